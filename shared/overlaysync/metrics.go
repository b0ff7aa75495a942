package overlaysync

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gridsync/gridsync/shared/envelope"
)

// Event outcomes, the outcome label of grid_overlay_sync_events_total, as
// the upstream sidecar has them.
const (
	outcomeAccepted  = "accepted"  // a new revision was published
	outcomeUnchanged = "unchanged" // the revision on disk was seen again
	outcomeRejected  = "rejected"  // kept the last-known-good
	outcomeDeleted   = "deleted"   // the ConfigMap is gone
	outcomeError     = "error"     // the API failed, or a write did
)

// Reasons of the upstream sidecar's metrics and of /status's
// degraded_reason: dashboards and alerts written for it match these.
const (
	upstreamValid          = "valid"
	upstreamUnchanged      = "unchanged"
	upstreamMalformed      = "malformed"
	upstreamUnsupported    = "unsupported_schema"
	upstreamMissingKey     = "missing_key"
	upstreamDeleted        = "deleted"
	upstreamAPIUnavailable = "api_unavailable"
	upstreamWriteFailed    = "write_failed"
	upstreamStreamEnded    = "stream_ended"
	upstreamStreamError    = "stream_error"
)

// upstreamReason maps one of our reasons (the envelope's, or a degraded
// reason) to the upstream sidecar's coarser one.
func upstreamReason(reason string) string {
	switch reason {
	case string(envelope.ReasonMalformedStructure), string(envelope.ReasonMissingSchemaVersion), string(envelope.ReasonLegacyPayload):
		return upstreamMalformed // upstream's parser fails on all three
	case string(envelope.ReasonUnsupportedSchemaVersion):
		return upstreamUnsupported
	case ReasonMissingDataKey:
		return upstreamMissingKey
	case ReasonDeleted:
		return upstreamDeleted
	case ReasonNotFound, ReasonAPIUnreachable, ReasonAPIForbidden, ReasonSourceUnconfirmed:
		return upstreamAPIUnavailable // upstream's GET or watch fails
	case ReasonWriteFailed, ReasonOutputMissing:
		return upstreamWriteFailed // the gateway's file is not what it should be
	}
	return reason // oversized, scope_mismatch, digest_mismatch, revision_digest_mismatch
}

// Watch restart reasons, the reason label of our restart counter; the
// upstream counter has stream_ended for closed and stream_error for the
// rest.
const (
	reconnectClosed     = "closed"      // the server ended the watch (timeout)
	reconnectExpired    = "expired"     // 410 Gone: relisted
	reconnectIdle       = "idle"        // nothing, not even a bookmark, within the idle timeout
	reconnectWatchError = "watch_error" // the watch could not start or failed
	reconnectListError  = "list_error"  // the list failed
)

type metrics struct {
	// The upstream sidecar's, with its label values.
	events             *prometheus.CounterVec
	writes             *prometheus.CounterVec
	validationFailures *prometheus.CounterVec
	reconnects         *prometheus.CounterVec
	lastObserved       prometheus.Gauge
	lastWrite          prometheus.Gauge
	payloadBytes       prometheus.Gauge
	// Ours: the finer reasons, and latency.
	rejections      *prometheus.CounterVec
	watchRestarts   *prometheus.CounterVec
	apiFailures     *prometheus.CounterVec
	deliveryLatency prometheus.Histogram
	renderToDisk    prometheus.Histogram
	revisionInfo    *prometheus.GaugeVec
	outputMissing   prometheus.Counter
}

// rejectionReasons is the closed set of our rejection reasons.
func rejectionReasons() []string {
	reasons := []string{ReasonMissingDataKey}
	for _, r := range envelope.Reasons() {
		reasons = append(reasons, string(r))
	}
	return reasons
}

// accepted counts a published revision.
func (m *metrics) accepted() { m.events.WithLabelValues(outcomeAccepted, upstreamValid).Inc() }

// unchanged counts a revision seen again.
func (m *metrics) unchanged() { m.events.WithLabelValues(outcomeUnchanged, upstreamUnchanged).Inc() }

// rejected counts a refused envelope under our reason and upstream's.
func (m *metrics) rejected(reason string) {
	up := upstreamReason(reason)
	m.validationFailures.WithLabelValues(up).Inc()
	m.events.WithLabelValues(outcomeRejected, up).Inc()
	m.rejections.WithLabelValues(reason).Inc()
}

