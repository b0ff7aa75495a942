package node

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gridsync/gridsync/shared/envelope"
	"github.com/gridsync/gridsync/test/testnode"
	"github.com/gridsync/gridsync/test/testpki"
	"github.com/gridsync/gridsync/test/testpod"
)

// Each of the upstream chart's CI and example values files, unchanged but
// for the images (the node runs the project's, never pulled), produces a
// pod that starts and becomes Ready, given the ConfigMaps and Secrets the
// values name, as in the cluster those files were written for.
func TestUpstreamValuesFilesRunOnTheNode(t *testing.T) {
	for _, c := range []struct {
		file      string
		release   string
		port      int
		configMap string
		tls       string
		// credentials are Secrets the pod mounts; overlay the ConfigMap
		// of the kubelet-projected overlay (no sidecar).
		credentials []string
		overlay     string
		// sidecar: the scope the overlay sidecar expects.
		sidecar *envelope.Scope
	}{
		{file: "consumer-gateway.yaml", release: "consumer", port: 8080, configMap: "consumer-praxis-config", tls: "consumer-tls",
			overlay: "grid-overlay-production-consumer-gateway"},
		{file: "hardened.yaml", release: "hardened", port: 8080, configMap: "praxis-config"},
		{file: "provider-gateway.yaml", release: "provider", port: 8443, configMap: "provider-praxis-config", tls: "provider-tls",
			credentials: []string{"inference-credential"}},
		{file: "upstream-sidecar.yaml", release: "edge-gateway", port: 8080, configMap: "edge-praxis-config",
			overlay: "grid-overlay-production-edge-gateway",
			sidecar: &envelope.Scope{Network: "production", Gateway: "edge-gateway", LocalSite: "east"}},
	} {
		t.Run(c.file, func(t *testing.T) {
			t.Parallel()
			ns := namespace(t, "upstream")
			admin := cp.AdminClient()
			praxis := fmt.Sprintf("listeners:\n  - name: main\n    address: \"0.0.0.0:%d\"\n", c.port)
			_, err := admin.CoreV1().ConfigMaps(ns).Create(t.Context(), &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Name: c.configMap}, Data: map[string]string{"praxis.yaml": praxis},
			}, metav1.CreateOptions{})
			require.NoError(t, err)
			if c.tls != "" {
				cert, key := testpki.NewRoot(t, "ca").Leaf(t, c.release, testpki.Opts{})
				_, err := admin.CoreV1().Secrets(ns).Create(t.Context(), &corev1.Secret{
					ObjectMeta: metav1.ObjectMeta{Name: c.tls}, Type: corev1.SecretTypeTLS,
					Data: map[string][]byte{"tls.crt": cert, "tls.key": key},
				}, metav1.CreateOptions{})
				require.NoError(t, err)
			}
			for _, name := range c.credentials {
				_, err := admin.CoreV1().Secrets(ns).Create(t.Context(), &corev1.Secret{
					ObjectMeta: metav1.ObjectMeta{Name: name}, StringData: map[string]string{"token": "not-a-real-token"},
				}, metav1.CreateOptions{})
				require.NoError(t, err)
			}
			if c.overlay != "" {
				scope := envelope.Scope{Network: "production", Gateway: "consumer-gateway", Namespace: ns, LocalSite: "east"}
				if c.sidecar != nil {
					scope = *c.sidecar
					scope.Namespace = ns
				}
				p := &testpod.Pod{T: t, Namespace: ns, Scope: scope, Admin: admin, ConfigMap: c.overlay}
				doc, _ := p.Envelope(1)
				// The kubelet's ConfigMap volume projects both keys the
				// upstream chart lists.
				_, err := admin.CoreV1().ConfigMaps(ns).Create(t.Context(), &corev1.ConfigMap{
					ObjectMeta: metav1.ObjectMeta{Name: c.overlay},
					Data:       map[string]string{"routing-overlay.json": string(doc), "routing-config.json": "{}"},
				}, metav1.CreateOptions{})
				require.NoError(t, err)
			}
			images := testnode.Merge(testnode.ImageValues("praxis-gateway"), map[string]any{"image": map[string]any{"digest": ""}})
			objs, err := testnode.Render(t.Context(), testnode.Chart("praxis-gateway"), c.release, ns,
				[]string{filepath.Join("..", "charts", "testdata", "upstream-values", c.file)}, images)
			require.NoError(t, err)
			require.NoError(t, testnode.Apply(t.Context(), cp, ns, objs))
			pod := waitPod(t, ns, 90*time.Second, "Ready", testnode.PodReady)
			// Ready says little where the values turn the probes off
			// (hardened.yaml): a gateway that exits at once is Ready for
			// a moment. The gateway answers on its port, and then no
			// container has restarted.
			eventually(t, 10*time.Second, "the gateway answers on its port", func() bool {
				var st testnode.GatewayState
				return node.GetJSON(t.Context(), pod.Status.PodIP, c.port, "/state", &st) == nil
			})
			pod, err = admin.CoreV1().Pods(ns).Get(t.Context(), pod.Name, metav1.GetOptions{})
			require.NoError(t, err)
			for _, st := range pod.Status.ContainerStatuses {
				require.NotNil(t, st.State.Running, "%s: %s", st.Name, describe(pod))
				require.Zero(t, st.RestartCount, "%s: %s", st.Name, describe(pod))
			}
			if c.overlay != "" {
				// The gateway read the overlay, through the sidecar or the
				// kubelet's ConfigMap volume.
				eventually(t, 10*time.Second, "the gateway reads a valid overlay", func() bool {
					st := stateOfGateway(t, pod)
					return st.Revision != "" && st.Invalid == 0
				})
			}
		})
	}
}
