// Package node measures the gateway chart's pods on a real node (package
// testnode: a kubelet with containerd and runc): twenty pods of one
// Deployment from the apply to Ready, and an overlay update to the file in
// every pod. `make bench` runs it; it prints
//
//	node pods=20 gateway_ready_p50_ms=<> gateway_ready_p99_ms=<> update_to_pod_file_p99_ms=<>
//	node-floor pods=20 kubelet_ready_p50_ms=<> kubelet_ready_p99_ms=<> init_fetch_p50_ms=<> init_fetch_p99_ms=<> update_to_pod_file_p50_ms=<> updates=<>
//
// The floor is what the pod's time to Ready is made of. The kubelet's own
// time is that of the same Deployment, the same containers in the same
// order with the same probes, but for an init container that exits at
// once instead of fetching the overlay. The init container's fetch is read
// from its log's timestamps (the kubelet's, to the nanosecond): from its
// first line to its last.
package node

import (
	"bufio"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/gridsync/gridsync/hack/images"
	"github.com/gridsync/gridsync/shared/envelope"
	"github.com/gridsync/gridsync/test/controlplane"
	"github.com/gridsync/gridsync/test/framework"
	"github.com/gridsync/gridsync/test/measure"
	"github.com/gridsync/gridsync/test/testnode"
)

var (
	cp   *controlplane.ControlPlane
	node *testnode.Node
)

func TestMain(m *testing.M) {
	framework.BenchMain(m, framework.ControlPlanes(&cp), framework.Node(&node))
}

const (
	gateway = "edge-gateway"
	network = "glb-demo"
	site    = "east-edge"
)

// The sizes measured, and the smoke run's.
var (
	pods    = measure.Size(20, 2)
	updates = measure.Size(20, 2)
)

func BenchmarkNode(b *testing.B) {
	for range b.N {
		kubelet := deploy(b, "floor", false)
		// The floor's pods are gone before the measured ones start, so
		// that both have the node to themselves.
		remove(b, kubelet)
		gated := deploy(b, "gated", true)
		b.StopTimer()

		var initFetch []float64
		for _, p := range gated.pods {
			if ms, ok := initFetchMillis(p); ok {
				initFetch = append(initFetch, ms)
			}
		}
		if len(initFetch) != pods {
			b.Fatalf("read the init container's fetch of %d pods of %d", len(initFetch), pods)
		}
		toFile := updateAll(b, gated)
		fmt.Printf("node pods=%d gateway_ready_p50_ms=%.0f gateway_ready_p99_ms=%.0f update_to_pod_file_p99_ms=%.1f\n",
			pods, measure.Percentile(gated.ready, 50), measure.Percentile(gated.ready, 99), measure.Percentile(toFile, 99))
		fmt.Printf("node-floor pods=%d kubelet_ready_p50_ms=%.0f kubelet_ready_p99_ms=%.0f init_fetch_p50_ms=%.1f init_fetch_p99_ms=%.1f update_to_pod_file_p50_ms=%.1f updates=%d\n",
			pods, measure.Percentile(kubelet.ready, 50), measure.Percentile(kubelet.ready, 99),
			measure.Percentile(initFetch, 50), measure.Percentile(initFetch, 99), measure.Percentile(toFile, 50), updates)
		b.StartTimer()
	}
}

// deployment is one measured Deployment: its overlay ConfigMap, its pods
// and each pod's time from the apply to Ready.
type deployment struct {
	scope     envelope.Scope
	configMap string
	pods      []*corev1.Pod
	ready     []float64
}

// deploy applies the gateway chart with twenty replicas and the overlay
// sidecar, the overlay already in its ConfigMap, and times every pod to
// Ready, seen on a watch. Without gate, the init container exits at once.
func deploy(b *testing.B, name string, gate bool) *deployment {
	b.Helper()
	ctx := b.Context()
	ns := "bench-" + name
	measure.Must(b, cp.EnsureNamespace(ctx, ns))
	scope := envelope.Scope{Network: network, Gateway: gateway, Namespace: ns, LocalSite: site}
	d := &deployment{scope: scope, configMap: envelope.ConfigMapName(network, gateway)}
	doc, _, err := envelope.Build(overlay(0), scope, envelope.Provenance{Producer: "bench", RenderedAt: time.Now()})
	measure.Must(b, err)
	_, err = cp.AdminClient().CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: d.configMap},
		Data:       map[string]string{envelope.DataKeyEnvelope: string(doc)},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		b.Fatal(err)
	}
	values := testnode.SidecarGatewayValues(scope, map[string]any{"replicaCount": pods})
	objs, err := testnode.Render(ctx, testnode.Chart("praxis-gateway"), gateway, ns, nil, values)
	measure.Must(b, err)
	if !gate {
		ungate(b, objs)
	}

	w, err := cp.AdminClient().CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{})
	measure.Must(b, err)
	defer w.Stop()
	applied := time.Now()
	measure.Must(b, testnode.Apply(ctx, cp, ns, objs))
	readyAt := map[string]time.Duration{}
	timeout := time.After(5 * time.Minute)
	for len(readyAt) < pods {
		select {
		case ev := <-w.ResultChan():
			p, ok := ev.Object.(*corev1.Pod)
			if !ok || ev.Type == watch.Deleted {
				continue
			}
			if _, seen := readyAt[p.Name]; !seen && testnode.PodReady(p) {
				readyAt[p.Name] = time.Since(applied)
				d.pods = append(d.pods, p.DeepCopy())
			}
		case <-timeout:
			b.Fatalf("%s: %d pods of %d Ready within 5 minutes", name, len(readyAt), pods)
		}
	}
	for _, t := range readyAt {
		d.ready = append(d.ready, measure.Millis(t))
	}
	return d
}

