// Package fleet measures delivery at fleet scale: a thousand sidecars,
// each a real overlaysync.Syncer with its own HTTP/2 connection and its
// own ServiceAccount token, watching their gateways' ConfigMaps on one
// kube-apiserver, and the reconnect storm when that API server restarts.
// It has a control plane of its own (the storm restarts it). Run it with
// `make bench`.
package fleet

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/gridsync/gridsync/shared/envelope"
	"github.com/gridsync/gridsync/shared/overlaysync"
	"github.com/gridsync/gridsync/test/controlplane"
	"github.com/gridsync/gridsync/test/framework"
	"github.com/gridsync/gridsync/test/measure"
	"github.com/gridsync/gridsync/test/testenvelope"
	"github.com/gridsync/gridsync/test/testfs"
)

var cp *controlplane.ControlPlane

func TestMain(m *testing.M) { framework.BenchMain(m, framework.ControlPlanes(&cp)) }

const namespace = "fleet"

// maxPods is the largest fleet measured (the smoke run's: 4).
var maxPods = measure.Size(1000, 4)

// BenchmarkFleet prints, per case,
//
//	fleet pods=<M> gateways=<G> size=<bytes> encoding=plain last_pod_p50_ms=<> last_pod_p99_ms=<> apiserver_cpu_ms_per_update=<> apiserver_rss_mib=<> idle_apiserver_cpu_ms_per_s=<> syncer_heap_kib_per_pod=<> rounds=<> first_round_last_pod_ms=<> first_round_apiserver_cpu_ms_per_update=<> steady_apiserver_cpu_ms_per_update_p50=<>
//
// (encoding=zstd and compressed_bytes=<> at the end for the case that
// writes the overlay in its compressed form, one zstd frame of the
// envelope under binaryData: 1 MiB both ways), and then the reconnect
// storm:
//
//	storm pods=<M> all_caught_up_ms=<> relists_from_etcd=<> peak_apiserver_inflight=<>
//
// last_pod is, for each update of a ConfigMap, the time from the update's
// API response to the last of its pods holding the new revision in its
// file; apiserver_cpu is the kube-apiserver process's CPU (user and
// system, from /proc) from the first update of a round until every pod
// holds it, per ConfigMap update; size is the envelope's and
// compressed_bytes the largest compressed frame the case wrote; idle is
// its CPU per second over 10 s with every watch open and nothing changing
// (after 5 s of quiet); the heap is this process's live heap with the
// syncers running, less before, per pod.
func BenchmarkFleet(b *testing.B) {
	for b.Loop() {
		benchFleet(b)
	}
}

func benchFleet(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	defer cancel()
	configs := podConfigs(ctx, b)
	out := testfs.Mount(b, "size=3g") // the pods' emptyDirs, in memory as the chart's are
	type fleetCase struct {
		pods, gateways, size, rounds int
		encoding                     string
	}
	const plain, zstd = envelope.EncodingPlain, envelope.EncodingZstd
	cases := measure.Size([]fleetCase{
		{200, 1, 64 << 10, 10, plain},
		{1000, 1, 64 << 10, 10, plain},
		// The same in the compressed form: where it starts to pay.
		{1000, 1, 64 << 10, 10, zstd},
		{1000, 50, 64 << 10, 3, plain},
		{1000, 1, 1000 << 10, 5, plain},
		{1000, 1, 1000 << 10, 5, zstd},
	}, []fleetCase{
		{2, 1, 64 << 10, 1, plain},
		{4, 2, 64 << 10, 1, plain},
		{4, 1, 1000 << 10, 1, plain},
		{4, 1, 1000 << 10, 1, zstd},
	})
	for i, c := range cases {
		f := startFleet(ctx, b, configs[:c.pods], fmt.Sprintf("case%d", i), c.gateways, c.size, c.encoding, filepath.Join(out, fmt.Sprintf("case%d", i)))
		fmt.Println(f.measure(ctx, b, c.rounds))
		f.stop(b)
	}
	f := startFleet(ctx, b, configs, "storm", 1, 64<<10, plain, filepath.Join(out, "storm"))
	fmt.Println(f.storm(ctx, b))
	f.stop(b)
}

