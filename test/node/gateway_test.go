package node

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/gridsync/gridsync/shared/envelope"
	"github.com/gridsync/gridsync/test/testnode"
)

// The gateway pod of the chart, in both sidecar modes: the gateway does not
// start before a valid overlay is on the shared emptyDir; every update
// reaches the gateway's file, a tampered one never does, and deleting the
// ConfigMap keeps the file; the kubelet's probes of the real ports make the
// pod Ready.
func TestGatewayPodIsGatedAndFollowsTheOverlay(t *testing.T) {
	for _, mode := range []struct {
		name   string
		native bool
		// sync is the container that syncs after the start.
		sync, gate string
		// volumeMedium is the emptyDir's (the chart's default, Memory, or
		// the node's disk); medium is what the sidecar finds it on.
		volumeMedium, medium string
	}{
		{name: "classic", native: false, sync: "overlay-sync", gate: "overlay-init", volumeMedium: "", medium: "emptyDir"},
		{name: "native", native: true, sync: "overlay-sync", gate: "overlay-sync", volumeMedium: "Memory", medium: "tmpfs"},
	} {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			ns := namespace(t, "gw-"+mode.name)
			gw := installGateway(t, ns, sidecarValues(map[string]any{
				"overlay": map[string]any{"sidecar": map[string]any{"native": mode.native, "volume": map[string]any{"medium": mode.volumeMedium}}},
			}))

			// No ConfigMap yet: the gate runs, the gateway waits.
			waitPod(t, ns, 60*time.Second, "running its gate", func(p *corev1.Pod) bool {
				st := containerStatus(p, mode.gate)
				return st != nil && st.State.Running != nil
			})
			time.Sleep(3 * time.Second)
			pod := waitPod(t, ns, time.Second, "still gated", func(p *corev1.Pod) bool { return true })
			praxis := containerStatus(pod, "praxis")
			require.NotNil(t, praxis, describe(pod))
			require.Nil(t, praxis.State.Running, "the gateway started without an overlay: %s", describe(pod))
			require.Zero(t, praxis.RestartCount)

			// The first valid overlay opens the gate and the pod becomes
			// Ready through the kubelet's probes.
			doc1, rev1 := gw.Envelope(1)
			gw.Put(doc1)
			pod = waitPod(t, ns, 60*time.Second, "Ready", testnode.PodReady)
			st := stateOfGateway(t, pod)
			assert.Equal(t, rev1, st.Revision)
			side := statusOfSidecar(t, pod)
			assert.True(t, side.Ready)
			assert.Equal(t, rev1, side.WrittenRevision)
			// The kubelet's emptyDir, on disk or in memory: --fsync auto
			// finds it and syncs nothing.
			assert.Equal(t, mode.medium, side.OutputMedium)
			assert.False(t, side.Fsync)
			file := node.VolumeFile(pod, "kubernetes.io~empty-dir", "routing-overlay", "routing-overlay.json")
			assert.Equal(t, string(doc1), readFile(file), "the emptyDir holds the envelope as published")

			// An update reaches the gateway through the emptyDir.
			doc2, rev2 := gw.Envelope(2)
			gw.Put(doc2)
			eventually(t, 10*time.Second, "the gateway reads the second revision", func() bool {
				return stateOfGateway(t, pod).Revision == rev2
			})

			// A tampered update never does: the sidecar rejects it and the
			// gateway keeps the second revision.
			doc3, _ := gw.Envelope(3)
			tampered := strings.Replace(string(doc3), `"model-east"`, `"model-evil"`, 1)
			require.NotEqual(t, string(doc3), tampered)
			gw.PutRaw(tampered)
			eventually(t, 10*time.Second, "the sidecar rejects the tampered update", func() bool {
				return statusOfSidecar(t, pod).LastRejectionReason == string(envelope.ReasonDigestMismatch)
			})
			assert.Equal(t, rev2, stateOfGateway(t, pod).Revision)
			assert.Equal(t, string(doc2), readFile(file))

			// Deleting the ConfigMap keeps the file and the gateway.
			gw.DeleteConfigMap()
			eventually(t, 10*time.Second, "the sidecar notices the deletion", func() bool {
				return statusOfSidecar(t, pod).Degraded
			})
			time.Sleep(time.Second)
			assert.Equal(t, string(doc2), readFile(file))
			st = stateOfGateway(t, pod)
			assert.Equal(t, rev2, st.Revision)
			assert.Zero(t, st.Invalid, "the gateway read an invalid file")
			pod = waitPod(t, ns, time.Second, "still Ready", testnode.PodReady)
			assert.Zero(t, containerStatus(pod, "praxis").RestartCount)
		})
	}
}
