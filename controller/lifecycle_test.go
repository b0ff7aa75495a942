package controller_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gridsync/gridsync/controller/api/v1alpha1"
	"github.com/gridsync/gridsync/shared/envelope"
	"github.com/gridsync/gridsync/shared/overlaysync"
)

// The loop closed: a provider change becomes a new revision, which a
// sidecar running with its own least-privilege token writes to its file.
func TestProviderChangeReachesARunningSidecar(t *testing.T) {
	e := newEnv(t)
	gw := e.gateway("edge", "east")
	network := e.network(gw)
	e.create(network)
	p := e.provider("east-provider", network.Name, "model-a")
	e.create(p)
	e.startAgent()
	_, first := e.overlayOf(network, gw, func(r envelope.Result) bool { return r.CandidateCount == 1 })

	configMap := envelope.ConfigMapName(network.Name, gw.Name)
	sidecarConfig, err := cp.ConfigMapReaderConfig(e.ctx, e.gwNS, "gateway", configMap)
	require.NoError(t, err)
	output := filepath.Join(t.TempDir(), "routing-overlay.json")
	syncer, err := overlaysync.New(sidecarConfig, overlaysync.Options{
		Namespace: e.gwNS, ConfigMap: configMap, DataKey: envelope.DataKeyEnvelope, Output: output,
		Expect:     envelope.Scope{Network: network.Name, Gateway: gw.Name, Namespace: e.gwNS, LocalSite: "east"},
		Registerer: prometheus.NewRegistry(),
	})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan error, 1)
	go func() { done <- syncer.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		assert.NoError(t, <-done)
	})
	onDisk := func(revision string) func() (bool, string) {
		return func() (bool, string) {
			data, err := os.ReadFile(output)
			if err != nil {
				return false, err.Error()
			}
			res, err := envelope.Validate(data, envelope.Options{})
			if err != nil {
				return false, err.Error()
			}
			return res.Revision == revision, res.Revision
		}
	}
	e.eventually("first revision on disk", onDisk(first.Revision))

	update(e, p, func(p *v1alpha1.InferenceProvider) {
		p.Spec.Models = append(p.Spec.Models, v1alpha1.Model{Name: "model-b"})
	})
	_, second := e.overlayOf(network, gw, func(r envelope.Result) bool { return r.CandidateCount == 2 })
	require.NotEqual(t, first.Revision, second.Revision)
	e.eventually("changed revision on disk", onDisk(second.Revision))
}

func TestDeletingTheLastProviderPublishesTheEmptyOverlay(t *testing.T) {
	e := newEnv(t)
	gw := e.gateway("edge", "east")
	network := e.network(gw)
	e.create(network)
	p := e.provider("only", network.Name, "model-a")
	e.create(p)
	e.startAgent()
	e.overlayOf(network, gw, func(r envelope.Result) bool { return r.CandidateCount == 1 })

	require.NoError(t, e.admin.Delete(e.ctx, p))
	cm, res := e.overlayOf(network, gw, func(r envelope.Result) bool { return r.CandidateCount == 0 })
	assert.Empty(t, candidatesOf(t, cm), "an authoritative empty overlay, not a stale one")
	assert.Equal(t, res.Revision, cm.Annotations[envelope.AnnotationRevision])
}

func TestConfigMapsOfRemovedGatewaysAndNetworksAreDeletedAndOthersLeftAlone(t *testing.T) {
	e := newEnv(t)
	a, b := e.gateway("edge-a", "east"), e.gateway("edge-b", "east")
	network := e.network(a, b)
	e.create(network)
	e.create(e.provider("p", network.Name, "m"))

	// A ConfigMap of someone else that holds the name of a third gateway's
	// overlay, and an unrelated one: neither is ever touched.
	c := e.gateway("edge-c", "east")
	foreign := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: envelope.ConfigMapName(network.Name, c.Name), Namespace: e.gwNS},
		Data:       map[string]string{"mine": "yes"},
	}
	e.create(foreign)
	unrelated := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "unrelated", Namespace: e.gwNS, Labels: map[string]string{envelope.LabelNetwork: network.Name}}}
	e.create(unrelated)

	e.startAgent()
	cmA, _ := e.overlayOf(network, a, anyRevision)
	e.overlayOf(network, b, anyRevision)

	// A hand edit of a managed ConfigMap is put back.
	update(e, cmA, func(cm *corev1.ConfigMap) { cm.Data[envelope.DataKeyEnvelope] = "{}" })
	e.overlayOf(network, a, anyRevision)

	update(e, network, func(n *v1alpha1.GridNetwork) { n.Spec.ConsumerGateways = []v1alpha1.ConsumerGateway{a, c} })
	e.eventually("gateway b's ConfigMap deleted", func() (bool, string) {
		err := e.admin.Get(e.ctx, client.ObjectKey{Namespace: e.gwNS, Name: envelope.ConfigMapName(network.Name, b.Name)}, &corev1.ConfigMap{})
		return apierrors.IsNotFound(err), "still there"
	})
	var got v1alpha1.GridNetwork
	e.eventually("gateway c refused", func() (bool, string) {
		require.NoError(t, e.admin.Get(e.ctx, client.ObjectKeyFromObject(network), &got))
		for _, s := range got.Status.OverlayStatus {
			if s.GatewayName == c.Name {
				return s.Phase == v1alpha1.OverlayError && s.Reason == "ConfigMapNotOwned", s.Reason
			}
		}
		return false, "no entry"
	})

	require.NoError(t, e.admin.Delete(e.ctx, network))
	e.eventually("gateway a's ConfigMap deleted with the network", func() (bool, string) {
		err := e.admin.Get(e.ctx, client.ObjectKeyFromObject(cmA), &corev1.ConfigMap{})
		return apierrors.IsNotFound(err), "still there"
	})
	time.Sleep(500 * time.Millisecond) // give a wrong delete the chance to happen
	var stillForeign, stillUnrelated corev1.ConfigMap
	require.NoError(t, e.admin.Get(e.ctx, client.ObjectKeyFromObject(foreign), &stillForeign))
	assert.Equal(t, foreign.Data, stillForeign.Data)
	assert.Empty(t, stillForeign.Labels)
	require.NoError(t, e.admin.Get(e.ctx, client.ObjectKeyFromObject(unrelated), &stillUnrelated))
}

// ConfigMaps of a network deleted while no agent ran are removed when an
// agent starts (upstream leaks them).
func TestConfigMapsOfANetworkDeletedWhileTheAgentWasDownAreRemoved(t *testing.T) {
	e := newEnv(t)
	gw := e.gateway("edge", "east")
	network := e.network(gw)
	e.create(network)
	first := e.startAgent()
	cm, _ := e.overlayOf(network, gw, anyRevision)
	first.stop()

	require.NoError(t, e.admin.Delete(e.ctx, network))
	e.startAgent()
	e.eventually("orphaned ConfigMap deleted", func() (bool, string) {
		err := e.admin.Get(e.ctx, client.ObjectKeyFromObject(cm), &corev1.ConfigMap{})
		return apierrors.IsNotFound(err), "still there"
	})
}
