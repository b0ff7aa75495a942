package controller_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/controller"
	"github.com/gridsync/gridsync/controller/internal/deliverystatus"
	rollout "github.com/gridsync/gridsync/delivery/fold"
	deliveryreport "github.com/gridsync/gridsync/delivery/report"
	membership "github.com/gridsync/gridsync/gossip"
	"github.com/gridsync/gridsync/gossip/sites"
	"github.com/gridsync/gridsync/shared/envelope"
	"github.com/gridsync/gridsync/signals"
)

// The network reconciles are counted by controller and outcome, and the
// stages they ran by stage: an overlay reconcile that runs renders and
// publishes once each, and syncs GridSites when its network asks for it;
// the delivery status reconciler folds deliveries; one of a deleted
// network is skipped; a stage the agent is not set up for (gossip,
// without SWIM) is not counted.
func TestNetworkReconcilesAndTheirStagesAreCounted(t *testing.T) {
	e := newEnv(t)
	gw := e.gateway("edge", "east")
	network := e.network(gw)
	network.Labels[controller.AutoDiscoverSitesLabel] = "true"
	e.create(network)
	p := e.provider("east-provider", network.Name, "model-a")
	e.create(p)
	reg := prometheus.NewRegistry()
	deliveries := rollout.New(rollout.Options{Registerer: prometheus.NewRegistry()})
	e.startAgent(withDeliveries(deliveries), func(o *controller.ManagerOptions) { o.Registerer = reg })
	e.overlayOf(network, gw, func(r envelope.Result) bool { return r.CandidateCount == 1 })

	type counts struct{ ran, skipped, failed, render, publish, gossip, gridSites, delivery float64 }
	read := func() counts {
		return counts{
			ran:       counterOf(t, reg, "gridsync_controller_network_reconciles_total", "ran"),
			skipped:   counterOf(t, reg, "gridsync_controller_network_reconciles_total", "skipped"),
			failed:    counterOf(t, reg, "gridsync_controller_network_reconciles_total", "error"),
			render:    counterOf(t, reg, "gridsync_controller_network_stages_total", "render"),
			publish:   counterOf(t, reg, "gridsync_controller_network_stages_total", "publish"),
			gossip:    counterOf(t, reg, "gridsync_controller_network_stages_total", "gossip_config"),
			gridSites: counterOf(t, reg, "gridsync_controller_network_stages_total", "grid_sites"),
			delivery:  counterOf(t, reg, "gridsync_controller_network_stages_total", "delivery_fold"),
		}
	}
	// Every series is there from the start, the controller label naming
	// the reconciler controller-runtime's metrics name.
	for _, controller := range []string{"gridnetwork", "gridnetwork-membership", "gridnetwork-delivery"} {
		for _, outcome := range []string{"ran", "skipped", "error"} {
			_, found := reconcilesOf(t, reg, controller, outcome)
			require.True(t, found, "a series for controller %s, outcome %s", controller, outcome)
		}
	}
	// Every overlay reconcile that got past the providers rendered and
	// published once each, and folded deliveries into the status it wrote;
	// the membership reconciler synced GridSites, only for this network,
	// labelled for it (at most once per membership reconcile); the
	// delivery status reconciler folded deliveries too. The agent sees the whole cluster
	// (no earlier test's network: each test's cleanup removes its own and
	// fails on one left behind), so the relations are agent-wide, and the
	// counters, read one after another, are compared once the reconciles
	// settle.
	var first counts
	e.eventually("every reconcile past the providers counted each of its stages once", func() (bool, string) {
		first = read()
		folded, _ := reconcilesOf(t, reg, "gridnetwork-delivery", "ran")
		members, _ := reconcilesOf(t, reg, "gridnetwork-membership", "ran")
		ok := first.ran > 0 && first.render >= first.ran && first.publish == first.render &&
			folded > 0 && first.delivery >= first.render+folded && first.gridSites > 0 && first.gridSites <= members && first.gossip == 0
		return ok, fmt.Sprintf("%+v, membership reconciles %v", first, members)
	})

	// A provider change is reconciled: the stages move with it.
	update(e, p, func(p *v1alpha1.InferenceProvider) {
		p.Spec.Models = append(p.Spec.Models, v1alpha1.Model{Name: "model-b"})
	})
	e.eventually("the provider change rendered and published again", func() (bool, string) {
		c := read()
		return c.ran > first.ran && c.render > first.render && c.publish > first.publish, fmt.Sprintf("%+v", c)
	})

	// A deleted network is finalized and forgotten: its reconciles are
	// skipped.
	before := read()
	require.NoError(t, e.admin.Delete(e.ctx, network))
	e.eventually("the deleted network's reconciles were skipped", func() (bool, string) {
		c := read()
		return c.skipped > before.skipped && c.publish == c.render, fmt.Sprintf("%+v", c)
	})
}

