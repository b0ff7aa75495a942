package overlaysync

import (
	"fmt"
	"time"
)

// States reported by /status.
const (
	// StateCold: no valid overlay is on disk yet; not ready.
	StateCold = "cold"
	// StateReady: the last-known-good overlay is on disk and the source
	// agrees with it.
	StateReady = "ready"
	// StateReadyDegraded: the last-known-good overlay serves, but the
	// source is rejected, deleted or unreachable, or a write failed.
	StateReadyDegraded = "ready_degraded"
	// StateStale: an overlay is on disk but the source has not been
	// confirmed within ExpireAfter; readiness is withdrawn.
	StateStale = "stale"
)

// Degraded reasons beyond the envelope's rejection reasons. Together they
// form the closed set of the degraded_reason field and of metric labels.
const (
	ReasonMissingDataKey = "missing_data_key"
	ReasonNotFound       = "not_found"
	ReasonDeleted        = "deleted"
	ReasonAPIUnreachable = "api_unreachable"
	// ReasonAPIForbidden: the API server answers, but refuses this
	// ServiceAccount (a Role or RoleBinding that does not match).
	ReasonAPIForbidden = "api_forbidden"
	ReasonWriteFailed  = "write_failed"
	// ReasonSourceUnconfirmed: a request to the API server got no answer
	// within the watch idle timeout (a held request, a frozen path, an
	// overloaded server): what is on disk may no longer be what the source
	// holds.
	ReasonSourceUnconfirmed = "source_unconfirmed"
	// ReasonOutputMissing: the published file is not at the output any
	// more (another container of the pod removed, replaced or rewrote
	// it) and could not be put back yet.
	ReasonOutputMissing = "output_missing"
)

// state is the Syncer's mutable view of delivery, guarded by Syncer.mu.
type state struct {
	onDisk           bool // a valid overlay for this scope is on disk
	restored         bool // ... and it was found there at start
	writtenRevision  string
	observedRevision string
	// lastValidRevision is the last valid revision the source held, kept
	// across later rejections (the upstream observed_overlay_revision).
	lastValidRevision string
	resourceVersion   string
	// The causes of degradation are kept apart, so that one ending does
	// not hide another: the API coming back does not clear a rejection
	// that still stands.
	sourceReason string // the source: rejected, deleted, not found
	apiReason    string // the path to it: unreachable, forbidden, unconfirmed
	// pending is an accepted envelope whose write failed; it is retried,
	// and the Syncer is degraded (write_failed) while it waits.
	pending *accepted
	// lastGood is the envelope on disk (written, or restored at start):
	// what the output guard puts back when the output goes missing.
	lastGood *accepted
	// outputReason is set while the output is missing and not yet put
	// back (ReasonOutputMissing).
	outputReason        string
	lastRejectionReason string
	lastRejectionAt     time.Time
	lastObservedAt      time.Time
	lastWrittenAt       time.Time
	lastConfirmedAt     time.Time
	lastDeliveryLatency time.Duration
	payloadBytes        int
}

