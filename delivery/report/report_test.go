package report

import (
	"bufio"
	"crypto/tls"
	"encoding/json"
	"encoding/pem"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gridsync/gridsync/shared/h3fallback"
)

var rev = strings.Repeat("c", 64)

func TestValidateRefusesMalformedReports(t *testing.T) {
	good := Report{Namespace: "gw", Gateway: "edge", Pod: "edge-7d9f-x2", Revision: rev, ContentDigest: rev, State: StateReady}
	require.NoError(t, good.Validate())
	require.NoError(t, Report{Namespace: "gw", Gateway: "edge", Pod: "p", State: StateCold}.Validate(), "cold, no revision yet")
	for name, mutate := range map[string]func(*Report){
		"namespace":       func(r *Report) { r.Namespace = "Not_A_Label" },
		"gateway":         func(r *Report) { r.Gateway = "" },
		"pod":             func(r *Report) { r.Pod = "a/b" },
		"revision":        func(r *Report) { r.Revision = "abc" },
		"digest mismatch": func(r *Report) { r.ContentDigest = strings.Repeat("d", 64) },
		"state":           func(r *Report) { r.State = "fine" },
		"ready, nothing":  func(r *Report) { r.Revision, r.ContentDigest = "", "" },
		"reason":          func(r *Report) { r.LastRejectionReason = "has spaces and {json}" },
		"reads":           func(r *Report) { r.Reads = []string{"plain", "brotli"} },
		"reads too many":  func(r *Report) { r.Reads = []string{"plain", "zstd", "plain", "zstd", "plain"} },
		"encoding":        func(r *Report) { r.Encoding = "gzip" },
		"max bytes":       func(r *Report) { r.MaxBytes = -1 },
		"max bytes huge":  func(r *Report) { r.MaxBytes = 1 << 30 },
	} {
		r := good
		mutate(&r)
		assert.Error(t, r.Validate(), name)
	}
}

// A heartbeat is sent for an unchanged state only: a change of any field
// but the time written counts as a change.
func TestSameStateSeesEveryField(t *testing.T) {
	written := time.Unix(1.8e9, 0)
	base := Report{Namespace: "gw", Gateway: "edge", Pod: "p", Revision: rev, ContentDigest: rev, WrittenAt: &written,
		State: StateReady, LastRejectionReason: "oversized", Reads: []string{FormPlain, FormZstd}, Encoding: EncodingAuto, MaxBytes: 1 << 20}
	again := base
	again.WrittenAt = new(time.Time)
	*again.WrittenAt = written
	again.Reads = slices.Clone(base.Reads)
	require.True(t, sameState(base, again))
	v := reflect.ValueOf(&base).Elem()
	for i := range v.NumField() {
		changed := base
		changed.Reads = slices.Clone(base.Reads)
		f := reflect.ValueOf(&changed).Elem().Field(i)
		switch f.Kind() {
		case reflect.String:
			f.SetString(f.String() + "x")
		case reflect.Int:
			f.SetInt(f.Int() + 1)
		case reflect.Slice:
			f.Set(reflect.ValueOf([]string{FormPlain}))
		case reflect.Pointer:
			later := written.Add(time.Second)
			f.Set(reflect.ValueOf(&later))
		default:
			t.Fatalf("field %s of kind %s: teach this test to change it", v.Type().Field(i).Name, f.Kind())
		}
		assert.False(t, sameState(base, changed), "a change of %s", v.Type().Field(i).Name)
	}
}

// agent is an HTTPS (TCP only) stand-in for the agent's listener that
// records what it is sent.
type agent struct {
	srv      *httptest.Server
	caFile   string
	mu       sync.Mutex
	got      []Report
	tokens   []string
	types    []string
	status   int
	requests int
	// endAfter, when set, ends the next stream after that many reports,
	// as an agent's restart or a lost connection does, and is cleared: a
	// stream opened again before the test clears it would otherwise end
	// after its first report too, within a second of its opening, which
	// the reporter leaves to its usual schedule.
	endAfter int
}