// reconcilesOf is gridsync_controller_network_reconciles_total of one
// controller and outcome, and whether the series is there.
func reconcilesOf(t *testing.T, reg *prometheus.Registry, controller, outcome string) (float64, bool) {
	t.Helper()
	for _, m := range gathered(t, reg, "gridsync_controller_network_reconciles_total") {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["controller"] == controller && labels["outcome"] == outcome {
			return m.GetCounter().GetValue(), true
		}
	}
	return 0, false
}

// stageCounts are the stages the network reconciles ran so far.
type stageCounts struct{ render, publish, gossip, gridSites, delivery float64 }

func stagesOf(t *testing.T, reg *prometheus.Registry) stageCounts {
	t.Helper()
	return stageCounts{
		render:    counterOf(t, reg, "gridsync_controller_network_stages_total", "render"),
		publish:   counterOf(t, reg, "gridsync_controller_network_stages_total", "publish"),
		gossip:    counterOf(t, reg, "gridsync_controller_network_stages_total", "gossip_config"),
		gridSites: counterOf(t, reg, "gridsync_controller_network_stages_total", "grid_sites"),
		delivery:  counterOf(t, reg, "gridsync_controller_network_stages_total", "delivery_fold"),
	}
}

// oneProviderNetwork is a network with one gateway and one provider.
func (e *env) oneProviderNetwork() (v1alpha1.ConsumerGateway, *v1alpha1.GridNetwork) {
	gw := e.gateway("edge", "east")
	network := e.network(gw)
	e.create(network)
	e.create(e.provider("east-provider", network.Name, "model-a"))
	return gw, network
}

// countingStages has the agent count into reg, without a resync in the
// way of counting what an event runs.
func countingStages(reg *prometheus.Registry) agentOption {
	return func(o *controller.ManagerOptions) {
		o.Registerer = reg
		o.ResyncPeriod = time.Hour
	}
}

// quiet waits until no stage has run for a second: what runs after is
// what the next event set off (the resync is long enough not to come).
func (e *env) quiet(reg *prometheus.Registry) stageCounts {
	e.t.Helper()
	var c stageCounts
	e.eventually("no stage running", func() (bool, string) {
		c = stagesOf(e.t, reg)
		time.Sleep(time.Second)
		again := stagesOf(e.t, reg)
		return c == again, fmt.Sprintf("%+v then %+v", c, again)
	})
	return c
}

// deliveredOf waits until the network's Delivered condition has status
// and reason.
func (e *env) deliveredOf(network *v1alpha1.GridNetwork, status metav1.ConditionStatus, reason string) (metav1.Condition, v1alpha1.GridNetworkStatus) {
	e.t.Helper()
	var got metav1.Condition
	var st v1alpha1.GridNetworkStatus
	e.eventually("Delivered "+string(status)+" "+reason, func() (bool, string) {
		var n v1alpha1.GridNetwork
		if err := e.admin.Get(e.ctx, client.ObjectKeyFromObject(network), &n); err != nil {
			return false, err.Error()
		}
		st = n.Status
		c := meta.FindStatusCondition(n.Status.Conditions, deliverystatus.ConditionDelivered)
		if c == nil {
			return false, "no Delivered condition"
		}
		got = *c
		return c.Status == status && c.Reason == reason, fmt.Sprintf("%s %s: %s", c.Status, c.Reason, c.Message)
	})
	return got, st
}

