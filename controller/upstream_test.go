package controller_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/controller"
	assess "github.com/gridsync/gridsync/controller/providerpolicy"
	membership "github.com/gridsync/gridsync/gossip"
	"github.com/gridsync/gridsync/gossip/sites"
	"github.com/gridsync/gridsync/shared/envelope"
	"github.com/gridsync/gridsync/test/testgateway"
	"github.com/gridsync/gridsync/trust/sitetrust"
)

// siteCondition is a GridSite's condition of type kind, as kubectl wait
// --for=condition=<kind> reads it.
func siteCondition(gs *v1alpha1.GridSite, kind string) metav1.Condition {
	if c := meta.FindStatusCondition(gs.Status.Conditions, kind); c != nil {
		return *c
	}
	return metav1.Condition{}
}

// A network written with upstream's fields, as upstream runs it: its
// pinned grid ID is the grid's, connectedSites counts every alive SWIM
// peer (the reference's definition) and networkSites those of the
// network; a GridSite carries Accepted, Discovered, Connected and Ready
// conditions, its region and zone and capabilities from what the site
// signs, is trusted by upstream's earlier certFingerprint pin, and is Left
// after a clean leave; a site whose agent is gone while its gateway still
// answers has its candidates withdrawn after staleCandidateTtlSeconds;
// upstream's metric names count the probes and phases.
func TestUpstreamSiteLifecycleAndNetworkFields(t *testing.T) {
	e := newEnv(t)
	e.logOnFailure()
	e.grantTrustSecrets("grid-ca", "site-cert")
	key := swimKey(t)
	e.create(e.secret("swim-key", map[string][]byte{"key": key}))
	gw := e.gateway("edge", "site-a")
	network := e.network(gw)
	network.Labels[controller.AutoDiscoverSitesLabel] = "true"
	ttl := int32(2)
	network.Spec.GridID = "grid-one-" + e.id
	network.Spec.StaleCandidateTTLSeconds = &ttl
	network.Spec.BudgetPolicy = &v1alpha1.BudgetPolicy{Tenants: []v1alpha1.TenantBudget{{TenantID: "team-a", CapUSD: 10}}}
	network.Spec.TLS = &v1alpha1.GridTLS{
		SwimKeySecretRef: &v1alpha1.NamespacedKeyRef{Name: "swim-key", Namespace: e.credNS},
		CASecretRef:      &v1alpha1.NamespacedName{Name: "grid-ca", Namespace: e.credNS},
		SiteSecretRef:    &v1alpha1.NamespacedName{Name: "site-cert", Namespace: e.credNS},
	}

	// B: a gateway and a provider, in us-east-1b. C: in the network, no
	// gateway. D: another network only.
	stub, err := testgateway.Start("127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(stub.Close)
	remoteB := startSwimSite(t, "site-b", membership.Config{EnvKey: key}).running(t)
	remoteB.SetGatewayAddress(stub.Addr)
	remoteB.SetNetworkSettings(network.Name, sites.NetworkSettings{Region: "us-east-1", Zone: "us-east-1b"})
	remoteC := startSwimSite(t, "site-c", membership.Config{EnvKey: key}).running(t)
	remoteD := startSwimSite(t, "site-d", membership.Config{EnvKey: key}).running(t)
	remoteD.SetIdentity("elsewhere", sites.Identity{Open: true})
	require.NoError(t, remoteD.Publish("elsewhere", "", nil))
	network.Spec.Seeds = []string{"site-b.grid.test:" + portOf(remoteB.AdvertiseAddr()), "site-c.grid.test:" + portOf(remoteC.AdvertiseAddr()),
		"site-d.grid.test:" + portOf(remoteD.AdvertiseAddr())}
	e.create(network)
	e.create(e.provider("local", network.Name, "m-local"))

	site := startSwimSite(t, "site-a", membership.Config{RequireKey: true})
	reg := prometheus.NewRegistry()
	e.startAgent(withMembership(site, seedNames{"site-b.grid.test": "127.0.0.1", "site-c.grid.test": "127.0.0.1", "site-d.grid.test": "127.0.0.1"}),
		withSiteTrust("site-a", time.Hour, time.Second), func(o *controller.ManagerOptions) { o.Registerer = reg })

	ca, _ := e.gridCA()
	remoteB.signsWith(t, network.Name, ca)
	remoteC.signsWith(t, network.Name, ca)
	_, chain := presentIssued(t, stub, ca, "site-b")
	remoteProviders := []sites.Provider{{Name: "remote-1", Models: []string{"m-remote"}, Cluster: "b", Phase: "Available"}}
	require.NoError(t, remoteB.Publish(network.Name, chain, remoteProviders))
	require.NoError(t, remoteC.Publish(network.Name, "", nil))

	got := e.networkStatus(network, "the pinned grid ID and both counts", func(n *v1alpha1.GridNetwork) (bool, string) {
		// Counts (the provider counts too) and grid ID are membership's;
		// Ready is the overlay reconcile's, written after it.
		return n.Status.GridID == network.Spec.GridID && n.Status.ConnectedSites == 3 && n.Status.NetworkSites == 2 &&
				n.Status.DistributedProviderCount == 1 && condition(n, "Ready").Reason == controller.ReasonFieldNotSupported,
			fmt.Sprintf("%s networkSites=%d grid=%q distributed=%d ready=%s", phaseAndCounts(n), n.Status.NetworkSites, n.Status.GridID,
				n.Status.DistributedProviderCount, condition(n, "Ready").Reason)
	})
	assert.Equal(t, network.Spec.GridID, remoteD.GridID(), "a peer with no grid ID adopts the pinned one")
	assert.Equal(t, v1alpha1.NetworkActive, got.Status.Phase)
	assert.Equal(t, got.Status.RemoteProviderCount, got.Status.DistributedProviderCount, "upstream's name for the remote provider count")
	assert.Equal(t, int32(1), got.Status.DistributedProviderCount)
	ready := condition(got, "Ready")
	assert.Equal(t, controller.ReasonFieldNotSupported, ready.Reason)
	assert.Contains(t, ready.Message, "spec.budgetPolicy")

	// B, as discovered: where it runs, what it offers, not yet trusted.
	keyB, keyC := types.NamespacedName{Name: network.Name + "-site-b"}, types.NamespacedName{Name: network.Name + "-site-c"}
	gsB := e.gridSite(keyB, "B discovered with its region", func(gs *v1alpha1.GridSite) bool {
		return gs.Spec.Region == "us-east-1" && gs.Status.Capabilities != nil && gs.Status.Capabilities.Inference &&
			siteCondition(gs, controller.ConditionDiscovered).Status == metav1.ConditionTrue
	})
	t.Cleanup(func() { _ = e.admin.Delete(context.Background(), gsB) })
	assert.Equal(t, "us-east-1b", gsB.Spec.Zone)
	assert.Equal(t, metav1.ConditionFalse, siteCondition(gsB, "Ready").Status)
	assert.Equal(t, metav1.ConditionTrue, siteCondition(gsB, controller.ConditionAccepted).Status)

	// Pinned by upstream's earlier form: the SHA-256 of the leaf's PEM,
	// colon-separated. Every condition turns True, as kubectl wait reads.
	leaf := leafOf(t, []byte(chain))
	update(e, gsB, func(gs *v1alpha1.GridSite) {
		gs.Spec.GatewayEndpoint.TLS = &v1alpha1.GatewayTLS{Mode: "Mutual", ServerName: "site-b.grid.internal"}
		gs.Spec.Trust = &v1alpha1.SiteTrust{CertFingerprint: sitetrust.PEMFingerprint(leaf.Raw)}
		gs.Spec.SovereigntyZone = "eu"
	})
	gsB = e.gridSite(keyB, "B Ready", func(gs *v1alpha1.GridSite) bool {
		return siteCondition(gs, "Ready").Status == metav1.ConditionTrue && siteCondition(gs, controller.ConditionAccepted).Reason == controller.ReasonFieldNotSupported
	})
	assert.Equal(t, sitetrust.PhaseActive, gsB.Status.Phase)
	for _, kind := range []string{controller.ConditionAccepted, controller.ConditionDiscovered, controller.ConditionConnected} {
		assert.Equal(t, metav1.ConditionTrue, siteCondition(gsB, kind).Status, kind)
	}
	assert.Contains(t, siteCondition(gsB, controller.ConditionAccepted).Message, "spec.sovereigntyZone")
	withRemote := func(r envelope.Result) bool { return r.CandidateCount == 2 }
	e.overlayOf(network, gw, withRemote)

	// C has no gateway: discovered, not connected, not ready; then it
	// leaves cleanly and is Left.
	gsC := e.gridSite(keyC, "C discovered", func(gs *v1alpha1.GridSite) bool {
		return siteCondition(gs, controller.ConditionDiscovered).Status == metav1.ConditionTrue &&
			siteCondition(gs, controller.ConditionConnected).Reason == sitetrust.ReasonGatewayAddressMissing
	})
	t.Cleanup(func() { _ = e.admin.Delete(context.Background(), gsC) })
	assert.False(t, gsC.Status.Capabilities.Inference)
	remoteC.stop()
	gsC = e.gridSite(keyC, "C Left", func(gs *v1alpha1.GridSite) bool { return gs.Status.Phase == sitetrust.PhaseLeft })
	assert.Equal(t, controller.ReasonSiteLeft, gsC.Status.Reason)
	assert.Equal(t, metav1.ConditionFalse, siteCondition(gsC, "Ready").Status)
	assert.Equal(t, metav1.ConditionFalse, siteCondition(gsC, controller.ConditionDiscovered).Status)

	// B's agent dies while its gateway still answers: B stays Active (its
	// gateway is verified), its candidate goes stale, then leaves the
	// overlay once stale for staleCandidateTtlSeconds.
	remoteB.Vanish()
	remoteB.stop()
	e.overlayOf(network, gw, func(r envelope.Result) bool { return r.CandidateCount == 1 })
	gsB = e.gridSite(keyB, "B still Active", func(gs *v1alpha1.GridSite) bool { return gs.Status.Phase == sitetrust.PhaseActive })
	assert.Contains(t, e.logs.String(), `"gridsite_phase"`)

	// Upstream's metric names.
	assert.Positive(t, counterOf(t, reg, "grid_gateway_probe_total", "mtls"))
	assert.Positive(t, counterOf(t, reg, "grid_site_phase_transition_total", "Left"))
	assert.Equal(t, 1.0, counterOf(t, reg, "grid_site_phase", gsB.Name))
	families, err := reg.Gather()
	require.NoError(t, err)
	var names []string
	for _, f := range families {
		names = append(names, f.GetName())
	}
	for _, want := range []string{"grid_gateway_probe_duration_seconds", "grid_site_phase_transition_total", "grid_site_phase"} {
		assert.Contains(t, names, want)
	}
}

// A provider's siteSelector says which sites host it: a site whose labels
// (its name, its network's region and zone) it does not match neither
// offers nor probes it, and says why; upstream's model metadata and cost
// are accepted and reported as not acted on.
func TestProviderSiteSelectorNarrowsWhereItIsOffered(t *testing.T) {
	e := newEnv(t)
	gw := e.gateway("edge", "site-a")
	network := e.network(gw)
	network.Spec.Region, network.Spec.Zone = "us-east-1", "us-east-1a"
	e.create(network)
	here := e.provider("here", network.Name, "m-here")
	here.Spec.SiteSelector = &metav1.LabelSelector{MatchLabels: map[string]string{controller.RegionLabel: "us-east-1"}}
	window := int64(200000)
	here.Spec.Models[0].Capabilities, here.Spec.Models[0].ContextWindow = []string{"text_generation"}, &window
	price := 3.0
	here.Spec.Cost = &v1alpha1.ProviderCost{PerMillionInputTokens: &price}
	elsewhere := e.provider("elsewhere", network.Name, "m-elsewhere")
	elsewhere.Spec.SiteSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
		{Key: controller.ZoneLabel, Operator: metav1.LabelSelectorOpIn, Values: []string{"eu-west-1a"}}}}
	everywhere := e.provider("everywhere", network.Name, "m-everywhere")
	for _, p := range []*v1alpha1.InferenceProvider{here, elsewhere, everywhere} {
		e.create(p)
	}
	e.startAgent(withSiteTrust("site-a", time.Hour, time.Second))

	_, r := e.overlayOf(network, gw, func(r envelope.Result) bool { return r.CandidateCount == 2 })
	assert.Equal(t, 2, r.CandidateCount)
	got := e.providerPhase(elsewhere, v1alpha1.ProviderPending, controller.ReasonSiteNotSelected)
	hosted := meta.FindStatusCondition(got.Status.Conditions, controller.ConditionHosted)
	require.NotNil(t, hosted)
	assert.Equal(t, metav1.ConditionFalse, hosted.Status)
	assert.Contains(t, hosted.Message, "grid.praxis.fast/zone=us-east-1a")

	got = e.providerPhase(here, v1alpha1.ProviderAvailable, assess.ReasonReady)
	hosted = meta.FindStatusCondition(got.Status.Conditions, controller.ConditionHosted)
	require.NotNil(t, hosted)
	assert.Equal(t, metav1.ConditionTrue, hosted.Status)
	accepted := meta.FindStatusCondition(got.Status.Conditions, controller.ConditionAccepted)
	require.NotNil(t, accepted)
	assert.Equal(t, controller.ReasonFieldNotSupported, accepted.Reason)
	for _, path := range []string{"spec.cost", "spec.models[m-here].capabilities", "spec.models[m-here].contextWindow"} {
		assert.Contains(t, accepted.Message, path)
	}
	got = e.providerPhase(everywhere, v1alpha1.ProviderAvailable, assess.ReasonReady)
	assert.Nil(t, meta.FindStatusCondition(got.Status.Conditions, controller.ConditionHosted), "no selector: no Hosted condition")
	assert.Equal(t, controller.ReasonAccepted, meta.FindStatusCondition(got.Status.Conditions, controller.ConditionAccepted).Reason)
}
