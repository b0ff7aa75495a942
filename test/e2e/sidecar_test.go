package e2e

import (
	"context"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gridsync/gridsync/test/testbin"
)

func TestSidecarServesProbesStatusAndMetrics(t *testing.T) {
	p := newPod(t)
	addr := freeAddr(t)
	sidecar := start(t, testbin.Sidecar, nil, p.Args("--health-addr", addr)...)
	base := "http://" + addr

	waitOK(t, base+"/livez")
	code, body := get(t, base+"/readyz")
	assert.Equal(t, 503, code, body)
	code, _ = get(t, base+"/startupz")
	assert.Equal(t, 503, code)

	doc, revision := p.Envelope(1)
	p.Put(doc)
	waitOK(t, base+"/readyz")
	code, _ = get(t, base+"/startupz")
	assert.Equal(t, 200, code)

	_, body = get(t, base+"/status")
	var status map[string]any
	require.NoError(t, json.Unmarshal([]byte(body), &status), body)
	assert.Equal(t, "ready", status["state"])
	assert.Equal(t, revision, status["written_revision"])
	assert.Equal(t, revision, status["observed_revision"])
	source, _ := status["source"].(map[string]any)
	assert.NotEmpty(t, source["resource_version"])
	assert.Positive(t, status["last_delivery_latency_seconds"])
	assert.NotContains(t, body, "model-east", "no envelope content in /status")

	_, metrics := get(t, base+"/metrics")
	for _, name := range []string{
		"grid_overlay_sync_events_total", "grid_overlay_sync_file_writes_total",
		"grid_overlay_sync_validation_failures_total", "grid_overlay_sync_watch_reconnects_total",
		"grid_overlay_sync_ready 1", "grid_overlay_sync_degraded 0",
		"grid_overlay_sync_last_observed_timestamp_seconds", "grid_overlay_sync_last_write_timestamp_seconds",
		"grid_overlay_sync_payload_bytes", "grid_overlay_sync_delivery_latency_seconds_bucket",
		"grid_overlay_sync_render_to_disk_latency_seconds_bucket", `grid_overlay_sync_revision_info{revision="` + revision + `"} 1`,
		`gridsync_build_info{binary="gridsync-sidecar"`, "process_resident_memory_bytes",
	} {
		assert.Contains(t, metrics, name)
	}
	assert.NotContains(t, metrics, "model-east")

	// A rejected update is logged with its reason, never its content.
	tampered := []byte(strings.Replace(string(doc), `"fresh": true`, `"fresh": false`, 1))
	p.Put(tampered)
	require.Eventually(t, func() bool { return strings.Contains(sidecar.Log(), `"reason":"digest_mismatch"`) }, 10*time.Second, 10*time.Millisecond)
	for _, content := range []string{"model-east", "east-provider", "sim-east-provider"} {
		assert.NotContains(t, sidecar.Log(), content, "envelope content in the log")
	}
	assert.True(t, sidecar.Running())
}

func TestSidecarShutsDownCleanlyOnSIGTERM(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			p := newPod(t)
			doc, _ := p.Envelope(1)
			p.Put(doc)
			addr := freeAddr(t)
			sidecar := start(t, testbin.Sidecar, nil, p.Args("--health-addr", addr)...)
			waitOK(t, "http://"+addr+"/readyz")

			require.NoError(t, sidecar.Cmd.Process.Signal(sig))
			began := time.Now()
			assert.Equal(t, 0, sidecar.Wait(t, 5*time.Second))
			assert.Less(t, time.Since(began), 3*time.Second)
			assert.Contains(t, sidecar.Log(), `"msg":"shutdown"`)
			// The file stays for the gateway.
			got, err := os.ReadFile(p.Output())
			require.NoError(t, err)
			assert.Equal(t, string(doc), string(got))
		})
	}
}

func TestSidecarExitsNonZeroWhenTheHealthAddressIsTaken(t *testing.T) {
	p := newPod(t)
	taken, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer func() { _ = taken.Close() }()
	sidecar := start(t, testbin.Sidecar, nil, p.Args("--health-addr", taken.Addr().String())...)
	assert.Equal(t, 1, sidecar.Wait(t, 5*time.Second))
	assert.Contains(t, sidecar.Log(), "bind health address")
}

func TestSidecarTakesTheUpstreamEnvironmentVariables(t *testing.T) {
	p := newPod(t)
	addr := freeAddr(t)
	doc, revision := p.Envelope(1)
	p.Put(doc)
	start(t, testbin.Sidecar, []string{
		"OVERLAY_SYNC_NAMESPACE=" + p.Namespace,
		"OVERLAY_SYNC_CONFIGMAP=" + p.ConfigMap,
		"OVERLAY_SYNC_DATA_KEY=routing-overlay.json",
		"OVERLAY_SYNC_OUTPUT=" + p.Output(),
		"OVERLAY_SYNC_MAX_BYTES=1048576",
		"OVERLAY_SYNC_HEALTH_ADDR=" + addr,
	}, "--kubeconfig", p.Kubeconfig,
		"--expected-network", p.Scope.Network, "--expected-gateway", p.Scope.Gateway, "--expected-local-site", p.Scope.LocalSite)
	waitOK(t, "http://"+addr+"/readyz")
	_, body := get(t, "http://"+addr+"/status")
	assert.Contains(t, body, revision)
}

func TestSidecarOnceExitsAfterTheFirstValidOverlay(t *testing.T) {
	p := newPod(t)
	doc, _ := p.Envelope(1)
	p.Put(doc)
	sidecar := start(t, testbin.Sidecar, nil, p.Args("--once", "--health-addr", freeAddr(t))...)
	assert.Equal(t, 0, sidecar.Wait(t, 10*time.Second))
	got, err := os.ReadFile(p.Output())
	require.NoError(t, err)
	assert.Equal(t, string(doc), string(got))
}

func TestSidecarFlagErrorsNameTheFlag(t *testing.T) {
	tests := map[string]struct {
		args []string
		env  []string
		want string
	}{
		"missing config map":    {args: []string{"--expected-network", "n", "--expected-gateway", "g", "--expected-local-site", "s"}, want: "--config-map is required"},
		"bad max bytes":         {args: []string{"--config-map", "c", "--expected-network", "n", "--expected-gateway", "g", "--expected-local-site", "s", "--max-bytes", "-1"}, want: "--max-bytes must be between 1 and 67108864, got -1"},
		"bad duration":          {args: []string{"--expire-after", "soon"}, want: "-expire-after"},
		"bad env value":         {env: []string{"OVERLAY_SYNC_MAX_BYTES=lots"}, want: "OVERLAY_SYNC_MAX_BYTES"},
		"bad log level":         {args: []string{"--config-map", "c", "--expected-network", "n", "--expected-gateway", "g", "--expected-local-site", "s", "--log-level", "loud"}, want: "--log-level"},
		"stray argument":        {args: []string{"--config-map", "c", "extra"}, want: `unexpected argument "extra"`},
		"unknown flag":          {args: []string{"--no-such-flag"}, want: "no-such-flag"},
		"missing expected site": {args: []string{"--config-map", "c", "--expected-network", "n", "--expected-gateway", "g"}, want: "--expected-local-site is required"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			sidecar := start(t, testbin.Sidecar, tt.env, tt.args...)
			assert.Equal(t, 2, sidecar.Wait(t, 5*time.Second))
			assert.Contains(t, sidecar.Log(), tt.want)
		})
	}
}
