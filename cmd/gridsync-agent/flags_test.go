package main

import (
	"bytes"
	"log/slog"
	"maps"
	"strings"
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

// The scraper ServiceAccount is a name in the agent's namespace, or
// namespace/name; anything else is refused.
func TestScraperServiceAccountFlag(t *testing.T) {
	var out bytes.Buffer
	env := func(k string) string {
		if k == "POD_NAMESPACE" {
			return "grid-system"
		}
		return ""
	}
	c, err := parseFlags([]string{"--scraper-service-account", "gridsync-agent-scraper"}, env, &out)
	require.NoError(t, err, out.String())
	assert.Equal(t, "grid-system/gridsync-agent-scraper", c.scraperAccount.String())
	c, err = parseFlags([]string{"--scraper-service-account", "monitoring/scraper"}, env, &out)
	require.NoError(t, err, out.String())
	assert.Equal(t, "monitoring/scraper", c.scraperAccount.String())
	c, err = parseFlags(nil, env, &out)
	require.NoError(t, err)
	assert.Empty(t, c.scraperAccount.Name, "none by default")
	for _, bad := range []string{"Not_A_Name", "a/b/c", "/x", "x/"} {
		_, err := parseFlags([]string{"--scraper-service-account", bad}, env, &out)
		assert.Error(t, err, bad)
	}
}

func TestSwimFlagsReadTheReferencesVariables(t *testing.T) {
	env := map[string]string{
		"GRID_SWIM_BIND_ADDR":                "127.0.0.1:7946",
		"GRID_SWIM_ADVERTISE_ADDR":           "agent.grid.test:7946",
		"GRID_SWIM_SITE_NAME":                "site-a",
		"GRID_SWIM_SEEDS":                    "127.0.0.2:7946, [::1]:7946",
		"GRID_SWIM_REQUIRE_KEY":              "false",
		"GRID_SWIM_ENCRYPT_KEY":              strings.Repeat("ab", 32),
		"GRID_GATEWAY_SERVICE_NAME":          "provider-gateway",
		"GRID_GATEWAY_PORT":                  "8443",
		"GRID_GATEWAY_DISCOVERY_INTERVAL_MS": "2500",
		"POD_NAMESPACE":                      "praxis-system",
	}
	var out bytes.Buffer
	c, err := parseFlags(nil, func(k string) string { return env[k] }, &out)
	require.NoError(t, err, out.String())
	assert.True(t, c.swim.enabled())
	assert.Equal(t, "site-a", c.swim.site)
	assert.Equal(t, "agent.grid.test:7946", c.swim.advertiseAddr)
	assert.Equal(t, []string{"127.0.0.2:7946", "[::1]:7946"}, c.swim.seeds)
	assert.False(t, c.swim.requireKey)
	assert.Len(t, c.swim.key, 32)
	assert.Equal(t, 5*time.Second, c.swim.probeInterval, "the reference's timings")
	assert.Equal(t, 3*time.Second, c.swim.probeTimeout)
	assert.Equal(t, 3, c.swim.suspectPeriods)
	assert.Equal(t, "provider-gateway", c.gateway.serviceName)
	assert.Equal(t, "praxis-system", c.gateway.serviceNamespace)
	assert.Equal(t, 8443, c.gateway.port)
	assert.Equal(t, 2500*time.Millisecond, c.gateway.interval)
}

func TestSwimFlagErrors(t *testing.T) {
	for name, env := range map[string]map[string]string{
		"no site name":        {"GRID_SWIM_BIND_ADDR": "127.0.0.1:7946"},
		"site not a label":    {"GRID_SWIM_BIND_ADDR": "127.0.0.1:7946", "GRID_SWIM_SITE_NAME": "Site_A"},
		"malformed key":       {"GRID_SWIM_BIND_ADDR": "127.0.0.1:7946", "GRID_SWIM_SITE_NAME": "a", "GRID_SWIM_ENCRYPT_KEY": "secret-value-here"},
		"uppercase key":       {"GRID_SWIM_BIND_ADDR": "127.0.0.1:7946", "GRID_SWIM_SITE_NAME": "a", "GRID_SWIM_ENCRYPT_KEY": strings.Repeat("AB", 32)},
		"key without SWIM":    {"GRID_SWIM_ENCRYPT_KEY": strings.Repeat("ab", 32)},
		"timeout too long":    {"GRID_SWIM_BIND_ADDR": "127.0.0.1:7946", "GRID_SWIM_SITE_NAME": "a", "GRIDSYNC_AGENT_SWIM_PROBE_TIMEOUT": "6s"},
		"service without pod": {"GRID_SWIM_BIND_ADDR": "127.0.0.1:7946", "GRID_SWIM_SITE_NAME": "a", "GRIDSYNC_AGENT_SWIM_SERVICE_NAME": "grid-swim"},
		"bad interval":        {"GRID_GATEWAY_DISCOVERY_INTERVAL_MS": "soon"},
	} {
		t.Run(name, func(t *testing.T) {
			var out bytes.Buffer
			_, err := parseFlags(nil, func(k string) string { return env[k] }, &out)
			require.Error(t, err)
			assert.NotContains(t, out.String(), "secret-value-here", "a key is never echoed")
		})
	}
}

// The chart's signals arguments parse; the listener refuses to start
// without the site identity or with caps that leave peers no room.
func TestSignalsFlags(t *testing.T) {
	env := func(k string) string {
		return map[string]string{"GRID_SWIM_SITE_NAME": "site-s", "POD_IP": "127.0.0.3"}[k]
	}
	chart := []string{"--signals-addr=:9443", "--signals-cert=/etc/gridsync/site/tls.crt", "--signals-key=/etc/gridsync/site/tls.key",
		"--signals-ca=/etc/gridsync/site/ca.crt", "--signals-peer-naming=spiffe", "--signals-max-connections=256", "--signals-gateway-reserved=8",
		"--signals-per-site-connections=4", "--signals-handshake-rate=20", "--signals-handshake-burst=40", "--signals-max-connection-age=5m",
		"--signals-write-timeout=10s", "--report-audience=gridsync-agent", "--report-silent-after=90s", "--signals-service-name=sig-gridsync-agent-signals"}
	var out bytes.Buffer
	c, err := parseFlags(chart, env, &out)
	require.NoError(t, err, out.String())
	assert.True(t, c.signals.enabled())
	assert.True(t, c.signals.spiffe)
	assert.Equal(t, 4, c.signals.perSite)
	assert.Equal(t, "127.0.0.3", c.signals.podIP)
	assert.Equal(t, "sig-gridsync-agent-signals.grid-system.svc:9443", signalsServiceAddress(c),
		"what an embedded gateway's serving config polls by default")

	for name, args := range map[string][]string{
		"no identity":    {"--signals-addr=:9443"},
		"no peer room":   append(append([]string{}, chart...), "--signals-max-connections=8"),
		"unknown naming": append(append([]string{}, chart...), "--signals-peer-naming=cn"),
		"no site":        {"--signals-addr=:9443", "--signals-cert=a", "--signals-key=b", "--signals-ca=c"},
	} {
		e := env
		if name == "no site" {
			e = func(string) string { return "" }
		}
		out.Reset()
		_, err := parseFlags(args, e, &out)
		assert.Error(t, err, name)
	}
}

// --metrics-tls moves /metrics to a TLS port of its own; client
// certificates are asked for only there.
func TestMetricsTLSFlags(t *testing.T) {
	var out bytes.Buffer
	none := func(string) string { return "" }
	c, err := parseFlags([]string{"--metrics-tls=/etc/gridsync/metrics-tls", "--metrics-addr=:9444", "--metrics-client-auth"}, none, &out)
	require.NoError(t, err)
	assert.Equal(t, metricsTLSConfig{dir: "/etc/gridsync/metrics-tls", addr: ":9444", clientAuth: true}, c.metricsTLS)
	assert.True(t, c.metricsTLS.enabled())

	c, err = parseFlags(nil, none, &out)
	require.NoError(t, err)
	assert.False(t, c.metricsTLS.enabled(), "plain /metrics on the health port by default")

	_, err = parseFlags([]string{"--metrics-client-auth"}, none, &out)
	require.Error(t, err)
	assert.Contains(t, out.String(), "--metrics-client-auth needs --metrics-tls")
}

// The listener's certificate path without its key path, or the reverse,
// is refused at start with a message that names the flags.
func TestASignalsCertificateWithoutItsKeyIsRefusedNamingTheFlags(t *testing.T) {
	env := func(k string) string { return map[string]string{"POD_IP": "127.0.0.3"}[k] }
	for name, args := range map[string][]string{
		"certificate, no key": {"--signals-addr=:9443", "--site-name=east", "--signals-cert=/site/tls.crt", "--signals-ca=/site/ca.crt"},
		"key, no certificate": {"--signals-addr=:9443", "--site-name=east", "--signals-key=/site/tls.key", "--signals-ca=/site/ca.crt"},
	} {
		var out bytes.Buffer
		_, err := parseFlags(args, env, &out)
		require.Error(t, err, name)
		assert.Contains(t, out.String(), "--signals-addr needs --signals-cert, --signals-key and --signals-ca", name)
	}
}

// GRID_GATEWAY_DISCOVERY_ENABLED=false stops the Service lookups, while
// an explicit GRID_GATEWAY_ADDRESS still wins and is advertised, with
// discovery on or off; one the other sites would refuse does not stop the
// agent, and is not advertised.
func TestGatewayDiscoveryOffStopsLookupsAndAnExplicitAddressWins(t *testing.T) {
	base := map[string]string{"GRID_SWIM_BIND_ADDR": "127.0.0.1:7946", "GRID_SWIM_SITE_NAME": "site-a",
		"GRID_GATEWAY_SERVICE_NAME": "provider-gateway", "POD_NAMESPACE": "praxis-system"}
	for name, tt := range map[string]struct {
		env      map[string]string
		explicit string
		discover bool
		refused  bool
	}{
		"discovery by default":               {discover: true},
		"discovery off":                      {env: map[string]string{"GRID_GATEWAY_DISCOVERY_ENABLED": "false"}},
		"discovery off, an explicit address": {env: map[string]string{"GRID_GATEWAY_DISCOVERY_ENABLED": "false", "GRID_GATEWAY_ADDRESS": "gw.example.com:8443"}, explicit: "gw.example.com:8443"},
		"discovery on, an explicit address":  {env: map[string]string{"GRID_GATEWAY_ADDRESS": "gw.example.com:8443"}, explicit: "gw.example.com:8443"},
		// Any non-empty string is accepted, as the reference has it; one
		// the other sites would refuse is not advertised, nor discovered.
		"discovery on, an address the other sites refuse": {env: map[string]string{"GRID_GATEWAY_ADDRESS": "gw.example.com"}, refused: true},
	} {
		env := map[string]string{}
		maps.Copy(env, base)
		maps.Copy(env, tt.env)
		var out bytes.Buffer
		c, err := parseFlags(nil, func(k string) string { return env[k] }, &out)
		require.NoError(t, err, "%s: %s", name, out.String())
		explicit, discover := c.gateway.source()
		assert.Equal(t, tt.explicit, explicit, name)
		assert.Equal(t, tt.discover, discover, name)
		if tt.refused {
			assert.Contains(t, c.gateway.refused, "GRID_GATEWAY_ADDRESS", name)
		} else {
			assert.Empty(t, c.gateway.refused, name)
		}
	}
}

// A port by number and a port by name are two answers to one question:
// both are refused, naming them.
func TestGatewayPortByNumberAndByNameIsRefused(t *testing.T) {
	var out bytes.Buffer
	_, err := parseFlags([]string{"--gateway-port", "8443", "--gateway-port-name", "https"}, func(string) string { return "" }, &out)
	require.Error(t, err)
	assert.Contains(t, out.String(), "--gateway-port and --gateway-port-name both name the advertised port")
	c, err := parseFlags([]string{"--gateway-port-name", "https"}, func(string) string { return "" }, &out)
	require.NoError(t, err)
	assert.Equal(t, "https", c.gateway.portName)
}