func newAgent(t *testing.T) *agent {
	a := &agent{status: http.StatusAccepted}
	a.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// As the agent does: a report a line, as they come; a refusal
		// answers at once and ends the stream.
		a.mu.Lock()
		a.requests++
		a.mu.Unlock()
		lines := bufio.NewScanner(r.Body)
		read := 0
		for lines.Scan() {
			read++
			var rep Report
			_ = json.Unmarshal(lines.Bytes(), &rep)
			a.mu.Lock()
			a.got = append(a.got, rep)
			a.tokens = append(a.tokens, r.Header.Get("Authorization"))
			a.types = append(a.types, r.Header.Get("Content-Type"))
			status := a.status
			a.mu.Unlock()
			if status != http.StatusAccepted {
				w.WriteHeader(status)
				return
			}
			a.mu.Lock()
			end := a.endAfter > 0 && read >= a.endAfter
			if end {
				a.endAfter = 0
			}
			a.mu.Unlock()
			if end {
				break
			}
		}
		w.WriteHeader(http.StatusAccepted)
	}))
	a.srv.EnableHTTP2 = true
	a.srv.TLS = &tls.Config{MinVersion: tls.VersionTLS13}
	a.srv.StartTLS()
	t.Cleanup(a.srv.Close)
	a.caFile = filepath.Join(t.TempDir(), "ca.crt")
	require.NoError(t, os.WriteFile(a.caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: a.srv.Certificate().Raw}), 0o600))
	return a
}

func (a *agent) reports() []Report {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]Report(nil), a.got...)
}

// The reporter reports at once, on each change and on its interval; with
// no HTTP/3 to be had it falls back to HTTPS; the token file is read at
// every send.
func TestReporterSendsAtOnceOnChangeAndOnItsInterval(t *testing.T) {
	a := newAgent(t)
	tokenFile := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(tokenFile, []byte("token-1\n"), 0o600))
	var mu sync.Mutex
	state := Report{Namespace: "gw", Gateway: "edge", Pod: "p", State: StateCold}
	reg := prometheus.NewRegistry()
	r, err := NewReporter(ReporterOptions{
		URL: a.srv.URL, TokenFile: tokenFile, CAFile: a.caFile, ServerName: "example.com", Interval: 300 * time.Millisecond, Timeout: time.Second,
		Snapshot: func() Report { mu.Lock(); defer mu.Unlock(); return state }, Registerer: reg,
	})
	require.NoError(t, err)
	ctx := t.Context()
	go r.Run(ctx)
	require.Eventually(t, func() bool { return len(a.reports()) >= 1 }, 5*time.Second, 10*time.Millisecond, "at once")
	assert.Equal(t, StateCold, a.reports()[0].State)

	mu.Lock()
	state = Report{Namespace: "gw", Gateway: "edge", Pod: "p", Revision: rev, ContentDigest: rev, State: StateReady}
	mu.Unlock()
	require.NoError(t, os.WriteFile(tokenFile, []byte("token-2"), 0o600))
	r.Notify()
	require.Eventually(t, func() bool {
		got := a.reports()
		return got[len(got)-1].Revision == rev
	}, 5*time.Second, 10*time.Millisecond, "on a change")
	a.mu.Lock()
	assert.Equal(t, "Bearer token-2", a.tokens[len(a.tokens)-1], "the rotated token")
	a.mu.Unlock()
	n := len(a.reports())
	require.Eventually(t, func() bool { return len(a.reports()) >= n+2 }, 5*time.Second, 20*time.Millisecond, "heartbeats")
	assert.Positive(t, testutil.ToFloat64(r.sent.WithLabelValues("https", "accepted")))
	a.mu.Lock()
	assert.Equal(t, StreamContentType, a.types[0], "reports go as a stream")
	assert.Equal(t, 2, a.requests, "one request per token: the reports are lines of it")
	a.mu.Unlock()
	assert.Positive(t, testutil.ToFloat64(r.sent.WithLabelValues("h3", "failed")), "HTTP/3 was tried first")
}

// Notify never blocks, whatever the reporter is doing.
func TestNotifyNeverBlocks(t *testing.T) {
	r, err := NewReporter(ReporterOptions{URL: "https://127.0.0.1:1", TokenFile: "/nonexistent", Snapshot: func() Report { return Report{} }})
	require.NoError(t, err)
	done := make(chan struct{})
	go func() {
		for range 100000 {
			r.Notify()
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Notify blocked with nobody running the reporter")
	}
}

// A refused report is retried with a backoff, not hammered.
func TestRefusedReportsBackOff(t *testing.T) {
	a := newAgent(t)
	a.status = http.StatusForbidden
	tokenFile := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(tokenFile, []byte("t"), 0o600))
	r, err := NewReporter(ReporterOptions{
		URL: a.srv.URL, TokenFile: tokenFile, CAFile: a.caFile, ServerName: "example.com", Interval: 4 * time.Second, Timeout: time.Second,
		Snapshot: func() Report { return Report{Namespace: "gw", Gateway: "edge", Pod: "p", State: StateCold} },
	})
	require.NoError(t, err)
	go r.Run(t.Context())
	for range 50 {
		r.Notify()
		time.Sleep(40 * time.Millisecond)
	}
	got := len(a.reports())
	assert.GreaterOrEqual(t, got, 1)
	assert.LessOrEqual(t, got, 3, "2 s of refusals with a doubling backoff from 1 s, however often nudged")
}

