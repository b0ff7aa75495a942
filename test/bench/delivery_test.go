package bench

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gridsync/gridsync/shared/envelope"
	"github.com/gridsync/gridsync/shared/runtimecfg"
	"github.com/gridsync/gridsync/test/controlplane"
	"github.com/gridsync/gridsync/test/framework"
	"github.com/gridsync/gridsync/test/measure"
	"github.com/gridsync/gridsync/test/testbin"
	"github.com/gridsync/gridsync/test/testenvelope"
)

const (
	updateEvery = 100 * time.Millisecond
	readerPause = 200 * time.Microsecond
)

// The sizes measured, and the smoke run's.
var (
	warmupUpdates = measure.Size(5, 1)
	timedUpdates  = measure.Size(200, 5)
	idleWindow    = measure.Size(5*time.Second, 500*time.Millisecond)
)

var caseSeq atomic.Int64

// BenchmarkDelivery runs each case once (the case is the unit, not b.N):
// 200 ConfigMap updates, one every 100 ms after a few warm-up updates.
// Latency runs from the moment the client that sent an update has read
// the API server's response to the moment the consumer's fsnotify event
// for the new file arrives; it can be slightly negative, because the
// watch event may reach the sidecar before the response reaches the
// client.
//
// The 4 MiB case is the compressed form (one zstd frame of the envelope
// under binaryData): a plain 4 MiB envelope does not fit a ConfigMap. Its
// sidecar is given the --max-bytes that admits it.
//
//	go test ./test/bench -run '^$' -bench Delivery -benchtime 1x
func BenchmarkDelivery(b *testing.B) {
	const plain, zstd = envelope.EncodingPlain, envelope.EncodingZstd
	cases := []struct {
		name     string
		size     int
		medium   string
		encoding string
		fsync    string
		reader   bool
	}{
		{"size=64KiB/medium=tmpfs", 64 << 10, "tmpfs", plain, "auto", true},
		// The same in the compressed form: what decompression costs a pod.
		{"size=64KiB/medium=tmpfs/encoding=zstd", 64 << 10, "tmpfs", zstd, "auto", false},
		{"size=1MiB/medium=tmpfs", 1<<20 - 8<<10, "tmpfs", plain, "auto", false},
		{"size=4MiB/medium=tmpfs/encoding=zstd", 4 << 20, "tmpfs", zstd, "auto", false},
		// A disk-backed emptyDir, as a pod's: --fsync auto does not sync.
		{"size=64KiB/medium=disk", 64 << 10, "disk", plain, "auto", true},
		// The same folder with every publication synced, as before.
		{"size=64KiB/medium=disk/fsync=always", 64 << 10, "disk", plain, "always", true},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				res := deliver(b, c.size, c.medium, c.encoding, c.fsync, c.reader)
				fmt.Println(res.line())
				fmt.Printf("idle size=%d medium=%s encoding=%s fsync=%s cpu_ms_per_s=%.2f\n", res.size, res.medium, res.encoding, res.fsync, res.idleCPUMsPerSecond)
				if c.reader {
					fmt.Printf("reader reads=%d invalid=%d\n", res.reads, res.invalid)
				}
				b.ReportMetric(res.percentile(50), "p50_ms")
				b.ReportMetric(res.percentile(99), "p99_ms")
				b.ReportMetric(res.rssMiB, "rss_MiB")
				b.ReportMetric(res.cpuMsPerUpdate, "cpu_ms/update")
				if res.invalid > 0 || res.missed > 0 {
					b.Fatalf("reader saw %d invalid files; %d updates never arrived", res.invalid, res.missed)
				}
			}
		})
	}
}

