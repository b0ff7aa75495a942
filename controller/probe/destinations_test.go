package probe_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
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
