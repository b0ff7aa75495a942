package node

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gridsync/gridsync/test/testnode"
)

// Both sidecar modes start in order and stop cleanly: the gate before the
// gateway; a sidecar killed mid-life is restarted by the kubelet while
// the gateway keeps serving the file; deleting the pod stops every
// container with exit code 0 within the grace period, the native sidecar
// after the gateway.
func TestPodStartsAndStopsInOrderAndSurvivesASidecarKill(t *testing.T) {
	for _, native := range []bool{false, true} {
		name := map[bool]string{false: "classic", true: "native"}[native]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ns := namespace(t, "life-"+name)
			gw := installGateway(t, ns, sidecarValues(map[string]any{
				"overlay": map[string]any{"sidecar": map[string]any{"native": native}},
			}))
			doc1, rev1 := gw.Envelope(1)
			gw.Put(doc1)
			pod := waitPod(t, ns, 60*time.Second, "Ready", testnode.PodReady)

			// Started in order: the gate had done its work (the init
			// container exited, the native sidecar passed its startup
			// probe) before the gateway started.
			praxis := containerStatus(pod, "praxis")
			require.NotNil(t, praxis.State.Running)
			if native {
				sync := containerStatus(pod, "overlay-sync")
				require.NotNil(t, sync.State.Running)
				require.NotNil(t, sync.Started)
				assert.True(t, *sync.Started)
				assert.False(t, praxis.State.Running.StartedAt.Before(&sync.State.Running.StartedAt), "the gateway started before the native sidecar")
			} else {
				gate := containerStatus(pod, "overlay-init")
				require.NotNil(t, gate.State.Terminated, describe(pod))
				assert.Zero(t, gate.State.Terminated.ExitCode)
				assert.False(t, praxis.State.Running.StartedAt.Before(&gate.State.Terminated.FinishedAt), "the gateway started before the gate finished")
			}

			// Kill the sidecar: the kubelet restarts it; the gateway's file
			// keeps serving throughout.
			var mu sync.Mutex
			var lost []string
			stop := pollGateway(t, pod, 20*time.Millisecond, func(st testnode.GatewayState, err error) {
				if err != nil || st.Revision != rev1 || st.Invalid != 0 {
					mu.Lock()
					lost = append(lost, st.Revision)
					mu.Unlock()
				}
			})
			require.NoError(t, node.KillContainer(t.Context(), pod, "overlay-sync"))
			pod = waitPod(t, ns, 60*time.Second, "with the sidecar restarted and Ready", func(p *corev1.Pod) bool {
				st := containerStatus(p, "overlay-sync")
				return st != nil && st.RestartCount == 1 && st.Ready && testnode.PodReady(p)
			})
			stop()
			assert.Empty(t, lost, "the gateway lost its overlay while the sidecar restarted")
			assert.Zero(t, containerStatus(pod, "praxis").RestartCount)
			doc2, rev2 := gw.Envelope(2)
			gw.Put(doc2)
			eventually(t, 10*time.Second, "the restarted sidecar delivers", func() bool {
				return stateOfGateway(t, pod).Revision == rev2
			})

			// Delete the pod: every container exits 0 within the grace
			// period.
			// The deletion's time, in the whole seconds a container's
			// finish is given in. (The final object's deletionTimestamp is
			// not it: the kubelet's last, immediate deletion moves it.)
			var requested time.Time
			last := watchPodUntilGone(t, ns, pod.Name, func() {
				requested = time.Now().Truncate(time.Second)
				require.NoError(t, cp.AdminClient().CoreV1().Pods(ns).Delete(context.Background(), pod.Name, metav1.DeleteOptions{}))
			})
			grace := time.Duration(*pod.Spec.TerminationGracePeriodSeconds) * time.Second
			for _, c := range []string{"praxis", "overlay-sync"} {
				st := containerStatus(last, c)
				require.NotNil(t, st, c)
				require.NotNil(t, st.State.Terminated, "%s: %s", c, describe(last))
				assert.Zero(t, st.State.Terminated.ExitCode, "%s exit code", c)
				took := st.State.Terminated.FinishedAt.Sub(requested)
				t.Logf("%s exited %d, %s after the deletion (to the second)", c, st.State.Terminated.ExitCode, took)
				assert.Less(t, took, grace, "%s outlived the grace period", c)
			}
			if native {
				assert.False(t, containerStatus(last, "overlay-sync").State.Terminated.FinishedAt.Before(&containerStatus(last, "praxis").State.Terminated.FinishedAt),
					"the native sidecar stopped before the gateway")
			}
		})
	}
}

// watchPodUntilGone runs act and returns the pod's final state, as the
// API showed it when it was deleted.
func watchPodUntilGone(t *testing.T, ns, name string, act func()) *corev1.Pod {
	t.Helper()
	w, err := cp.AdminClient().CoreV1().Pods(ns).Watch(t.Context(), metav1.ListOptions{FieldSelector: "metadata.name=" + name})
	require.NoError(t, err)
	defer w.Stop()
	act()
	timeout := time.After(90 * time.Second)
	for {
		select {
		case ev, ok := <-w.ResultChan():
			require.True(t, ok, "the watch ended")
			if p, isPod := ev.Object.(*corev1.Pod); isPod && ev.Type == "DELETED" {
				return p // its final state
			}
		case <-timeout:
			t.Fatalf("pod %s/%s not gone within 90 s", ns, name)
		}
	}
}
