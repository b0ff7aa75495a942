package overlay

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/controller/internal/base"
	"github.com/gridsync/gridsync/controller/internal/deliverystatus"
	"github.com/gridsync/gridsync/controller/internal/membership"
	"github.com/gridsync/gridsync/controller/mounts"
)

// overlayParts are the overlay reconciler's fields of a network's status,
// as one reconcile made them.
type overlayParts struct {
	overlays        []v1alpha1.GatewayOverlayStatus
	praxis, serving []v1alpha1.PraxisConfigStatus
	mounts          []v1alpha1.MountReconciliationStatus
}

// writeStatus writes the overlay reconciler's part of the network's
// status when it differs: parts (nil keeps the overlays' fields as they
// are: nothing was published), the Selection condition and Ready, which
// sums up the overlays and membership's conditions as the status has them
// (the membership reconciler tells this one when those change).
func (r *Reconciler) writeStatus(ctx context.Context, network *v1alpha1.GridNetwork, parts *overlayParts) error {
	var ready metav1.Condition
	before, _, err := r.UpdateNetworkStatus(ctx, network, func(next *v1alpha1.GridNetworkStatus) {
		next.ObservedGeneration = network.Generation
		if parts != nil {
			next.OverlayStatus = slices.Clone(parts.overlays) // Fold sets each entry's delivery: not in the caller's
			if d := r.Opts.Deliveries; d != nil {
				// The delivery fields go with the revisions written here:
				// a summary of the previous revision beside a new one
				// would say its pods serve it. The delivery status
				// reconciler folds the same way when a report changes
				// them.
				r.RanStage(base.StageDeliveryFold)
				deliverystatus.Fold(d, network, next)
			}
			next.PraxisConfigStatus = parts.praxis
			next.ConsumerConfigStatus = parts.praxis // upstream's name for the same entries
			next.ServingConfigStatus = parts.serving
			next.MountReconciliationStatus = parts.mounts
			next.GatewayCount = int32(len(parts.overlays))
			next.DistributedCount = 0
			for _, o := range parts.overlays {
				if o.Phase == v1alpha1.OverlayDistributed {
					next.DistributedCount++
				}
			}
		}
		setSelectionCondition(network, next)
		ready = r.readyCondition(network, next)
		meta.SetStatusCondition(&next.Conditions, ready)
	})
	if err != nil {
		return err
	}
	if was := meta.FindStatusCondition(before.Conditions, "Ready"); was == nil || was.Status != ready.Status || was.Reason != ready.Reason {
		eventType := corev1.EventTypeNormal
		if ready.Status != metav1.ConditionTrue {
			eventType = corev1.EventTypeWarning
		}
		r.Events.Record(ctx, network, "GridNetwork", eventType, ready.Reason, ready.Message)
	}
	return nil
}

// readyCondition sums up the network: its overlays, consumer configs,
// serving configs and mounts as status has them, the fields it sets that
// this release does not act on, and membership's conditions.
func (r *Reconciler) readyCondition(network *v1alpha1.GridNetwork, status *v1alpha1.GridNetworkStatus) metav1.Condition {
	var failing []string
	for _, o := range status.OverlayStatus {
		if o.Phase != v1alpha1.OverlayDistributed {
			failing = append(failing, o.Namespace+"/"+o.GatewayName+": "+o.Reason)
		}
	}
	overlaysFailing := len(failing)
	for _, p := range status.PraxisConfigStatus {
		if p.Phase != praxisRendered {
			failing = append(failing, p.Namespace+"/"+p.GatewayName+" praxisConfig: "+p.Reason)
		}
	}
	praxisFailing := len(failing)
	for _, s := range status.ServingConfigStatus {
		if s.Phase != praxisRendered {
			failing = append(failing, s.Namespace+"/"+s.GatewayName+" gridServing: "+s.Message)
		}
	}
	servingFailing := len(failing)
	for _, m := range status.MountReconciliationStatus {
		if m.Phase == mounts.PhaseError {
			failing = append(failing, m.Namespace+"/"+m.GatewayName+" mountReconciliation: "+m.Reason)
		}
	}
	ready := metav1.Condition{Type: "Ready", Status: metav1.ConditionTrue, Reason: "AllOverlaysDistributed",
		Message: fmt.Sprintf("%d of %d gateway overlays distributed", status.DistributedCount, status.GatewayCount), ObservedGeneration: network.Generation}
	switch {
	case overlaysFailing > 0:
		ready.Status, ready.Reason = metav1.ConditionFalse, "OverlaysNotDistributed"
		ready.Message += "; " + base.JoinLimited(failing, 5)
	case praxisFailing > overlaysFailing:
		ready.Status, ready.Reason = metav1.ConditionFalse, ReasonPraxisConfigsNotRendered
		ready.Message += "; " + base.JoinLimited(failing, 5)
	case servingFailing > praxisFailing:
		ready.Status, ready.Reason = metav1.ConditionFalse, ReasonServingConfigFailed
		ready.Message += "; " + base.JoinLimited(failing, 5)
	case len(failing) > 0:
		ready.Status, ready.Reason = metav1.ConditionFalse, ReasonMountsNotReconciled
		ready.Message += "; " + base.JoinLimited(failing, 5)
	}
	// A field this release does not act on is said, never silently
	// ignored: the network is not what it asks for.
	if unsupported := unsupportedFields(network); len(unsupported) > 0 {
		ready.Status, ready.Reason = metav1.ConditionFalse, base.ReasonFieldNotSupported
		ready.Message = "not supported by this release, so not in effect: " + strings.Join(unsupported, ", ") + "; " + ready.Message
	}
	// Membership that keeps the network from what it asks for is said in
	// Ready too: a key that does not load stops the publishing, and seeds
	// without SWIM do nothing.
	swim := meta.FindStatusCondition(status.Conditions, membership.ConditionMembership)
	switch {
	case swim == nil:
	case membership.KeyFailed(status):
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, swim.Reason, swim.Message
	case swim.Reason == membership.ReasonSwimNotRunning && swim.Status != metav1.ConditionTrue:
		if ready.Reason != base.ReasonFieldNotSupported {
			ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, membership.ReasonSwimNotRunning, swim.Message+"; "+ready.Message
		} else {
			ready.Message += "; " + swim.Message
		}
	}
	// Admission by load on an agent that collects no signals would see
	// every measured provider's signal missing: the load restricts
	// nothing there (admitProviders), and Ready says why.
	if loadDriven(network) && r.Opts.Signals == nil {
		msg := "spec.scoringPolicy judges providers by load, but this agent collects no signals (--signals-addr): load restricts no provider"
		if ready.Status == metav1.ConditionTrue {
			ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, ReasonSignalsNotCollected, msg+"; "+ready.Message
		} else {
			ready.Message += "; " + msg
		}
	}
	// A site identity that is configured and not in effect is said in
	// Ready: nothing it secures (probes of other sites) works.
	if id := meta.FindStatusCondition(status.Conditions, membership.ConditionSiteIdentity); id != nil && id.Status != metav1.ConditionTrue && ready.Status == metav1.ConditionTrue {
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, id.Reason, id.Message+"; "+ready.Message
	}
	return ready
}

