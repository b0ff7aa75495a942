package attack

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/controller/mounts"
	"github.com/gridsync/gridsync/controller/praxisconfig"
	"github.com/gridsync/gridsync/controller/rbac"
	"github.com/gridsync/gridsync/test/controlplane"
	"github.com/gridsync/gridsync/test/framework"
	"github.com/gridsync/gridsync/test/testbin"
	"github.com/gridsync/gridsync/test/testfs"
	"github.com/gridsync/gridsync/test/testproc"
)

// The pod's shared volume and health port against a neighbour: another
// container that shares the output emptyDir (same UID, or root) or
// reaches the health port.

// What a neighbour leaves at the output's name across a restart of the
// sidecar (a liveness restart keeps the emptyDir), and across the init
// container of a restarted pod: a FIFO (a blocking open waits for a writer
// for ever, so the first round's sidecar never answered /livez and
// crash-looped), and a file under the neighbour's write lease (a blocking
// open waits out the kernel's lease-break-time, 45 s). Neither is waited
// on: the sidecar is ready, and the init container done, with the API's
// envelope in its place, within a second (the short form, beside every
// other package on two cores, is held to five: the failure is for ever or
// 45 s).
func TestOutputFIFORestart(t *testing.T) {
	initBin := framework.Bin(testbin.Init)
	s := startSidecar(t)
	output := s.pod.Output()
	doc, err := os.ReadFile(output)
	require.NoError(t, err)
	stop := func(p *testproc.Proc) {
		require.NoError(t, p.Cmd.Process.Kill())
		p.Wait(t, 10*time.Second)
	}
	stop(s.Proc)

	plants := []struct {
		name  string
		plant func()
	}{
		{"fifo", func() {
			require.NoError(t, os.Remove(output))
			require.NoError(t, unix.Mkfifo(output, 0o644))
		}},
		{"leased", func() {
			// A file of the neighbour's own, whatever the last round left.
			require.NoError(t, os.RemoveAll(output))
			require.NoError(t, os.WriteFile(output, doc, 0o644))
			testfs.Lease(t, output)
		}},
	}
	bound := time.Duration(size(1000, 5000)) * time.Millisecond
	held := true
	var figures []figure
	for _, p := range plants {
		// The sidecar restarted over it.
		p.plant()
		probe := testproc.FreeAddr(t)
		start := time.Now()
		sc := testproc.Start(t, framework.Bin(testbin.Sidecar), nil, s.pod.Args("--health-addr", testproc.FreeAddr(t), "--probe-addr", probe)...)
		ready := time.Duration(-1)
		for deadline := start.Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if kubeletProbe(probe, "/readyz") && kubeletProbe(probe, "/livez") {
				ready = time.Since(start)
				break
			}
		}
		sidecarOK := ready >= 0 && ready < bound && regularWith(output, doc)
		readyFigure := any("never")
		if ready >= 0 {
			readyFigure = ready.Milliseconds()
		}
		stop(sc)

		// The init container of the restarted pod over it.
		p.plant()
		start = time.Now()
		ic := testproc.Start(t, initBin, nil, s.pod.Args()...)
		for deadline := start.Add(20 * time.Second); time.Now().Before(deadline) && ic.Running(); {
			time.Sleep(10 * time.Millisecond)
		}
		done := time.Since(start)
		code := -1 // still waiting after 20 s
		if ic.Running() {
			stop(ic)
		} else {
			code = ic.Wait(t, time.Second)
		}
		initOK := code == 0 && done < bound && regularWith(output, doc)

		held = held && sidecarOK && initOK
		figures = append(figures, figure{p.name + "_sidecar_ready_ms", readyFigure}, figure{p.name + "_init_done_ms", done.Milliseconds()},
			figure{p.name + "_init_exit", code})
	}
	report(t, "output_fifo_restart", held, append(figures, figure{"bound_ms", bound.Milliseconds()})...)
}

// regularWith reports whether path is a regular file holding want. It
// does not wait on what a round planted there and the binary left (a
// FIFO, the test's own lease).
func regularWith(path string, want []byte) bool {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	f := os.NewFile(uintptr(fd), path)
	defer func() { _ = f.Close() }()
	info, err := f.Stat()
	if err != nil || !info.Mode().IsRegular() {
		return false
	}
	got, err := io.ReadAll(f)
	return err == nil && string(got) == string(want)
}

