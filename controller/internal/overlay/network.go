// Package overlay is the GridNetwork overlay reconciler (controller
// gridnetwork): one pipeline that assesses a network's providers, renders
// one overlay per consumer gateway from them and from the remote providers
// membership knows, generates the gateways' Praxis configs, publishes the
// overlays, and writes its part of the network's status. Its stages are in
// network_*.go, in the order reconcile runs them. The site's identity and
// membership are the membership reconciler's (package membership); the
// two meet through the network's status and the gossip view.
package overlay

import (
	"cmp"
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/controller/internal/base"
	"github.com/gridsync/gridsync/controller/internal/membership"
	"github.com/gridsync/gridsync/controller/internal/trustmaterial"
	"github.com/gridsync/gridsync/controller/render"
	"github.com/gridsync/gridsync/gossip/sites"
)

// ControllerName names the reconciler in controller-runtime's metrics and
// logs (an end-to-end test and the controller benchmark read it).
const ControllerName = "gridnetwork"

// Reconciler reconciles GridNetworks; New builds it and Setup registers
// it with a manager.
type Reconciler struct {
	*base.Env
	Trust *trustmaterial.Cache
	// locals hands this site's assessed providers to the membership
	// reconciler, which announces them.
	locals *membership.Locals
	// admission is each network's provider admission (the admission
	// stage's memory).
	admission admissionBook
	// Snapshot is each network's providers as its last reconcile
	// assessed them, for the provider discovery API.
	Snapshot *Snapshot
	// decisions is each gateway's last choice of form and bound, what a
	// change of its pods' reports is judged against.
	decisions formDecisions
}

// New returns the overlay reconciler; locals is where it hands this
// site's providers to membership.
func New(env *base.Env, trust *trustmaterial.Cache, locals *membership.Locals) *Reconciler {
	for _, o := range []string{base.ReconcileRan, base.ReconcileSkipped, base.ReconcileError} {
		env.Metrics.NetworkReconciles.WithLabelValues(ControllerName, o)
	}
	return &Reconciler{Env: env, Trust: trust, Snapshot: &Snapshot{}, locals: locals}
}

// Setup registers the reconciler with mgr: it watches GridNetworks,
// their providers and GridSites, the provider health events on health and
// the events on changes (when not nil): membership's verdict or remote
// providers moved, a peer's readiness, the load signals settled, trust
// material changed.
func (r *Reconciler) Setup(mgr ctrl.Manager, health, changes <-chan event.GenericEvent) error {
	b := ctrl.NewControllerManagedBy(mgr)
	if changes != nil {
		b = b.WatchesRawSource(source.Channel(changes, &handler.EnqueueRequestForObject{}))
	}
	return b.
		Named(ControllerName).
		For(&v1alpha1.GridNetwork{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		// A provider's old and new network are both reconciled when it
		// moves (the map function sees both objects of an update).
		Watches(&v1alpha1.InferenceProvider{}, handler.EnqueueRequestsFromMapFunc(providerNetwork),
			builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		// ConfigMaps and Secrets are not watched (the agent only gets
		// them): a hand edit, a rotated Secret or a freed ConfigMap name is
		// noticed at the periodic resync.
		WatchesRawSource(source.Channel(health, handler.EnqueueRequestsFromMapFunc(r.providerByName))).
		// A site's phase decides whether its providers are in overlays.
		Watches(&v1alpha1.GridSite{}, handler.EnqueueRequestsFromMapFunc(base.GridSiteNetwork), builder.WithPredicates(base.SitePhaseChanged)).
		Complete(r)
}

func providerNetwork(_ context.Context, o client.Object) []reconcile.Request {
	p, ok := o.(*v1alpha1.InferenceProvider)
	if !ok || p.Spec.GridNetworkRef == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: p.Spec.GridNetworkRef}}}
}

// providerByName maps a health event (which names the provider only) to
// the provider's network.
func (r *Reconciler) providerByName(ctx context.Context, o client.Object) []reconcile.Request {
	var p v1alpha1.InferenceProvider
	if err := r.Client.Get(ctx, types.NamespacedName{Name: o.GetName()}, &p); err != nil {
		return nil
	}
	return providerNetwork(ctx, &p)
}

