package controller_test

import (
	"strings"
	"time"

	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gridsync/gridsync/controller"
	"github.com/gridsync/gridsync/controller/api/v1alpha1"
	"github.com/gridsync/gridsync/shared/envelope"
)

// gatewayStatus waits until the network's entry for gateway satisfies ok.
func (e *env) gatewayStatus(network *v1alpha1.GridNetwork, gateway string, ok func(v1alpha1.GatewayOverlayStatus) bool) v1alpha1.GatewayOverlayStatus {
	e.t.Helper()
	var got v1alpha1.GatewayOverlayStatus
	e.eventually(network.Name+"/"+gateway, func() (bool, string) {
		var n v1alpha1.GridNetwork
		if err := e.admin.Get(e.ctx, client.ObjectKeyFromObject(network), &n); err != nil {
			return false, err.Error()
		}
		for _, s := range n.Status.OverlayStatus {
			if s.GatewayName == gateway {
				got = s
				return ok(s), string(s.Phase) + "/" + s.Reason
			}
		}
		return false, "no entry"
	})
	return got
}

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