// ConditionSelection is there while the network asks for a selection the
// gateway contract cannot carry as asked.
const ConditionSelection = "Selection"

// ReasonWeightsNotInContract: weightedRandom is published as random with
// each candidate's weight beside it.
const ReasonWeightsNotInContract = "WeightsNotInContract"

// weighted reports whether the network asks for weightedRandom selection.
func weighted(n *v1alpha1.GridNetwork) bool {
	return n.Spec.SelectionPolicy != nil && n.Spec.SelectionPolicy.Mode == v1alpha1.SelectionWeightedRandom
}

// setSelectionCondition says, while the network asks for weightedRandom,
// what its gateways do instead: the overlay contract (1.0.0) knows
// deterministic, roundRobin and random only, and a mode the gateway does
// not know would have it refuse every revision. Ready is unaffected:
// routes are delivered.
func setSelectionCondition(network *v1alpha1.GridNetwork, next *v1alpha1.GridNetworkStatus) {
	base.SetConditionWhile(&next.Conditions, weighted(network), metav1.Condition{Type: ConditionSelection, Status: metav1.ConditionFalse,
		Reason: ReasonWeightsNotInContract, ObservedGeneration: network.Generation,
		Message: "weightedRandom is not a mode of the overlay contract 1.0.0: the overlays ask the gateway for random selection within a group, " +
			"and each candidate carries its capacityWeight as selection_weight for a gateway that weighs by it"})
}

// unsupportedFields lists the paths of the fields a network sets that
// this release does not act on yet (upstream's budget policy
// and metrics interval, a key named in a TLS Secret reference).
func unsupportedFields(n *v1alpha1.GridNetwork) []string {
	var out []string
	s := &n.Spec
	for path, set := range map[string]bool{
		"spec.budgetPolicy":           s.BudgetPolicy != nil,
		"spec.metricsRefreshInterval": s.MetricsRefreshInterval != "",
		"spec.tls.caSecretRef.key":    s.TLS != nil && s.TLS.CASecretRef != nil && s.TLS.CASecretRef.Key != "",
		"spec.tls.siteSecretRef.key":  s.TLS != nil && s.TLS.SiteSecretRef != nil && s.TLS.SiteSecretRef.Key != "",
	} {
		if set {
			out = append(out, path)
		}
	}
	slices.Sort(out)
	return out
}

// ReasonMountsNotReconciled is the Ready condition's reason while a
// delegated gateway's Deployment cannot be reconciled (its
// mountReconciliationStatus entry says why).
const ReasonMountsNotReconciled = "MountsNotReconciled"

// ReasonPraxisConfigsNotRendered is the Ready condition's reason while
// every overlay is distributed and a gateway's generated Praxis config
// fails.
const ReasonPraxisConfigsNotRendered = "PraxisConfigsNotRendered"
