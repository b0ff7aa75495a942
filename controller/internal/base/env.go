// Package base holds what the controller's reconcilers share: the
// environment they run in (Env: clients, configuration, metrics, the
// prober, the leader's lifetime, Events, the statuses last written), the
// ports they reach the rest of the agent through, and the helpers more
// than one of them uses. It imports no other package of the controller.
package base

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/gridsync/gridsync/controller/probe"
	"github.com/gridsync/gridsync/signals"
	"github.com/gridsync/gridsync/trust/bundle"
)

// Config is what the reconcilers read of the controller's Options, with
// the defaults applied (Setup copies it from Options).
type Config struct {
	// Namespaces where gateways may run and credential Secrets live;
	// empty means every namespace.
	Namespaces []string
	// Producer names the controller in labels, provenance and field
	// ownership.
	Producer        string
	ProducerVersion string
	Registerer      prometheus.Registerer
	Logger          *slog.Logger
	// Now is the clock of rendered_at.
	Now func() time.Time
	// ProbeDestinations limit where probes, scrapes and polls connect.
	ProbeDestinations probe.Destinations
	// ProbeSecretSelector, when set, must match a credential Secret's
	// labels before its value is sent in a health probe.
	ProbeSecretSelector labels.Selector
	// ResyncPeriod re-reconciles every object this often (jittered).
	ResyncPeriod time.Duration
	// DeleteOrphanedOverlays deletes the overlay ConfigMap of a removed
	// gateway or network instead of publishing an empty one.
	DeleteOrphanedOverlays bool
	// MaxOverlayBytes is the largest envelope published (defaulted).
	MaxOverlayBytes int
	// CompressOverlaysAbove is where Auto starts compressing (defaulted).
	CompressOverlaysAbove int

	// Membership is the site's SWIM runtime; nil runs without SWIM.
	Membership Membership
	// SwimKeyPollInterval is how often SWIM key Secrets are read.
	SwimKeyPollInterval time.Duration

	// Signals receives this site's provider signals; nil: none.
	Signals *signals.Store
	// SignalsInterval is how often they are collected.
	SignalsInterval time.Duration
	// SignalsScrapeMaxBytes bounds one metrics scrape.
	SignalsScrapeMaxBytes int64
	// SignalsPeerPort is the port peers serve their signals on.
	SignalsPeerPort int
	// SignalsAddress is where this site's gateways reach its signals
	// listener (host:port).
	SignalsAddress string

	// Deliveries folds the delivery reports of gateway pods; nil: none.
	Deliveries DeliveryTracker

	// TrustBundles holds each network's trust bundle (its evicted sites),
	// shared with the listener and the gossip runtime.
	TrustBundles *bundle.Book

	// SiteName is this site's name.
	SiteName string
	// RecordKeySecret is the Secret, in the agent's namespace, holding
	// this site's key for the records of networks without a grid CA
	// (created when missing). No namespace: the key is made in memory
	// and lives as long as the process.
	RecordKeySecret types.NamespacedName
	// SiteCertLifetime is how long an issued site certificate is valid;
	// 0 goes by the network (membership.SiteLifetime).
	SiteCertLifetime time.Duration
	// SiteProbeInterval is how often each GridSite's gateway is probed.
	SiteProbeInterval time.Duration
	// SiteProbeTimeout bounds one probe.
	SiteProbeTimeout time.Duration
	// SiteRenewalRetry is the wait after a first failure to obtain the
	// site certificate; it doubles with each failure in a row up to
	// SiteRenewalRetryMax.
	SiteRenewalRetry, SiteRenewalRetryMax time.Duration
}

// Resync is the next periodic reconcile, jittered so that a thousand
// objects do not come due together.
func (o Config) Resync() reconcile.Result {
	return reconcile.Result{RequeueAfter: o.ResyncPeriod + rand.N(o.ResyncPeriod/10+1)}
}

// Watches says whether the controller works in namespace.
func (o Config) Watches(namespace string) bool {
	return len(o.Namespaces) == 0 || slices.Contains(o.Namespaces, namespace)
}

// Field indexes: InferenceProviders and GridSites by network.
const (
	IndexNetwork     = "spec.gridNetworkRef"
	IndexSiteNetwork = "site.spec.gridNetworkRef"
)

// Env is what the reconcilers share.
type Env struct {
	Client   client.Client
	API      client.Reader // uncached reads: Secrets and ConfigMaps, by name
	Opts     Config
	Metrics  *Metrics
	Prober   *probe.Prober
	Lifetime *Lifetime
	Events   EventWriter
	// Written are the statuses the agent wrote that the cache may not
	// show yet.
	Written *WrittenStatuses
}

// Outcome is a reconcile's outcome as
// gridsync_controller_network_reconciles_total counts it.
func Outcome(ran bool, err error) string {
	switch {
	case err != nil:
		return ReconcileError
	case !ran:
		return ReconcileSkipped
	}
	return ReconcileRan
}

// RetryConflicts turns a write conflict (the cache had not yet seen the
// object's latest version, often the controller's own last write) into a
// quiet retry once the cache has caught up: it is expected, and not worth
// an error in the log.
func RetryConflicts(err error) (reconcile.Result, error) {
	if apierrors.IsConflict(err) {
		return reconcile.Result{RequeueAfter: 250 * time.Millisecond}, nil
	}
	return reconcile.Result{}, err
}

// Lifetime is the context the manager runs the leader's work in; probe
// loops live in it, so they stop when leadership or the process ends.
type Lifetime struct {
	mu  sync.Mutex
	ctx context.Context
}

// Start holds the manager's context until it ends.
func (l *Lifetime) Start(ctx context.Context) error {
	l.mu.Lock()
	l.ctx = ctx
	l.mu.Unlock()
	<-ctx.Done()
	return nil
}

// Context is the leader's context; an error before the manager started.
func (l *Lifetime) Context() (context.Context, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ctx == nil {
		return nil, errors.New("controller not started")
	}
	return l.ctx, nil
}

// Send delivers an event unless the manager has stopped. Before this
// runnable started, the event waits in the channel's buffer: the
// controllers that read it start with the manager, beside this runnable
// and possibly before it, and a reconcile of theirs may already tell
// another of a change (membership telling the overlays that it wrote its
// first verdict). Dropped then, that change would reach nobody until the
// resync.
func (l *Lifetime) Send(ch chan<- event.GenericEvent, e event.GenericEvent) {
	ctx, err := l.Context()
	if err != nil {
		select {
		case ch <- e:
		default:
			// A full buffer before the start: dropped, as every event
			// before the start was, rather than blocking a caller
			// (a gossip callback) on a manager that may never lead.
		}
		return
	}
	select {
	case ch <- e:
	case <-ctx.Done():
	}
}
