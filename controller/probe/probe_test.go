package probe_test

import (
	"context"
	"crypto/x509"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gridsync/gridsync/controller/probe"
	"github.com/gridsync/gridsync/controller/providerpolicy"
	"github.com/gridsync/gridsync/trust/endpointtls"
)

// period is short for quick tests, long enough that a probe (bounded by
// its period) still completes on a loaded machine under -race.
const period = 150 * time.Millisecond

// server answers with the status in *status and records the
// Authorization header of each request.
type server struct {
	*httptest.Server
	status atomic.Int32
	mu     sync.Mutex
	auth   []string
}

func newServer(t *testing.T, tls bool) *server {
	s := &server{}
	s.status.Store(http.StatusOK)
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.auth = append(s.auth, r.Header.Get("Authorization"))
		s.mu.Unlock()
		if code := int(s.status.Load()); code == http.StatusFound {
			http.Redirect(w, r, "/elsewhere", code)
		} else {
			w.WriteHeader(code)
		}
	})
	if tls {
		s.Server = httptest.NewTLSServer(handler)
	} else {
		s.Server = httptest.NewServer(handler)
	}
	t.Cleanup(s.Close)
	return s
}

func (s *server) authHeaders() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.auth...)
}

type notes struct {
	mu    sync.Mutex
	count int
}

func (n *notes) note(string) { n.mu.Lock(); n.count++; n.mu.Unlock() }
func (n *notes) get() int    { n.mu.Lock(); defer n.mu.Unlock(); return n.count }

func token(context.Context) (string, error) { return "s3cret-token", nil }

// loopback allows what the tests' servers listen on; by default probes
// never dial it.
var loopback = probe.Destinations{AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}

// newProber probes the test servers (httptest's TLS servers share one
// certificate) on loopback.
func newProber(notify func(string)) *probe.Prober {
	roots := x509.NewCertPool()
	roots.AddCert(testCert)
	return probe.New(probe.Options{Destinations: loopback, RootCAs: roots, Notify: notify})
}

var testCert = func() *x509.Certificate {
	srv := httptest.NewTLSServer(http.NotFoundHandler())
	defer srv.Close()
	return srv.Certificate()
}()

func waitFailures(t *testing.T, p *probe.Prober, name string, atLeast int) {
	t.Helper()
	require.Eventually(t, func() bool {
		h := p.Health(name)
		return h.Probed && h.ConsecutiveFailures >= atLeast
	}, 5*time.Second, 5*time.Millisecond)
}

func TestProberReportsLevelChangesOnly(t *testing.T) {
	srv := newServer(t, true)
	var n notes
	p := newProber(n.note)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p.Ensure(ctx, "a", probe.Target{URL: srv.URL + "/health", Origin: srv.URL, Period: period, Token: token})

	require.Eventually(t, func() bool { return p.Health("a").Probed }, 5*time.Second, 5*time.Millisecond)
	assert.Zero(t, p.Health("a").ConsecutiveFailures)
	assert.Equal(t, 1, n.get(), "the first result is a change")

	srv.status.Store(http.StatusServiceUnavailable)
	waitFailures(t, p, "a", 5)
	h := p.Health("a")
	assert.Equal(t, probe.OutcomeServerError, h.LastError)
	assert.Equal(t, 3, n.get(), "failing, then failed; later failures are no news")

	srv.status.Store(http.StatusOK)
	require.Eventually(t, func() bool { return p.Health("a").ConsecutiveFailures == 0 }, 5*time.Second, 5*time.Millisecond)
	assert.Equal(t, 4, n.get())
	assert.Empty(t, p.Health("a").LastError)
}

