package membership

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"io"
	"slices"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/controller/internal/base"
	"github.com/gridsync/gridsync/controller/internal/trustmaterial"
	"github.com/gridsync/gridsync/gossip/sites"
)

// ControllerName names the membership reconciler in controller-runtime's
// metrics and logs and in gridsync_controller_network_reconciles_total.
const ControllerName = "gridnetwork-membership"

// seedRetry is how soon a network with a seed that could not be resolved
// or joined is reconciled again (the runtime leaves a failed join alone
// about as long).
const seedRetry = 30 * time.Second

// Reconciler keeps this site a member of each network's grid: its
// identity (the grid CA and the site certificate, issued, enrolled or
// renewed), its membership (SWIM keys, seeds, this site's records, as the
// overlay reconciler assessed its providers: Locals), the GridSites of
// the discovered sites, and the network's SiteIdentity and Membership
// conditions, phase and site counts. It renders and publishes nothing: a
// gossip record, a Secret poll or a renewal costs the reads it needs and,
// when something moved, a status patch.
//
// The overlay reconciler reads what it needs of membership from the
// network's status (whether the SWIM key loaded, the conditions its Ready
// condition sums up) and from the gossip view; this reconciler tells it
// (Overlays) when either changed in a way that matters to it, and only
// then.
type Reconciler struct {
	*base.Env
	Trust    *trustmaterial.Cache
	Identity *Identity
	// Evictions keeps the network's trust bundle.
	Evictions *Evictions
	Member    *Member
	Locals    *Locals
	// Overlays is told a network whose overlays may have to change: its
	// membership verdict or its remote providers moved.
	Overlays func(network string)

	mu   sync.Mutex
	told map[string][32]byte
}

// NewReconciler returns the membership reconciler, its reconcile counters
// set up.
func NewReconciler(env *base.Env, trust *trustmaterial.Cache, member *Member, locals *Locals, overlays func(string)) *Reconciler {
	for _, o := range []string{base.ReconcileRan, base.ReconcileSkipped, base.ReconcileError} {
		env.Metrics.NetworkReconciles.WithLabelValues(ControllerName, o)
	}
	return &Reconciler{Env: env, Trust: trust, Identity: &Identity{Env: env, Trust: trust}, Evictions: &Evictions{Env: env, Trust: trust},
		Member: member, Locals: locals, Overlays: overlays,
		told: map[string][32]byte{}}
}

// Setup registers the reconciler with mgr: it follows a network's spec,
// labels (the auto-discover label asks for GridSites) and annotations
// (the reset of a site's key), and the events
// on changes: the gossip runtime's (a record, a site's state), the Secret
// poll's, the trust material's and the overlay reconciler's (the site's
// providers changed).
func (r *Reconciler) Setup(mgr ctrl.Manager, changes <-chan event.GenericEvent) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName).
		For(&v1alpha1.GridNetwork{}, builder.WithPredicates(predicate.Or[client.Object](predicate.GenerationChangedPredicate{}, predicate.LabelChangedPredicate{}, predicate.AnnotationChangedPredicate{}))).
		WatchesRawSource(source.Channel(changes, &handler.EnqueueRequestForObject{})).
		Complete(r)
}

// Reconcile keeps the network's membership.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	again, ran, err := r.reconcile(ctx, req.Name)
	r.Metrics.NetworkReconciles.WithLabelValues(ControllerName, base.Outcome(ran, err)).Inc()
	if err != nil {
		return base.RetryConflicts(err)
	}
	if !ran {
		return reconcile.Result{}, nil
	}
	if again > 0 && again < r.Opts.ResyncPeriod {
		return reconcile.Result{RequeueAfter: again}, nil
	}
	return r.Opts.Resync(), nil
}

