package controller

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// Publication outcomes.
const (
	publishApplied   = "applied"
	publishUnchanged = "unchanged"
	publishDeleted   = "deleted"
	publishFailed    = "failed"
	publishRefused   = "refused" // not rendered or not ours to write
)

type metrics struct {
	publishes      *prometheus.CounterVec
	statusWrites   *prometheus.CounterVec
	renderDuration prometheus.Histogram
	// Site trust.
	siteCertificates prometheus.Counter
	siteProbes       *prometheus.CounterVec
	probeDuration    prometheus.Histogram
	sitePhases       *prometheus.GaugeVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		publishes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gridsync_controller_overlay_publishes_total",
			Help: "Overlay ConfigMap publications by outcome: applied, unchanged (revision already stored), deleted (gateway or network gone), failed, refused.",
		}, []string{"outcome"}),
		statusWrites: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gridsync_controller_status_writes_total",
			Help: "Status writes by kind (GridNetwork, InferenceProvider); written only when the status changes.",
		}, []string{"kind"}),
		renderDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "gridsync_controller_render_duration_seconds",
			Help:    "Time to render and build one gateway's overlay envelope.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
		}),
		siteCertificates: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "grid_site_certificates_issued_total",
			Help: "Site certificates this agent issued into a site Secret (first issue, renewal, reissue).",
		}),
		siteProbes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "grid_site_probes_total",
			Help: "Probes of remote sites' gateways by outcome: TlsVerified or the reason that kept the site from Active.",
		}, []string{"outcome"}),
		probeDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "grid_site_probe_duration_seconds",
			Help:    "Time of one probe of a remote site's gateway: connect, mutual-TLS handshake, the wait for the gateway's verdict.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}),
		sitePhases: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "grid_sites",
			Help: "GridSites by phase; only Active sites' providers reach overlays.",
		}, []string{"phase"}),
	}
	for _, o := range []string{publishApplied, publishUnchanged, publishDeleted, publishFailed, publishRefused} {
		m.publishes.WithLabelValues(o)
	}
	for _, k := range []string{"GridNetwork", "InferenceProvider", "GridSite"} {
		m.statusWrites.WithLabelValues(k)
	}
	for _, c := range []prometheus.Collector{m.publishes, m.statusWrites, m.renderDuration,
		m.siteCertificates, m.siteProbes, m.probeDuration, m.sitePhases} {
		if err := reg.Register(c); err != nil {
			var already prometheus.AlreadyRegisteredError
			if !errors.As(err, &already) {
				return nil, err
			}
		}
	}
	return m, nil
}
