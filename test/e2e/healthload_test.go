package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gridsync/gridsync/test/measure"
	"github.com/gridsync/gridsync/test/testbin"
)

// chartMemoryLimit is the sidecar's memory limit in the praxis-gateway
// chart (overlay.sidecar.resources.limits.memory: 32Mi).
const chartMemoryLimit = 32 << 20

// concurrentGets sends n GET requests at once, each on its own
// connection, and returns how many got an answer of each status.
func concurrentGets(t *testing.T, url string, n int) map[int]int {
	t.Helper()
	client := &http.Client{
		Timeout:   30 * time.Second,
		Transport: &http.Transport{DisableKeepAlives: true, MaxConnsPerHost: 0},
	}
	var mu sync.Mutex
	codes := map[int]int{}
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			code := 0
			req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, url, http.NoBody)
			require.NoError(t, err)
			if resp, err := client.Do(req); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
				code = resp.StatusCode
			}
			mu.Lock()
			codes[code]++
			mu.Unlock()
		})
	}
	wg.Wait()
	return codes
}

// Anyone who can reach the health port must not be able to grow the
// sidecar past the chart's memory limit: concurrent scrapes and idle
// connections queue or are refused, and the process stays within 32 MiB
// (its peak resident memory, read from /proc) and keeps answering.
func TestSidecarHealthPortStaysWithinTheChartsMemoryLimit(t *testing.T) {
	p := newPod(t)
	doc, _ := p.Envelope(1)
	p.Put(doc)
	addr := freeAddr(t)
	sidecar := start(t, testbin.Sidecar, []string{fmt.Sprintf("GRIDSYNC_MEMORY_LIMIT=%d", chartMemoryLimit)}, p.Args("--health-addr", addr)...)
	waitOK(t, "http://"+addr+"/readyz")
	pid := sidecar.Cmd.Process.Pid

	for _, n := range []int{200, 1000} {
		codes := concurrentGets(t, "http://"+addr+"/metrics", n)
		t.Logf("%d concurrent /metrics: answers by status %v, peak RSS %.1f MiB", n, codes, measure.MustPeakRSSMiB(t, pid))
		assert.Positive(t, codes[http.StatusOK], "scrapes are still served")
		assert.Less(t, measure.MustPeakRSSMiB(t, pid), float64(chartMemoryLimit>>20), "%d concurrent /metrics", n)
	}

	var idle []net.Conn
	for range 3000 {
		c, err := (&net.Dialer{}).DialContext(context.Background(), "tcp", addr)
		if err != nil {
			break // the listen backlog is full: the kernel refuses, not the sidecar
		}
		idle = append(idle, c)
	}
	time.Sleep(time.Second)
	t.Logf("%d idle connections: peak RSS %.1f MiB", len(idle), measure.MustPeakRSSMiB(t, pid))
	assert.GreaterOrEqual(t, len(idle), 1000)
	assert.Less(t, measure.MustPeakRSSMiB(t, pid), float64(chartMemoryLimit>>20), "idle connections")
	for _, c := range idle {
		_ = c.Close()
	}
	require.Eventually(t, func() bool { code, _ := get(t, "http://"+addr+"/readyz"); return code == 200 }, 15*time.Second, 50*time.Millisecond, "answers again once the flood is gone")
	assert.True(t, sidecar.Running())
}

// SIGTERM while a health client has sent half a request: still exit 0,
// within a few seconds.
func TestSidecarExitsZeroOnSIGTERMWithAHalfSentHealthRequest(t *testing.T) {
	p := newPod(t)
	doc, _ := p.Envelope(1)
	p.Put(doc)
	addr := freeAddr(t)
	sidecar := start(t, testbin.Sidecar, nil, p.Args("--health-addr", addr)...)
	waitOK(t, "http://"+addr+"/readyz")
	conn, err := (&net.Dialer{}).DialContext(context.Background(), "tcp", addr)
	require.NoError(t, err)
	defer func() { _ = conn.Close() }()
	_, err = conn.Write([]byte("GET /metrics HTTP/1.1\r\nHost: x\r\n"))
	require.NoError(t, err)
	time.Sleep(100 * time.Millisecond)

	require.NoError(t, sidecar.Cmd.Process.Signal(syscall.SIGTERM))
	began := time.Now()
	assert.Equal(t, 0, sidecar.Wait(t, 10*time.Second))
	assert.Less(t, time.Since(began), 4*time.Second)
}