// podConfigs creates maxPods ServiceAccounts that may read the ConfigMaps
// of the namespace, and a client configuration per pod with its own token
// and its own connection: client-go shares one transport between configs
// that differ only in their token, which would make a thousand pods one.
func podConfigs(ctx context.Context, b *testing.B) []*rest.Config {
	measure.Must(b, cp.EnsureNamespace(ctx, namespace))
	admin := adminClient(b)
	_, err := admin.RbacV1().Roles(namespace).Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "overlay-reader"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "watch"}}},
	}, metav1.CreateOptions{})
	measure.Must(b, err)
	_, err = admin.RbacV1().RoleBindings(namespace).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "overlay-reader"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "overlay-reader"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "system:serviceaccounts:" + namespace}},
	}, metav1.CreateOptions{})
	measure.Must(b, err)
	configs := make([]*rest.Config, maxPods)
	var g errgroup.Group
	g.SetLimit(16)
	for i := range configs {
		g.Go(func() error {
			name := fmt.Sprintf("pod-%04d", i)
			cfg, err := cp.ServiceAccountConfig(ctx, namespace, name)
			if err != nil {
				return err
			}
			// A dialer of its own makes client-go build this pod its own
			// transport (and connection) instead of sharing one.
			dialer := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
			cfg.Dial, cfg.UserAgent = dialer.DialContext, "gridsync-sidecar-fleet/"+name
			configs[i] = cfg
			return nil
		})
	}
	measure.Must(b, g.Wait())
	return configs
}

func adminClient(b *testing.B) kubernetes.Interface {
	cfg := cp.AdminConfig()
	cfg.QPS, cfg.Burst = -1, -1
	c, err := kubernetes.NewForConfig(cfg)
	measure.Must(b, err)
	return c
}

// fleet is M syncers watching G ConfigMaps, pod i watching ConfigMap i%G.
type fleet struct {
	admin    kubernetes.Interface
	names    []string // the ConfigMaps
	size     int
	encoding string // the ConfigMaps' form: envelope.EncodingPlain or EncodingZstd
	maxBytes int    // every syncer's bound on an envelope
	dir      string
	syncers  []*overlaysync.Syncer
	cancel   context.CancelFunc
	done     sync.WaitGroup
	arrivals *arrivals
	variant  int
	heapKiB  float64
	// compressedBytes is the largest compressed frame written (zstd only).
	compressedBytes int
}

func startFleet(ctx context.Context, b *testing.B, configs []*rest.Config, prefix string, gateways, size int, encoding, dir string) *fleet {
	measure.Must(b, os.MkdirAll(dir, 0o755))
	// Twice the size leaves room for the last batch of candidates the
	// envelope overshoots its size by; never below the sidecar's default.
	f := &fleet{admin: adminClient(b), size: size, encoding: encoding, maxBytes: max(envelope.DefaultMaxBytes, 2*size), dir: dir}
	for g := range gateways {
		name := fmt.Sprintf("%s-gw-%02d", prefix, g)
		f.names = append(f.names, name)
		cm, _ := f.configMap(b, name)
		_, err := f.admin.CoreV1().ConfigMaps(namespace).Create(ctx, cm, metav1.CreateOptions{})
		measure.Must(b, err)
	}
	f.arrivals = watchArrivals(b, dir, len(configs))

	before := liveHeap()
	sctx, cancel := context.WithCancel(ctx)
	f.cancel = cancel
	for i, cfg := range configs {
		name := f.names[i%gateways]
		s, err := overlaysync.New(cfg, overlaysync.Options{
			Namespace: namespace, ConfigMap: name, DataKey: envelope.DataKeyEnvelope,
			Output: filepath.Join(dir, podFile(i)),
			Expect: scope(name), MaxBytes: f.maxBytes,
		})
		measure.Must(b, err)
		f.syncers = append(f.syncers, s)
		f.done.Add(1)
		go func() {
			defer f.done.Done()
			_ = s.Run(sctx)
		}()
	}
	f.waitAll(b, func(s *overlaysync.Syncer) bool { return s.Started() }, "the first overlay")
	f.heapKiB = float64(liveHeap()-before) / 1024 / float64(len(configs))
	return f
}

// stop stops the syncers and removes their files, as a pod's emptyDir
// goes with it: the memory-backed folder holds one 1 MiB case at a time.
func (f *fleet) stop(b *testing.B) {
	f.cancel()
	f.done.Wait()
	f.arrivals.close()
	measure.Must(b, os.RemoveAll(f.dir))
}

func podFile(i int) string { return fmt.Sprintf("pod-%04d.json", i) }

func scope(name string) envelope.Scope {
	return envelope.Scope{Network: "fleet", Gateway: name, Namespace: namespace, LocalSite: "east"}
}