// absent counts a deletion, or a ConfigMap not found (an API error to the
// upstream sidecar, whose GET fails).
func (m *metrics) absent(reason string) {
	if reason == ReasonDeleted {
		m.events.WithLabelValues(outcomeDeleted, upstreamDeleted).Inc()
		return
	}
	m.events.WithLabelValues(outcomeError, upstreamAPIUnavailable).Inc()
}

// apiFailed counts a failed request to the API server.
func (m *metrics) apiFailed(reason string) {
	m.events.WithLabelValues(outcomeError, upstreamAPIUnavailable).Inc()
	m.apiFailures.WithLabelValues(reason).Inc()
}

// writeFailed counts a failed write of the overlay file.
func (m *metrics) writeFailed() {
	m.writes.WithLabelValues("failure").Inc()
	m.events.WithLabelValues(outcomeError, upstreamWriteFailed).Inc()
}

// outputLost counts an output found missing, replaced or rewritten by
// someone else; to the upstream sidecar's counters it is a failed write
// (the gateway's file is not the one delivered).
func (m *metrics) outputLost() {
	m.outputMissing.Inc()
	m.events.WithLabelValues(outcomeError, upstreamWriteFailed).Inc()
}

// watchRestarted counts a watch that ended, and why.
func (m *metrics) watchRestarted(reason string) {
	up := upstreamStreamError
	if reason == reconnectClosed {
		up = upstreamStreamEnded
	}
	m.reconnects.WithLabelValues(up).Inc()
	m.watchRestarts.WithLabelValues(reason).Inc()
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
		rejections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "grid_overlay_sync_rejections_total",
			Help: "Envelopes rejected, by gridsync's finer reason (the envelope contract's reasons and missing_data_key).",
		}, []string{"reason"}),
		watchRestarts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "grid_overlay_sync_watch_restarts_total",
			Help: "Watch restarts, by gridsync's finer reason (closed, expired, idle, watch_error, list_error).",
		}, []string{"reason"}),
		apiFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "grid_overlay_sync_api_failures_total",
			Help: "Failed requests to the API server, by reason (api_unreachable, api_forbidden, source_unconfirmed).",
		}, []string{"reason"}),
		revisionInfo: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "grid_overlay_sync_revision_info",
			Help: "The revision of the overlay file on disk, as a label; one series.",
		}, []string{"revision"}),
		outputMissing: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "grid_overlay_sync_output_missing_total",
			Help: "Times the published file was found removed, replaced or rewritten by someone else (and put back from the last-known-good).",
		}),
	}
	if reg == nil {
		return m
	}
	reg.MustRegister(m.events, m.writes, m.validationFailures, m.reconnects,
		m.lastObserved, m.lastWrite, m.payloadBytes,
		m.rejections, m.watchRestarts, m.apiFailures, m.deliveryLatency, m.renderToDisk, m.revisionInfo, m.outputMissing,
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
		up := upstreamReason(r)
		m.validationFailures.WithLabelValues(up)
		m.events.WithLabelValues(outcomeRejected, up)
		m.rejections.WithLabelValues(r)
	}
	m.events.WithLabelValues(outcomeAccepted, upstreamValid)
	m.events.WithLabelValues(outcomeUnchanged, upstreamUnchanged)
	m.events.WithLabelValues(outcomeDeleted, upstreamDeleted)
	m.events.WithLabelValues(outcomeError, upstreamAPIUnavailable)
	m.events.WithLabelValues(outcomeError, upstreamWriteFailed)
	m.writes.WithLabelValues("success")
	m.writes.WithLabelValues("failure")
	m.reconnects.WithLabelValues(upstreamStreamEnded)
	m.reconnects.WithLabelValues(upstreamStreamError)
	for _, r := range []string{reconnectClosed, reconnectExpired, reconnectIdle, reconnectWatchError, reconnectListError} {
		m.watchRestarts.WithLabelValues(r)
	}
	for _, r := range []string{ReasonAPIUnreachable, ReasonAPIForbidden, ReasonSourceUnconfirmed} {
		m.apiFailures.WithLabelValues(r)
	}
	return m
}

func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
