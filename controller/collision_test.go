package controller_test

import (
	"fmt"
	"strings"
	"time"

	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/controller"
	"github.com/gridsync/gridsync/shared/envelope"
)

func (a *agent) configMapWrites(since int) int {
	n := 0
	for _, w := range a.requests.since(since) {
		if strings.Contains(w, "/configmaps") {
			n++
		}
	}
	return n
}

// Network x-a with gateway b-c and network x-a-b with gateway c both map
// to grid-overlay-x-a-b-c (the upstream rule, kept byte for byte). The
// first claim keeps the name, the other is refused naming both, nothing
// flaps, and deleting either never deletes the other's ConfigMap.
func TestTwoNetworksMappingToOneConfigMapNameDoNotFight(t *testing.T) {
	e := newEnv(t)
	prefix := "x-" + e.id
	first := &v1alpha1.GridNetwork{
		ObjectMeta: metav1.ObjectMeta{Name: prefix + "-a", Labels: map[string]string{"test": e.id}},
		Spec:       v1alpha1.GridNetworkSpec{ConsumerGateways: []v1alpha1.ConsumerGateway{e.gateway("b-c", "east")}},
	}
	second := &v1alpha1.GridNetwork{
		ObjectMeta: metav1.ObjectMeta{Name: prefix + "-a-b", Labels: map[string]string{"test": e.id}},
		Spec:       v1alpha1.GridNetworkSpec{ConsumerGateways: []v1alpha1.ConsumerGateway{e.gateway("c", "east")}},
	}
	name := envelope.ConfigMapName(first.Name, "b-c")
	require.Equal(t, name, envelope.ConfigMapName(second.Name, "c"))
	e.create(first)
	a := e.startAgent()
	e.gatewayStatus(first, "b-c", func(s v1alpha1.GatewayOverlayStatus) bool { return s.Phase == v1alpha1.OverlayDistributed })
	e.create(second)

	refused := e.gatewayStatus(second, "c", func(s v1alpha1.GatewayOverlayStatus) bool {
		return s.Reason == controller.ReasonConfigMapNameConflict
	})
	assert.Equal(t, v1alpha1.OverlayError, refused.Phase)
	assert.Contains(t, refused.Message, first.Name)
	assert.Contains(t, refused.Message, second.Name)

	// Nothing flaps: no ConfigMap write while both exist.
	before := a.requests.count()
	time.Sleep(3 * time.Second)
	assert.Zero(t, a.configMapWrites(before), "ConfigMap writes while the two networks collide")
	var cm corev1.ConfigMap
	require.NoError(t, e.admin.Get(e.ctx, client.ObjectKey{Namespace: e.gwNS, Name: name}, &cm))
	assert.Equal(t, first.Name, cm.Labels[envelope.LabelNetwork])
	e.gatewayStatus(first, "b-c", func(s v1alpha1.GatewayOverlayStatus) bool { return s.Phase == v1alpha1.OverlayDistributed })

	// Deleting the refused network leaves the holder's ConfigMap alone.
	require.NoError(t, e.admin.Delete(e.ctx, second))
	time.Sleep(time.Second)
	require.NoError(t, e.admin.Get(e.ctx, client.ObjectKey{Namespace: e.gwNS, Name: name}, &cm))
	assert.Equal(t, first.Name, cm.Labels[envelope.LabelNetwork])

	// Back again, then the holder goes: the waiting network takes the name.
	second.ResourceVersion = ""
	e.create(second)
	e.gatewayStatus(second, "c", func(s v1alpha1.GatewayOverlayStatus) bool {
		return s.Reason == controller.ReasonConfigMapNameConflict
	})
	require.NoError(t, e.admin.Delete(e.ctx, first))
	e.gatewayStatus(second, "c", func(s v1alpha1.GatewayOverlayStatus) bool { return s.Phase == v1alpha1.OverlayDistributed })
	e.eventually("the name now holds the second network's overlay", func() (bool, string) {
		err := e.admin.Get(e.ctx, client.ObjectKey{Namespace: e.gwNS, Name: name}, &cm)
		if apierrors.IsNotFound(err) {
			return false, "absent"
		}
		require.NoError(t, err)
		return cm.Labels[envelope.LabelNetwork] == second.Name, cm.Labels[envelope.LabelNetwork]
	})
}

// Replacing the Grid operator: its overlay ConfigMaps (managed by
// grid-operator, or carrying its older grid.praxis-proxy.io labels) are
// taken over, its older labels removed; one made by anybody else is still
// refused, and one of the operator's that names another network is not
// taken.
func TestTakesOverTheGridOperatorsConfigMaps(t *testing.T) {
	e := newEnv(t)
	a, b, c, d := e.gateway("op-a", "east"), e.gateway("op-b", "east"), e.gateway("op-c", "east"), e.gateway("op-d", "east")
	network := e.network(a, b, c, d)
	cm := func(gw v1alpha1.ConsumerGateway, labels map[string]string) *corev1.ConfigMap {
		return &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: envelope.ConfigMapName(network.Name, gw.Name), Namespace: e.gwNS, Labels: labels,
				Annotations: map[string]string{"grid.praxis-proxy.io/overlay-revision": "old"}},
			Data: map[string]string{envelope.DataKeyEnvelope: "{}"},
		}
	}
	e.create(cm(a, map[string]string{envelope.LabelManagedBy: "grid-operator", envelope.LabelNetwork: network.Name, envelope.LabelGateway: a.Name}))
	e.create(cm(b, map[string]string{"grid.praxis-proxy.io/network": network.Name, "grid.praxis-proxy.io/gateway": b.Name}))
	e.create(cm(c, map[string]string{"team": "someone-else"}))
	e.create(cm(d, map[string]string{envelope.LabelManagedBy: "grid-operator", envelope.LabelNetwork: "another-network", envelope.LabelGateway: d.Name}))
	e.create(network)
	e.startAgent()

	for _, gw := range []v1alpha1.ConsumerGateway{a, b} {
		e.overlayOf(network, gw, anyRevision)
		e.eventually(gw.Name+" taken over, older metadata removed", func() (bool, string) {
			var got corev1.ConfigMap
			require.NoError(t, e.admin.Get(e.ctx, client.ObjectKey{Namespace: e.gwNS, Name: envelope.ConfigMapName(network.Name, gw.Name)}, &got))
			for k := range got.Labels {
				if strings.HasPrefix(k, envelope.LegacyPrefix) {
					return false, "label " + k
				}
			}
			for k := range got.Annotations {
				if strings.HasPrefix(k, envelope.LegacyPrefix) {
					return false, "annotation " + k
				}
			}
			return got.Labels[envelope.LabelManagedBy] == controller.DefaultProducer && got.Labels[envelope.LabelNetwork] == network.Name, fmt.Sprint(got.Labels)
		})
	}
	e.gatewayStatus(network, c.Name, func(s v1alpha1.GatewayOverlayStatus) bool { return s.Reason == controller.ReasonConfigMapNotOwned })
	e.gatewayStatus(network, d.Name, func(s v1alpha1.GatewayOverlayStatus) bool { return s.Reason == controller.ReasonConfigMapNameConflict })
	var foreign corev1.ConfigMap
	require.NoError(t, e.admin.Get(e.ctx, client.ObjectKey{Namespace: e.gwNS, Name: envelope.ConfigMapName(network.Name, c.Name)}, &foreign))
	assert.Equal(t, "{}", foreign.Data[envelope.DataKeyEnvelope], "never touched")
}