// Status is the /status document. It carries revisions, reasons and
// times, never envelope content.
type Status struct {
	// The upstream sidecar's fields, with its names and values, always
	// present and null when unset, so that scripts written for it work.
	Namespace               string     `json:"namespace"`
	ConfigMap               string     `json:"config_map"`
	DataKey                 string     `json:"data_key"`
	ObservedOverlayRevision *string    `json:"observed_overlay_revision"`
	WrittenOverlayRevision  *string    `json:"written_overlay_revision"`
	LastObservedAt          *time.Time `json:"last_observed_at"`
	LastWrittenAt           *time.Time `json:"last_written_at"`
	// UpstreamDegradedReason is DegradedReason in the upstream sidecar's
	// words (malformed, missing_key, api_unavailable...).
	UpstreamDegradedReason *string `json:"degraded_reason"`

	State          string `json:"state"`
	Ready          bool   `json:"ready"`
	NotReadyReason string `json:"not_ready_reason,omitempty"`
	Degraded       bool   `json:"degraded"`
	// DegradedReason is gridsync's finer reason (the envelope contract's
	// reasons, api_unreachable, api_forbidden, source_unconfirmed...).
	DegradedReason string `json:"degraded_detail,omitempty"`
	// Restored: the overlay on disk was found there at start (a restarted
	// container) and has not been replaced since.
	Restored bool `json:"restored"`

	Source SourceStatus `json:"source"`
	Output string       `json:"output"`
	// OutputMedium is what the output's folder is on (tmpfs, emptyDir,
	// disk) and Fsync whether publications there are fsynced.
	OutputMedium string `json:"output_medium"`
	Fsync        bool   `json:"fsync"`

	ObservedRevision string `json:"observed_revision,omitempty"`
	WrittenRevision  string `json:"written_revision,omitempty"`

	LastRejectionReason string    `json:"last_rejection_reason,omitempty"`
	LastRejectionAt     time.Time `json:"last_rejection_at,omitzero"`
	LastConfirmedAt     time.Time `json:"last_confirmed_at,omitzero"`
	// LastDeliveryLatencySeconds: from receiving the update from the API
	// server to the new file being in place.
	LastDeliveryLatencySeconds float64 `json:"last_delivery_latency_seconds,omitempty"`
	PayloadBytes               int     `json:"payload_bytes,omitempty"`
}

// SourceStatus names the watched ConfigMap.
type SourceStatus struct {
	Namespace       string `json:"namespace"`
	ConfigMap       string `json:"config_map"`
	DataKey         string `json:"data_key"`
	ResourceVersion string `json:"resource_version,omitempty"`
}

// degradedReason is the one reason /status and the degraded gauge report:
// the API first (nothing is known of the source while it is away), then a
// failed write, then a missing output, then the source itself.
func (st *state) degradedReason() string {
	switch {
	case st.apiReason != "":
		return st.apiReason
	case st.pending != nil:
		return ReasonWriteFailed
	case st.outputReason != "":
		return st.outputReason
	default:
		return st.sourceReason
	}
}

// readiness applies the readiness policy: ready once a valid overlay is on
// disk, and for as long as the last-known-good serves, unless the source
// has gone unconfirmed for longer than expireAfter.
func (st *state) readiness(now time.Time, expireAfter time.Duration) (bool, string) {
	if !st.onDisk {
		return false, "no valid overlay on disk yet"
	}
	if expireAfter > 0 {
		if age := now.Sub(st.lastConfirmedAt); age > expireAfter {
			return false, fmt.Sprintf("source not confirmed for %s (expire-after %s)", age.Round(time.Second), expireAfter)
		}
	}
	return true, ""
}

func (st *state) status(now time.Time, expireAfter time.Duration) Status {
	ready, why := st.readiness(now, expireAfter)
	s := Status{
		Ready:                      ready,
		NotReadyReason:             why,
		Degraded:                   st.degradedReason() != "",
		DegradedReason:             st.degradedReason(),
		Restored:                   st.restored,
		ObservedRevision:           st.observedRevision,
		WrittenRevision:            st.writtenRevision,
		LastRejectionReason:        st.lastRejectionReason,
		LastRejectionAt:            st.lastRejectionAt,
		LastConfirmedAt:            st.lastConfirmedAt,
		ObservedOverlayRevision:    nullable(st.lastValidRevision),
		WrittenOverlayRevision:     nullable(st.writtenRevision),
		LastObservedAt:             nullableTime(st.lastObservedAt),
		LastWrittenAt:              nullableTime(st.lastWrittenAt),
		UpstreamDegradedReason:     nullable(upstreamReason(st.degradedReason())),
		LastDeliveryLatencySeconds: st.lastDeliveryLatency.Seconds(),
		PayloadBytes:               st.payloadBytes,
	}
	switch {
	case !st.onDisk:
		s.State = StateCold
	case !ready:
		s.State = StateStale
	case s.Degraded:
		s.State = StateReadyDegraded
	default:
		s.State = StateReady
	}
	return s
}

func nullable(v string) *string {
	if v == "" {
		return nil
	}
	return &v
}

func nullableTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}
