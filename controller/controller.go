// Package controller runs the reconcilers that turn GridNetworks and
// InferenceProviders into published overlay ConfigMaps:
//
//   - the membership reconciler keeps this site a member of each
//     network's grid (its identity, SWIM keys, seeds and records, the
//     GridSites of the sites it discovers) and writes the network's
//     membership conditions, phase and counts, rendering nothing;
//   - the overlay reconciler renders one overlay per consumer gateway,
//     publishes it with server-side apply (only when the stored revision
//     differs), deletes the ConfigMaps of removed gateways and networks,
//     and reports each gateway's overlay in the network's status;
//   - the delivery status reconciler folds what the gateway pods report
//     they deliver into the network's status (its Delivered condition),
//     rendering and publishing nothing;
//   - the provider reconciler keeps the health probes running and reports
//     each provider's phase.
//
// Both decide a provider's phase with package assess, so the two agree
// without depending on each other's status writes. The controller only
// ever touches ConfigMaps labelled as managed by its producer.
package controller

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/controller/internal/base"
	"github.com/gridsync/gridsync/controller/internal/deliverystatus"
	"github.com/gridsync/gridsync/controller/internal/gridsite"
	"github.com/gridsync/gridsync/controller/internal/membership"
	"github.com/gridsync/gridsync/controller/internal/overlay"
	"github.com/gridsync/gridsync/controller/internal/provider"
	"github.com/gridsync/gridsync/controller/internal/signalcollect"
	"github.com/gridsync/gridsync/controller/internal/trustmaterial"
	"github.com/gridsync/gridsync/controller/probe"
	"github.com/gridsync/gridsync/controller/rbac"
	"github.com/gridsync/gridsync/gossip/seeds"
	"github.com/gridsync/gridsync/gossip/sites"
	"github.com/gridsync/gridsync/shared/envelope"
	"github.com/gridsync/gridsync/signals"
	"github.com/gridsync/gridsync/trust/bundle"
)

// DefaultProducer is the managed-by label value and the envelope's
// provenance.producer, and the field manager of every write.
const DefaultProducer = "gridsync-agent"