// Reconcile publishes the overlay of every consumer gateway of a network.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	start := time.Now()
	gatewayCount, retry, ran, err := r.reconcile(ctx, req.Name)
	if err != nil {
		// The discovery API tells a network it has not heard of yet
		// from one whose reconcile fails.
		r.Snapshot.attempted(req.Name)
	}
	r.Metrics.NetworkReconciles.WithLabelValues(ControllerName, base.Outcome(ran, err)).Inc()
	// One line per reconcile at debug level: what operators (and the
	// controller benchmark) need to see how long a network takes.
	// rendered tells a reconcile that ran the pipeline from one that
	// stopped before it (membership not reconciled yet, a SWIM key failing).
	r.Opts.Logger.Debug("network_reconciled", "network", req.Name, "gateways", gatewayCount, "rendered", ran,
		"duration_ms", float64(time.Since(start).Microseconds())/1000, "error", errString(err))
	if err != nil {
		return base.RetryConflicts(err)
	}
	if retry > 0 {
		return reconcile.Result{RequeueAfter: retry}, nil
	}
	return r.Opts.Resync(), nil
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// reconcile runs the network's stages, each in its own file, in the order
// they depend on one another:
//
//  1. providers (network_providers.go): this site's providers, assessed,
//     and handed to membership, which announces them;
//  2. membership's verdict, as the network's status has it: nothing runs
//     before membership first reconciled the network, and nothing is
//     published while its SWIM key does not load;
//  3. remote providers (network_providers.go): the records of the sites
//     whose GridSite is Active, as the gossip view holds them; their
//     admission, and the local providers', from load signals and drains
//     (network_admission.go);
//  4. render (network_render.go): one overlay per gateway;
//  5. consumer config (network_praxis.go): each generated praxis.yaml,
//     which may withdraw candidates or hold a revision back; for the
//     gateways whose mounts are delegated (network_mounts.go), their
//     Deployments read and their overlays narrowed to what their pods'
//     configs reach;
//  6. publish (network_publish.go): each overlay to its ConfigMap, the
//     overlays of removed gateways withdrawn; then the delegated
//     Deployments switched to their new config and mounts, or pruned
//     (network_mounts.go), and the opted-in gateway Deployments rolled to
//     a renewed site certificate (network_rollidentity.go);
//  7. status (network_status.go): the overlays, the consumer configs and
//     Ready, which sums up membership's conditions too.
//
// Each stage takes what the earlier ones produced as arguments and
// returns its own result; none reads another's state. It returns how many
// gateways the network has, and how soon to try again when that is sooner
// than the resync, and whether the stages past membership's verdict ran
// (not when the network is gone or being deleted, nor before membership
// reconciled it, nor when its key failed).
func (r *Reconciler) reconcile(ctx context.Context, name string) (int, time.Duration, bool, error) {
	network, live, err := r.admit(ctx, name)
	if err != nil || !live {
		return 0, 0, false, err
	}

	local, items, err := r.assessProviders(ctx, network)
	if err != nil {
		return 0, 0, false, err
	}
	r.locals.Set(network.Name, gossipProviders(items, local))
	if meta.FindStatusCondition(network.Status.Conditions, membership.ConditionMembership) == nil {
		// Membership has not reconciled this network yet: whether its
		// key loads is not known, so nothing is published. It tells this
		// reconciler when it has.
		r.Snapshot.publish(network.Name, local, nil)
		return len(network.Spec.ConsumerGateways), 0, false, nil
	}
	if membership.KeyFailed(&network.Status) {
		// Nothing published while the key does not load: the overlays
		// keep what they had. The discovery API still lists the providers,
		// the remote ones as the view holds them (none when they cannot be
		// read).
		remote, _ := r.remoteProviders(ctx, network, r.view(network.Name))
		r.Snapshot.publish(network.Name, local, remote)
		return len(network.Spec.ConsumerGateways), 0, false, r.writeStatus(ctx, network, nil)
	}
	remote, err := r.remoteProviders(ctx, network, r.view(network.Name))
	if err != nil {
		return 0, 0, false, err
	}
	r.Snapshot.publish(network.Name, local, remote)
	held := r.admitProviders(network, items, local, remote, r.Opts.Now())

	gws := gateways(network)
	overlays := renderOverlays(network.Name, gws, local, remote)
	r.RanStage(base.StageRender)
	overlays, praxis, delegated, firstErr := r.reconcilePraxisConfigs(ctx, network, items, overlays)
	plans := r.planMounts(ctx, network, overlays, delegated)
	statuses, err := r.publishOverlays(ctx, network, overlays)
	r.RanStage(base.StagePublish)
	firstErr = cmp.Or(firstErr, err)
	mountStatus, rolling, err := r.applyMounts(ctx, network, plans)
	firstErr = cmp.Or(firstErr, err)
	serving, err := r.reconcileServing(ctx, network, overlays)
	firstErr = cmp.Or(firstErr, err)
	r.rollIdentity(ctx, network, statuses)

	firstErr = cmp.Or(firstErr, r.writeStatus(ctx, network, &overlayParts{overlays: statuses, praxis: praxis, serving: serving, mounts: mountStatus}))
	var again time.Duration
	if held > 0 {
		again = held // an admission change waiting for its interval
	}
	if rolling && (again == 0 || mountPollInterval < again) {
		again = mountPollInterval // a delegated Deployment rolling, read again soon
	}
	return len(gws), again, true, firstErr
}