// envelope builds a valid envelope of about f.size bytes for the
// ConfigMap name, different for every variant.
func (f *fleet) envelope(name string) ([]byte, string) {
	f.variant++
	overlay := envelope.Overlay{Network: "fleet", LocalSite: "east", Candidates: []envelope.Candidate{}}
	for i := 0; ; i++ {
		c := envelope.Candidate{
			Kind: envelope.CandidateKindInferenceModel, Name: fmt.Sprintf("model-%d-%05d", f.variant, i),
			Site: fmt.Sprintf("site-%03d", i%100), Cluster: fmt.Sprintf("cluster-%03d", i%100), Fresh: true,
		}
		c.StableID = envelope.StableID(c.Kind, c.Name, c.Site, c.Cluster)
		overlay.Candidates = append(overlay.Candidates, c)
		if i%64 != 63 {
			continue
		}
		doc, rev, err := envelope.Build(overlay, scope(name), envelope.Provenance{
			Producer: "fleet-bench", ProducerVersion: "bench", SourceName: "fleet", SourceGeneration: int64(f.variant), RenderedAt: time.Now(),
		})
		if err != nil {
			panic(err)
		}
		if len(doc) >= f.size-2048 {
			return doc, rev
		}
	}
}

// configMap returns the ConfigMap name with a new envelope in the fleet's
// form, and the envelope's revision.
func (f *fleet) configMap(b *testing.B, name string) (*corev1.ConfigMap, string) {
	doc, rev := f.envelope(name)
	if len(doc) > f.maxBytes {
		b.Fatalf("an envelope of %d bytes is past the syncers' bound of %d", len(doc), f.maxBytes)
	}
	payload := testenvelope.Encode(b, doc, f.encoding)
	if f.encoding == envelope.EncodingZstd {
		f.compressedBytes = max(f.compressedBytes, payload.Len())
	}
	return payload.ConfigMap(name), rev
}

