package syncflags_test

import (
	"bytes"
	"errors"
	"flag"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gridsync/gridsync/shared/publish"
	"github.com/gridsync/gridsync/shared/syncflags"
)

var required = []string{"--config-map", "cm", "--expected-network", "net", "--expected-gateway", "gw", "--expected-local-site", "site"}

func env(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

func TestDefaultsMatchTheUpstreamSidecar(t *testing.T) {
	var out bytes.Buffer
	c, err := syncflags.Parse(syncflags.Sidecar, "gridsync-sidecar", required, env(nil), &out)
	require.NoError(t, err, out.String())
	assert.Equal(t, "grid-system", c.Namespace)
	assert.Equal(t, "routing-overlay.json", c.DataKey)
	assert.Equal(t, "/run/praxis-routing/routing-overlay.json", c.Output)
	assert.Equal(t, 1048576, c.MaxBytes)
	assert.Equal(t, "0.0.0.0:9091", c.HealthAddr)
	assert.Equal(t, "grid-system", c.ExpectedNamespace, "defaults to --namespace")
	assert.Equal(t, slog.LevelInfo, c.LogLevel)
	assert.Zero(t, c.ExpireAfter)
	assert.False(t, c.Once)
}

func TestFlagsWinOverEnvironmentWhichWinsOverDefaults(t *testing.T) {
	vars := map[string]string{
		"OVERLAY_SYNC_NAMESPACE":    "from-env",
		"OVERLAY_SYNC_CONFIGMAP":    "cm-env",
		"OVERLAY_SYNC_DATA_KEY":     "key-env",
		"OVERLAY_SYNC_OUTPUT":       "/env/out.json",
		"OVERLAY_SYNC_MAX_BYTES":    "2048",
		"OVERLAY_SYNC_HEALTH_ADDR":  "127.0.0.1:1",
		"OVERLAY_SYNC_EXPIRE_AFTER": "5m",
		"OVERLAY_SYNC_LOG_LEVEL":    "debug",
	}
	var out bytes.Buffer
	c, err := syncflags.Parse(syncflags.Sidecar, "gridsync-sidecar", append([]string{"--namespace", "from-flag"}, required...), env(vars), &out)
	require.NoError(t, err, out.String())
	assert.Equal(t, "from-flag", c.Namespace)
	assert.Equal(t, "cm", c.ConfigMap, "the flag wins")
	assert.Equal(t, "key-env", c.DataKey)
	assert.Equal(t, "/env/out.json", c.Output)
	assert.Equal(t, 2048, c.MaxBytes)
	assert.Equal(t, "127.0.0.1:1", c.HealthAddr)
	assert.Equal(t, 5*time.Minute, c.ExpireAfter)
	assert.Equal(t, slog.LevelDebug, c.LogLevel)
	assert.Equal(t, "from-flag", c.ExpectedNamespace)
}

func TestErrorsNameTheFlag(t *testing.T) {
	tests := map[string]struct {
		args []string
		vars map[string]string
		want string
	}{
		"config map":                 {args: required[2:], want: "--config-map is required (or set OVERLAY_SYNC_CONFIGMAP)"},
		"local site":                 {args: required[:6], want: "--expected-local-site is required"},
		"max bytes":                  {args: append([]string{"--max-bytes", "0"}, required...), want: "--max-bytes must be between 1 and 67108864, got 0"},
		"max bytes over the ceiling": {args: append([]string{"--max-bytes", "67108865"}, required...), want: "--max-bytes must be between 1 and 67108864"},
		"overlay encoding":           {args: append([]string{"--overlay-encoding", "gzip"}, required...), want: `--overlay-encoding must be auto, zstd or plain, got "gzip"`},
		"expire after":               {args: append([]string{"--expire-after", "-1s"}, required...), want: "--expire-after must be 0 (off) or at least 2m0s"},
		"expire too soon":            {args: append([]string{"--expire-after", "30s"}, required...), want: "about once a minute"},
		"idle timeout":               {args: append([]string{"--watch-idle-timeout", "0s"}, required...), want: "--watch-idle-timeout must be positive"},
		"log level":                  {args: append([]string{"--log-level", "chatty"}, required...), want: "--log-level"},
		"environment":                {args: required, vars: map[string]string{"OVERLAY_SYNC_MAX_BYTES": "big"}, want: "OVERLAY_SYNC_MAX_BYTES"},
		"positional":                 {args: append(required, "extra"), want: `unexpected argument "extra"`},
		"init has no -h":             {args: append([]string{"--health-addr", ":1"}, required...), want: "health-addr"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			mode := syncflags.Sidecar
			if name == "init has no -h" {
				mode = syncflags.Init
			}
			var out bytes.Buffer
			_, err := syncflags.Parse(mode, "bin", tt.args, env(tt.vars), &out)
			require.Error(t, err)
			assert.Contains(t, out.String()+err.Error(), tt.want)
		})
	}
}