// Options configure the controller.
type Options struct {
	// Namespaces where gateways may run and credential Secrets live: the
	// controller publishes ConfigMaps and gets Secrets only there (its
	// RoleBindings must match). Empty means every namespace.
	Namespaces []string
	// Producer names the controller in labels, provenance and field
	// ownership; DefaultProducer when empty.
	Producer        string
	ProducerVersion string
	Registerer      prometheus.Registerer
	Logger          *slog.Logger
	// Now is the clock of rendered_at; time.Now when nil.
	Now func() time.Time
	// ProbeDestinations limit where health probes connect (see
	// probe.Destinations: loopback, link-local and metadata addresses are
	// refused unless an allowed CIDR names them).
	ProbeDestinations probe.Destinations
	// ProbeRootCAs verify probed HTTPS servers; the system's when nil.
	ProbeRootCAs *x509.CertPool
	// ProbeSecretSelector, when set, must match a credential Secret's
	// labels before its value is sent in a health probe. Nil sends the
	// credential of every provider whose probe may carry it.
	ProbeSecretSelector labels.Selector
	// ScraperServiceAccount is the ServiceAccount whose short-lived
	// tokens are sent where a provider's metricsConfig.auth or
	// healthCheck.auth asks for one (type serviceAccountToken). Empty:
	// such a provider is not scraped or probed, and says why.
	ScraperServiceAccount types.NamespacedName

	// ResyncPeriod re-reconciles every network and provider this often
	// (jittered by up to a tenth): the agent does not watch Secrets or
	// ConfigMaps (least privilege: it only gets them), so a rotated or
	// deleted Secret, or a hand edit of an overlay, is noticed within it.
	// 0 means DefaultResyncPeriod.
	ResyncPeriod time.Duration
	// DeleteOrphanedOverlays deletes the overlay ConfigMap of a removed
	// gateway or a deleted network (the delete verb is then needed).
	// Off, the default, publishes an authoritative empty overlay there
	// instead (its routes are withdrawn) and marks it orphaned.
	DeleteOrphanedOverlays bool
	// MaxOverlayBytes is the largest envelope published to a gateway
	// (the smallest bound its pods report, when smaller, wins); 0 means
	// envelope.DefaultMaxBytes, the sidecar's default --max-bytes.
	MaxOverlayBytes int
	// CompressOverlaysAbove is the envelope size from which a network of
	// overlayEncoding Auto publishes the compressed form to a gateway whose
	// pods all read it; 0 means DefaultCompressOverlaysAbove.
	CompressOverlaysAbove int
	// EventNamespace receives the Events of the cluster-scoped Grid
	// objects: the agent's own namespace. Empty: no Events.
	EventNamespace string

	// Membership is the site's SWIM runtime; nil runs without SWIM (every
	// network Pending).
	Membership Membership
	// SeedResolver resolves spec.seeds host names; the system's when nil.
	SeedResolver seeds.Resolver
	// SwimKeyPollInterval is how often the SWIM key Secrets of the
	// networks are read, so that a rotation step is followed without a
	// Secret watch. 0 means DefaultSwimKeyPollInterval.
	SwimKeyPollInterval time.Duration

	// Signals, when set, receives this site's provider signals (health
	// and scraped load) every SignalsInterval; SiteName labels them.
	Signals *signals.Store
	// SignalsInterval is how often they are collected; 0 means
	// DefaultSignalsInterval.
	SignalsInterval time.Duration
	// SignalsScrapeMaxBytes bounds one metrics scrape; 0 means
	// DefaultScrapeMaxBytes.
	SignalsScrapeMaxBytes int64
	// SignalsPeerPort is the port peers serve their signals on (poll
	// mode): this site's own signals port, as every site of a grid runs
	// the same chart.
	SignalsPeerPort int
	// SignalsAddress is where this site's gateways reach its signals
	// listener (host:port): the default peer of an embedded gateway's
	// serving config (gridServing).
	SignalsAddress string

	// Directory, when set, is filled in to answer the provider discovery
	// API.
	Directory *Directory

	// Deliveries folds the delivery reports of gateway pods into the
	// overlay statuses and the Delivered condition (delivery/fold); nil:
	// no delivery evidence, no Delivered condition.
	Deliveries DeliveryTracker

	// TrustBundles holds each network's trust bundle: the sites its issuer
	// evicted, signed with the grid CA. Share it with the listener and
	// the gossip runtime so that all three refuse an evicted site at once;
	// one of the controller's own when nil.
	TrustBundles *bundle.Book

	// SiteName is this site's name (a lowercase DNS label): the subject of
	// the site certificate the agent issues. Empty: none is issued.
	SiteName string
	// RecordKeySecret is the Secret holding this site's key for the
	// records of networks without a grid CA: read by name, and created
	// (by server-side apply) when it does not exist. The name defaults to
	// DefaultRecordKeySecret, the namespace to EventNamespace (the
	// agent's own). With neither namespace, the key is made in memory
	// and lasts as long as the process: after a restart, every site that
	// held this site to the old key refuses its records until its
	// operator resets it.
	RecordKeySecret types.NamespacedName
	// SiteCertLifetime is how long an issued site certificate is valid;
	// it is renewed at two thirds. 0 goes by the network: a day
	// (sitetrust.DefaultSiteLifetime) in SPIFFE mode, 90 days
	// (sitetrust.PinnedSiteLifetime) when its sites pin each other's
	// certificates.
	SiteCertLifetime time.Duration
	// SiteProbeInterval is how often each GridSite's gateway is probed
	// (and at once when its inputs change). 0 means
	// DefaultSiteProbeInterval.
	SiteProbeInterval time.Duration
	// SiteProbeTimeout bounds one probe. 0 means DefaultSiteProbeTimeout.
	SiteProbeTimeout time.Duration
	// SiteRenewalRetry is how long the agent waits after a first failure
	// to obtain or renew the site certificate (the issuer did not answer
	// or refused, a write failed); the wait doubles with each failure in
	// a row up to SiteRenewalRetryMax, less up to a quarter at random.
	// 0 means DefaultSiteRenewalRetry and DefaultSiteRenewalRetryMax.
	SiteRenewalRetry, SiteRenewalRetryMax time.Duration
}

// Defaults of the site trust settings.
const (
	DefaultSiteProbeInterval = 30 * time.Second
	DefaultSiteProbeTimeout  = 5 * time.Second
	// A renewal that failed is tried again after 10 s, 20 s, 40 s and so
	// on, at most 5 minutes apart: an issuer that is down is not
	// hammered, and is found again within minutes once it is back.
	DefaultSiteRenewalRetry    = 10 * time.Second
	DefaultSiteRenewalRetryMax = 5 * time.Minute
)

// DefaultSwimKeyPollInterval is how often SWIM key Secrets are read.
const DefaultSwimKeyPollInterval = 10 * time.Second

// DefaultRecordKeySecret names the Secret of this site's record key in
// networks without a grid CA.
const DefaultRecordKeySecret = rbac.DefaultRecordKeySecret

