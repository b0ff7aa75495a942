package probe_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gridsync/gridsync/controller/probe"
)

// By default a probe never connects to loopback: the server on 127.0.0.1
// sees no request, whether the URL names the address or a name that
// resolves to it (checked at connect time, so DNS cannot get around it).
func TestProbesNeverDialLoopbackByDefault(t *testing.T) {
	srv := newServer(t, false)
	_, port, err := net.SplitHostPort(srv.Listener.Addr().String())
	require.NoError(t, err)
	for _, url := range []string{srv.URL + "/health", "http://localhost:" + port + "/health"} {
		p := probe.New(probe.Options{})
		ctx, cancel := context.WithCancel(context.Background())
		p.Ensure(ctx, "a", probe.Target{URL: url, Origin: url, Period: period, Token: token})
		waitFailures(t, p, "a", 2)
		assert.Equal(t, probe.OutcomeDestinationDenied, p.Health("a").LastError, url)
		cancel()
	}
	assert.Empty(t, srv.authHeaders(), "no request reached the loopback server")
}

// A host suffix on the allow-list never unlocks a denied range: a name
// can be pointed anywhere.
func TestAHostSuffixDoesNotUnlockLoopback(t *testing.T) {
	srv := newServer(t, false)
	_, port, err := net.SplitHostPort(srv.Listener.Addr().String())
	require.NoError(t, err)
	dest, err := probe.ParseDestinations([]string{"localhost"})
	require.NoError(t, err)
	p := probe.New(probe.Options{Destinations: dest})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p.Ensure(ctx, "a", probe.Target{URL: "http://localhost:" + port, Origin: "http://localhost:" + port, Period: period})
	waitFailures(t, p, "a", 1)
	assert.Equal(t, probe.OutcomeDestinationDenied, p.Health("a").LastError)
	assert.Empty(t, srv.authHeaders())
}

// The rule itself, on addresses no test may dial.
func TestDestinationRule(t *testing.T) {
	open := probe.Destinations{}
	restricted, err := probe.ParseDestinations([]string{"10.0.0.0/8", "example.com", "*.models.internal", "169.254.10.0/24"})
	require.NoError(t, err)
	tests := []struct {
		dest    probe.Destinations
		host    string
		addr    string
		allowed bool
	}{
		{open, "provider.example", "203.0.113.7", true},
		{open, "169.254.169.254", "169.254.169.254", false},          // cloud metadata
		{open, "metadata.google.internal", "169.254.169.254", false}, // by name
		{open, "x", "::ffff:169.254.169.254", false},                 // IPv4-mapped
		{open, "x", "fe80::1", false},
		{open, "x", "fd00:ec2::254", false},
		{open, "x", "100.100.100.200", false},
		{open, "x", "168.63.129.16", false},
		{open, "x", "127.0.0.53", false},
		{open, "x", "::1", false},
		{open, "x", "0.0.0.0", false},
		{open, "x", "224.0.0.1", false},
		{open, "x", "10.1.2.3", true}, // cluster addresses stay reachable without a list
		{restricted, "anything", "10.9.9.9", true},
		{restricted, "example.com", "203.0.113.7", true},
		{restricted, "api.example.com", "203.0.113.7", true},
		{restricted, "API.Example.COM.", "203.0.113.7", true},
		{restricted, "notexample.com", "203.0.113.7", false},
		{restricted, "gpu.models.internal", "192.0.2.1", true},
		{restricted, "example.com", "169.254.169.254", false}, // a suffix never unlocks metadata
		{restricted, "x", "169.254.10.5", true},               // a CIDR does, on purpose
		{restricted, "elsewhere.net", "192.0.2.1", false},
	}
	for _, tt := range tests {
		err := probe.CheckDestination(tt.dest, tt.host, netip.MustParseAddr(tt.addr))
		assert.Equal(t, tt.allowed, err == nil, "%s at %s (allow %+v)", tt.host, tt.addr, tt.dest)
	}
}

func TestParseDestinationsRefusesWhatIsNeitherACIDRNorASuffix(t *testing.T) {
	for _, bad := range []string{"10.0.0.0/33", "10.0.0.1", "[::1]", "*.", "fe80::1"} {
		_, err := probe.ParseDestinations([]string{bad})
		assert.Error(t, err, bad)
	}
	d, err := probe.ParseDestinations([]string{" 10.1.0.0/16 ", "", ".Example.com"})
	require.NoError(t, err)
	assert.Equal(t, []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16")}, d.AllowCIDRs)
	assert.Equal(t, []string{"example.com"}, d.AllowHostSuffixes)
}

// What a foreign server answers never reaches the status: only the class
// of its status code does.
func TestAFailureIsReportedAsAClosedOutcome(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusTeapot)
		_, _ = w.Write([]byte("internal-service-banner v1.2.3"))
	}))
	defer srv.Close()
	closed := httptest.NewServer(http.NotFoundHandler())
	closedURL := closed.URL
	closed.Close()
	p := newProber(nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p.Ensure(ctx, "teapot", probe.Target{URL: srv.URL, Origin: srv.URL, Period: period})
	p.Ensure(ctx, "refused", probe.Target{URL: closedURL, Origin: closedURL, Period: period})
	p.Ensure(ctx, "bad", probe.Target{URL: "http://%zz", Origin: "", Period: period})
	waitFailures(t, p, "teapot", 1)
	waitFailures(t, p, "refused", 1)
	waitFailures(t, p, "bad", 1)
	assert.Equal(t, probe.OutcomeClientError, p.Health("teapot").LastError)
	assert.Equal(t, probe.OutcomeConnectionRefused, p.Health("refused").LastError)
	assert.Equal(t, probe.OutcomeBadEndpoint, p.Health("bad").LastError)
	for _, name := range []string{"teapot", "refused", "bad"} {
		assert.NotContains(t, p.Health(name).LastError, "127.0.0.1")
		assert.NotContains(t, p.Health(name).LastError, "banner")
	}
}

// A token the agent must not send (its Secret does not match the probe
// Secret selector): the probe goes without it and says so.
func TestAWithheldTokenIsNotSentAndIsReported(t *testing.T) {
	srv := newServer(t, true)
	p := newProber(nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	withheld := func(context.Context) (string, error) { return "", probe.ErrTokenWithheld }
	p.Ensure(ctx, "a", probe.Target{URL: srv.URL, Origin: srv.URL, Period: period, Token: withheld})
	require.Eventually(t, func() bool { return p.Health("a").Probed }, 5*time.Second, 5*time.Millisecond)
	h := p.Health("a")
	assert.True(t, h.TokenWithheld)
	assert.Zero(t, h.ConsecutiveFailures, "the probe itself went ahead")
	for _, a := range srv.authHeaders() {
		assert.Empty(t, a)
	}
}

// Ensure replaces a running loop's token source on every reconcile while
// the loop probes: under -race this fails if the loop reads it unguarded.
func TestEnsureWhileProbingIsRaceFree(t *testing.T) {
	srv := newServer(t, true)
	p := newProber(nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	target := probe.Target{URL: srv.URL, Origin: srv.URL, Period: time.Millisecond}
	deadline := time.Now().Add(300 * time.Millisecond)
	for i := 0; time.Now().Before(deadline); i++ {
		suffix := strings.Repeat("x", i%3)
		target.Token = func(context.Context) (string, error) { return "token" + suffix, nil }
		p.Ensure(ctx, "a", target)
		time.Sleep(100 * time.Microsecond)
	}
	require.Eventually(t, func() bool { return len(srv.authHeaders()) > 10 }, 5*time.Second, 5*time.Millisecond)
}
