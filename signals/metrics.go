package signals

import "github.com/prometheus/client_golang/prometheus"

// Collector exports the health series the store holds, this site's and
// its peers', on the agent's /metrics: grid_provider_ready and
// grid_provider_probe_latency_seconds labelled grid_site and
// grid_provider, so that one Prometheus scraping a hub sees every site. A
// series the store does not hold fresh is absent, not 0. Load series stay
// on /v1/site/signals: their labels are each provider's own.
type Collector struct{ Store *Store }

var (
	readyDesc = prometheus.NewDesc(MetricReady, "1 while the provider can serve (Available or Degraded), 0 when Unavailable, by site; absent when unknown or stale.",
		[]string{LabelSite, LabelProvider}, nil)
	latencyDesc = prometheus.NewDesc(MetricProbeLatency, "The provider's last health probe's latency, by site; absent when unknown or stale.",
		[]string{LabelSite, LabelProvider}, nil)
	invalidDesc = prometheus.NewDesc("gridsync_signals_samples_dropped_total",
		"Signal samples dropped because a metric or label name is not of the classic syntax (from scrapes, polls and gossip alike).", nil, nil)
)

func (c Collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- readyDesc
	ch <- latencyDesc
	ch <- invalidDesc
}

func (c Collector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(invalidDesc, prometheus.CounterValue, float64(c.Store.Invalid()))
	seen := map[[3]string]bool{}
	for _, r := range c.Store.Rows(nil) {
		for _, smp := range r.Samples {
			var desc *prometheus.Desc
			switch smp.Metric {
			case MetricReady:
				desc = readyDesc
			case MetricProbeLatency:
				desc = latencyDesc
			default:
				continue
			}
			key := [3]string{smp.Metric, r.Site, r.Provider}
			if seen[key] {
				continue // a peer's row and a health row of one provider
			}
			seen[key] = true
			// No timestamp: Prometheus stamps a scrape itself, and an
			// absent series is how staleness shows.
			ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, smp.Value, r.Site, r.Provider)
		}
	}
}