type result struct {
	size     int // the envelope's
	medium   string
	encoding string
	// compressedBytes is the largest compressed frame written (zstd only).
	compressedBytes int
	fsync           string
	latencies       []float64 // ms
	missed          int
	// superseded are updates the consumer never read because a newer one
	// replaced them first; their latency is the newer one's arrival.
	superseded int
	rssMiB     float64
	// peakRSSMiB is the sidecar's high-water mark, against the memory
	// limit the gateway chart gives it for its bound.
	peakRSSMiB, memoryLimitMiB float64
	// cgroupPeakMiB is the most its memory cgroup was charged (its memory
	// and the output's tmpfs pages), oomKills how often it was killed.
	cgroupPeakMiB  float64
	oomKills       int64
	cpuMsPerUpdate float64
	// idleCPUMsPerSecond: CPU used while nothing changes.
	idleCPUMsPerSecond float64
	reads, invalid     int64
}

func (r result) percentile(p float64) float64 { return measure.Percentile(r.latencies, p) }

func (r result) line() string {
	line := fmt.Sprintf("delivery size=%d medium=%s encoding=%s fsync=%s updates=%d p50_ms=%.2f p95_ms=%.2f p99_ms=%.2f max_ms=%.2f rss_mib=%.1f cpu_ms_per_update=%.3f superseded=%d",
		r.size, r.medium, r.encoding, r.fsync, len(r.latencies), r.percentile(50), r.percentile(95), r.percentile(99), r.percentile(100), r.rssMiB, r.cpuMsPerUpdate, r.superseded)
	if r.encoding == envelope.EncodingZstd {
		line += fmt.Sprintf(" compressed_bytes=%d", r.compressedBytes)
	}
	return line + fmt.Sprintf(" peak_rss_mib=%.1f cgroup_peak_mib=%.1f memory_limit_mib=%.0f oom_kills=%d", r.peakRSSMiB, r.cgroupPeakMiB, r.memoryLimitMiB, r.oomKills)
}

// chartMemoryLimitMiB is the sync containers' memory limit the gateway
// chart sets for an envelope bound (its syncResources): 32Mi, and 4Mi
// more for each MiB past 1 MiB.
func chartMemoryLimitMiB(maxBytes int) float64 {
	extra := maxBytes - envelope.DefaultMaxBytes
	if extra <= 0 {
		return 32
	}
	return float64(32 + 4*((extra+1<<20-1)>>20))
}