// DefaultResyncPeriod is how often everything is reconciled anyway.
const DefaultResyncPeriod = 300 * time.Second

// DefaultCompressOverlaysAbove is the envelope size from which Auto
// compresses: below it an overlay's plain copies cost the API server
// little more than the event itself, and the contract's plain form, which
// every consumer reads, is kept.
const DefaultCompressOverlaysAbove = overlay.DefaultCompressAbove

func (o Options) withDefaults() Options {
	if o.Producer == "" {
		o.Producer = DefaultProducer
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Registerer == nil {
		o.Registerer = prometheus.NewRegistry()
	}
	if o.ResyncPeriod <= 0 {
		o.ResyncPeriod = DefaultResyncPeriod
	}
	if o.SignalsInterval <= 0 {
		o.SignalsInterval = DefaultSignalsInterval
	}
	if o.MaxOverlayBytes <= 0 {
		o.MaxOverlayBytes = envelope.DefaultMaxBytes
	}
	o.MaxOverlayBytes = min(o.MaxOverlayBytes, envelope.MaxBytesCeiling)
	if o.CompressOverlaysAbove <= 0 {
		o.CompressOverlaysAbove = DefaultCompressOverlaysAbove
	}
	if o.SignalsScrapeMaxBytes <= 0 {
		o.SignalsScrapeMaxBytes = DefaultScrapeMaxBytes
	}
	if o.SwimKeyPollInterval <= 0 {
		o.SwimKeyPollInterval = DefaultSwimKeyPollInterval
	}
	if o.TrustBundles == nil {
		o.TrustBundles = bundle.NewBook()
	}
	if o.SiteProbeInterval <= 0 {
		o.SiteProbeInterval = DefaultSiteProbeInterval
	}
	if o.SiteProbeTimeout <= 0 {
		o.SiteProbeTimeout = DefaultSiteProbeTimeout
	}
	if o.SiteRenewalRetry <= 0 {
		o.SiteRenewalRetry = DefaultSiteRenewalRetry
	}
	if o.SiteRenewalRetryMax <= 0 {
		o.SiteRenewalRetryMax = DefaultSiteRenewalRetryMax
	}
	o.SiteRenewalRetryMax = max(o.SiteRenewalRetryMax, o.SiteRenewalRetry)
	if o.RecordKeySecret.Name == "" {
		o.RecordKeySecret.Name = DefaultRecordKeySecret
	}
	if o.RecordKeySecret.Namespace == "" {
		o.RecordKeySecret.Namespace = o.EventNamespace
	}
	return o
}

// config is what the reconcilers read of the options.
func (o Options) config() base.Config {
	return base.Config{
		Namespaces:             o.Namespaces,
		Producer:               o.Producer,
		ProducerVersion:        o.ProducerVersion,
		Registerer:             o.Registerer,
		Logger:                 o.Logger,
		Now:                    o.Now,
		ProbeDestinations:      o.ProbeDestinations,
		ProbeSecretSelector:    o.ProbeSecretSelector,
		ResyncPeriod:           o.ResyncPeriod,
		DeleteOrphanedOverlays: o.DeleteOrphanedOverlays,
		MaxOverlayBytes:        o.MaxOverlayBytes,
		CompressOverlaysAbove:  o.CompressOverlaysAbove,
		Membership:             o.Membership,
		SwimKeyPollInterval:    o.SwimKeyPollInterval,
		Signals:                o.Signals,
		SignalsInterval:        o.SignalsInterval,
		SignalsScrapeMaxBytes:  o.SignalsScrapeMaxBytes,
		SignalsPeerPort:        o.SignalsPeerPort,
		SignalsAddress:         o.SignalsAddress,
		Deliveries:             o.Deliveries,
		SiteName:               o.SiteName,
		RecordKeySecret:        o.RecordKeySecret,
		TrustBundles:           o.TrustBundles,
		SiteCertLifetime:       o.SiteCertLifetime,
		SiteProbeInterval:      o.SiteProbeInterval,
		SiteProbeTimeout:       o.SiteProbeTimeout,
		SiteRenewalRetry:       o.SiteRenewalRetry,
		SiteRenewalRetryMax:    o.SiteRenewalRetryMax,
	}
}

// cacheOptions is the cache the controller needs from its manager: the
// cluster-scoped Grid resources only. ConfigMaps and Secrets are never
// cached, listed or watched: the agent gets the ones it names.
func cacheOptions() cache.Options {
	return cache.Options{DefaultTransform: cache.TransformStripManagedFields()}
}

// uncached are never cached by the manager's client either: the
// reconcilers read them with the API reader, and this keeps a stray Get
// through the client from starting an informer (a list and a watch).
var uncached = []client.Object{&corev1.ConfigMap{}, &corev1.Secret{}}

// Setup registers the reconcilers, indexes and health probes with mgr,
// which must use cacheOptions and a client that does not cache uncached
// (NewManager builds it so).
func Setup(mgr manager.Manager, opts Options) error {
	opts = opts.withDefaults()
	metrics, err := base.NewMetrics(opts.Registerer, mgr.GetClient())
	if err != nil {
		return err
	}
	for _, r := range membership.RotationResults() {
		metrics.IdentityRotations.WithLabelValues(r)
	}
	ctx := context.Background()
	if err := mgr.GetFieldIndexer().IndexField(ctx, &v1alpha1.InferenceProvider{}, base.IndexNetwork, func(o client.Object) []string {
		return []string{o.(*v1alpha1.InferenceProvider).Spec.GridNetworkRef}
	}); err != nil {
		return fmt.Errorf("index providers by network: %w", err)
	}
	if err := mgr.GetFieldIndexer().IndexField(ctx, &v1alpha1.GridSite{}, base.IndexSiteNetwork, func(o client.Object) []string {
		return []string{o.(*v1alpha1.GridSite).Spec.GridNetworkRef}
	}); err != nil {
		return fmt.Errorf("index GridSites by network: %w", err)
	}

	// Ask for every informer the reconcilers watch now, not when they
	// start: caches run on every replica, so a standby is warm when it
	// wins the election and reconciles at once, and /readyz (cache
	// synced) covers all of them.
	for _, obj := range []client.Object{&v1alpha1.GridNetwork{}, &v1alpha1.InferenceProvider{}, &v1alpha1.GridSite{}} {
		if _, err := mgr.GetCache().GetInformer(ctx, obj); err != nil {
			return fmt.Errorf("informer for %T: %w", obj, err)
		}
	}

	// Health changes reach both reconcilers, each through its own channel.
	toNetworks := make(chan event.GenericEvent, 1024)
	toProviders := make(chan event.GenericEvent, 1024)
	life := &base.Lifetime{}
	prober := probe.New(probe.Options{
		Destinations: opts.ProbeDestinations,
		RootCAs:      opts.ProbeRootCAs,
		Notify: func(provider string) {
			p := &v1alpha1.InferenceProvider{}
			p.Name = provider
			life.Send(toProviders, event.GenericEvent{Object: p})
			life.Send(toNetworks, event.GenericEvent{Object: p})
		},
	})
	if err := mgr.Add(life); err != nil {
		return err
	}

	shared := &base.Env{
		Client:   mgr.GetClient(),
		API:      mgr.GetAPIReader(),
		Opts:     opts.config(),
		Metrics:  metrics,
		Prober:   prober,
		Lifetime: life,
		Events:   base.EventWriter{Client: mgr.GetClient(), Namespace: opts.EventNamespace, Component: opts.Producer, Logger: opts.Logger},
		Written:  base.NewWrittenStatuses(),
	}
	trust := trustmaterial.New(mgr.GetAPIReader())
	trust.Bundles = opts.TrustBundles
	endpoints := provider.NewEndpoints(shared, opts.ScraperServiceAccount)
	scraped := provider.NewScrapeStatus(func(name string) {
		p := &v1alpha1.InferenceProvider{}
		p.Name = name
		life.Send(toProviders, event.GenericEvent{Object: p})
	})
	// The reconcilers of a network meet through its status and the gossip
	// view; each is told of the events that change its own outputs, on a
	// channel of its own:
	//   - membership: the gossip runtime's changes (a record, a site's
	//     state), SWIM key Secrets that changed (the poll), trust material
	//     that changed, this site's providers as the overlay reconciler
	//     assessed them;
	//   - overlay: membership's verdict or remote providers moved (the
	//     membership reconciler says when), a peer's readiness, the load
	//     signals settled, trust material that changed;
	//   - delivery status: the delivery reports;
	//   - GridSites: probed again when their network's membership or trust
	//     changes.
	toMembership := make(chan event.GenericEvent, 1024)
	toOverlays := make(chan event.GenericEvent, 1024)
	reprobe := make(chan event.GenericEvent, 1024)
	send := func(ch chan event.GenericEvent) func(string) {
		return func(network string) {
			n := &v1alpha1.GridNetwork{}
			n.Name = network
			life.Send(ch, event.GenericEvent{Object: n})
		}
	}
	locals := &membership.Locals{Changed: send(toMembership)}
	member := membership.NewMember(shared, trust, opts.SeedResolver)
	nr := overlay.New(shared, trust, locals)
	mr := membership.NewReconciler(shared, trust, member, locals, send(toOverlays))
	if opts.Directory != nil {
		*opts.Directory = Directory{networks: mgr.GetClient(), site: opts.SiteName, snapshot: nr.Snapshot, remote: opts.Membership != nil}
	}
	reprobeSites := func(network string) {
		if ctx, err := life.Context(); err == nil {
			gridsite.ReprobeSites(ctx, shared, network, reprobe)
		}
	}
	trust.Changed = func(network string) {
		send(toMembership)(network)
		send(toOverlays)(network)
		reprobeSites(network)
	}
	// A new trust bundle (an eviction signed here, received by gossip or
	// loaded from a status) is kept in the network's status, and its
	// GridSites judged again: an evicted site is withdrawn at once.
	// The grid CAs it names (a rotation of the grid CA) become the
	// network's trust material, which tells the reconcilers in turn.
	opts.TrustBundles.Subscribe(func(network string) {
		if trust.BundleChanged(network) {
			return // told as any change of trust material
		}
		send(toMembership)(network)
		reprobeSites(network)
	})
	if opts.Membership != nil {
		opts.Membership.OnChange(func(network string) {
			send(toMembership)(network)
			reprobeSites(network)
		})
	}
	if opts.Signals != nil && opts.Membership != nil {
		// A remote provider its site reports unready is rendered not
		// fresh: the networks whose view holds that provider (the store
		// does not know which network a site's provider is of) render
		// again. Only their overlays: readiness is nothing a GridSite
		// probe looks at, and a network that does not hold the provider
		// renders nothing new. Without membership no remote provider is
		// rendered.
		opts.Signals.OnReadyChange(func(site, provider string) {
			if site == opts.SiteName {
				return // local readiness reaches the reconcilers through probes
			}
			ctx, err := life.Context()
			if err != nil {
				return
			}
			var list v1alpha1.GridNetworkList
			if mgr.GetCache().List(ctx, &list) != nil {
				return
			}
			for i := range list.Items {
				if name := list.Items[i].Name; viewHolds(opts.Membership.View(name), site, provider) {
					send(toOverlays)(name)
				}
			}
		})
	}
	// Delivery reports change the delivery fields of a status: they reach
	// the delivery status reconciler, which renders and publishes nothing
	// (and probes no site); only a change of what the pods read reaches
	// the overlay reconciler.
	fromDeliveries := make(chan event.GenericEvent, 1024)
	if opts.Deliveries != nil {
		opts.Deliveries.OnChange(send(fromDeliveries))
		// What a gateway's pods read decides its overlay's form and bound:
		// a change that moves either is published again; any other renders
		// nothing.
		opts.Deliveries.OnReadersChange(func(name string) {
			if nr.ReadersChangeMatters(name, opts.Deliveries.Readers) {
				send(toOverlays)(name)
			}
		})
	}
	if err := mgr.Add(member.SecretPoller(toMembership)); err != nil {
		return err
	}
	if opts.Signals != nil {
		if opts.SiteName == "" {
			return errors.New("the site's signals need its name (SiteName)")
		}
		// This site's signals, then its peers': polled (poll mode) or
		// read from membership (gossip).
		settled := func(ctx context.Context) {
			for _, name := range overlay.LoadDrivenNetworks(ctx, mgr.GetCache()) {
				send(toOverlays)(name)
			}
		}
		if err := mgr.Add(&signalcollect.Loop{Collector: signalcollect.NewCollector(shared, endpoints, scraped), Peers: signalcollect.NewPoller(shared, trust), Every: opts.SignalsInterval, Settled: settled}); err != nil {
			return err
		}
	}
	if err := nr.Setup(mgr, toNetworks, toOverlays); err != nil {
		return err
	}
	if err := mr.Setup(mgr, toMembership); err != nil {
		return err
	}
	if opts.Deliveries != nil {
		if err := deliverystatus.New(shared, opts.Deliveries).Setup(mgr, fromDeliveries); err != nil {
			return err
		}
	}
	if err := (&gridsite.Reconciler{Env: shared, Trust: trust}).Setup(mgr, reprobe); err != nil {
		return err
	}
	return (&provider.Reconciler{Env: shared, Endpoints: endpoints, ScrapeStatus: scraped}).Setup(mgr, toProviders)
}

// viewHolds reports whether a network's view holds a site's provider.
func viewHolds(v sites.NetworkView, site, provider string) bool {
	return slices.ContainsFunc(v.Providers, func(p sites.RemoteProvider) bool { return p.Site == site && p.Name == provider })
}
