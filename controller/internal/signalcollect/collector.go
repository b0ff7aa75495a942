// Package signalcollect is the leader's signals work, every
// SignalsInterval: this site's provider signals (health and scraped load)
// collected into the signals store and gossiped, then the peers' signals
// taken in, polled (signalTransport poll) or read from membership
// (gossip).
package signalcollect

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/controller/internal/base"
	"github.com/gridsync/gridsync/controller/internal/provider"
	"github.com/gridsync/gridsync/controller/probe"
	"github.com/gridsync/gridsync/controller/providerpolicy"
	"github.com/gridsync/gridsync/gossip/sites"
	"github.com/gridsync/gridsync/signals"
	"github.com/gridsync/gridsync/trust/endpointtls"
)

// Defaults of the signals collection.
const (
	DefaultSignalsInterval = 5 * time.Second
	// DefaultScrapeMaxBytes bounds a provider's metrics body.
	DefaultScrapeMaxBytes = 4 << 20
	// maxScrapesAtOnce bounds the scrapes in flight.
	maxScrapesAtOnce     = 8
	defaultScrapeTimeout = 2 * time.Second
)

// Collector keeps this site's rows of the signals store: every
// provider's health (its phase and last probe) and, for a provider with
// spec.metricsConfig, the load series it declares, scraped under the
// probes' destination rule and bounded in time and size. A scrape that
// fails leaves the last rows to expire: stale is absent, never zero.
type Collector struct {
	c                        *base.Env
	endpoints                *provider.Endpoints
	scrapeStatus             *provider.ScrapeStatus
	scrapes, upstreamScrapes *prometheus.CounterVec
}

// NewCollector is the collector of env's site: e and scraped are the
// provider reconciler's endpoints and scrape status. It registers its
// metrics.
func NewCollector(c *base.Env, e *provider.Endpoints, scraped *provider.ScrapeStatus) *Collector {
	s := &Collector{c: c, endpoints: e, scrapeStatus: scraped}
	s.scrapes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gridsync_signals_scrapes_total",
		Help: "Scrapes of providers' metrics for the site's signals, by outcome (ok, a probe outcome such as timeout or too_large, not_exposition, or the reason a scrape was not sent, such as MetricsTlsSecretMissing).",
	}, []string{"outcome"})
	s.upstreamScrapes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "grid_provider_scrape_total",
		Help: "Scrapes of providers' metrics (upstream's name; the outcomes of gridsync_signals_scrapes_total).",
	}, []string{"outcome"})
	c.Opts.Registerer.MustRegister(s.scrapes, s.upstreamScrapes, scraped.Collector())
	return s
}

// scraped counts one scrape's outcome under both names.
func (s *Collector) scraped(outcome string) {
	s.scrapes.WithLabelValues(outcome).Inc()
	s.upstreamScrapes.WithLabelValues(outcome).Inc()
}

// Loop is the leader's signals work, every SignalsInterval: this
// site's rows collected (and gossiped), then the peers' taken in.
type Loop struct {
	Collector *Collector
	Peers     *Poller
	Every     time.Duration
	// Settled is told after each round: the networks whose overlays
	// follow load signals are looked at again.
	Settled func(context.Context)
}

// NeedLeaderElection: the leader's signals are the site's.
func (l *Loop) NeedLeaderElection() bool { return true }