func deliver(b *testing.B, size int, medium, encoding, fsync string, withReader bool) result {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ns := fmt.Sprintf("bench-%d", caseSeq.Add(1))
	scope := envelope.Scope{Network: "bench-net", Gateway: "bench-gateway", Namespace: ns, LocalSite: "east-edge"}
	configMap := envelope.ConfigMapName(scope.Network, scope.Gateway)
	saConfig, err := cp.ConfigMapReaderConfig(ctx, ns, "gateway", configMap)
	measure.Must(b, err)
	kubeconfig := filepath.Join(b.TempDir(), "kubeconfig")
	measure.Must(b, controlplane.WriteKubeconfig(saConfig, kubeconfig))

	// On the local disk, a folder where the kubelet puts a pod's emptyDir.
	dir := filepath.Join(b.TempDir(), "pods", "bench", "volumes", "kubernetes.io~empty-dir", "routing")
	measure.Must(b, os.MkdirAll(dir, 0o755))
	if medium == "tmpfs" {
		dir, err = os.MkdirTemp("/dev/shm", "gridsync-bench-")
		measure.Must(b, err)
		defer func() { _ = os.RemoveAll(dir) }()
	}
	output := filepath.Join(dir, "routing-overlay.json")

	// Every document is rendered and encoded before timing starts; only
	// the encoded form is kept (4 MiB envelopes compress to a few KiB).
	res := result{medium: medium, encoding: encoding, fsync: fsync}
	docs := make([]testenvelope.Payload, warmupUpdates+timedUpdates+1)
	revisions := make([]string, len(docs))
	for i := range docs {
		var doc []byte
		doc, revisions[i] = testenvelope.Sized(b, scope, i, size)
		docs[i], res.size = testenvelope.Encode(b, doc, encoding), len(doc)
		if encoding == envelope.EncodingZstd {
			res.compressedBytes = max(res.compressedBytes, docs[i].Len())
		}
	}
	admin := cp.AdminClient()
	cms := admin.CoreV1().ConfigMaps(ns)
	_, err = cms.Create(ctx, docs[0].ConfigMap(configMap), metav1.CreateOptions{})
	measure.Must(b, err)

	consumer := watchOutput(b, dir, filepath.Base(output))
	defer consumer.close()

	health := freeAddr(b)
	maxBytes := max(envelope.DefaultMaxBytes, size)
	// As the gateway chart and the kubelet run it: in a memory cgroup of
	// the container's limit, which the chart sizes for the bound (the
	// output's tmpfs pages it writes are charged there too, as an emptyDir
	// in memory is to the pod), and with the Go runtime's soft limit from
	// it.
	limit := int64(chartMemoryLimitMiB(maxBytes)) << 20
	memcg := measure.NewMemoryCgroup(b, limit)
	argv := memcg.Command(framework.Bin(testbin.Sidecar),
		"--kubeconfig", kubeconfig, "--namespace", ns, "--config-map", configMap, "--output", output,
		"--expected-network", scope.Network, "--expected-gateway", scope.Gateway, "--expected-local-site", scope.LocalSite,
		"--health-addr", health, "--log-level", "warn", "--fsync", fsync,
		"--max-bytes", strconv.Itoa(maxBytes))
	proc := exec.Command(argv[0], argv[1:]...) //nolint:noctx // stopped with SIGTERM below
	proc.Env = append(os.Environ(), fmt.Sprintf("%s=%d", runtimecfg.MemoryLimitEnv, limit))
	proc.Stderr = os.Stderr
	proc.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	measure.Must(b, proc.Start())
	defer func() {
		_ = proc.Process.Signal(syscall.SIGTERM)
		_ = proc.Wait()
	}()
	consumer.waitFor(b, revisions[0], 10*time.Second)

	var stopReader atomic.Bool
	var reads, invalid atomic.Int64
	var readers sync.WaitGroup
	if withReader {
		readers.Add(1)
		go func() {
			defer readers.Done()
			// Every read is checked: byte-equal to the last file that
			// validated, or validated in full. Validating identical bytes
			// again would prove nothing and only load the machine.
			var lastValid []byte
			for !stopReader.Load() {
				data, err := os.ReadFile(output)
				reads.Add(1)
				if err != nil {
					invalid.Add(1)
					continue
				}
				if bytes.Equal(data, lastValid) {
					time.Sleep(readerPause)
					continue
				}
				if _, err := envelope.Validate(data, envelope.Options{Expect: scope}); err != nil {
					invalid.Add(1)
				} else {
					lastValid = data
				}
				// A breath between reads: on two cores a reader that never
				// sleeps would take a whole core from the API server and
				// the sidecar, and measure the machine instead.
				time.Sleep(readerPause)
			}
		}()
	}

	update := func(i int) time.Time {
		_, err := cms.Update(ctx, docs[i].ConfigMap(configMap), metav1.UpdateOptions{})
		measure.Must(b, err)
		return time.Now()
	}
	for i := 1; i <= warmupUpdates; i++ {
		update(i)
		consumer.waitFor(b, revisions[i], 10*time.Second)
		time.Sleep(updateEvery)
	}

	// Idle: the watch is open and nothing changes.
	idleBefore := measure.MustCPU(b, proc.Process.Pid)
	time.Sleep(idleWindow)
	res.idleCPUMsPerSecond = float64((measure.MustCPU(b, proc.Process.Pid) - idleBefore).Microseconds()) / 1000 / idleWindow.Seconds()

	cpuBefore := measure.MustCPU(b, proc.Process.Pid)
	tick := time.NewTicker(updateEvery)
	defer tick.Stop()
	sent := make([]time.Time, len(docs))
	for i := warmupUpdates + 1; i < len(docs); i++ {
		<-tick.C
		sent[i] = update(i)
	}
	// Wait for the last one, then collect.
	consumer.waitFor(b, revisions[len(docs)-1], 10*time.Second)
	cpuAfter := measure.MustCPU(b, proc.Process.Pid)
	res.rssMiB = measure.MustRSSMiB(b, proc.Process.Pid)
	res.peakRSSMiB = measure.MustPeakRSSMiB(b, proc.Process.Pid)
	res.memoryLimitMiB = chartMemoryLimitMiB(maxBytes)
	res.cgroupPeakMiB, res.oomKills = memcg.PeakMiB(b), memcg.OOMKills(b)
	if res.oomKills > 0 {
		b.Fatalf("the sidecar was killed for memory %d times within its chart's limit of %.0f MiB", res.oomKills, res.memoryLimitMiB)
	}
	for i := warmupUpdates + 1; i < len(docs); i++ {
		at, ok := consumer.seen(revisions[i])
		if !ok {
			// A revision replaced before the consumer read it (the next
			// update came right behind it, as when an update's request
			// took longer than the interval): the gateway's file held a
			// newer one first, and that is when this update reached it.
			at, ok = consumer.firstAfter(revisions[i+1:])
			if !ok {
				res.missed++
				continue
			}
			res.superseded++
		}
		res.latencies = append(res.latencies, float64(at.Sub(sent[i]).Microseconds())/1000)
	}
	res.cpuMsPerUpdate = float64((cpuAfter - cpuBefore).Microseconds()) / 1000 / float64(timedUpdates)
	stopReader.Store(true)
	readers.Wait()
	res.reads, res.invalid = reads.Load(), invalid.Load()
	if consumer.wrong.Load() > 0 {
		b.Fatalf("consumer read %d files that held no expected revision", consumer.wrong.Load())
	}
	return res
}

