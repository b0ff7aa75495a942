package node

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gridsync/gridsync/controller"
	"github.com/gridsync/gridsync/shared/envelope"
	"github.com/gridsync/gridsync/test/testnode"
	"github.com/gridsync/gridsync/test/testpod"
)

var seq atomic.Int64

// namespace makes a namespace for one test, deleted after it.
func namespace(t *testing.T, prefix string) string {
	t.Helper()
	ns := fmt.Sprintf("%s-%d", prefix, seq.Add(1))
	require.NoError(t, cp.EnsureNamespace(t.Context(), ns))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = cp.AdminClient().CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{})
	})
	return ns
}

// gridClient is an admin client that knows the Grid resources.
func gridClient(t *testing.T) client.Client {
	t.Helper()
	scheme, err := controller.Scheme()
	require.NoError(t, err)
	c, err := client.New(cp.AdminConfig(), client.Options{Scheme: scheme})
	require.NoError(t, err)
	return c
}

// gateway is one release of the praxis-gateway chart on the node, with
// the overlay sidecar.
type gateway struct {
	*testpod.Pod
	Release string
}

const (
	gatewayName = "edge-gateway"
	networkName = "glb-demo"
	localSite   = "east-edge"
)

// sidecarValues are the gateway chart's values for a release with the
// overlay sidecar, on the node's images.
func sidecarValues(extra map[string]any) map[string]any {
	return testnode.SidecarGatewayValues(envelope.Scope{Network: networkName, Gateway: gatewayName, LocalSite: localSite},
		testnode.Merge(map[string]any{"overlay": map[string]any{"sidecar": map[string]any{"logLevel": "debug"}}}, extra))
}

// installGateway renders the gateway chart with values and applies it in
// namespace ns.
func installGateway(t *testing.T, ns string, values map[string]any, valueFiles ...string) *gateway {
	t.Helper()
	objs, err := testnode.Render(t.Context(), testnode.Chart("praxis-gateway"), gatewayName, ns, valueFiles, values)
	require.NoError(t, err)
	require.NoError(t, testnode.Apply(t.Context(), cp, ns, objs))
	scope := envelope.Scope{Network: networkName, Gateway: gatewayName, Namespace: ns, LocalSite: localSite}
	return &gateway{
		Pod: &testpod.Pod{
			T: t, Namespace: ns, Scope: scope, Admin: cp.AdminClient(),
			ConfigMap: envelope.ConfigMapName(scope.Network, scope.Gateway),
		},
		Release: gatewayName,
	}
}

// pods lists the namespace's pods.
func pods(t *testing.T, ns string) []corev1.Pod {
	t.Helper()
	list, err := cp.AdminClient().CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{})
	require.NoError(t, err)
	return list.Items
}

// waitPod waits until the namespace has exactly one pod (not being
// deleted) for which ok holds, and returns it.
func waitPod(t *testing.T, ns string, timeout time.Duration, what string, ok func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		var last []string
		for _, p := range pods(t, ns) {
			if p.DeletionTimestamp == nil && ok(&p) {
				return &p
			}
			last = append(last, describe(&p))
		}
		if time.Now().After(deadline) {
			t.Fatalf("no pod of %s is %s within %s:\n%s", ns, what, timeout, strings.Join(last, "\n"))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// describe is a pod's phase and its containers' states, for failures.
func describe(p *corev1.Pod) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s:", p.Name, p.Status.Phase)
	for _, c := range p.Status.Conditions {
		fmt.Fprintf(&b, " %s=%s", c.Type, c.Status)
		if c.Status != corev1.ConditionTrue && c.Message != "" {
			fmt.Fprintf(&b, " (%s)", c.Message)
		}
	}
	for _, list := range [][]corev1.ContainerStatus{p.Status.InitContainerStatuses, p.Status.ContainerStatuses} {
		for _, c := range list {
			fmt.Fprintf(&b, "\n  %s ready=%v restarts=%d %s", c.Name, c.Ready, c.RestartCount, stateOf(c.State))
			if log := containerLog(p, c.Name); log != "" {
				fmt.Fprintf(&b, "\n    %s", strings.ReplaceAll(strings.TrimSpace(log), "\n", "\n    "))
			}
		}
	}
	return b.String()
}

func stateOf(s corev1.ContainerState) string {
	switch {
	case s.Running != nil:
		return "running"
	case s.Terminated != nil:
		return fmt.Sprintf("terminated(%d %s)", s.Terminated.ExitCode, s.Terminated.Reason)
	case s.Waiting != nil:
		return "waiting(" + s.Waiting.Reason + ": " + s.Waiting.Message + ")"
	}
	return "unknown"
}

func containerStatus(p *corev1.Pod, name string) *corev1.ContainerStatus {
	for _, list := range [][]corev1.ContainerStatus{p.Status.InitContainerStatuses, p.Status.ContainerStatuses} {
		for i := range list {
			if list[i].Name == name {
				return &list[i]
			}
		}
	}
	return nil
}

// getJSON reads a pod's endpoint from inside the node's network namespace.
func getJSON(t *testing.T, podIP string, port int, path string, out any) error {
	return node.GetJSON(t.Context(), podIP, port, path, out)
}

func stateOfGateway(t *testing.T, p *corev1.Pod) testnode.GatewayState {
	t.Helper()
	st, err := node.GatewayState(t.Context(), p.Status.PodIP)
	require.NoError(t, err)
	return st
}

// pollGateway reads the pod's stand-in gateway every period and hands each
// read to check, until the stop it returns is called (which waits for the
// read under way).
func pollGateway(t *testing.T, pod *corev1.Pod, every time.Duration, check func(testnode.GatewayState, error)) (stop func()) {
	t.Helper()
	quit := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-quit:
				return
			case <-time.After(every):
			}
			check(node.GatewayState(t.Context(), pod.Status.PodIP))
		}
	}()
	return func() { close(quit); <-done }
}

// sidecarStatus is the part of the sidecar's /status the tests read.
type sidecarStatus struct {
	State               string `json:"state"`
	Ready               bool   `json:"ready"`
	WrittenRevision     string `json:"written_revision"`
	LastRejectionReason string `json:"last_rejection_reason"`
	Degraded            bool   `json:"degraded"`
	DegradedDetail      string `json:"degraded_detail"`
	OutputMedium        string `json:"output_medium"`
	Fsync               bool   `json:"fsync"`
	Identity            *struct {
		Fingerprint string `json:"fingerprint"`
		Generation  string `json:"generation"`
	} `json:"identity"`
}

func statusOfSidecar(t *testing.T, p *corev1.Pod) sidecarStatus {
	t.Helper()
	var st sidecarStatus
	require.NoError(t, getJSON(t, p.Status.PodIP, 9091, "/status", &st))
	return st
}

// eventually polls cond every 50 ms until it holds or timeout passes.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// containerLog is the end of a container's last log as the kubelet keeps
// it.
func containerLog(p *corev1.Pod, container string) string {
	files := node.ContainerLogFiles(p, container)
	if len(files) == 0 {
		return ""
	}
	log := readFile(files[len(files)-1])
	if len(log) > 2000 {
		log = log[len(log)-2000:]
	}
	return log
}

// readFile reads a file or returns "".
func readFile(path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return string(data)
}