// A neighbour removes the output, and the sidecar puts it back from the
// last-known-good within 2 s (its retry tick is a second), saying so
// (output_missing in its log and counter). While it cannot (a folder put
// at the name), /status says degraded, output_missing, in upstream's words
// write_failed; the first round stayed "ready" with no reason while the
// gateway had no file.
func TestOutputDeleted(t *testing.T) {
	s := startSidecar(t)
	output := s.pod.Output()
	doc, err := os.ReadFile(output)
	require.NoError(t, err)
	rounds := size(20, 3)
	worst, back := time.Duration(0), 0
	for i := 0; i < rounds && back == i; i++ {
		require.NoError(t, os.Remove(output))
		start := time.Now()
		for deadline := start.Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if regularWith(output, doc) {
				back++
				worst = max(worst, time.Since(start))
				break
			}
		}
	}
	counted := strings.Count(s.Log(), `"msg":"output_missing"`)
	_, metrics := testproc.Get(t, "http://"+s.health+"/metrics")
	metricSaid := strings.Contains(metrics, fmt.Sprintf("grid_overlay_sync_output_missing_total %d", rounds))

	// A folder at the name cannot be renamed over.
	require.NoError(t, os.RemoveAll(output))
	require.NoError(t, os.MkdirAll(filepath.Join(output, "keep"), 0o755))
	var detail, upstream string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline) && detail == ""; time.Sleep(50 * time.Millisecond) {
		_, body := testproc.Get(t, "http://"+s.health+"/status")
		var st struct {
			Detail   string  `json:"degraded_detail"`
			Upstream *string `json:"degraded_reason"`
		}
		_ = json.Unmarshal([]byte(body), &st)
		if st.Detail != "" && st.Upstream != nil {
			detail, upstream = st.Detail, *st.Upstream
		}
	}
	require.NoError(t, os.RemoveAll(output))
	restored := false
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline) && !restored; time.Sleep(10 * time.Millisecond) {
		restored = regularWith(output, doc)
	}
	report(t, "output_deleted", back == rounds && worst < 2*time.Second && counted == rounds && metricSaid &&
		detail == "output_missing" && upstream == "write_failed" && restored && s.Running(),
		figure{"removals", rounds}, figure{"put_back", back}, figure{"worst_ms", worst.Milliseconds()},
		figure{"logged", counted}, figure{"counted", metricSaid}, figure{"while_blocked", detail + "/" + upstream},
		figure{"back_after_unblocked", restored})
}

// 200 clients send GETs to the health port, each with a chunked body one
// chunk every 500 ms, reconnecting when closed; the first round's health
// port answered 0 of 12 probes, its every slot held by a request whose
// body the server drained. A body is never read now: the answer comes at
// once and the connection closes, and both ports answer every probe.
func TestHealthSlowBody(t *testing.T) {
	s := startSidecar(t)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	clients := 200
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			slowBodyClient(ctx, s.health)
		}()
	}
	time.Sleep(time.Second) // every client has sent its headers
	healthOK, probeOK, probes := 0, 0, size(24, 12)
	failed := "none"
	for range probes {
		if why := probeFailure(s.health, "/readyz"); why == "" {
			healthOK++
		} else if failed == "none" {
			failed = "health port " + why
		}
		if why := probeFailure(s.probe, "/readyz"); why == "" {
			probeOK++
		} else if failed == "none" {
			failed = "probe port " + why
		}
		time.Sleep(250 * time.Millisecond)
	}
	cancel()
	wg.Wait()
	report(t, "health_slow_body", healthOK == probes && probeOK == probes && s.Running(),
		figure{"clients", clients}, figure{"chunk_every_ms", 500},
		figure{"health_port_probes_ok", fmt.Sprintf("%d/%d", healthOK, probes)}, figure{"probe_port_probes_ok", fmt.Sprintf("%d/%d", probeOK, probes)},
		figure{"first_failure", strconv.Quote(failed)})
}