// view is what membership knows of the network's other sites (nothing
// without SWIM).
func (r *Reconciler) view(network string) sites.NetworkView {
	if r.Opts.Membership == nil {
		return sites.NetworkView{}
	}
	return r.Opts.Membership.View(network)
}

// admit reads the network. A deleted one is finalized (its overlays
// withdrawn) or, already gone, forgotten; live says whether the stages
// run. A live network gets the finalizer first: without listing
// ConfigMaps the agent finds a deleted network's overlays only from the
// network itself.
func (r *Reconciler) admit(ctx context.Context, name string) (*v1alpha1.GridNetwork, bool, error) {
	var network v1alpha1.GridNetwork
	key := types.NamespacedName{Name: name}
	err := r.Client.Get(ctx, key, &network)
	if apierrors.IsNotFound(err) {
		r.Written.Networks.Forget(key)
		r.admission.forget(name)
		r.Snapshot.forget(name)
		r.decisions.forgetNetwork(name)
		if r.Opts.Deliveries != nil {
			r.Opts.Deliveries.SetGateways(name, nil)
		}
		return nil, false, nil // its overlays were withdrawn before the finalizer went
	}
	if err != nil {
		return nil, false, err
	}
	// The status and version as the API server holds them, as far as the
	// agent knows: the status patch is made against that version.
	r.ReadNetworkStatus(&network)
	if !network.DeletionTimestamp.IsZero() {
		return nil, false, r.finalize(ctx, &network)
	}
	if !controllerutil.ContainsFinalizer(&network, overlaysFinalizer) {
		orig := network.DeepCopy()
		controllerutil.AddFinalizer(&network, overlaysFinalizer)
		if err := r.Client.Patch(ctx, &network, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
			return nil, false, fmt.Errorf("add finalizer to GridNetwork %s: %w", name, err)
		}
	}
	return &network, true, nil
}

// overlaysFinalizer holds a deleted GridNetwork until its overlays are
// withdrawn.
const overlaysFinalizer = "grid.praxis.fast/overlays"

// finalize withdraws the overlays of a network being deleted, then lets
// it go.
func (r *Reconciler) finalize(ctx context.Context, network *v1alpha1.GridNetwork) error {
	r.decisions.forgetNetwork(network.Name)
	if r.Opts.Deliveries != nil {
		r.Opts.Deliveries.SetGateways(network.Name, nil)
	}
	if !controllerutil.ContainsFinalizer(network, overlaysFinalizer) {
		return nil
	}
	// The gateways of the spec and those the status still remembers: an
	// overlay published just before a crash may not be in the status yet.
	targets := map[types.NamespacedName]bool{}
	for _, g := range network.Spec.ConsumerGateways {
		targets[types.NamespacedName{Namespace: g.Namespace, Name: g.Name}] = true
	}
	for _, s := range network.Status.OverlayStatus {
		targets[types.NamespacedName{Namespace: s.Namespace, Name: s.GatewayName}] = true
	}
	for gw := range targets {
		if err := r.withdraw(ctx, network.Name, gw.Name, gw.Namespace); err != nil {
			return err
		}
	}
	// This site leaves the network's membership when the membership
	// reconciler sees it deleted.
	orig := network.DeepCopy()
	controllerutil.RemoveFinalizer(network, overlaysFinalizer)
	if err := r.Client.Patch(ctx, network, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("remove finalizer from GridNetwork %s: %w", network.Name, err)
	}
	r.Opts.Logger.Info("network_finalized", "network", network.Name, "gateways", len(targets))
	return nil
}

// consumerGateway is the network's spec of a rendered gateway.
func consumerGateway(network *v1alpha1.GridNetwork, gw render.Gateway) *v1alpha1.ConsumerGateway {
	for i := range network.Spec.ConsumerGateways {
		if g := &network.Spec.ConsumerGateways[i]; g.Name == gw.Name && g.Namespace == gw.Namespace {
			return g
		}
	}
	return nil
}