// remove deletes a measured Deployment's namespace and waits until its
// pods are gone from the node.
func remove(b *testing.B, d *deployment) {
	b.Helper()
	ns := d.scope.Namespace
	measure.Must(b, cp.AdminClient().CoreV1().Namespaces().Delete(b.Context(), ns, metav1.DeleteOptions{}))
	measure.Until(b, 3*time.Minute, 200*time.Millisecond, "the floor's pods are gone", func() bool {
		list, err := cp.AdminClient().CoreV1().Pods(ns).List(b.Context(), metav1.ListOptions{})
		return err == nil && len(list.Items) == 0
	})
}

// ungate makes the Deployment's init container one that exits at once.
func ungate(b *testing.B, objs []*unstructured.Unstructured) {
	b.Helper()
	for _, o := range objs {
		if o.GetKind() != "Deployment" {
			continue
		}
		inits, _, err := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "initContainers")
		measure.Must(b, err)
		if len(inits) != 1 {
			b.Fatalf("the Deployment has %d init containers, want the gate alone", len(inits))
		}
		gate := inits[0].(map[string]any)
		gate["image"] = images.Gateway.Ref(testnode.ImageTag)
		gate["command"] = []any{"/usr/local/bin/gridsync-standin-gateway", "--exit-at-once"}
		delete(gate, "args")
		measure.Must(b, unstructured.SetNestedSlice(o.Object, inits, "spec", "template", "spec", "initContainers"))
		return
	}
	b.Fatal("the chart rendered no Deployment")
}

func overlay(variant int) envelope.Overlay {
	rank := int64(variant)
	return envelope.Overlay{
		Network: network, LocalSite: site,
		Candidates: []envelope.Candidate{{
			Kind: envelope.CandidateKindInferenceModel, Name: "model-east", Site: "east-provider",
			Cluster: "sim-east-provider", Fresh: true, Rank: &rank,
		}},
	}
}

// updateAll writes updates revisions one after another and times each
// to the file of every pod (the emptyDir as the node holds it, polled
// every millisecond).
func updateAll(b *testing.B, d *deployment) []float64 {
	b.Helper()
	var files []string
	for _, p := range d.pods {
		files = append(files, node.VolumeFile(p, "kubernetes.io~empty-dir", "routing-overlay", "routing-overlay.json"))
	}
	cms := cp.AdminClient().CoreV1().ConfigMaps(d.scope.Namespace)
	var samples []float64
	for i := 1; i <= updates; i++ {
		doc, revision, err := envelope.Build(overlay(i), d.scope, envelope.Provenance{Producer: "bench", RenderedAt: time.Now()})
		measure.Must(b, err)
		cm, err := cms.Get(b.Context(), d.configMap, metav1.GetOptions{})
		measure.Must(b, err)
		cm.Data[envelope.DataKeyEnvelope] = string(doc)
		written := time.Now()
		_, err = cms.Update(b.Context(), cm, metav1.UpdateOptions{})
		measure.Must(b, err)
		var mu sync.Mutex
		var wg sync.WaitGroup
		for _, f := range files {
			wg.Add(1)
			go func() {
				defer wg.Done()
				deadline := time.Now().Add(30 * time.Second)
				for time.Now().Before(deadline) {
					if data, err := os.ReadFile(f); err == nil && strings.Contains(string(data), revision) {
						mu.Lock()
						samples = append(samples, measure.Millis(time.Since(written)))
						mu.Unlock()
						return
					}
					time.Sleep(time.Millisecond)
				}
			}()
		}
		wg.Wait()
		if len(samples) != i*len(files) {
			b.Fatalf("update %d reached %d pod files of %d within 30 s", i, len(samples)-(i-1)*len(files), len(files))
		}
	}
	return samples
}

// initFetchMillis is the init container's run as its log's timestamps
// show it: from its first line to its last (the overlay published).
func initFetchMillis(p *corev1.Pod) (float64, bool) {
	files := node.ContainerLogFiles(p, "overlay-init")
	if len(files) != 1 {
		return 0, false
	}
	f, err := os.Open(files[0])
	if err != nil {
		return 0, false
	}
	defer f.Close()
	var first, last time.Time
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		// CRI log lines: <RFC 3339 nano time> <stream> <tag> <line>
		ts, _, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		t, err := time.Parse(time.RFC3339Nano, ts)
		if err != nil {
			continue
		}
		if first.IsZero() {
			first = t
		}
		last = t
	}
	if first.IsZero() || !last.After(first) {
		return 0, false
	}
	return measure.Millis(last.Sub(first)), true
}
