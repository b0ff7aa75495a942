package deliverystatus

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/controller/internal/base"
)

// ControllerName names the reconciler in controller-runtime's metrics and
// logs and in gridsync_controller_network_reconciles_total{controller}.
const ControllerName = "gridnetwork-delivery"

// Reconciler folds the delivery reports of a network's gateway pods into
// its status: each overlayStatus entry's delivery, status.delivered and
// the Delivered condition. It renders and publishes nothing: a delivery
// report costs a status read and, when the summary moved, one patch. The
// overlay and membership reconcilers write the rest of the status (the
// overlay reconciler folds too, see Fold); they meet there
// (base.UpdateNetworkStatus).
type Reconciler struct {
	*base.Env
	Deliveries base.DeliveryTracker
}

// New returns the reconciler, its reconcile counters set up.
func New(env *base.Env, deliveries base.DeliveryTracker) *Reconciler {
	for _, o := range []string{base.ReconcileRan, base.ReconcileSkipped, base.ReconcileError} {
		env.Metrics.NetworkReconciles.WithLabelValues(ControllerName, o)
	}
	return &Reconciler{Env: env, Deliveries: deliveries}
}

// Setup registers the reconciler with mgr: it follows the delivery
// tracker's changes (on changes, a channel the caller feeds), and a
// network's spec and rendered revisions (whose pods are compared with
// them).
func (r *Reconciler) Setup(mgr manager.Manager, changes <-chan event.GenericEvent) error {
	return builder.ControllerManagedBy(mgr).
		Named(ControllerName).
		For(&v1alpha1.GridNetwork{}, builder.WithPredicates(predicate.Or[client.Object](predicate.GenerationChangedPredicate{}, renderedChanged))).
		WatchesRawSource(source.Channel(changes, &handler.EnqueueRequestForObject{})).
		Complete(r)
}

// renderedChanged passes a network update whose overlays were rendered
// anew (a revision or its time moved, a gateway came or went): the pods'
// reports are then compared with another revision. The reconciler's own
// writes (delivery fields only) do not pass.
var renderedChanged = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		o, ok1 := e.ObjectOld.(*v1alpha1.GridNetwork)
		n, ok2 := e.ObjectNew.(*v1alpha1.GridNetwork)
		if !ok1 || !ok2 || len(o.Status.OverlayStatus) != len(n.Status.OverlayStatus) {
			return true
		}
		for i := range o.Status.OverlayStatus {
			a, b := &o.Status.OverlayStatus[i], &n.Status.OverlayStatus[i]
			if a.Namespace != b.Namespace || a.GatewayName != b.GatewayName || a.RenderedRevision != b.RenderedRevision ||
				!a.RenderedAt.Equal(b.RenderedAt) {
				return true
			}
		}
		return false
	},
	GenericFunc: func(event.GenericEvent) bool { return false },
}

// Reconcile folds the network's delivery summaries into its status.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	ran, err := r.reconcile(ctx, req.Name)
	r.Metrics.NetworkReconciles.WithLabelValues(ControllerName, base.Outcome(ran, err)).Inc()
	if err != nil {
		return base.RetryConflicts(err)
	}
	if !ran {
		return reconcile.Result{}, nil
	}
	return r.Opts.Resync(), nil
}

// reconcile reports whether it folded (not for a network gone or being
// deleted: the overlay reconciler tells the tracker it has no gateways).
func (r *Reconciler) reconcile(ctx context.Context, name string) (bool, error) {
	var network v1alpha1.GridNetwork
	if err := r.Client.Get(ctx, types.NamespacedName{Name: name}, &network); err != nil {
		return false, client.IgnoreNotFound(err)
	}
	if !network.DeletionTimestamp.IsZero() {
		return false, nil
	}
	// Built on the other reconcilers' last writes, which the cache may
	// not show yet, and carrying their fields over.
	r.ReadNetworkStatus(&network)
	r.RanStage(base.StageDeliveryFold)
	_, _, err := r.UpdateNetworkStatus(ctx, &network, func(next *v1alpha1.GridNetworkStatus) {
		Fold(r.Deliveries, &network, next)
	})
	return true, err
}

// Fold tells the tracker the network's gateways and puts what their pods
// report in next: each overlay status's delivery (against its rendered
// revision), status.delivered and the Delivered condition. The overlay
// reconciler folds as well when it writes a status, so that a new
// rendered revision is never written beside a delivery summary of the
// previous one (a drain waiting for its pods would take that for done).
func Fold(d base.DeliveryTracker, network *v1alpha1.GridNetwork, next *v1alpha1.GridNetworkStatus) {
	d.SetGateways(network.Name, gatewayKeys(network))
	for i := range next.OverlayStatus {
		st := &next.OverlayStatus[i]
		var renderedAt time.Time
		if st.RenderedAt != nil {
			renderedAt = st.RenderedAt.Time
		}
		st.Delivery = d.Summary(st.Namespace, st.GatewayName, st.RenderedRevision, renderedAt)
	}
	next.Delivered = Summary(next.OverlayStatus)
	status, reason, message := Condition(next.OverlayStatus)
	meta.SetStatusCondition(&next.Conditions, metav1.Condition{Type: ConditionDelivered, Status: status, Reason: reason,
		Message: message, ObservedGeneration: network.Generation})
}

// gatewayKeys are the network's gateways, each once.
func gatewayKeys(n *v1alpha1.GridNetwork) []types.NamespacedName {
	seen := map[types.NamespacedName]bool{}
	var out []types.NamespacedName
	for _, g := range n.Spec.ConsumerGateways {
		k := types.NamespacedName{Namespace: g.Namespace, Name: g.Name}
		if !seen[k] {
			seen[k] = true
			out = append(out, k)
		}
	}
	return out
}

// Summary is status.delivered, "on revision/reporting" over every
// gateway, empty while no pod reports.
func Summary(overlays []v1alpha1.GatewayOverlayStatus) string {
	var on, reporting int32
	for _, o := range overlays {
		if o.Delivery != nil {
			on += o.Delivery.PodsOnRevision
			reporting += o.Delivery.ReportingPods
		}
	}
	if reporting == 0 {
		return ""
	}
	return fmt.Sprintf("%d/%d", on, reporting)
}
