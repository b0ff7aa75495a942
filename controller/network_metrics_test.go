package controller_test

import (
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/controller"
	rollout "github.com/gridsync/gridsync/delivery/fold"
	"github.com/gridsync/gridsync/shared/envelope"
)

// The network reconciles are counted by outcome, and the stages they ran
// by stage: a reconcile that runs renders, publishes and folds deliveries
// once each, and syncs GridSites when its network asks for it; one of a
// deleted network is skipped; a stage the agent is not set up for
// (gossip, without SWIM) is not counted.
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
	for _, outcome := range []string{"ran", "skipped", "error"} {
		found := false
		for _, m := range gathered(t, reg, "gridsync_controller_network_reconciles_total") {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			found = found || labels["controller"] == "gridnetwork" && labels["outcome"] == outcome
		}
		require.True(t, found, "a series for outcome %s", outcome)
	}
	// Every reconcile that got past the providers rendered, published and
	// folded deliveries once each; only this network, labelled for it,
	// syncs GridSites. The agent sees the whole cluster, where networks of
	// earlier tests may linger (being deleted: skipped; or failing before
	// render: error), so the relations are agent-wide, and the counters,
	// read one after another, are compared once the reconciles settle.
	var first counts
	e.eventually("every reconcile past the providers counted each of its stages once", func() (bool, string) {
		first = read()
		ok := first.ran > 0 && first.render >= first.ran && first.publish == first.render &&
			first.delivery == first.render && first.gridSites > 0 && first.gridSites <= first.render && first.gossip == 0
		return ok, fmt.Sprintf("%+v", first)
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
		return c.skipped > before.skipped && c.publish == c.render && c.delivery == c.render, fmt.Sprintf("%+v", c)
	})
}