// A network's Delivered condition follows its pods' reports, the one a
// user waits on (kubectl wait --for=condition=Delivered): no report yet,
// a pod lagging on an older revision, every pod on the rendered one. And a
// delivery report is a status-only event: it runs the delivery fold, and
// no render and no publish.
func TestTheDeliveredConditionFollowsReportsAndAReportRendersNothing(t *testing.T) {
	e := newEnv(t)
	e.logOnFailure()
	gw, network := e.oneProviderNetwork()
	reg := prometheus.NewRegistry()
	deliveries := rollout.New(rollout.Options{Registerer: prometheus.NewRegistry()})
	e.startAgent(withDeliveries(deliveries), countingStages(reg))
	_, res := e.overlayOf(network, gw, anyRevision)
	e.deliveredOf(network, metav1.ConditionUnknown, deliverystatus.ReasonNoReports)
	before := e.quiet(reg)
	foldsBefore, _ := reconcilesOf(t, reg, "gridnetwork-delivery", "ran")

	report := func(pod, revision string) {
		require.NoError(t, deliveries.Observe(deliveryreport.Report{Namespace: gw.Namespace, Gateway: gw.Name, Pod: pod,
			Revision: revision, ContentDigest: revision, State: deliveryreport.StateReady}))
	}
	older := strings.Repeat("ab", 32)
	report("edge-a", older)
	c, _ := e.deliveredOf(network, metav1.ConditionFalse, deliverystatus.ReasonPodsLagging)
	assert.Equal(t, "0/1 pods on revision "+res.Revision[:12]+"; lagging: "+gw.Namespace+"/edge-a ("+rollout.LagOlderRevision+")", c.Message)

	report("edge-a", res.Revision)
	c, status := e.deliveredOf(network, metav1.ConditionTrue, deliverystatus.ReasonRevisionDelivered)
	assert.Equal(t, "1/1 pods on their gateway's rendered revision", c.Message)
	assert.Equal(t, "1/1", status.Delivered)
	require.Len(t, status.OverlayStatus, 1)
	require.NotNil(t, status.OverlayStatus[0].Delivery)
	assert.Equal(t, int32(1), status.OverlayStatus[0].Delivery.PodsOnRevision)
	assert.Equal(t, res.Revision, status.OverlayStatus[0].RenderedRevision, "the overlay reconciler's fields are kept")
	ready := meta.FindStatusCondition(status.Conditions, "Ready")
	require.NotNil(t, ready, "the overlay reconciler's conditions are kept")
	assert.Equal(t, metav1.ConditionTrue, ready.Status)

	after := e.quiet(reg)
	folds, _ := reconcilesOf(t, reg, "gridnetwork-delivery", "ran")
	assert.GreaterOrEqual(t, folds-foldsBefore, 2.0, "each report's change was folded")
	assert.Greater(t, after.delivery, before.delivery)
	assert.Equal(t, before.render, after.render, "a delivery report renders nothing")
	assert.Equal(t, before.publish, after.publish, "a delivery report publishes nothing")
	assert.Equal(t, before.gridSites, after.gridSites)
}