func (l *Loop) Start(ctx context.Context) error {
	t := time.NewTicker(l.Every)
	defer t.Stop()
	for {
		l.Collector.collect(ctx)
		l.Peers.round(ctx)
		if l.Settled != nil {
			l.Settled(ctx)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func (s *Collector) collect(ctx context.Context) {
	store, site := s.c.Opts.Signals, s.c.Opts.SiteName
	var list v1alpha1.InferenceProviderList
	if err := s.c.Client.List(ctx, &list); err != nil {
		s.c.Opts.Logger.Warn("signals_list_failed", "error", err)
		return
	}
	// A provider another site hosts (spec.siteSelector) is that site's to
	// scrape and send.
	list.Items = slices.DeleteFunc(list.Items, func(p v1alpha1.InferenceProvider) bool { return !s.hostedHere(ctx, &p) })
	now := s.c.Opts.Now()
	ttl := 3 * s.c.Opts.SignalsInterval
	present, scraped := map[string]bool{}, map[string]bool{}
	sem := make(chan struct{}, maxScrapesAtOnce)
	material := s.endpoints.NewMaterialReader(ctx) // this round's: a rotation is used from the next round on
	var wg sync.WaitGroup
	for i := range list.Items {
		p := &list.Items[i]
		present[p.Name] = true
		if p.Spec.MetricsConfig == nil {
			store.Drop(site, p.Name, signals.PartLoad)
			continue
		}
		scraped[p.Name] = true
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			s.scrape(ctx, p, material)
		}()
	}
	wg.Wait()
	// Health after the scrapes: a provider's own health signal, when it
	// declares one, has a say in its readiness.
	for i := range list.Items {
		p := &list.Items[i]
		store.Set(site, p.Name, signals.PartHealth, s.health(p, now), now.Add(max(ttl, 3*probePeriod(p))))
	}
	store.Retain(site, signals.PartHealth, present)
	store.Retain(site, signals.PartLoad, present)
	s.scrapeStatus.Retain(scraped)
	s.c.Prober.RetainClients(provider.EndpointKey(provider.FeatureMetrics, ""), scraped)
	store.Expire()
	s.gossip(ctx, list.Items, now)
}

// gossip publishes this site's signals into membership for every network
// whose signals travel by gossip (the default): each network gets its own
// providers' rows, ages as of now.
func (s *Collector) gossip(ctx context.Context, providers []v1alpha1.InferenceProvider, now time.Time) {
	m := s.c.Opts.Membership
	if m == nil {
		return
	}
	var networks v1alpha1.GridNetworkList
	if err := s.c.Client.List(ctx, &networks); err != nil {
		return
	}
	site := s.c.Opts.SiteName
	for i := range networks.Items {
		n := &networks.Items[i]
		if transportMode(n) != v1alpha1.SignalTransportGossip {
			continue
		}
		mine := map[string]bool{}
		for j := range providers {
			if providers[j].Spec.GridNetworkRef == n.Name {
				mine[providers[j].Name] = true
			}
		}
		var out []sites.Signal
		for _, r := range s.c.Opts.Signals.Rows(func(rs, rp string) bool { return rs == site && mine[rp] }) {
			for _, smp := range r.Samples {
				if len(out) >= maxGossipSignals {
					break
				}
				labels := map[string]string{}
				for _, l := range smp.Labels {
					if l.Name != signals.LabelSite && l.Name != signals.LabelProvider {
						labels[l.Name] = l.Value
					}
				}
				out = append(out, sites.Signal{Provider: r.Provider, Metric: smp.Metric, Labels: labels, Value: smp.Value,
					AgeMs: max(now.Sub(smp.At).Milliseconds(), 0)})
			}
		}
		if err := m.PublishSignals(n.Name, out); err != nil {
			s.c.Opts.Logger.Warn("signals_gossip_failed", "network", n.Name, "error", err)
		}
	}
}

// maxGossipSignals bounds one site's signals in one network's record.
const maxGossipSignals = 4096

// health is a provider's phase and last probe, as series.
func (s *Collector) health(p *v1alpha1.InferenceProvider, now time.Time) []signals.Sample {
	h := s.c.Prober.Health(p.Name)
	at := now
	var out []signals.Sample
	if h.Probed {
		at = h.LastProbeAt
		out = append(out, signals.Sample{Metric: signals.MetricProbeLatency, Value: h.LastLatency.Seconds(), At: at})
	}
	phase := p.Status.Phase
	ready := -1.0 // unknown
	switch phase {
	case v1alpha1.ProviderAvailable, v1alpha1.ProviderDegraded:
		ready = 1
	case v1alpha1.ProviderUnavailable:
		ready = 0
	}
	// The provider's own health gauge (signalNames.healthy), while fresh:
	// any positive value is healthy, anything else is not, whatever the
	// probes say.
	if healthy, at2, ok := s.healthySignal(p); ok && ready != 0 {
		ready, at = 0, at2
		if healthy > 0 {
			ready = 1
		}
	}
	if ready >= 0 {
		out = append(out, signals.Sample{Metric: signals.MetricReady, Value: ready, At: at})
	}
	if phase != "" {
		out = append(out, signals.Sample{Metric: signals.MetricPhase, Labels: []signals.Label{{Name: "phase", Value: string(phase)}}, Value: 1, At: at})
	}
	return out
}

// healthySignal is the fresh value of the provider's declared health
// gauge, if it has one.
func (s *Collector) healthySignal(p *v1alpha1.InferenceProvider) (float64, time.Time, bool) {
	mc := p.Spec.MetricsConfig
	if mc == nil || mc.SignalNames.Healthy == "" {
		return 0, time.Time{}, false
	}
	site := s.c.Opts.SiteName
	for _, r := range s.c.Opts.Signals.Rows(func(rs, rp string) bool { return rs == site && rp == p.Name }) {
		if r.Part != signals.PartLoad {
			continue
		}
		for _, smp := range r.Samples {
			if smp.Metric == mc.SignalNames.Healthy {
				return smp.Value, smp.At, true
			}
		}
	}
	return 0, time.Time{}, false
}

func probePeriod(p *v1alpha1.InferenceProvider) time.Duration {
	if hc := p.Spec.HealthCheck; hc != nil {
		return provider.HealthPeriod(hc)
	}
	return 0
}

// scrape reads a provider's declared load series, with its TLS and
// credential when it configures them; material is read through the
// round's reader.
func (s *Collector) scrape(ctx context.Context, p *v1alpha1.InferenceProvider, material *provider.MaterialReader) {
	mc := p.Spec.MetricsConfig
	store, site := s.c.Opts.Signals, s.c.Opts.SiteName
	endpoint := s.endpoints.EndpointFor(p, provider.FeatureMetrics, mc.TLS, mc.Auth, func(context.Context) endpointtls.Source { return material })
	if endpoint == nil {
		s.c.Prober.DropClient(provider.EndpointKey(provider.FeatureMetrics, p.Name))
	}
	wanted := declaredSignals(mc.SignalNames)
	if len(wanted) == 0 {
		s.outcome(p.Name, provider.ScrapeResult{Reason: providerpolicy.ReasonNoSignalNames,
			Message: "metricsConfig.signalNames names no series: nothing is scraped"})
		store.Drop(site, p.Name, signals.PartLoad)
		return
	}
	base := mc.MetricsEndpoint
	if base == "" {
		base = p.Spec.Endpoint
	}
	url := provider.JoinPath(base, cmp.Or(mc.Path, "/metrics"))
	start := time.Now()
	body, err := s.c.Prober.Fetch(ctx, url, scrapeTimeout(mc.Timeout), s.c.Opts.SignalsScrapeMaxBytes, endpoint)
	s.c.Opts.Logger.Debug("signals_scraped", "provider", p.Name, "duration_ms", float64(time.Since(start).Microseconds())/1000)
	var config *probe.ConfigError
	if errors.As(err, &config) {
		// Fail closed: nothing was sent, and the last rows expire.
		reason := providerpolicy.MetricsReason(config.Reason)
		s.scraped(reason)
		s.outcome(p.Name, provider.ScrapeResult{Reason: reason, Message: "not scraped: " + config.Message})
		return
	}
	if err != nil {
		s.scraped(err.Error())
		s.outcome(p.Name, provider.ScrapeResult{Reason: providerpolicy.ReasonScrapeFailed, Message: "the last scrape failed: " + err.Error()})
		return // the last rows expire on their own
	}
	parsed, err := signals.Parse(body, func(m string) bool { return wanted[m] })
	if err != nil {
		s.scraped("not_exposition")
		s.outcome(p.Name, provider.ScrapeResult{Reason: providerpolicy.ReasonScrapeFailed, Message: "the last scrape failed: the answer is not Prometheus text"})
		return
	}
	s.scraped("ok")
	s.outcome(p.Name, provider.ScrapeResult{OK: true, Reason: providerpolicy.ReasonScraped, Message: "the last scrape succeeded"})
	now := s.c.Opts.Now()
	samples := make([]signals.Sample, 0, len(parsed))
	for _, ps := range parsed {
		if mc.PoolName != "" && ps.Label("name") != mc.PoolName {
			continue
		}
		ps.At = now
		samples = append(samples, ps.Sample)
	}
	samples = append(samples, normalisedLoad(samples, mc)...)
	stale := 3 * s.c.Opts.SignalsInterval
	if mc.StaleMetricsSeconds != nil {
		stale = time.Duration(*mc.StaleMetricsSeconds) * time.Second
	}
	store.Set(site, p.Name, signals.PartLoad, samples, now.Add(stale))
}

// normalisedLoad are the normalised series of a provider's scraped
// samples, for admission here and at the peers.
func normalisedLoad(samples []signals.Sample, mc *v1alpha1.MetricsConfig) []signals.Sample {
	var capacity float64
	if mc.QueueCapacity != nil {
		capacity = float64(*mc.QueueCapacity)
	}
	var out []signals.Sample
	if q, ok := signals.Ratio(samples, mc.SignalNames.QueueDepth, capacity, signals.MetricQueueDepth); ok {
		out = append(out, q)
	}
	if kv, ok := signals.Ratio(samples, mc.SignalNames.KVCacheUtilization, 0, signals.MetricKVCache); ok {
		out = append(out, kv)
	}
	return out
}

// skip logs a provider's scrape problem once per change of it.
// outcome records a provider's scrape: a change is logged when it is a
// problem and reaches the provider's MetricsScraped condition.
func (s *Collector) outcome(provider string, r provider.ScrapeResult) {
	if !s.scrapeStatus.Set(provider, r) {
		return
	}
	if !r.OK {
		s.c.Opts.Logger.Warn("signals_scrape_skipped", "provider", provider, "reason", r.Reason, "message", r.Message)
	}
}

func declaredSignals(n v1alpha1.MetricSignalNames) map[string]bool {
	out := map[string]bool{}
	for _, name := range []string{n.QueueDepth, n.KVCacheUtilization, n.LatencyP99Ms, n.PrefixCacheHitRatio, n.ErrorRate, n.Healthy} {
		if name != "" {
			out[name] = true
		}
	}
	return out
}

// scrapeTimeout reads "2s" or "500ms", bounded by the probes' maximum.
func scrapeTimeout(s string) time.Duration {
	return min(cmp.Or(provider.ParseDuration(s), defaultScrapeTimeout), probe.MaxTimeout)
}

// hostedHere says whether this site hosts the provider; a network that
// cannot be read hosts it (its signals are only what the site scrapes).
func (s *Collector) hostedHere(ctx context.Context, p *v1alpha1.InferenceProvider) bool {
	if p.Spec.SiteSelector == nil {
		return true
	}
	n, err := s.c.NetworkOf(ctx, p)
	if err != nil {
		return true
	}
	ok, _ := s.c.Hosted(p, n)
	return ok
}