// A stream the agent or the network ends is opened again at once, and the
// latest state goes on it: it does not wait for the next heartbeat (the
// rollout benchmark saw streams end on an idle timeout and the round never
// settle).
func TestALostStreamIsReopenedAtOnce(t *testing.T) {
	a := newAgent(t)
	tokenFile := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(tokenFile, []byte("token-1\n"), 0o600))
	var mu sync.Mutex
	state := Report{Namespace: "gw", Gateway: "edge", Pod: "p", State: StateCold}
	r, err := NewReporter(ReporterOptions{
		URL: a.srv.URL, TokenFile: tokenFile, CAFile: a.caFile, ServerName: "example.com", Interval: time.Minute, Timeout: time.Second,
		Snapshot: func() Report { mu.Lock(); defer mu.Unlock(); return state }, Registerer: prometheus.NewRegistry(),
	})
	require.NoError(t, err)
	go r.Run(t.Context())
	require.Eventually(t, func() bool { return len(a.reports()) >= 1 }, 5*time.Second, 10*time.Millisecond)
	// The agent ends the stream after a while: the reporter opens the
	// next and sends its state again at once, far inside its one-minute
	// interval.
	time.Sleep(1100 * time.Millisecond)
	a.mu.Lock()
	a.endAfter = 1
	a.mu.Unlock()
	mu.Lock()
	state.State = StateStale
	mu.Unlock()
	r.Notify()
	start := time.Now()
	require.Eventually(t, func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		return a.requests >= 2
	}, 10*time.Second, 10*time.Millisecond, "the ended stream is opened again")
	assert.Less(t, time.Since(start), 5*time.Second)

	mu.Lock()
	state = Report{Namespace: "gw", Gateway: "edge", Pod: "p", Revision: rev, ContentDigest: rev, State: StateReady}
	mu.Unlock()
	r.Notify()
	require.Eventually(t, func() bool {
		got := a.reports()
		return got[len(got)-1].Revision == rev
	}, 5*time.Second, 10*time.Millisecond, "the latest state arrives")
}

// HTTP/3 failing where HTTPS answers starts the fallback: the next
// report goes over HTTPS first. Neither answering (nothing listens) is an
// agent away, not a path without UDP: the next report tries HTTP/3
// first again.
func TestTheFallbackToHTTPSIsForAPathWithoutQUICOnly(t *testing.T) {
	a := newAgent(t)
	tokenFile := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(tokenFile, []byte("token-1\n"), 0o600))
	newReporter := func(url string) *Reporter {
		r, err := NewReporter(ReporterOptions{
			URL: url, TokenFile: tokenFile, CAFile: a.caFile, ServerName: "example.com", Interval: time.Minute, Timeout: time.Second,
			Snapshot: func() Report { return Report{Namespace: "gw", Gateway: "edge", Pod: "p", State: StateCold} }, Registerer: prometheus.NewRegistry(),
		})
		require.NoError(t, err)
		t.Cleanup(r.closeStream)
		return r
	}
	rep := Report{Namespace: "gw", Gateway: "edge", Pod: "p", State: StateCold}

	// The agent's HTTPS only: nothing on its UDP port.
	r := newReporter(a.srv.URL)
	require.NoError(t, r.send(t.Context(), rep))
	assert.Equal(t, h3fallback.HTTPS, r.fallback.First("", time.Now()), "HTTP/3 failed where HTTPS answered")

	// Nothing listening at all.
	ln, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
	require.NoError(t, err)
	away := "https://" + ln.Addr().String()
	require.NoError(t, ln.Close())
	r = newReporter(away)
	require.Error(t, r.send(t.Context(), rep))
	assert.Equal(t, h3fallback.H3, r.fallback.First("", time.Now()), "an agent away starts no fallback")
}