func TestProberDoesNotFollowRedirects(t *testing.T) {
	srv := newServer(t, true)
	srv.status.Store(http.StatusFound)
	p := newProber(nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p.Ensure(ctx, "a", probe.Target{URL: srv.URL + "/health", Origin: srv.URL, Period: period})
	waitFailures(t, p, "a", 2)
	assert.Equal(t, probe.OutcomeRedirect, p.Health("a").LastError)
	for _, a := range srv.authHeaders() {
		assert.Empty(t, a)
	}
}

func TestProberBoundsEachProbe(t *testing.T) {
	block := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-block:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(block)
	p := newProber(nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p.Ensure(ctx, "a", probe.Target{URL: srv.URL, Origin: srv.URL, Period: period})
	waitFailures(t, p, "a", 1)
	assert.Equal(t, probe.OutcomeTimeout, p.Health("a").LastError)
}

func TestProberSendsTheTokenOnlyOverHTTPSToTheProvidersOrigin(t *testing.T) {
	same := newServer(t, true)
	other := newServer(t, true)
	plain := newServer(t, false)
	tests := []struct {
		name      string
		srv       *server
		url       string
		origin    string
		wantToken bool
	}{
		{"https, same origin", same, same.URL + "/health", same.URL + "/v1", true},
		{"https, other origin", other, other.URL + "/health", same.URL, false},
		{"plain http, same origin", plain, plain.URL + "/health", plain.URL, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newProber(nil)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			p.Ensure(ctx, "a", probe.Target{URL: tt.url, Origin: tt.origin, Period: period, Token: token})
			require.Eventually(t, func() bool { return p.Health("a").Probed }, 5*time.Second, 5*time.Millisecond)
			p.Remove("a")
			headers := tt.srv.authHeaders()
			require.NotEmpty(t, headers)
			for _, h := range headers {
				if tt.wantToken {
					assert.Equal(t, "Bearer s3cret-token", h)
				} else {
					assert.Empty(t, h)
				}
			}
			assert.False(t, strings.Contains(p.Health("a").LastError, "s3cret"))
		})
	}
}

func TestProberRestartsWhenTheTargetChangesAndStopsOnRemove(t *testing.T) {
	bad := newServer(t, true)
	bad.status.Store(http.StatusInternalServerError)
	good := newServer(t, true)
	p := newProber(nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p.Ensure(ctx, "a", probe.Target{URL: bad.URL, Origin: bad.URL, Period: period})
	waitFailures(t, p, "a", 1)
	p.Ensure(ctx, "a", probe.Target{URL: good.URL, Origin: good.URL, Period: period})
	require.Eventually(t, func() bool { h := p.Health("a"); return h.Probed && h.ConsecutiveFailures == 0 }, 5*time.Second, 5*time.Millisecond)
	p.Remove("a")
	assert.False(t, p.Health("a").Probed)
	seen := len(good.authHeaders())
	time.Sleep(3 * period)
	assert.Equal(t, seen, len(good.authHeaders()), "no probe after Remove")
}

// A health check whose TLS cannot be used is not sent: the provider's
// health carries the refusal (what the probes found before stands), and
// no failure is counted.
func TestAHealthCheckThatCannotBeSentReportsItsRefusal(t *testing.T) {
	var requests atomic.Int64
	plain := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { requests.Add(1) }))
	t.Cleanup(plain.Close)
	p := newProber(nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tls := func(context.Context) (*endpointtls.Raw, error) { return &endpointtls.Raw{}, nil }
	p.Ensure(ctx, "a", probe.Target{URL: plain.URL + "/health", Origin: plain.URL, Period: period,
		Endpoint: &probe.Endpoint{Key: "HealthCheck/a", TLS: tls}})
	require.Eventually(t, func() bool { return p.Health("a").Refusal != "" }, 5*time.Second, 5*time.Millisecond)
	h := p.Health("a")
	assert.Equal(t, providerpolicy.RefusalPlaintext, h.Refusal)
	assert.Contains(t, h.RefusalMessage, "TLS is configured")
	assert.Zero(t, h.ConsecutiveFailures)
	assert.Zero(t, requests.Load())
}
