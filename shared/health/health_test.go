package health_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gridsync/gridsync/shared/health"

	"github.com/gridsync/gridsync/test/testnet"
)

func TestEndpointsFollowTheChecks(t *testing.T) {
	ready, started := false, false
	checks := health.Checks{
		Ready:   func() (bool, string) { return ready, "no valid overlay on disk yet" },
		Started: func() bool { return started },
		Status:  func() any { return map[string]any{"state": "cold"} },
	}
	srv := httptest.NewServer(health.Handler(checks, health.NewRegistry("gridsync-test", "v0")))
	defer srv.Close()
	get := func(path string) (int, string, http.Header) {
		req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, srv.URL+path, http.NoBody)
		require.NoError(t, err)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer func() { _ = resp.Body.Close() }()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(body), resp.Header
	}

	code, body, _ := get("/readyz")
	assert.Equal(t, 503, code)
	assert.Contains(t, body, "no valid overlay on disk yet")
	code, _, _ = get("/startupz")
	assert.Equal(t, 503, code)
	code, _, _ = get("/livez")
	assert.Equal(t, 200, code)

	ready, started = true, true
	code, _, _ = get("/readyz")
	assert.Equal(t, 200, code)
	code, _, _ = get("/startupz")
	assert.Equal(t, 200, code)

	code, body, header := get("/status")
	assert.Equal(t, 200, code)
	assert.Equal(t, "application/json", header.Get("Content-Type"))
	assert.JSONEq(t, `{"state":"cold"}`, body)

	_, body, _ = get("/metrics")
	assert.Contains(t, body, `gridsync_build_info{binary="gridsync-test"`)
	assert.Contains(t, body, "go_goroutines")

	code, _, _ = get("/nope")
	assert.Equal(t, 404, code)
}

func TestServeStopsWhenTheContextEnds(t *testing.T) {
	ln, err := health.Listen(context.Background(), "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- health.Serve(ctx, ln, http.NotFoundHandler(), time.Second) }()
	cancel()
	select {
	case err := <-done:
		assert.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return")
	}
}

func TestListenFailsOnATakenAddress(t *testing.T) {
	ln, err := health.Listen(context.Background(), "127.0.0.1:0")
	require.NoError(t, err)
	defer func() { _ = ln.Close() }()
	_, err = health.Listen(context.Background(), ln.Addr().String())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "bind health address")
}

func TestServeWhileStopsTheServerWhenTheWorkEnds(t *testing.T) {
	ln, err := health.Listen(context.Background(), "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	workErr := errors.New("work failed")
	err = health.ServeWhile(context.Background(), ln, http.NotFoundHandler(), time.Second, func(context.Context) error { return workErr })
	require.ErrorIs(t, err, workErr)
	_, dialErr := (&net.Dialer{Timeout: time.Second}).DialContext(context.Background(), "tcp", addr)
	assert.Error(t, dialErr, "the server is closed")
}

func TestServeWhileStopsTheWorkWhenTheServerDies(t *testing.T) {
	ln, err := health.Listen(context.Background(), "127.0.0.1:0")
	require.NoError(t, err)
	stopped := make(chan struct{})
	err = health.ServeWhile(context.Background(), ln, http.NotFoundHandler(), time.Second, func(ctx context.Context) error {
		require.NoError(t, ln.Close()) // the server's listener dies under it
		<-ctx.Done()
		close(stopped)
		return nil
	})
	require.Error(t, err, "a dead health server is an error")
	select {
	case <-stopped:
	default:
		t.Fatal("the work was not stopped")
	}
}

func TestServeWhileEndsQuietlyWithTheContext(t *testing.T) {
	ln, err := health.Listen(context.Background(), "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	err = health.ServeWhile(ctx, ln, http.NotFoundHandler(), time.Second, func(ctx context.Context) error {
		cancel()
		<-ctx.Done()
		return nil
	})
	assert.NoError(t, err)
}

