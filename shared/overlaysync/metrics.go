package overlaysync

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gridsync/gridsync/shared/envelope"
)

// Event outcomes, the outcome label of grid_overlay_sync_events_total.
const (
	outcomeAccepted  = "accepted"  // a new revision was published
	outcomeUnchanged = "unchanged" // the revision on disk was seen again
	outcomeRejected  = "rejected"  // kept the last-known-good
	outcomeDeleted   = "deleted"   // the ConfigMap is gone
)

// Watch restart reasons, the reason label of the reconnect counter.
const (
	reconnectClosed     = "closed"      // the server ended the watch (timeout)
	reconnectExpired    = "expired"     // 410 Gone: relisted
	reconnectIdle       = "idle"        // nothing, not even a bookmark, within the idle timeout
	reconnectWatchError = "watch_error" // the watch could not start or failed
	reconnectListError  = "list_error"  // the list failed
)

const labelNone = "none"

type metrics struct {
	events             *prometheus.CounterVec
	writes             *prometheus.CounterVec
	validationFailures *prometheus.CounterVec
	reconnects         *prometheus.CounterVec
	lastObserved       prometheus.Gauge
	lastWrite          prometheus.Gauge
	payloadBytes       prometheus.Gauge
	deliveryLatency    prometheus.Histogram
	renderToDisk       prometheus.Histogram
	revisionInfo       *prometheus.GaugeVec
}

// rejectionReasons is the closed set of the reason labels.
func rejectionReasons() []string {
	reasons := []string{ReasonMissingDataKey}
	for _, r := range envelope.Reasons() {
		reasons = append(reasons, string(r))
	}
	return reasons
}

// newMetrics creates the upstream sidecar's metrics (same names and label
// names) and ours. ready and degraded are computed at scrape time from the
// same snapshot as /readyz and /status, so they can never disagree.
func newMetrics(reg prometheus.Registerer, ready, degraded func() bool, confirmedAt func() time.Time) *metrics {
	m := &metrics{
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "grid_overlay_sync_events_total",
			Help: "ConfigMap states handled, by outcome (accepted, unchanged, rejected, deleted) and reason.",
		}, []string{"outcome", "reason"}),
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "grid_overlay_sync_file_writes_total",
			Help: "Atomic writes of the overlay file, by outcome (success, failure).",
		}, []string{"outcome"}),
		validationFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "grid_overlay_sync_validation_failures_total",
			Help: "Envelopes rejected, by reason.",
		}, []string{"reason"}),
		reconnects: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "grid_overlay_sync_watch_reconnects_total",
			Help: "Watch restarts, by reason (closed, expired, idle, watch_error, list_error).",
		}, []string{"reason"}),
		lastObserved: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "grid_overlay_sync_last_observed_timestamp_seconds",
			Help: "When the ConfigMap was last observed (unix seconds).",
		}),
		lastWrite: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "grid_overlay_sync_last_write_timestamp_seconds",
			Help: "When the overlay file was last written (unix seconds).",
		}),
		payloadBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "grid_overlay_sync_payload_bytes",
			Help: "Size of the overlay file on disk.",
		}),
		deliveryLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "grid_overlay_sync_delivery_latency_seconds",
			Help:    "From receiving an update from the API server to the new file being renamed into place.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 15), // 0.5 ms .. 8 s
		}),
		renderToDisk: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "grid_overlay_sync_render_to_disk_latency_seconds",
			Help:    "From the envelope's provenance.rendered_at to the new file being in place (clocks of producer and node).",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 15), // 5 ms .. 80 s
		}),
		revisionInfo: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "grid_overlay_sync_revision_info",
			Help: "The revision of the overlay file on disk, as a label; one series.",
		}, []string{"revision"}),
	}
	if reg == nil {
		return m
	}
	reg.MustRegister(m.events, m.writes, m.validationFailures, m.reconnects,
		m.lastObserved, m.lastWrite, m.payloadBytes, m.deliveryLatency, m.renderToDisk, m.revisionInfo,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "grid_overlay_sync_ready",
			Help: "1 when a valid overlay is on disk and readiness is not withdrawn (matches /readyz).",
		}, func() float64 { return boolGauge(ready()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "grid_overlay_sync_last_confirmed_timestamp_seconds",
			Help: "When the API server last answered for the ConfigMap (list, event or bookmark); 0 before the first answer. What --expire-after measures, for alerts.",
		}, func() float64 {
			if t := confirmedAt(); !t.IsZero() {
				return unixSeconds(t)
			}
			return 0
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "grid_overlay_sync_degraded",
			Help: "1 when the last-known-good serves but the source is not accepted (matches /status).",
		}, func() float64 { return boolGauge(degraded()) }),
	)
	// Every series of a closed label set exists from the first scrape, so
	// that rate() and absent() work without waiting for the first failure.
	for _, r := range rejectionReasons() {
		m.validationFailures.WithLabelValues(r)
		m.events.WithLabelValues(outcomeRejected, r)
	}
	m.events.WithLabelValues(outcomeAccepted, labelNone)
	m.events.WithLabelValues(outcomeUnchanged, labelNone)
	m.events.WithLabelValues(outcomeDeleted, ReasonDeleted)
	m.writes.WithLabelValues("success")
	m.writes.WithLabelValues("failure")
	for _, r := range []string{reconnectClosed, reconnectExpired, reconnectIdle, reconnectWatchError, reconnectListError} {
		m.reconnects.WithLabelValues(r)
	}
	return m
}

func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