// A peer's readiness change is reconciled only where it is rendered: with
// no network's view holding that site's provider, it runs no render and
// no publish (nor probes a GridSite).
func TestAPeerReadinessChangeNoNetworkHoldsRendersNothing(t *testing.T) {
	e := newEnv(t)
	gw, network := e.oneProviderNetwork()
	store := signals.NewStore(nil)
	reg := prometheus.NewRegistry()
	e.startAgent(withMembership(startSwimSite(t, "east", membership.Config{}), seedNames{}), withSignals(store), countingStages(reg))
	e.overlayOf(network, gw, anyRevision)
	before := e.quiet(reg)

	// The store tells the agent of each change as it is set.
	for _, value := range []float64{1, 0} {
		store.Set("west", "west-provider", signals.PartPeer, []signals.Sample{{Metric: signals.MetricReady, Value: value, At: time.Now()}}, time.Now().Add(time.Hour))
		isReady, known := store.Ready("west", "west-provider")
		require.True(t, known)
		require.Equal(t, value > 0, isReady, "a readiness change")
	}
	after := e.quiet(reg)
	assert.Equal(t, before.render, after.render, "a peer readiness change no network holds renders nothing")
	assert.Equal(t, before.publish, after.publish, "and publishes nothing")
}

// A gossip record is membership's: the membership reconciler takes it
// into the network's status, and only a record that changes what the
// overlays are rendered from (a remote provider's) has the overlay
// reconciler render. A remote site announcing the network (its site
// record) and its signals record run no render and no publish, nor
// configure gossip again; its provider record renders.
func TestAGossipRecordRendersOnlyWhenItsProvidersMoved(t *testing.T) {
	e := newEnv(t)
	gw := e.gateway("edge", "east")
	network := e.network(gw)
	remote := startSwimSite(t, "west", membership.Config{}).running(t)
	network.Spec.Seeds = []string{"west.grid.test:" + portOf(remote.AdvertiseAddr())}
	e.create(network)
	e.create(e.provider("east-provider", network.Name, "model-a"))
	reg := prometheus.NewRegistry()
	east := startSwimSite(t, "east", membership.Config{})
	e.startAgent(withMembership(east, seedNames{"west.grid.test": "127.0.0.1"}), countingStages(reg))
	e.overlayOf(network, gw, anyRevision)
	e.networkStatus(network, "the seed joined", func(n *v1alpha1.GridNetwork) (bool, string) {
		return n.Status.ConnectedSites == 1 && n.Status.Phase == v1alpha1.NetworkInitializing, phaseAndCounts(n)
	})
	before := e.quiet(reg)
	ranBefore, _ := reconcilesOf(t, reg, "gridnetwork-membership", "ran")

	// The remote site announces the network (its site record, no
	// provider), then its signals.
	remote.SetIdentity(network.Name, sites.Identity{Open: true})
	require.NoError(t, remote.Publish(network.Name, "", nil))
	e.networkStatus(network, "the remote site in the status", func(n *v1alpha1.GridNetwork) (bool, string) {
		return n.Status.Phase == v1alpha1.NetworkActive && n.Status.NetworkSites == 1, phaseAndCounts(n)
	})
	require.NoError(t, remote.PublishSignals(network.Name, []sites.Signal{{Provider: "west-provider", Metric: signals.MetricReady, Value: 1}}))
	require.Eventually(t, func() bool { return len(east.View(network.Name).Signals) == 1 }, 10*time.Second, 20*time.Millisecond)
	after := e.quiet(reg)
	ran, _ := reconcilesOf(t, reg, "gridnetwork-membership", "ran")
	assert.Greater(t, ran, ranBefore, "the membership reconciler took the records")
	assert.Equal(t, before.render, after.render, "a site record and a signals record render nothing")
	assert.Equal(t, before.publish, after.publish, "and publish nothing")
	assert.Equal(t, before.gossip, after.gossip, "nor configure gossip again")

	// Its provider record is rendered from: the overlays are rendered
	// again (the site is not trusted, so they stay as they were).
	require.NoError(t, remote.Publish(network.Name, "", []sites.Provider{{Name: "west-provider", Models: []string{"m1"}, Phase: "Available"}}))
	e.networkStatus(network, "the remote provider in the status", func(n *v1alpha1.GridNetwork) (bool, string) {
		return n.Status.RemoteProviderCount == 1, phaseAndCounts(n)
	})
	e.eventually("the provider record rendered", func() (bool, string) {
		c := stagesOf(t, reg)
		return c.render > after.render, fmt.Sprintf("%+v", c)
	})
}
