package controller_test

import (
	"context"
	"fmt"
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

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/controller"
	"github.com/gridsync/gridsync/controller/rbac"
	"github.com/gridsync/gridsync/shared/envelope"
	"github.com/gridsync/gridsync/shared/overlaysync"
	"github.com/gridsync/gridsync/test/controlplane"
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
	sidecarConfig, err := e.cp.ConfigMapReaderConfig(e.ctx, e.gwNS, "gateway", configMap)
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

// orphaned waits until a ConfigMap holds an authoritative empty overlay
// marked orphaned: its gateway routes nowhere.
func (e *env) orphaned(key client.ObjectKey) {
	e.t.Helper()
	e.eventually("withdrawn "+key.String(), func() (bool, string) {
		var cm corev1.ConfigMap
		if err := e.admin.Get(e.ctx, key, &cm); err != nil {
			return false, err.Error()
		}
		res, err := envelope.Validate([]byte(cm.Data[envelope.DataKeyEnvelope]), envelope.Options{})
		if err != nil {
			return false, err.Error()
		}
		return res.CandidateCount == 0 && cm.Annotations[controller.AnnotationOrphaned] == "true",
			fmt.Sprintf("%d candidates, annotations %v", res.CandidateCount, cm.Annotations)
	})
}

// gone waits until a network has been deleted for good (its finalizer
// removed).
func (e *env) gone(network *v1alpha1.GridNetwork) {
	e.t.Helper()
	e.eventually("network "+network.Name+" gone", func() (bool, string) {
		err := e.admin.Get(e.ctx, client.ObjectKeyFromObject(network), &v1alpha1.GridNetwork{})
		return apierrors.IsNotFound(err), "still there"
	})
}

// The agent never lists ConfigMaps: a removed gateway's overlay, and a
// deleted network's, are withdrawn (an authoritative empty overlay, marked
// orphaned, so the gateway routes nowhere), the network held by a
// finalizer until they are. Nothing else is touched.
func TestOverlaysOfRemovedGatewaysAndNetworksAreWithdrawnAndOthersLeftAlone(t *testing.T) {
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
	cmA, _ := e.overlayOf(network, a, func(r envelope.Result) bool { return r.CandidateCount == 1 })
	cmB, _ := e.overlayOf(network, b, func(r envelope.Result) bool { return r.CandidateCount == 1 })

	// A hand edit of a managed ConfigMap is put back at the next resync.
	update(e, cmA, func(cm *corev1.ConfigMap) { cm.Data[envelope.DataKeyEnvelope] = "{}" })
	e.overlayOf(network, a, func(r envelope.Result) bool { return r.CandidateCount == 1 })

	update(e, network, func(n *v1alpha1.GridNetwork) { n.Spec.ConsumerGateways = []v1alpha1.ConsumerGateway{a, c} })
	e.orphaned(client.ObjectKeyFromObject(cmB))
	e.gatewayStatus(network, c.Name, func(s v1alpha1.GatewayOverlayStatus) bool { return s.Reason == controller.ReasonConfigMapNotOwned })

	require.NoError(t, e.admin.Delete(e.ctx, network))
	e.orphaned(client.ObjectKeyFromObject(cmA))
	e.gone(network)
	var stillForeign, stillUnrelated corev1.ConfigMap
	require.NoError(t, e.admin.Get(e.ctx, client.ObjectKeyFromObject(foreign), &stillForeign))
	assert.Equal(t, foreign.Data, stillForeign.Data)
	assert.Empty(t, stillForeign.Labels)
	require.NoError(t, e.admin.Get(e.ctx, client.ObjectKeyFromObject(unrelated), &stillUnrelated))
	assert.Empty(t, stillUnrelated.Annotations)
}

// A network deleted while no agent ran waits for one (its finalizer), and
// its overlays are withdrawn when an agent starts (upstream leaks them).
func TestOverlaysOfANetworkDeletedWhileTheAgentWasDownAreWithdrawn(t *testing.T) {
	e := newEnv(t)
	gw := e.gateway("edge", "east")
	network := e.network(gw)
	e.create(network)
	e.create(e.provider("p", network.Name, "m"))
	first := e.startAgent()
	cm, _ := e.overlayOf(network, gw, func(r envelope.Result) bool { return r.CandidateCount == 1 })
	first.stop()

	require.NoError(t, e.admin.Delete(e.ctx, network))
	time.Sleep(time.Second)
	require.NoError(t, e.admin.Get(e.ctx, client.ObjectKeyFromObject(network), &v1alpha1.GridNetwork{}), "held by its finalizer")
	e.startAgent()
	e.orphaned(client.ObjectKeyFromObject(cm))
	e.gone(network)
}

// Deleting orphaned overlays is an opt-in, with the delete verb granted
// for it.
func TestDeletingOrphanedOverlaysIsOptIn(t *testing.T) {
	e := newEnv(t)
	require.NoError(t, e.cp.Grant(e.ctx, e.agentNS, controlplane.AgentServiceAccount, "gridsync-agent-delete", e.gwNS, rbac.NamespaceRules(true)))
	a, b := e.gateway("edge-a", "east"), e.gateway("edge-b", "east")
	network := e.network(a, b)
	e.create(network)
	e.startAgent(func(o *controller.ManagerOptions) { o.DeleteOrphanedOverlays = true })
	cmA, _ := e.overlayOf(network, a, anyRevision)
	cmB, _ := e.overlayOf(network, b, anyRevision)
	deleted := func(cm *corev1.ConfigMap) {
		e.eventually("deleted "+cm.Name, func() (bool, string) {
			err := e.admin.Get(e.ctx, client.ObjectKeyFromObject(cm), &corev1.ConfigMap{})
			return apierrors.IsNotFound(err), "still there"
		})
	}
	update(e, network, func(n *v1alpha1.GridNetwork) { n.Spec.ConsumerGateways = []v1alpha1.ConsumerGateway{a} })
	deleted(cmB)
	require.NoError(t, e.admin.Delete(e.ctx, network))
	deleted(cmA)
	e.gone(network)
}
