package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gridsync/gridsync/controller/mounts"
	"github.com/gridsync/gridsync/shared/envelope"
	"github.com/gridsync/gridsync/test/controlplane"
	"github.com/gridsync/gridsync/test/testnode"
)

// onANode runs the gateway chart's pod on a real node: a kubelet with
// containerd and runc, in a network namespace of its own. The chart is
// installed by Helm from the registry a release was published to, and
// containerd pulls the sidecar's image from it by the digest the chart
// pins. The init container holds the gateway until the overlay exists; an
// update reaches the gateway's file through the pod's emptyDir.
func onANode(ctx context.Context, cp *controlplane.ControlPlane) error {
	step("a real node: a kubelet with containerd and runc, in a network namespace of its own")
	if ok, err := nodesCanRun(false); !ok || err != nil {
		return err
	}
	work, err := os.MkdirTemp("", "gridsync-demo-release-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(work) }()
	// Helm's registry logins and chart cache, the demo's own while this
	// step runs (the folder goes with it).
	for _, v := range []string{"HELM_CACHE_HOME", "HELM_CONFIG_HOME", "HELM_DATA_HOME"} {
		was, set := os.LookupEnv(v)
		if err := os.Setenv(v, filepath.Join(work, "helm", v)); err != nil {
			return err
		}
		defer func() {
			if set {
				_ = os.Setenv(v, was)
			} else {
				_ = os.Unsetenv(v)
			}
		}()
	}
	rel, err := publishARelease(ctx, work)
	if err != nil {
		return err
	}
	defer func() { _ = rel.registry.Stop() }()

	step("the node: containerd has the registry as its mirror of %s, the only endpoint it asks", strings.SplitN(shippedUnder, "/", 2)[0])
	began := time.Now()
	node, err := testnode.StartWith(ctx, cp, testnode.Options{Mirrors: []testnode.Mirror{
		{Registry: strings.SplitN(shippedUnder, "/", 2)[0], Upstream: rel.registry.Host, CA: rel.registry.CA},
	}})
	if err != nil {
		return err
	}
	defer func() { _ = node.Stop() }()
	fmt.Printf("    node %s Ready after %s (the stand-in gateway and the tests' images loaded; the release's to be pulled)\n", node.Name, time.Since(began).Round(time.Millisecond))

	const ns = "praxis-node"
	if err := cp.EnsureNamespace(ctx, ns); err != nil {
		return err
	}
	nodeScope := scope
	nodeScope.Namespace = ns
	chart, chartArgs := rel.chart("praxis-gateway")
	step("helm install %s %s, with the sidecar: no overlay yet", chart, strings.Join(chartArgs[:2], " "))
	applied := time.Now()
	r, err := testnode.Install(ctx, cp, chart, scope.Gateway, ns, testnode.ReleasedSidecarGatewayValues(nodeScope, nil), chartArgs...)
	if err != nil {
		return err
	}
	defer func() { _ = r.Close() }()
	pod, err := waitNodePod(ctx, cp, ns, func(p *corev1.Pod) bool { return containerRunning(p, "overlay-init") })
	if err != nil {
		return err
	}
	for _, st := range pod.Status.InitContainerStatuses {
		fmt.Printf("    %s runs %s, pulled %s after the install\n", st.Name, st.ImageID, time.Since(applied).Round(100*time.Millisecond))
	}
	if want := rel.image("gridsync-sidecar"); pod.Status.InitContainerStatuses[0].ImageID != want {
		return fmt.Errorf("the init container runs %s, not the release's %s", pod.Status.InitContainerStatuses[0].ImageID, want)
	}
	time.Sleep(2 * time.Second)
	fmt.Printf("    pod %s: init container overlay-init running, gateway container waiting (PodInitializing)\n", pod.Name)

	step("the overlay is published: the gate opens, the kubelet's probes make the pod Ready")
	doc, _, err := envelope.Build(demoOverlay(1), nodeScope, envelope.Provenance{Producer: "gridsync-demo", RenderedAt: time.Now()})
	if err != nil {
		return err
	}
	if err := putIn(ctx, cp.AdminClient(), ns, configMapName(), doc); err != nil {
		return err
	}
	pod, err = waitNodePod(ctx, cp, ns, testnode.PodReady)
	if err != nil {
		return err
	}
	fmt.Printf("    pod Ready %s after the apply; the gateway reads revision %s\n", time.Since(applied).Round(time.Millisecond), short(gatewayRevision(ctx, node, pod)))

	step("an update reaches the gateway's file through the pod's emptyDir")
	doc, revision, err := envelope.Build(demoOverlay(2), nodeScope, envelope.Provenance{Producer: "gridsync-demo", RenderedAt: time.Now()})
	if err != nil {
		return err
	}
	written := time.Now()
	if err := putIn(ctx, cp.AdminClient(), ns, configMapName(), doc); err != nil {
		return err
	}
	for gatewayRevision(ctx, node, pod) != revision {
		if time.Since(written) > 30*time.Second {
			return fmt.Errorf("the update did not reach the gateway in the pod")
		}
		time.Sleep(5 * time.Millisecond)
	}
	fmt.Printf("    the gateway in the pod reads %s %s after the write\n", short(revision), time.Since(written).Round(time.Millisecond))
	return delegatedMounts(ctx, cp, node)
}

// delegatedMounts lets the agent roll a gateway Deployment of the chart
// (installed by Helm, opted in, its Role granting the agent get and patch
// on it) to its generated config, then to a credential's mount: one
// pod-template patch and one rollout each.
func delegatedMounts(ctx context.Context, cp *controlplane.ControlPlane, node *testnode.Node) error {
	step("delegated mounts: helm install of the gateway chart (2 replicas, a bootstrap praxis.yaml), the agent rolls it")
	const ns = "praxis-delegated"
	d, err := testnode.Delegate(ctx, cp, ns, 2, 2*time.Second, nil)
	if err != nil {
		return err
	}
	defer func() { _ = d.Stop() }()
	provider, err := d.Provider(ctx)
	if err != nil {
		return err
	}
	rolled := func(what string, since time.Time, generation int64) (*appsv1.Deployment, error) {
		st, dep, err := d.WaitReady(ctx, generation, 3*time.Minute)
		if err != nil {
			return nil, err
		}
		fmt.Printf("    %s: Ready %s later, %d pod-template patch; the pods mount ConfigMap %s (config %s)\n",
			what, time.Since(since).Round(100*time.Millisecond), dep.Generation-generation, st.ConfigMapName, st.ConfigRevision)
		return dep, nil
	}
	dep, err := rolled("the generated config replaces the bootstrap", time.Now(), 1)
	if err != nil {
		return err
	}

	step("a credential reference added to the provider: one rollout, every new pod has the Secret's file")
	if _, err := cp.AdminClient().CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "token-a"},
		Data: map[string][]byte{"token": []byte("demo-token")}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	changed := time.Now()
	if err := d.SetCredential(ctx, provider, "token-a"); err != nil {
		return err
	}
	if dep, err = rolled("token-a mounted", changed, dep.Generation); err != nil {
		return err
	}
	dir := "/run/secrets/grid-credentials/" + ns + "/token-a"
	list, err := cp.AdminClient().CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for i := range list.Items {
		p := &list.Items[i]
		if p.DeletionTimestamp != nil || p.Annotations[mounts.AnnotationConfigRevision] != dep.Spec.Template.Annotations[mounts.AnnotationConfigRevision] {
			continue
		}
		data, err := os.ReadFile(node.VolumeFile(p, "kubernetes.io~projected", mounts.VolumeName(dir), "token"))
		fmt.Printf("    pod %s: %s/token holds %d bytes (%v)\n", p.Name, dir, len(data), err)
	}
	if err := d.Admin.Delete(ctx, provider); err != nil {
		return err
	}
	return d.Admin.Delete(ctx, d.Network)
}