// waitAll waits until every syncer satisfies ok.
func (f *fleet) waitAll(b *testing.B, ok func(*overlaysync.Syncer) bool, what string) {
	deadline := time.Now().Add(5 * time.Minute)
	for {
		n := 0
		for _, s := range f.syncers {
			if ok(s) {
				n++
			}
		}
		if n == len(f.syncers) {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d pods have %s", n, len(f.syncers), what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// update writes a new revision to every ConfigMap, one after the other,
// and returns each one's revision and API response time.
func (f *fleet) update(ctx context.Context, b *testing.B) ([]string, []time.Time) {
	revisions := make([]string, len(f.names))
	answered := make([]time.Time, len(f.names))
	for g, name := range f.names {
		cm, rev := f.configMap(b, name)
		_, err := f.admin.CoreV1().ConfigMaps(namespace).Update(ctx, cm, metav1.UpdateOptions{})
		measure.Must(b, err)
		revisions[g], answered[g] = rev, time.Now()
	}
	return revisions, answered
}

// delivered waits until every pod holds its ConfigMap's revision and
// returns, per ConfigMap, the time from its update's response to the last
// of its pods' files arriving.
func (f *fleet) delivered(b *testing.B, revisions []string, answered []time.Time, since time.Time) []float64 {
	f.waitAll(b, func(s *overlaysync.Syncer) bool {
		st := s.Status()
		return st.WrittenRevision == revisions[slices.Index(f.names, st.ConfigMap)]
	}, "the new revision")
	// The fsnotify events of the last files may still be on their way.
	deadline := time.Now().Add(10 * time.Second)
	last := make([]time.Time, len(f.names))
	for i := range f.syncers {
		at := f.arrivals.last(i)
		for at.Before(since) && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
			at = f.arrivals.last(i)
		}
		if at.Before(since) {
			b.Fatalf("pod %d holds the revision but no event said its file arrived", i)
		}
		if g := i % len(f.names); at.After(last[g]) {
			last[g] = at
		}
	}
	out := make([]float64, len(f.names))
	for g := range f.names {
		out[g] = float64(last[g].Sub(answered[g]).Microseconds()) / 1000
	}
	return out
}

func (f *fleet) measure(ctx context.Context, b *testing.B, rounds int) string {
	pid := cp.APIServerPID()
	time.Sleep(measure.Size(5*time.Second, time.Second)) // the fleet's start (its lists and watches) settles
	idleFrom, idleFor := measure.MustCPUMillis(b, pid), measure.Size(10*time.Second, time.Second)
	time.Sleep(idleFor)
	idle := (measure.MustCPUMillis(b, pid) - idleFrom) / idleFor.Seconds()

	var lastPod, cpu []float64
	for range rounds {
		time.Sleep(time.Second) // the previous round's writes settle
		start, from := time.Now(), measure.MustCPUMillis(b, pid)
		revisions, answered := f.update(ctx, b)
		lastPod = append(lastPod, f.delivered(b, revisions, answered, start)...)
		cpu = append(cpu, (measure.MustCPUMillis(b, pid)-from)/float64(len(f.names)))
	}
	// The first round is the first large event on every connection; it
	// is also printed alone, beside the steady rounds' median.
	line := fmt.Sprintf("fleet pods=%d gateways=%d size=%d encoding=%s last_pod_p50_ms=%.0f last_pod_p99_ms=%.0f apiserver_cpu_ms_per_update=%.0f apiserver_rss_mib=%.0f idle_apiserver_cpu_ms_per_s=%.1f syncer_heap_kib_per_pod=%.0f rounds=%d first_round_last_pod_ms=%.0f first_round_apiserver_cpu_ms_per_update=%.0f steady_apiserver_cpu_ms_per_update_p50=%.0f",
		len(f.syncers), len(f.names), f.size, f.encoding, measure.Percentile(lastPod, 50), measure.Percentile(lastPod, 99),
		measure.Mean(cpu), measure.MustRSSMiB(b, pid), idle, f.heapKiB,
		rounds, slices.Max(lastPod[:len(f.names)]), cpu[0], measure.Percentile(cpu[1:], 50))
	if f.encoding == envelope.EncodingZstd {
		line += fmt.Sprintf(" compressed_bytes=%d", f.compressedBytes)
	}
	return line
}

// storm restarts kube-apiserver under the fleet, writes a new revision as
// soon as it answers, and waits until every pod holds it.
func (f *fleet) storm(ctx context.Context, b *testing.B) string {
	measure.Must(b, cp.StopAPIServer())
	time.Sleep(2 * time.Second) // every watch has failed and is backing off
	measure.Must(b, cp.StartAPIServer(ctx))
	ready := time.Now()
	baseline := metric(ctx, b, f.admin)
	var peak atomic.Int64
	sampling, stopSampling := context.WithCancel(ctx)
	var sampled sync.WaitGroup
	sampled.Add(1)
	go func() {
		defer sampled.Done()
		for sampling.Err() == nil {
			m := metric(ctx, b, f.admin)
			if n := int64(m.inflight); n > peak.Load() {
				peak.Store(n)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	revisions, answered := f.update(ctx, b)
	f.delivered(b, revisions, answered, ready)
	caughtUp := time.Since(ready)
	stopSampling()
	sampled.Wait()
	after := metric(ctx, b, f.admin)
	return fmt.Sprintf("storm pods=%d all_caught_up_ms=%d relists_from_etcd=%.0f peak_apiserver_inflight=%d lists_from_watch_cache=%.0f",
		len(f.syncers), caughtUp.Milliseconds(), after.etcdLists-baseline.etcdLists, peak.Load(), after.cacheLists-baseline.cacheLists)
}

// apiserverMetrics are the kube-apiserver's own counts that say what a
// storm cost it.
type apiserverMetrics struct {
	etcdLists, cacheLists float64 // LISTs of ConfigMaps served from etcd, from the watch cache
	inflight              float64 // requests being served now
}

func metric(ctx context.Context, b *testing.B, admin kubernetes.Interface) apiserverMetrics {
	raw, err := admin.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	measure.Must(b, err)
	var m apiserverMetrics
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		name, rest, _ := strings.Cut(line, "{")
		labels, value, ok := strings.Cut(rest, "} ")
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			continue
		}
		switch {
		case name == "apiserver_storage_list_total" && strings.Contains(labels, `resource="configmaps"`):
			if strings.Contains(labels, `storage="etcd"`) {
				m.etcdLists += v
			} else {
				m.cacheLists += v
			}
		case name == "apiserver_current_inflight_requests":
			m.inflight += v
		}
	}
	return m
}

func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// arrivals records, per pod, when its output file last arrived, from
// fsnotify as a gateway would see it.
type arrivals struct {
	watcher *fsnotify.Watcher
	at      []atomic.Int64 // unix nanoseconds
	index   map[string]int
}

func watchArrivals(b *testing.B, dir string, pods int) *arrivals {
	w, err := fsnotify.NewWatcher()
	measure.Must(b, err)
	measure.Must(b, w.Add(dir))
	a := &arrivals{watcher: w, at: make([]atomic.Int64, pods), index: make(map[string]int, pods)}
	for i := range pods {
		a.index[podFile(i)] = i
	}
	go func() {
		for {
			select {
			case ev, ok := <-w.Events:
				if !ok {
					return
				}
				if i, mine := a.index[filepath.Base(ev.Name)]; mine && ev.Has(fsnotify.Create) {
					a.at[i].Store(time.Now().UnixNano())
				}
			case err, ok := <-w.Errors:
				if !ok {
					return
				}
				b.Errorf("fsnotify: %v", err) // a queue overflow would lose arrivals
			}
		}
	}()
	return a
}

func (a *arrivals) last(i int) time.Time { return time.Unix(0, a.at[i].Load()) }

func (a *arrivals) close() { _ = a.watcher.Close() }
