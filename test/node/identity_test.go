package node

import (
	"crypto/sha256"
	"encoding/hex"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gridsync/gridsync/test/testnode"
	"github.com/gridsync/gridsync/test/testpki"
)

// The pod's TLS identity from a real Secret volume: the Secret is updated,
// the kubelet swaps the volume's ..data, the sidecar publishes the new
// generation, and the gateway, reading the pair every 10 ms, sees the new
// certificate and never a certificate with another's key.
func TestIdentityFollowsTheKubeletsSecretVolume(t *testing.T) {
	t.Parallel()
	ns := namespace(t, "identity")
	root := testpki.NewRoot(t, "gateway-ca")
	secret := func(name string) (*corev1.Secret, string) {
		cert, key := root.Leaf(t, name, testpki.Opts{})
		sum := sha256.Sum256(cert)
		return &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: "edge-tls", Namespace: ns},
			Type:       corev1.SecretTypeTLS,
			Data:       map[string][]byte{"tls.crt": cert, "tls.key": key, "ca.crt": root.PEM},
		}, hex.EncodeToString(sum[:])
	}
	first, firstSum := secret("edge-1.example")
	secrets := cp.AdminClient().CoreV1().Secrets(ns)
	_, err := secrets.Create(t.Context(), first, metav1.CreateOptions{})
	require.NoError(t, err)

	gw := installGateway(t, ns, sidecarValues(map[string]any{
		"overlay": map[string]any{"sidecar": map[string]any{
			"identity": map[string]any{"enabled": true, "secretName": "edge-tls", "interval": "1s"},
		}},
	}))
	doc, _ := gw.Envelope(1)
	gw.Put(doc)
	pod := waitPod(t, ns, 60*time.Second, "Ready", testnode.PodReady)
	eventually(t, 10*time.Second, "the gateway reads the first identity", func() bool {
		return stateOfGateway(t, pod).Identity == firstSum
	})

	// Watch the gateway's reads while the Secret changes.
	var torn atomic.Int64
	stop := pollGateway(t, pod, 100*time.Millisecond, func(st testnode.GatewayState, err error) {
		if err == nil {
			torn.Store(st.IdentityTorn)
		}
	})
	second, secondSum := secret("edge-2.example")
	_, err = secrets.Update(t.Context(), second, metav1.UpdateOptions{})
	require.NoError(t, err)
	updated := time.Now()
	// The kubelet refreshes a Secret volume within its sync period (5 s
	// on this node), the sidecar reads it every second.
	eventually(t, 30*time.Second, "the gateway reads the second identity", func() bool {
		return stateOfGateway(t, pod).Identity == secondSum
	})
	t.Logf("the new identity reached the gateway %s after the Secret's update", time.Since(updated).Round(time.Millisecond))
	stop()
	st := stateOfGateway(t, pod)
	assert.Zero(t, st.IdentityTorn, "the gateway read a certificate with another's key")
	assert.Zero(t, torn.Load())
	assert.Greater(t, st.Reads, int64(100), "the gateway kept reading")
	side := statusOfSidecar(t, pod)
	require.NotNil(t, side.Identity)
	assert.NotEmpty(t, side.Identity.Generation)
}
