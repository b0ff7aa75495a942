package attack

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gridsync/gridsync/test/controlplane"
	"github.com/gridsync/gridsync/test/framework"
	"github.com/gridsync/gridsync/test/measure"
	"github.com/gridsync/gridsync/test/testbin"
	"github.com/gridsync/gridsync/test/testnet"
	"github.com/gridsync/gridsync/test/testpod"
	"github.com/gridsync/gridsync/test/testproc"
)

// sidecarMemoryLimitMiB is the gateway chart's limit for the sidecar.
const sidecarMemoryLimitMiB = 32

// sidecar is a gridsync-sidecar process of one pod, serving a valid
// overlay, with its health port and its probe port.
type sidecar struct {
	*testproc.Proc
	pod           *testpod.Pod
	health, probe string
}

func startSidecar(t *testing.T, extra ...string) *sidecar {
	t.Helper()
	p := testpod.New(t, cp)
	doc, _ := p.Envelope(1)
	p.Put(doc)
	s := &sidecar{pod: p, health: testproc.FreeAddr(t), probe: testproc.FreeAddr(t)}
	args := p.Args(append([]string{"--health-addr", s.health, "--probe-addr", s.probe, "--log-level", "info"}, extra...)...)
	s.Proc = testproc.Start(t, framework.Bin(testbin.Sidecar), []string{fmt.Sprintf("GRIDSYNC_MEMORY_LIMIT=%d", sidecarMemoryLimitMiB<<20)}, args...)
	testproc.WaitOK(t, "http://"+s.probe+"/readyz")
	return s
}

func (s *sidecar) rss() float64 {
	v, _ := measure.RSSMiB(s.Cmd.Process.Pid)
	return v
}

// kubeletProbe is what the kubelet does: a new connection, no keep-alive,
// one second.
func kubeletProbe(addr, path string) bool { return probeFailure(addr, path) == "" }

// probeFailure is kubeletProbe saying why a probe failed ("" when it
// passed): what an attack's line names when one did.
func probeFailure(addr, path string) string {
	c := &http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, "http://"+addr+path, http.NoBody)
	start := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		return fmt.Sprintf("after %d ms: %v", time.Since(start).Milliseconds(), err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return resp.Status
	}
	return ""
}

// Idle keep-alive connections and a thousand concurrent /metrics never
// starve the kubelet's probes (the first round: 40 idle connections filled
// the health port's 32 slots and kubelet-style probes got 0 answers of 18
// over 35 s; 1,000 /metrics did the same).
func TestSidecarProbeStarvation(t *testing.T) {
	s := startSidecar(t)
	before := footprintOf(t, s.Cmd.Process.Pid, "http://"+s.health+"/metrics")
	var held []net.Conn
	closeHeld := func() {
		for _, c := range held {
			c.Close()
		}
		held = nil
	}
	t.Cleanup(closeHeld)
	for _, addr := range []string{s.health, s.probe} {
		for range 100 {
			if c, err := (&net.Dialer{Timeout: time.Second}).DialContext(context.Background(), "tcp", addr); err == nil {
				held = append(held, c) // silent
			}
		}
		keepAlive := &http.Transport{MaxIdleConnsPerHost: 40, MaxIdleConns: 40}
		t.Cleanup(keepAlive.CloseIdleConnections)
		var wg sync.WaitGroup
		for range 40 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, "http://"+addr+"/livez", http.NoBody)
				if resp, err := (&http.Client{Transport: keepAlive, Timeout: 5 * time.Second}).Do(req); err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					_ = resp.Body.Close()
				}
			}()
		}
		wg.Wait()
	}
	var peak atomic.Uint64
	scrapers := size(1000, 200)
	stopFlood := testnet.Hammer("http://"+s.health+"/metrics", scrapers)
	probes, ok := 0, 0
	healthPortOK := 0
	for range size(35, 10) {
		for _, path := range []string{"/readyz", "/livez"} {
			probes++
			if kubeletProbe(s.probe, path) {
				ok++
			}
		}
		if kubeletProbe(s.health, "/readyz") {
			healthPortOK++
		}
		if v := uint64(s.rss() * 1024); v > peak.Load() {
			peak.Store(v)
		}
		time.Sleep(200 * time.Millisecond)
	}
	stopFlood()
	closeHeld()
	fp, settled := settles(t, s.Cmd.Process.Pid, "http://"+s.health+"/metrics", before)
	rss := float64(peak.Load()) / 1024
	report(t, "sidecar_probe_starvation", ok == probes && rss < sidecarMemoryLimitMiB && s.Running() && settled,
		figure{"goroutines", fmt.Sprintf("%d->%d", before.goroutines, fp.goroutines)}, figure{"fds", fmt.Sprintf("%d->%d", before.fds, fp.fds)},
		figure{"idle", 40}, figure{"silent", 100}, figure{"metrics_clients", scrapers}, figure{"probes_ok", fmt.Sprintf("%d/%d", ok, probes)},
		figure{"health_port_probes_ok", healthPortOK}, figure{"sidecar_rss_peak_mib", rss}, figure{"limit_mib", sidecarMemoryLimitMiB})
}