// reconcile runs identity, then membership (which gossips the
// certificate identity read or issued), then the GridSites of what
// membership knows, then writes the status. It returns how soon to come
// back (a renewal, a SWIM key that did not load, a seed that failed), and
// whether it ran (not for a network gone or being deleted: this site
// leaves it).
func (r *Reconciler) reconcile(ctx context.Context, name string) (time.Duration, bool, error) {
	var network v1alpha1.GridNetwork
	err := r.Client.Get(ctx, types.NamespacedName{Name: name}, &network)
	switch {
	case apierrors.IsNotFound(err), err == nil && !network.DeletionTimestamp.IsZero():
		// Its records become tombstones here, after every reconcile of it
		// that could have announced them (this reconciler's own queue runs
		// one network at a time).
		r.forget(name)
		return 0, false, nil
	case err != nil:
		return 0, false, err
	}

	// The status as the other writers last left it (the cache may not
	// show their writes yet): this reconciler's part is written on it.
	r.ReadNetworkStatus(&network)

	identity := r.Identity.Reconcile(ctx, &network)
	if identity.Wrote {
		r.Trust.Refresh(ctx, &network)
	}
	evictions := r.Evictions.Reconcile(ctx, &network)
	local, known := r.Locals.Get(name)
	swim := r.Member.Reconcile(ctx, &network, local, known, identity.GossipCert, identity.GossipErr)
	if evictions.Status != nil {
		rot := evictions.Rotation(r.Opts.TrustBundles, name, swim.View, identity.GossipCert)
		if rot != nil {
			since := metav1.NewTime(r.Opts.Now().Truncate(time.Second))
			if prev := network.Status.TrustBundle; prev != nil && prev.Rotation != nil && prev.Rotation.Stage == rot.Stage && prev.Rotation.NewCA == rot.NewCA && prev.Rotation.Since != nil {
				since = *prev.Rotation.Since
			}
			rot.Since = &since
		}
		evictions.Status.Rotation = rot
	}
	var firstErr error
	if !swim.KeyFailed {
		firstErr = r.Member.SyncGridSites(ctx, &network, swim.View)
	}
	_, after, err := r.UpdateNetworkStatus(ctx, &network, func(next *v1alpha1.GridNetworkStatus) {
		setStatus(&network, next, swim, identity, evictions)
	})
	if err != nil {
		return 0, true, err
	}
	r.tellOverlays(&network, after, swim.View)
	if swim.ResetValue != "" {
		r.Member.ClearReset(ctx, &network, swim.ResetValue)
	}

	var again time.Duration
	if identity.RenewIn > 0 {
		again = identity.RenewIn + time.Second/10 // just past the renewal point
	}
	for _, d := range []time.Duration{seedRetryIf(swim.SeedsFailed), keyRetryIf(swim.KeyFailed || swim.RecordKeyFailed)} {
		if d > 0 && (again == 0 || d < again) {
			again = d
		}
	}
	return again, true, firstErr
}

func seedRetryIf(failed bool) time.Duration {
	if failed {
		return seedRetry
	}
	return 0
}

func keyRetryIf(failed bool) time.Duration {
	if failed {
		return SwimKeyRetry
	}
	return 0
}

// forget has this site leave a deleted network.
func (r *Reconciler) forget(name string) {
	r.Member.Forget(name)
	r.Identity.retryDone(name)
	r.Trust.Forget(name)
	r.Locals.Forget(name)
	// A network of the same name created again starts with no eviction.
	r.Opts.TrustBundles.Forget(name)
	r.Identity.firstKeys.forget(name)
	r.mu.Lock()
	delete(r.told, name)
	r.mu.Unlock()
}

