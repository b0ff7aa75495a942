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
	}
	for _, o := range []string{publishApplied, publishUnchanged, publishDeleted, publishFailed, publishRefused} {
		m.publishes.WithLabelValues(o)
	}
	for _, k := range []string{"GridNetwork", "InferenceProvider"} {
		m.statusWrites.WithLabelValues(k)
	}
	for _, c := range []prometheus.Collector{m.publishes, m.statusWrites, m.renderDuration} {
		if err := reg.Register(c); err != nil {
			var already prometheus.AlreadyRegisteredError
			if !errors.As(err, &already) {
				return nil, err
			}
		}
	}
	return m, nil
}