// slowBodyClient sends a GET with a chunked body, a chunk every 500 ms,
// and opens a new connection when the server closes one, until ctx ends.
func slowBodyClient(ctx context.Context, addr string) {
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	var c net.Conn
	defer func() {
		if c != nil {
			_ = c.Close()
		}
	}()
	for {
		if c == nil {
			var err error
			if c, err = (&net.Dialer{Timeout: time.Second}).DialContext(ctx, "tcp", addr); err == nil {
				_, err = fmt.Fprint(c, "GET /readyz HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
			}
			if err != nil && c != nil {
				_ = c.Close()
				c = nil
			}
		}
		if c != nil {
			if _, err := fmt.Fprint(c, "1\r\na\r\n"); err != nil {
				_ = c.Close()
				c = nil
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// A gateway opted in to delegated mounts for network N; the agent patched
// it. Whoever may create GridNetworks (they are cluster-scoped) deletes N
// and creates another N, its endpoints of their choosing. The first round
// matched the opt-in by name, so the new N inherited the Deployment's
// opt-in and grant; now the opt-in is bound to the first N's UID, recorded
// by the agent's first patch, and the new N patches nothing: its status
// says NetworkRecreated.
func TestMountsNetworkRecreated(t *testing.T) {
	a := startSwimAgent(t, nil)
	ctx := context.Background()
	const deployment, configMap = "recreated-victim", "recreated-victim-config"
	require.NoError(t, a.admin.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: configMap, Namespace: a.resNS},
		Data: map[string]string{praxisconfig.DataKey: "listeners: []\n"}}))
	name := fmt.Sprintf("recreated-%d", seq.Add(1))
	labels := map[string]string{"app": deployment}
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: deployment, Namespace: a.resNS, Annotations: map[string]string{
		mounts.AnnotationEnabled: "true", mounts.AnnotationNetwork: name, mounts.AnnotationGatewayRef: "edge"}},
		Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
				Containers: []corev1.Container{{Name: "praxis", Image: "praxis:test", VolumeMounts: []corev1.VolumeMount{{Name: "config", MountPath: mounts.ConfigMountPath}}}},
				Volumes: []corev1.Volume{{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
					LocalObjectReference: corev1.LocalObjectReference{Name: configMap}}}}},
			}}}}
	require.NoError(t, a.admin.Create(ctx, d))
	// No controller manager runs: the status a finished rollout has, so
	// that the agent may switch the config.
	d.Status = appsv1.DeploymentStatus{ObservedGeneration: d.Generation, Replicas: 1, UpdatedReplicas: 1, ReadyReplicas: 1, AvailableReplicas: 1}
	require.NoError(t, a.admin.Status().Update(ctx, d))
	require.NoError(t, cp.Grant(ctx, a.agentNS, controlplane.AgentServiceAccount, "gateway-"+deployment, a.resNS, rbac.GatewayDeploymentRules(deployment)))

	network := func(endpoint string) *v1alpha1.GridNetwork {
		return &v1alpha1.GridNetwork{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.GridNetworkSpec{
			ConsumerGateways: []v1alpha1.ConsumerGateway{{Name: "edge", Namespace: a.resNS, SiteName: "here",
				PraxisConfig: &v1alpha1.PraxisConfig{Generate: true, ConfigMapName: configMap,
					ClusterEndpoints:    []v1alpha1.ClusterEndpoint{{Cluster: "x", Address: endpoint, Transport: &v1alpha1.EndpointTransport{Mode: "plaintext"}}},
					MountReconciliation: &v1alpha1.MountReconciliation{Enabled: true, DeploymentName: deployment}}}}}}
	}
	granted := network("127.0.0.1:1")
	require.NoError(t, a.admin.Create(ctx, granted))
	var now appsv1.Deployment
	get := func() {
		require.NoError(t, a.admin.Get(ctx, types.NamespacedName{Namespace: a.resNS, Name: deployment}, &now))
	}
	require.Eventually(t, func() bool {
		get()
		return now.Annotations[mounts.AnnotationNetworkUID] == string(granted.UID)
	}, 30*time.Second, 50*time.Millisecond, "the agent's first patch records the network's UID")
	// The rollout done, so that nothing but the opt-in stands between the
	// next network of that name and a patch.
	now.Status = appsv1.DeploymentStatus{ObservedGeneration: now.Generation, Replicas: 1, UpdatedReplicas: 1, ReadyReplicas: 1, AvailableReplicas: 1}
	require.NoError(t, a.admin.Status().Update(ctx, &now))
	mountReason(t, a, name, mounts.ReasonRolledOut)
	require.NoError(t, a.admin.Delete(ctx, granted))
	require.Eventually(t, func() bool {
		return apierrors.IsNotFound(a.admin.Get(ctx, types.NamespacedName{Name: name}, &v1alpha1.GridNetwork{}))
	}, 30*time.Second, 50*time.Millisecond)
	get()
	before := now.ResourceVersion

	recreated := network("127.0.0.1:2")
	require.NoError(t, a.admin.Create(ctx, recreated))
	t.Cleanup(func() { _ = a.admin.Delete(context.Background(), recreated) })
	reason, message := mountReason(t, a, name, "")
	time.Sleep(time.Duration(size(10, 3)) * time.Second)
	get()
	patched := now.ResourceVersion != before
	report(t, "mounts_network_recreated", !patched && reason == mounts.ReasonNetworkRecreated && strings.Contains(message, string(recreated.UID)),
		figure{"first_uid_recorded", true}, figure{"patched_after_recreate", patched}, figure{"reason", reason})
}

// mountReason waits until the network's one mountReconciliationStatus
// entry has a reason (want, when given) and returns it with its message.
func mountReason(t *testing.T, a *swimAgent, network, want string) (reason, message string) {
	t.Helper()
	require.Eventually(t, func() bool {
		var gn v1alpha1.GridNetwork
		if a.admin.Get(context.Background(), types.NamespacedName{Name: network}, &gn) != nil || len(gn.Status.MountReconciliationStatus) == 0 {
			return false
		}
		reason, message = gn.Status.MountReconciliationStatus[0].Reason, gn.Status.MountReconciliationStatus[0].Message
		return reason != "" && (want == "" || reason == want)
	}, 30*time.Second, 50*time.Millisecond, "network %s: mount status %q, want %q", network, reason, want)
	return reason, message
}
