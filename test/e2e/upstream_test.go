package e2e

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gridsync/gridsync/test/testbin"
)

// Dashboards, alerts, log searches and status scrapers written for the
// upstream sidecar: its metric label values, /status fields, /readyz body
// and log event names.
func TestSidecarAnswersAsTheUpstreamSidecarDoes(t *testing.T) {
	p := newPod(t)
	addr := freeAddr(t)
	sidecar := start(t, testbin.Sidecar, nil, p.Args("--health-addr", addr)...)
	base := "http://" + addr
	waitOK(t, base+"/livez")

	// Cold: every upstream field present, null when unset.
	_, body := get(t, base+"/status")
	var status map[string]any
	require.NoError(t, json.Unmarshal([]byte(body), &status), body)
	for _, field := range []string{"namespace", "config_map", "data_key", "observed_overlay_revision", "written_overlay_revision", "last_observed_at", "last_written_at", "state", "degraded_reason"} {
		assert.Contains(t, status, field, "upstream field %s", field)
	}
	assert.Nil(t, status["written_overlay_revision"])
	assert.Nil(t, status["last_written_at"])
	assert.Equal(t, "cold", status["state"])
	assert.Equal(t, p.Namespace, status["namespace"])
	assert.Equal(t, p.ConfigMap, status["config_map"])
	assert.Equal(t, "routing-overlay.json", status["data_key"])

	doc, revision := p.Envelope(1)
	p.Put(doc)
	waitOK(t, base+"/readyz")
	_, ready := get(t, base+"/readyz")
	assert.Equal(t, "ready", strings.TrimSpace(ready))
	_, body = get(t, base+"/status")
	status = nil
	require.NoError(t, json.Unmarshal([]byte(body), &status), body)
	assert.Equal(t, revision, status["written_overlay_revision"])
	assert.Equal(t, revision, status["observed_overlay_revision"])
	assert.Nil(t, status["degraded_reason"])
	assert.NotNil(t, status["last_written_at"])

	// A malformed update: upstream's reason words in metrics and status.
	p.PutRaw(`{"schema_version":`)
	require.Eventually(t, func() bool {
		_, body := get(t, base+"/status")
		return strings.Contains(body, `"degraded_reason": "malformed"`)
	}, 10*time.Second, 10*time.Millisecond)
	_, body = get(t, base+"/status")
	assert.Contains(t, body, `"degraded_detail": "malformed_structure"`, "our finer reason beside it")
	assert.Contains(t, body, `"observed_overlay_revision": "`+revision+`"`, "the last valid revision observed is kept")

	_, metrics := get(t, base+"/metrics")
	for _, series := range []string{
		`grid_overlay_sync_events_total{outcome="accepted",reason="valid"} 1`,
		`grid_overlay_sync_events_total{outcome="rejected",reason="malformed"} 1`,
		`grid_overlay_sync_validation_failures_total{reason="malformed"} 1`,
		`grid_overlay_sync_events_total{outcome="error",reason="api_unavailable"}`,
		`grid_overlay_sync_events_total{outcome="error",reason="write_failed"} 0`,
		`grid_overlay_sync_events_total{outcome="deleted",reason="deleted"} 0`,
		`grid_overlay_sync_events_total{outcome="unchanged",reason="unchanged"} 0`,
		`grid_overlay_sync_validation_failures_total{reason="missing_key"} 0`,
		`grid_overlay_sync_validation_failures_total{reason="unsupported_schema"} 0`,
		`grid_overlay_sync_watch_reconnects_total{reason="stream_ended"}`,
		`grid_overlay_sync_watch_reconnects_total{reason="stream_error"}`,
		`grid_overlay_sync_file_writes_total{outcome="success"} 1`,
		`grid_overlay_sync_rejections_total{reason="malformed_structure"} 1`,
	} {
		assert.Contains(t, metrics, series)
	}
	for _, ours := range []string{`reason="none"`, `reason="malformed_structure"}`, `reason="closed"}`} {
		for _, line := range strings.Split(metrics, "\n") {
			if strings.HasPrefix(line, "grid_overlay_sync_events_total") || strings.HasPrefix(line, "grid_overlay_sync_validation_failures_total") || strings.HasPrefix(line, "grid_overlay_sync_watch_reconnects_total") {
				assert.NotContains(t, line, ours, "upstream series carry upstream values only")
			}
		}
	}

	// Deleted: the upstream event name in the log.
	p.DeleteConfigMap()
	require.Eventually(t, func() bool { return strings.Contains(sidecar.Log(), `"msg":"overlay_source_deleted"`) }, 10*time.Second, 10*time.Millisecond)
	assert.Contains(t, sidecar.Log(), `"msg":"overlay_written"`)
}

// OVERLAY_SYNC_ONCE=true ends the process after the first valid overlay,
// and --once never binds the health port (here it is taken).
func TestSidecarOnceFromTheEnvironmentNeverBindsThePort(t *testing.T) {
	p := newPod(t)
	doc, _ := p.Envelope(1)
	p.Put(doc)
	taken, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer func() { _ = taken.Close() }()
	sidecar := start(t, testbin.Sidecar, []string{"OVERLAY_SYNC_ONCE=true"}, p.Args("--health-addr", taken.Addr().String())...)
	assert.Equal(t, 0, sidecar.Wait(t, 10*time.Second), sidecar.Log())
	got, err := os.ReadFile(p.Output())
	require.NoError(t, err)
	assert.Equal(t, string(doc), string(got))
}