func TestHelpIsNotAnError(t *testing.T) {
	var out bytes.Buffer
	_, err := syncflags.Parse(syncflags.Init, "gridsync-init", []string{"-h"}, env(nil), &out)
	assert.True(t, errors.Is(err, flag.ErrHelp))
	assert.Contains(t, out.String(), "-timeout")
	assert.Contains(t, out.String(), "$OVERLAY_SYNC_CONFIGMAP")
}

// The upstream sidecar's environment: OVERLAY_SYNC_ONCE, and RUST_LOG as
// the level when nothing of ours says otherwise.
func TestUpstreamOnceAndRustLog(t *testing.T) {
	var out bytes.Buffer
	c, err := syncflags.Parse(syncflags.Sidecar, "gridsync-sidecar", required, env(map[string]string{"OVERLAY_SYNC_ONCE": "true"}), &out)
	require.NoError(t, err, out.String())
	assert.True(t, c.Once)

	for value, want := range map[string]slog.Level{
		"debug":                       slog.LevelDebug,
		"TRACE":                       slog.LevelDebug,
		"warn":                        slog.LevelWarn,
		"error,hyper=debug":           slog.LevelError,
		"info,overlay_sync=debug":     slog.LevelDebug,
		"overlay_sync=warn,kube=info": slog.LevelWarn,
		"nonsense":                    slog.LevelInfo,
	} {
		c, err := syncflags.Parse(syncflags.Sidecar, "gridsync-sidecar", required, env(map[string]string{"RUST_LOG": value}), &out)
		require.NoError(t, err)
		assert.Equal(t, want, c.LogLevel, "RUST_LOG=%s", value)
	}
	c, err = syncflags.Parse(syncflags.Sidecar, "gridsync-sidecar", required, env(map[string]string{"RUST_LOG": "debug", "OVERLAY_SYNC_LOG_LEVEL": "error"}), &out)
	require.NoError(t, err)
	assert.Equal(t, slog.LevelError, c.LogLevel, "our variable wins")
	c, err = syncflags.Parse(syncflags.Sidecar, "gridsync-sidecar", append([]string{"--log-level", "warn"}, required...), env(map[string]string{"RUST_LOG": "debug"}), &out)
	require.NoError(t, err)
	assert.Equal(t, slog.LevelWarn, c.LogLevel, "the flag wins")
}

// --fsync takes auto (the default), always or never, from the flag or
// OVERLAY_SYNC_FSYNC, for both binaries; anything else is refused by name.
func TestFsyncMode(t *testing.T) {
	for _, mode := range []syncflags.Mode{syncflags.Sidecar, syncflags.Init} {
		var out bytes.Buffer
		c, err := syncflags.Parse(mode, "bin", required, env(nil), &out)
		require.NoError(t, err, out.String())
		assert.Equal(t, publish.SyncAuto, c.Fsync)
		assert.Equal(t, publish.SyncAuto, c.SyncOptions().Fsync)
		c, err = syncflags.Parse(mode, "bin", required, env(map[string]string{"OVERLAY_SYNC_FSYNC": "never"}), &out)
		require.NoError(t, err, out.String())
		assert.Equal(t, publish.SyncNever, c.Fsync)
		c, err = syncflags.Parse(mode, "bin", append([]string{"--fsync", "always"}, required...), env(map[string]string{"OVERLAY_SYNC_FSYNC": "never"}), &out)
		require.NoError(t, err, out.String())
		assert.Equal(t, publish.SyncAlways, c.Fsync)
		_, err = syncflags.Parse(mode, "bin", append([]string{"--fsync", "sometimes"}, required...), env(nil), &out)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "--fsync")
	}
}

// A certificate path without its key path, or the reverse, is refused at
// start, naming the flag that is missing (and its variable): never a
// sidecar that starts without the identity it was meant to publish.
func TestAnIdentityCertificateWithoutItsKeyIsRefused(t *testing.T) {
	for name, tt := range map[string]struct {
		args []string
		vars map[string]string
		want string
	}{
		"certificate, no key":                 {args: []string{"--identity-cert", "/id/tls.crt", "--identity-dir", "/out/id"}, want: "--identity-key is required (or set OVERLAY_SYNC_IDENTITY_KEY)"},
		"key, no certificate":                 {args: []string{"--identity-key", "/id/tls.key", "--identity-dir", "/out/id"}, want: "--identity-cert is required (or set OVERLAY_SYNC_IDENTITY_CERT)"},
		"certificate by its variable, no key": {vars: map[string]string{"OVERLAY_SYNC_IDENTITY_CERT": "/id/tls.crt", "OVERLAY_SYNC_IDENTITY_DIR": "/out/id"}, want: "--identity-key is required"},
	} {
		t.Run(name, func(t *testing.T) {
			var out bytes.Buffer
			_, err := syncflags.Parse(syncflags.Sidecar, "bin", append(tt.args, required...), env(tt.vars), &out)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
	var out bytes.Buffer
	_, err := syncflags.Parse(syncflags.Sidecar, "bin", append([]string{"--identity-cert", "/id/tls.crt", "--identity-key", "/id/tls.key", "--identity-dir", "/out/id"}, required...), env(nil), &out)
	require.NoError(t, err, "both, with the folder, start")
}