func demoOverlay(variant int) envelope.Overlay {
	rank := int64(variant)
	return envelope.Overlay{
		Network: scope.Network, LocalSite: scope.LocalSite,
		Candidates: []envelope.Candidate{{
			Kind: envelope.CandidateKindInferenceModel, Name: "llama-3-70b", Site: "east-provider",
			Cluster: "sim-east", Fresh: true, Rank: &rank,
		}},
	}
}

func waitNodePod(ctx context.Context, cp *controlplane.ControlPlane, ns string, ok func(*corev1.Pod) bool) (*corev1.Pod, error) {
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		list, err := cp.AdminClient().CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err == nil {
			for i := range list.Items {
				if ok(&list.Items[i]) {
					return &list.Items[i], nil
				}
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return nil, fmt.Errorf("no pod in %s as expected within 90 s", ns)
}

func containerRunning(p *corev1.Pod, name string) bool {
	for _, st := range p.Status.InitContainerStatuses {
		if st.Name == name && st.State.Running != nil {
			return true
		}
	}
	return false
}

// gatewayRevision asks the stand-in gateway in the pod what it reads.
func gatewayRevision(ctx context.Context, node *testnode.Node, pod *corev1.Pod) string {
	st, _ := node.GatewayState(ctx, pod.Status.PodIP)
	return st.Revision
}

// nodesCanRun says whether this machine can run a real node (and, with
// wan, the emulated WAN), printing what it lacks when it cannot: the demo
// then goes on without that step, as it says.
func nodesCanRun(wan bool) (bool, error) {
	bin, err := controlplane.BinDir()
	if err != nil {
		return false, err
	}
	if err := testnode.Check(bin); err != nil {
		fmt.Printf("    skipped: %v\n", err)
		return false, nil
	}
	if wan && os.Geteuid() != 0 {
		fmt.Println("    skipped: the emulated WAN needs root (network namespaces, TUN devices, nftables)")
		return false, nil
	}
	return true, nil
}