// setStatus sets membership's fields of the network's status: the
// SiteIdentity, Membership, Evictions and RecordsSigned conditions, the
// phase, the site and provider counts, the grid ID, the trust bundle and
// the keys the sites of a network without a grid CA are held to.
func setStatus(network *v1alpha1.GridNetwork, next *v1alpha1.GridNetworkStatus, swim Outcome, identity IdentityOutcome, evictions EvictionsOutcome) {
	for _, c := range []struct {
		kind string
		cond Condition
	}{{ConditionSiteIdentity, identity.Condition}, {ConditionMembership, swim.Condition}, {ConditionEvictions, evictions.Condition}} {
		status := metav1.ConditionTrue
		if !c.cond.OK {
			status = metav1.ConditionFalse
		}
		meta.SetStatusCondition(&next.Conditions, metav1.Condition{Type: c.kind, Status: status, Reason: c.cond.Reason,
			Message: c.cond.Message, ObservedGeneration: network.Generation})
	}
	next.Phase, next.NetworkSites, next.RemoteProviderCount = networkPhase(swim)
	next.ConnectedSites = int32(swim.View.AlivePeers)
	next.DistributedProviderCount = next.RemoteProviderCount // upstream's name for the same count
	next.GridID = swim.View.GridID
	next.TrustBundle = evictions.Status
	setOpenNetwork(network, next, swim)
}

// networkPhase is the network's membership phase and counts: Pending
// without SWIM, Initializing until a remote site is known (or while
// SWIM holds for a key), Active with at least one alive, Degraded when
// all known are suspect or dead.
func networkPhase(swim Outcome) (v1alpha1.NetworkPhase, int32, int32) {
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

// tellOverlays tells the overlay reconciler of the network when what it
// reads of membership changed since it was last told: the verdicts its
// Ready condition sums up (the conditions as written, their messages
// only while they fail), and the part of the gossip view its overlays
// are rendered from (the remote providers and where their sites are).
// A record that changes neither (a site's own record, a signals record,
// the count of sites alive) renders nothing.
func (r *Reconciler) tellOverlays(network *v1alpha1.GridNetwork, status *v1alpha1.GridNetworkStatus, view sites.NetworkView) {
	h := sha256.New()
	for _, kind := range []string{ConditionSiteIdentity, ConditionMembership} {
		c := meta.FindStatusCondition(status.Conditions, kind)
		if c == nil {
			continue
		}
		h.Write([]byte(kind + "\x00" + string(c.Status) + "\x00" + c.Reason + "\x00"))
		if c.Status != metav1.ConditionTrue {
			h.Write([]byte(c.Message))
		}
		h.Write([]byte{0})
	}
	writeRenderedView(h, network, view)
	var sum [32]byte
	copy(sum[:], h.Sum(nil))
	r.mu.Lock()
	prev, had := r.told[network.Name]
	r.told[network.Name] = sum
	r.mu.Unlock()
	if (!had || prev != sum) && r.Overlays != nil {
		r.Overlays(network.Name)
	}
}

// writeRenderedView writes what the overlays take from the view: each
// remote provider record, and of its site the region, the zone, and (when
// the network expires the candidates of stale sites) its state and since
// when.
func writeRenderedView(h io.Writer, network *v1alpha1.GridNetwork, view sites.NetworkView) {
	expires := network.Spec.StaleCandidateTTLSeconds != nil && *network.Spec.StaleCandidateTTLSeconds > 0
	withProviders := map[string]bool{}
	for _, p := range view.Providers {
		withProviders[p.Site] = true
		b, _ := json.Marshal(p) // a struct's fields in their order: the same record, the same bytes
		_, _ = h.Write(b)
	}
	for _, s := range view.Sites {
		if !withProviders[s.Name] {
			continue
		}
		_, _ = h.Write([]byte(s.Name + "\x00" + s.Region + "\x00" + s.Zone + "\x00"))
		if expires {
			_, _ = h.Write([]byte(string(s.State)))
			_, _ = h.Write(binary.BigEndian.AppendUint64(nil, uint64(s.Since.UnixNano())))
		}
	}
}

// KeyFailed reports whether the network's status says its SWIM key did
// not load (the overlay reconciler publishes nothing then).
func KeyFailed(status *v1alpha1.GridNetworkStatus) bool {
	c := meta.FindStatusCondition(status.Conditions, ConditionMembership)
	return c != nil && c.Status == metav1.ConditionFalse && slices.Contains(keyReasons, c.Reason)
}

// keyReasons are the Membership reasons of a SWIM key that did not load.
var keyReasons = []string{ReasonSwimKeyMissing, ReasonSwimKeyInvalid, ReasonSwimKeyUnreadable}
