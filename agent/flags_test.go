package main

import (
	"bytes"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestFlagsReadTheEnvironmentAndTheCommandLineWins(t *testing.T) {
	env := map[string]string{
		"GRIDSYNC_AGENT_NAMESPACES":     "praxis, grid-system",
		"GRIDSYNC_AGENT_LEASE_DURATION": "30s",
		"GRIDSYNC_AGENT_LOG_LEVEL":      "debug",
		"POD_NAMESPACE":                 "agents",
	}
	var out bytes.Buffer
	c, err := parseFlags([]string{"--log-level", "warn"}, func(k string) string { return env[k] }, &out)
	require.NoError(t, err, out.String())
	assert.Equal(t, []string{"praxis", "grid-system"}, c.namespaces)
	assert.Equal(t, 30*time.Second, c.leaseDuration)
	assert.Equal(t, slog.LevelWarn, c.logLevel, "the command line wins")
	assert.Equal(t, "agents", c.leaderElectionNamespace, "the Lease defaults to the pod's namespace")
}

func TestFlagErrorsNameTheVariable(t *testing.T) {
	var out bytes.Buffer
	_, err := parseFlags(nil, func(k string) string {
		if k == "GRIDSYNC_AGENT_KUBE_API_BURST" {
			return "lots"
		}
		return ""
	}, &out)
	require.Error(t, err)
	assert.Contains(t, out.String(), `GRIDSYNC_AGENT_KUBE_API_BURST="lots" for --kube-api-burst`)
}

func TestProbeFlags(t *testing.T) {
	var out bytes.Buffer
	c, err := parseFlags([]string{"--probe-allow-destinations", "198.51.100.0/24, models.example.com", "--probe-secret-selector", "grid.praxis.fast/probe-credential=true"}, func(string) string { return "" }, &out)
	require.NoError(t, err, out.String())
	assert.Len(t, c.probeDestinations.AllowCIDRs, 1)
	assert.Equal(t, []string{"models.example.com"}, c.probeDestinations.AllowHostSuffixes)
	require.NotNil(t, c.probeSecretSelector)
	assert.Equal(t, "grid.praxis.fast/probe-credential=true", c.probeSecretSelector.String())

	c, err = parseFlags(nil, func(string) string { return "" }, &out)
	require.NoError(t, err)
	assert.Nil(t, c.probeSecretSelector, "off by default")

	for _, bad := range [][]string{{"--probe-allow-destinations", "192.0.2.1"}, {"--probe-secret-selector", "a in ("}} {
		_, err := parseFlags(bad, func(string) string { return "" }, &out)
		assert.Error(t, err, bad)
	}
}
