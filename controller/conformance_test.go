package controller_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/controller"
	"github.com/gridsync/gridsync/shared/envelope"
)

// A network that asks for what this release does not do says so in its
// Ready condition, naming every such field, instead of running as if it
// had not asked; its overlays are still delivered. Seeds and a SWIM key on
// an agent that runs no SWIM say that too (phase Pending, nothing
// gossiped).
func TestFieldsNotSupportedYetAreReportedNotIgnored(t *testing.T) {
	e := newEnv(t)
	gw := e.gateway("edge", "east")
	network := e.network(gw)
	network.Spec.MetricsRefreshInterval = "30s"
	network.Spec.Seeds = []string{"127.0.0.1:7946"}
	network.Spec.TLS = &v1alpha1.GridTLS{SwimKeySecretRef: &v1alpha1.NamespacedKeyRef{Name: "grid-swim-key", Namespace: e.credNS}}
	e.create(network)
	e.create(e.provider("east", network.Name, "model-a"))
	e.startAgent()

	e.overlayOf(network, gw, func(r envelope.Result) bool { return r.CandidateCount == 1 })
	// Ready is the overlay reconcile's; the Membership condition and the
	// phase are membership's, and Ready names the seeds and the key only
	// once the overlay reconcile summed up that condition, after
	// membership wrote it: all of it is waited for.
	var got v1alpha1.GridNetwork
	e.eventually("FieldNotSupported, with membership's SwimNotRunning summed up", func() (bool, string) {
		require.NoError(t, e.admin.Get(e.ctx, client.ObjectKeyFromObject(network), &got))
		c := meta.FindStatusCondition(got.Status.Conditions, "Ready")
		if c == nil {
			return false, "no Ready condition"
		}
		swim := condition(&got, controller.ConditionMembership)
		return c.Reason == controller.ReasonFieldNotSupported && swim.Reason == controller.ReasonSwimNotRunning && strings.Contains(c.Message, "spec.seeds"),
			c.Reason + ": " + c.Message + "; Membership " + swim.Reason
	})
	ready := meta.FindStatusCondition(got.Status.Conditions, "Ready")
	assert.Equal(t, "False", string(ready.Status))
	for _, path := range []string{"spec.metricsRefreshInterval", "spec.seeds", "spec.tls.swimKeySecretRef"} {
		assert.Contains(t, ready.Message, path)
	}
	swim := meta.FindStatusCondition(got.Status.Conditions, controller.ConditionMembership)
	require.NotNil(t, swim)
	assert.Equal(t, "False", string(swim.Status))
	assert.Equal(t, controller.ReasonSwimNotRunning, swim.Reason)
	assert.Equal(t, v1alpha1.NetworkPending, got.Status.Phase)
	assert.Zero(t, got.Status.ConnectedSites)
}

// networkPolicy is honoured: a denied site's providers reach no overlay,
// and a denied site's gateway gets an authoritative empty overlay.
func TestNetworkPolicyDeniesSites(t *testing.T) {
	e := newEnv(t)
	east := e.gateway("edge-east", "east")
	partnerProvider := e.provider("partner", "", "model-p")
	partnerSite := partnerProvider.Name // a provider is a site of the network
	partnerGateway := e.gateway("edge-partner", partnerSite)
	network := e.network(east, partnerGateway)
	network.Spec.NetworkPolicy = &v1alpha1.NetworkPolicy{Deny: []v1alpha1.SiteRef{{Site: partnerSite}}}
	e.create(network)
	partnerProvider.Spec.GridNetworkRef = network.Name
	e.create(partnerProvider)
	e.create(e.provider("trusted", network.Name, "model-t"))
	e.startAgent()

	cm, _ := e.overlayOf(network, east, func(r envelope.Result) bool { return r.CandidateCount == 1 })
	for _, c := range candidatesOf(t, cm) {
		assert.NotEqual(t, partnerSite, c.Site, "a denied site's provider reaches no overlay")
	}
	e.overlayOf(network, partnerGateway, func(r envelope.Result) bool { return r.CandidateCount == 0 })
}

// Phase changes are Kubernetes Events in the agent's namespace (the Grid
// objects are cluster-scoped), never carrying a Secret's value.
func TestPhaseChangesAreRecordedAsEvents(t *testing.T) {
	e := newEnv(t)
	network := e.network(e.gateway("edge", "east"))
	e.create(network)
	p := e.provider("evented", network.Name, "model-a")
	p.Spec.Auth = e.bearer("absent", "token")
	e.create(p)
	e.startAgent()
	e.providerPhase(p, v1alpha1.ProviderUnavailable, "CredentialSecretMissing")
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(e.logs.String())
		}
	})
	e.eventually("an Event for the provider's phase", func() (bool, string) {
		var events corev1.EventList
		require.NoError(t, e.admin.List(e.ctx, &events, client.InNamespace(e.agentNS)))
		for _, ev := range events.Items {
			if ev.InvolvedObject.Kind == "InferenceProvider" && ev.InvolvedObject.Name == p.Name {
				return ev.Reason == "CredentialSecretMissing" && ev.Type == corev1.EventTypeWarning, ev.Reason
			}
		}
		return false, fmt.Sprintf("%d events, none for %s", len(events.Items), p.Name)
	})
}