// A client that sent half a request when the stop comes must not turn a
// clean stop into an error: its connection is closed when the grace ends.
func TestServeStopsCleanlyWithAHalfSentRequest(t *testing.T) {
	ln, err := health.Listen(context.Background(), "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- health.Serve(ctx, ln, http.NotFoundHandler(), 200*time.Millisecond) }()
	conn, err := (&net.Dialer{}).DialContext(context.Background(), "tcp", ln.Addr().String())
	require.NoError(t, err)
	defer func() { _ = conn.Close() }()
	_, err = conn.Write([]byte("GET /metrics HTTP/1.1\r\nHost: x\r\n"))
	require.NoError(t, err)
	time.Sleep(100 * time.Millisecond) // the server is reading the headers
	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return")
	}
}

func get(c *http.Client, url string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, url, http.NoBody)
	if err != nil {
		return nil, err
	}
	return c.Do(req)
}

// probe is a kubelet-style probe: a new connection, no keep-alive, a
// one-second timeout.
func probe(addr, path string) error {
	client := &http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := get(client, "http://"+addr+path)
	if err != nil {
		return err
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return nil
}

// Connections that carry no request never make a probe wait, and the
// probes' own port shares nothing with scrapes: past the cap a newcomer
// takes the place of an idle or silent connection (the first round: 40
// idle keep-alive connections left kubelet probes unanswered for 35 s,
// and 1,000 concurrent /metrics did too). Headers are bounded.
func TestProbesAreNeverStarved(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	reg := prometheus.NewRegistry()
	for i := range 200 {
		g := prometheus.NewGauge(prometheus.GaugeOpts{Name: fmt.Sprintf("series_%d", i), Help: "a series"})
		reg.MustRegister(g)
	}
	ln, err := health.Listen(context.Background(), "127.0.0.1:0")
	require.NoError(t, err)
	checks := health.Checks{Ready: func() (bool, string) { return true, "" }, Started: func() bool { return true }, Status: func() any { return nil }}
	go func() { _ = health.Serve(ctx, ln, health.Handler(checks, reg), time.Second) }()
	probeLn, err := health.Listen(context.Background(), "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = health.Serve(ctx, probeLn, health.ProbeHandler(checks), time.Second) }()
	addr, probeAddr := ln.Addr().String(), probeLn.Addr().String()

	// On both ports: silent connections past the cap, and 40 idle
	// keep-alive ones.
	var held []net.Conn
	defer func() {
		for _, c := range held {
			_ = c.Close()
		}
	}()
	for _, a := range []string{addr, probeAddr} {
		for range health.MaxConnections + 20 {
			c, err := (&net.Dialer{}).DialContext(context.Background(), "tcp", a)
			require.NoError(t, err)
			held = append(held, c)
		}
		keepAlive := &http.Transport{MaxIdleConnsPerHost: 40, MaxIdleConns: 40}
		defer keepAlive.CloseIdleConnections()
		var wg sync.WaitGroup
		for range 40 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if resp, err := get(&http.Client{Transport: keepAlive, Timeout: 5 * time.Second}, "http://"+a+"/livez"); err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					_ = resp.Body.Close()
				}
			}()
		}
		wg.Wait()
	}
	// With the idle ones alone, probes on the health port are answered
	// too: newcomers take the places of silent connections.
	for range 5 {
		require.NoError(t, probe(addr, "/readyz"), "the health port, past its cap with idle clients")
	}

	// A thousand /metrics clients at once on the health port, meanwhile.
	stopFlood := testnet.Hammer("http://"+addr+"/metrics", 1000)
	// The kubelet acts on a probe only after failureThreshold (3, the
	// chart's) failures in a row. This test shares two cores, under the
	// race detector, with the thousand clients and another test package,
	// so one late answer can be the scheduler's; the shipped binary is
	// held to every probe answered by the attack suite
	// (sidecar_probe_starvation).
	const failureThreshold = 3
	ok, total := 0, 0
	inARow, worst := map[string]int{}, 0
	for range 18 {
		for _, path := range []string{"/readyz", "/livez", "/startupz"} {
			total++
			if err := probe(probeAddr, path); err == nil {
				ok++
				inARow[path] = 0
			} else {
				inARow[path]++
				worst = max(worst, inARow[path])
				t.Logf("probe %s: %v", path, err)
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	stopFlood()
	t.Logf("probes_ok=%d/%d most_failed_in_a_row=%d with %d silent and 40 idle clients per port and 1000 /metrics clients", ok, total, worst, health.MaxConnections+20)
	assert.Less(t, worst, failureThreshold, "no probe fails as often in a row as the kubelet acts on")
	// Starvation would fail probes in runs; scattered late answers (four of
	// 54 in one run of the whole suite, never two in a row) are the
	// shared machine's.
	assert.GreaterOrEqual(t, ok, total*85/100, "all but the odd late answer on a shared machine")
	status, err := get(&http.Client{Timeout: time.Second}, "http://"+probeAddr+"/metrics")
	require.NoError(t, err)
	_ = status.Body.Close()
	assert.Equal(t, http.StatusNotFound, status.StatusCode, "the probe port serves the probes alone")

	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, "http://"+addr+"/livez", http.NoBody)
	require.NoError(t, err)
	req.Header.Set("X-Big", strings.Repeat("x", 4*health.MaxHeaderBytes))
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
	require.NoError(t, err)
	_ = resp.Body.Close()
	assert.Equal(t, http.StatusRequestHeaderFieldsTooLarge, resp.StatusCode)
}

// At most MaxMetricsInFlight renders run at once; the rest get 503.
func TestMetricsRendersAreBounded(t *testing.T) {
	release := make(chan struct{})
	var inFlight, peak atomic.Int64
	gatherer := prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		n := inFlight.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		<-release
		inFlight.Add(-1)
		return nil, nil
	})
	srv := httptest.NewServer(health.Handler(health.Checks{}, gatherer))
	defer srv.Close()
	codes := make(chan int, 10)
	for range 10 {
		go func() {
			req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, srv.URL+"/metrics", http.NoBody)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				codes <- 0
				return
			}
			_ = resp.Body.Close()
			codes <- resp.StatusCode
		}()
	}
	busy := 0
	for range 10 - health.MaxMetricsInFlight {
		if <-codes == http.StatusServiceUnavailable {
			busy++
		}
	}
	close(release)
	for range health.MaxMetricsInFlight {
		assert.Equal(t, http.StatusOK, <-codes)
	}
	assert.Equal(t, 10-health.MaxMetricsInFlight, busy)
	assert.LessOrEqual(t, peak.Load(), int64(health.MaxMetricsInFlight))
}

