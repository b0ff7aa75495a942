package overlaysync_test

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gridsync/gridsync/shared/overlaysync"
)

func TestMetricsAgreeWithStatusAndCarryNoPayload(t *testing.T) {
	g := newGateway(t)
	r := g.start(g.options())

	// Cold: not ready, gauges say so, every closed label series exists.
	r.waitStatus(t, "not found", func(st overlaysync.Status) bool { return st.DegradedReason == overlaysync.ReasonNotFound })
	assert.Zero(t, r.metric(t, "grid_overlay_sync_ready"))
	assert.Equal(t, 1.0, r.metric(t, "grid_overlay_sync_degraded"))
	for _, reason := range []string{"digest_mismatch", "scope_mismatch", "missing_key", "oversized", "malformed", "unsupported_schema", "revision_digest_mismatch"} {
		assert.Zero(t, r.metric(t, "grid_overlay_sync_validation_failures_total", "reason", reason))
	}

	doc, revision := g.envelopeFor(1)
	r.waitObserved(t, g.putEnvelope(doc))
	assert.Equal(t, 1.0, r.metric(t, "grid_overlay_sync_ready"))
	assert.Zero(t, r.metric(t, "grid_overlay_sync_degraded"))
	assert.Equal(t, 1.0, r.metric(t, "grid_overlay_sync_revision_info", "revision", revision))
	assert.Equal(t, float64(len(doc)), r.metric(t, "grid_overlay_sync_payload_bytes"))
	assert.Equal(t, 1.0, r.metric(t, "grid_overlay_sync_events_total", "outcome", "accepted", "reason", "valid"))
	confirmed := r.Status().LastConfirmedAt
	require.False(t, confirmed.IsZero())
	assert.InDelta(t, float64(confirmed.UnixNano())/1e9, r.metric(t, "grid_overlay_sync_last_confirmed_timestamp_seconds"), 1e-6)

	next, nextRevision := g.envelopeFor(2)
	r.waitObserved(t, g.putEnvelope(next))
	assert.Equal(t, 1, testutil.CollectAndCount(r.registry, "grid_overlay_sync_revision_info"), "one revision series")
	assert.Equal(t, 1.0, r.metric(t, "grid_overlay_sync_revision_info", "revision", nextRevision))
	assert.Equal(t, 2, int(histogramCount(t, r, "grid_overlay_sync_delivery_latency_seconds")))
	assert.Equal(t, 2, int(histogramCount(t, r, "grid_overlay_sync_render_to_disk_latency_seconds")))

	bad := fixture(t, "invalid-digest.json")
	r.waitObserved(t, g.putEnvelope(bad))
	assert.Equal(t, 1.0, r.metric(t, "grid_overlay_sync_ready"), "degraded is not unready")
	assert.Equal(t, 1.0, r.metric(t, "grid_overlay_sync_degraded"))
	assert.Equal(t, 1.0, r.metric(t, "grid_overlay_sync_validation_failures_total", "reason", "digest_mismatch"))

	// No candidate names, secret references or other envelope content.
	families, err := r.registry.Gather()
	require.NoError(t, err)
	var text strings.Builder
	for _, f := range families {
		text.WriteString(f.String())
	}
	for _, leak := range []string{"model-east", "east-provider", "east-cred", "sim-east-provider"} {
		assert.NotContains(t, text.String(), leak)
	}
}

func histogramCount(t *testing.T, r *running, name string) uint64 {
	t.Helper()
	families, err := r.registry.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() == name {
			return f.GetMetric()[0].GetHistogram().GetSampleCount()
		}
	}
	t.Fatalf("no histogram %s", name)
	return 0
}