// consumer watches the output folder as a gateway does and records when
// each revision appeared.
type consumer struct {
	watcher *fsnotify.Watcher
	mu      sync.Mutex
	at      map[string]time.Time
	arrived chan struct{}
	wrong   atomic.Int64
	done    chan struct{}
}

func watchOutput(b *testing.B, dir, name string) *consumer {
	w, err := fsnotify.NewWatcher()
	measure.Must(b, err)
	measure.Must(b, w.Add(dir))
	c := &consumer{watcher: w, at: map[string]time.Time{}, arrived: make(chan struct{}, 1), done: make(chan struct{})}
	go func() {
		defer close(c.done)
		for {
			select {
			case ev, ok := <-w.Events:
				if !ok {
					return
				}
				now := time.Now()
				if filepath.Base(ev.Name) != name || !ev.Has(fsnotify.Create) {
					continue
				}
				revision := readRevision(filepath.Join(dir, name))
				if revision == "" {
					c.wrong.Add(1)
					continue
				}
				c.mu.Lock()
				if _, ok := c.at[revision]; !ok {
					c.at[revision] = now
				}
				c.mu.Unlock()
				select {
				case c.arrived <- struct{}{}:
				default:
				}
			case _, ok := <-w.Errors:
				if !ok {
					return
				}
			}
		}
	}()
	return c
}

// readRevision reads the revision the file holds.
func readRevision(path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	var doc struct {
		Revision struct {
			Value string `json:"value"`
		} `json:"revision"`
		Rest jsontext.Value `json:",unknown"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		return ""
	}
	return doc.Revision.Value
}

// firstAfter is when the first of the given revisions reached the output.
func (c *consumer) firstAfter(revisions []string) (time.Time, bool) {
	var first time.Time
	for _, r := range revisions {
		if at, ok := c.seen(r); ok && (first.IsZero() || at.Before(first)) {
			first = at
		}
	}
	return first, !first.IsZero()
}

func (c *consumer) seen(revision string) (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	at, ok := c.at[revision]
	return at, ok
}

func (c *consumer) waitFor(b *testing.B, revision string, timeout time.Duration) {
	deadline := time.After(timeout)
	for {
		if _, ok := c.seen(revision); ok {
			return
		}
		select {
		case <-c.arrived:
		case <-deadline:
			b.Fatalf("revision %s never reached the output", revision[:8])
		}
	}
}

func (c *consumer) close() {
	_ = c.watcher.Close()
	<-c.done
}

func freeAddr(b *testing.B) string {
	l, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	measure.Must(b, err)
	defer func() { _ = l.Close() }()
	return l.Addr().String()
}