// A watch the API server (or a proxy) holds without answering is noticed
// at the idle timeout, and the pod reports it (the first round's hung
// watch).
func TestSidecarHeldWatch(t *testing.T) {
	p := testpod.New(t, cp)
	doc, _ := p.Envelope(1)
	p.Put(doc)
	proxy, err := cp.NewHoldingProxy()
	require.NoError(t, err)
	t.Cleanup(func() { _ = proxy.Close() })
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, controlplane.WriteKubeconfig(proxy.Config(p.Config), kubeconfig))
	health := testproc.FreeAddr(t)
	const idle = 2 * time.Second
	sc := testproc.Start(t, framework.Bin(testbin.Sidecar), nil, p.Args("--kubeconfig", kubeconfig, "--health-addr", health, "--watch-idle-timeout", idle.String())...)
	testproc.WaitOK(t, "http://"+health+"/readyz")
	proxy.HoldWatches()
	start := time.Now()
	var reason string
	seen := false
	for deadline := time.Now().Add(4 * idle); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		_, body := testproc.Get(t, "http://"+health+"/status")
		var st map[string]any
		_ = json.Unmarshal([]byte(body), &st)
		if r, _ := st["degraded_reason"].(string); r != "" {
			reason, seen = r, true
			break
		}
	}
	took := time.Since(start)
	code, _ := testproc.Get(t, "http://"+health+"/readyz")
	report(t, "held_watch", seen && took < 2*idle+time.Second && code == http.StatusOK && sc.Running(),
		figure{"idle_timeout_ms", idle.Milliseconds()}, figure{"reported_after_ms", took.Milliseconds()},
		figure{"reason", reason}, figure{"still_serving_last_good", code == http.StatusOK})
}

// Envelopes nested far deeper than any real one, and larger than the
// limit, are refused and lose nothing: the last good file keeps serving
// (the first round's hostile nesting).
func TestSidecarHostileNesting(t *testing.T) {
	s := startSidecar(t)
	good, err := os.ReadFile(s.pod.Output())
	require.NoError(t, err)
	deep := strings.Repeat(`{"a":`, 100000) + "1" + strings.Repeat("}", 100000)
	s.pod.PutRaw(deep)
	var status string
	require.Eventually(t, func() bool {
		_, status = testproc.Get(t, "http://"+s.health+"/status")
		return strings.Contains(status, `"last_rejection_reason"`)
	}, 10*time.Second, 50*time.Millisecond)
	after, err := os.ReadFile(s.pod.Output())
	require.NoError(t, err)
	code, _ := testproc.Get(t, "http://"+s.probe+"/readyz")
	unchanged := string(after) == string(good)
	report(t, "hostile_nesting", code == http.StatusOK && s.Running() && unchanged,
		figure{"depth", 100000}, figure{"file_unchanged", unchanged}, figure{"still_ready", code == http.StatusOK}, figure{"sidecar_rss_mib", s.rss()})
}

// Another container of the pod that shares the output folder (the gateway
// given a writable emptyDir) puts a symbolic link, then a hard link, where
// the sidecar keeps the previous file for its next write, and holds the
// file the gateway reads open across updates: the sidecar never writes
// through either name, and every update still reaches the output whole.
func TestSidecarSharedVolumeSpare(t *testing.T) {
	s := startSidecar(t)
	output := s.pod.Output()
	deliver := func(variant int) []byte {
		doc, _ := s.pod.Envelope(variant)
		s.pod.Put(doc)
		require.Eventually(t, func() bool {
			got, err := os.ReadFile(output)
			return err == nil && string(got) == string(doc)
		}, 10*time.Second, 10*time.Millisecond, "update %d not delivered", variant)
		return doc
	}
	spare := func() string {
		matches, err := filepath.Glob(filepath.Join(filepath.Dir(output), "."+filepath.Base(output)+".tmp-*"))
		require.NoError(t, err)
		require.Len(t, matches, 1, "the previous file is kept beside the output")
		return matches[0]
	}
	deliver(2)
	deliver(3)

	// A symbolic link to a file elsewhere.
	elsewhere := filepath.Join(t.TempDir(), "elsewhere")
	require.NoError(t, os.WriteFile(elsewhere, []byte("not the sidecar's"), 0o644))
	link := spare()
	require.NoError(t, os.Remove(link))
	require.NoError(t, os.Symlink(elsewhere, link))
	deliver(4)
	viaSymlink, err := os.ReadFile(elsewhere)
	require.NoError(t, err)

	// A second name for the spare, and the output held open by a reader.
	second := filepath.Join(filepath.Dir(output), "gateway-copy.json")
	require.NoError(t, os.Link(spare(), second))
	held, err := os.ReadFile(second)
	require.NoError(t, err)
	reader, err := os.Open(output)
	require.NoError(t, err)
	defer func() { _ = reader.Close() }()
	readerHolds, err := os.ReadFile(output)
	require.NoError(t, err)
	deliver(5)
	deliver(6)
	viaHardLink, err := os.ReadFile(second)
	require.NoError(t, err)
	stillHeld, err := io.ReadAll(reader)
	require.NoError(t, err)

	symlinkKept := string(viaSymlink) == "not the sidecar's"
	hardLinkKept := string(viaHardLink) == string(held)
	readerWhole := string(stillHeld) == string(readerHolds)
	report(t, "shared_volume_spare", symlinkKept && hardLinkKept && readerWhole && s.Running(),
		figure{"written_through_symlink", !symlinkKept}, figure{"written_through_hard_link", !hardLinkKept},
		figure{"open_reader_whole", readerWhole}, figure{"updates_delivered", 5})
}