// A request's body is never read: a GET that sends a chunked body a byte
// at a time is answered and its connection closed at once, instead of
// carrying a request (beyond eviction) while net/http drains the body for
// the whole ReadTimeout. Past the cap, such clients leave the port to
// probes.
func TestASlowBodyHoldsNoConnection(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ln, err := health.Listen(context.Background(), "127.0.0.1:0")
	require.NoError(t, err)
	checks := health.Checks{Ready: func() (bool, string) { return true, "" }, Started: func() bool { return true }, Status: func() any { return nil }}
	go func() { _ = health.Serve(ctx, ln, health.Handler(checks, nil), time.Second) }()
	addr := ln.Addr().String()

	// Requests left open by their clients with their bodies unfinished,
	// as many as the server has places and more. They go one after
	// another: sent together, a request the server has accepted but not
	// yet read is what a newcomer past the cap may take the place of, by
	// design, and the test would measure eviction instead. Each must be
	// answered and closed by the server: held for its body, a connection
	// stays open past the 5 s read deadline here (the server's
	// ReadTimeout is 10 s).
	conns := make([]net.Conn, 0, health.MaxConnections+20)
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	for i := range health.MaxConnections + 20 {
		method := []string{"GET", "POST"}[i%2]
		c, err := (&net.Dialer{}).DialContext(context.Background(), "tcp", addr)
		require.NoError(t, err)
		conns = append(conns, c)
		_, err = fmt.Fprintf(c, "%s /livez HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n", method)
		require.NoError(t, err)
		require.NoError(t, c.SetReadDeadline(time.Now().Add(5*time.Second)))
		answer, err := io.ReadAll(c)
		require.NoError(t, err, "connection %d is closed by the server after its answer", i)
		assert.Contains(t, string(answer), "Connection: close")
	}
	require.NoError(t, probe(addr, "/livez"))
}
