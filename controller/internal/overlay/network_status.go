package overlay

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/controller/internal/base"
	"github.com/gridsync/gridsync/controller/internal/deliverystatus"
	"github.com/gridsync/gridsync/controller/internal/membership"
	"github.com/gridsync/gridsync/controller/mounts"
)

// writeStatus writes the network's status when it differs.
func (r *Reconciler) writeStatus(ctx context.Context, network *v1alpha1.GridNetwork, overlays []v1alpha1.GatewayOverlayStatus,
	praxis, serving []v1alpha1.PraxisConfigStatus, mountStatus []v1alpha1.MountReconciliationStatus, swim membership.Outcome, identity membership.IdentityOutcome,
) error {
	next := network.Status.DeepCopy()
	next.ObservedGeneration = network.Generation
	next.OverlayStatus = slices.Clone(overlays) // Fold sets each entry's delivery: not in the caller's
	if d := r.Opts.Deliveries; d != nil {
		// The delivery fields go with the revisions written here: a
		// summary of the previous revision beside a new one would say its
		// pods serve it. The delivery status reconciler folds the same
		// way when a report changes them.
		r.RanStage(base.StageDeliveryFold)
		deliverystatus.Fold(d, network, next)
	}
	next.PraxisConfigStatus = praxis
	next.ConsumerConfigStatus = praxis // upstream's name for the same entries
	next.ServingConfigStatus = serving
	next.MountReconciliationStatus = mountStatus
	next.GatewayCount = int32(len(overlays))
	next.DistributedCount = 0
	var failing []string
	for _, o := range overlays {
		if o.Phase == v1alpha1.OverlayDistributed {
			next.DistributedCount++
		} else {
			failing = append(failing, o.Namespace+"/"+o.GatewayName+": "+o.Reason)
		}
	}
	overlaysFailing := len(failing)
	for _, p := range praxis {
		if p.Phase != praxisRendered {
			failing = append(failing, p.Namespace+"/"+p.GatewayName+" praxisConfig: "+p.Reason)
		}
	}
	praxisFailing := len(failing)
	for _, s := range serving {
		if s.Phase != praxisRendered {
			failing = append(failing, s.Namespace+"/"+s.GatewayName+" gridServing: "+s.Message)
		}
	}
	servingFailing := len(failing)
	for _, m := range mountStatus {
		if m.Phase == mounts.PhaseError {
			failing = append(failing, m.Namespace+"/"+m.GatewayName+" mountReconciliation: "+m.Reason)
		}
	}
	ready := metav1.Condition{Type: "Ready", Status: metav1.ConditionTrue, Reason: "AllOverlaysDistributed",
		Message: fmt.Sprintf("%d of %d gateway overlays distributed", next.DistributedCount, next.GatewayCount), ObservedGeneration: network.Generation}
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
	// Ready too: a key that does not load stops the reconcile, and seeds
	// without SWIM do nothing.
	switch {
	case swim.KeyFailed:
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, swim.Condition.Reason, swim.Condition.Message
	case swim.Condition.Reason == membership.ReasonSwimNotRunning && !swim.Condition.OK:
		if ready.Reason != base.ReasonFieldNotSupported {
			ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, membership.ReasonSwimNotRunning, swim.Condition.Message+"; "+ready.Message
		} else {
			ready.Message += "; " + swim.Condition.Message
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
	if !identity.Condition.OK && ready.Status == metav1.ConditionTrue {
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, identity.Condition.Reason, identity.Condition.Message+"; "+ready.Message
	}
	identityCond := metav1.Condition{Type: membership.ConditionSiteIdentity, Status: metav1.ConditionTrue, Reason: identity.Condition.Reason,
		Message: identity.Condition.Message, ObservedGeneration: network.Generation}
	if !identity.Condition.OK {
		identityCond.Status = metav1.ConditionFalse
	}
	meta.SetStatusCondition(&next.Conditions, identityCond)
	next.Phase, next.NetworkSites, next.RemoteProviderCount = networkPhase(swim)
	next.ConnectedSites = int32(swim.View.AlivePeers)
	next.DistributedProviderCount = next.RemoteProviderCount // upstream's name for the same count
	next.GridID = swim.View.GridID
	membershipCond := metav1.Condition{Type: membership.ConditionMembership, Status: metav1.ConditionTrue, Reason: swim.Condition.Reason,
		Message: swim.Condition.Message, ObservedGeneration: network.Generation}
	if !swim.Condition.OK {
		membershipCond.Status = metav1.ConditionFalse
	}
	meta.SetStatusCondition(&next.Conditions, membershipCond)
	setSelectionCondition(network, next)
	before := meta.FindStatusCondition(network.Status.Conditions, "Ready")
	changed := before == nil || before.Status != ready.Status || before.Reason != ready.Reason
	meta.SetStatusCondition(&next.Conditions, ready)
	if equality.Semantic.DeepEqual(&network.Status, next) {
		return nil
	}
	// The delivery status reconciler writes the delivery fields of this
	// status too (overlayStatus[].delivery, delivered, the Delivered
	// condition): next has them from the same tracker, and the patch is
	// made against the version read, so that neither writer undoes the
	// other.
	if err := r.WriteNetworkStatus(ctx, network, next); err != nil {
		return err
	}
	if changed {
		eventType := corev1.EventTypeNormal
		if ready.Status != metav1.ConditionTrue {
			eventType = corev1.EventTypeWarning
		}
		r.Events.Record(ctx, network, "GridNetwork", eventType, ready.Reason, ready.Message)
	}
	return nil
}

// networkPhase is the network's membership phase and counts: Pending
// without SWIM, Initializing until a remote site is known (or while
// SWIM holds for a key), Active with at least one alive, Degraded when
// all known are suspect or dead.
func networkPhase(swim membership.Outcome) (v1alpha1.NetworkPhase, int32, int32) {
	v := swim.View
	if !v.Enabled {
		return v1alpha1.NetworkPending, 0, 0
	}
	connected, remote := int32(v.Connected()), int32(len(v.Providers))
	switch {
	case !v.Running || len(v.Sites) == 0:
		return v1alpha1.NetworkInitializing, connected, remote
	case connected > 0:
		return v1alpha1.NetworkActive, connected, remote
	default:
		return v1alpha1.NetworkDegraded, connected, remote
	}
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
