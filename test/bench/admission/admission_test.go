// Package admission measures how load reaches the gateways: the real
// gridsync-agent binary with its chart's RBAC scrapes 200 providers'
// metrics endpoints (one loopback server, a path each) every second and
// publishes the overlays of 20 gateways, each read by a real
// gridsync-sidecar into its own file. Run it with `make bench`; it prints
//
//	admission providers=200 gateways=20 react_p99_ms=<> revisions_per_gateway_per_min=<> flaps=<>
//
// react_p99_ms: one provider's queue crosses the enter threshold (and,
// next round, falls back), and every gateway's file is read until it lists
// the provider so: the 99th percentile over gateways and rounds, from the
// change of the provider's answer (policy instantaneous, minimumStateDuration
// 2 s, rounds spaced past it).
// revisions_per_gateway_per_min and flaps: for a minute every provider's
// queue crosses the threshold at every scrape (policy instantaneous,
// minimumStateDuration 10 s: the write budget's worst case); the revisions
// each gateway's file took, per minute (at most 6 is the bound), and how
// often a provider's state changed in them, per provider per minute.
// admission-stabilized: the same minute under upstream's default
// stabilized policy (pressure twice in a row, 10 s in a state, 30 s of
// recovery), where a signal crossing at every scrape changes nothing.
package admission

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/shared/envelope"
	"github.com/gridsync/gridsync/test/controlplane"
	"github.com/gridsync/gridsync/test/framework"
	"github.com/gridsync/gridsync/test/measure"
	"github.com/gridsync/gridsync/test/testbin"
	"github.com/gridsync/gridsync/test/testpki"
	"github.com/gridsync/gridsync/test/testproc"
)

const (
	network = "admission"
	site    = "east"
)

// The sizes measured, and the smoke run's.
var (
	providers = measure.Size(200, 4)
	gateways  = measure.Size(20, 2)
	rounds    = measure.Size(10, 1)
	flapFor   = measure.Size(time.Minute, 5*time.Second)
)

var cp *controlplane.ControlPlane

func TestMain(m *testing.M) {
	framework.BenchMain(m, framework.ControlPlanes(&cp), framework.Binaries(testbin.Agent, testbin.Sidecar))
}

func BenchmarkAdmission(b *testing.B) {
	for b.Loop() {
		runBench(b)
	}
}

// queues serves each provider's queue at /p/<i>/metrics: fixed, or, while
// flapping, crossing the threshold at every scrape.
type queues struct {
	mu       sync.Mutex
	waiting  []int // of a capacity of 100
	flapping atomic.Bool
	turn     []bool
}

func (q *queues) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	i, err := strconv.Atoi(parts[min(1, len(parts)-1)])
	if err != nil || i < 0 || i >= providers {
		http.NotFound(w, r)
		return
	}
	q.mu.Lock()
	v := q.waiting[i]
	if q.flapping.Load() {
		q.turn[i] = !q.turn[i]
		v = 10
		if q.turn[i] {
			v = 95
		}
	}
	q.mu.Unlock()
	fmt.Fprintf(w, "# TYPE queue_waiting gauge\nqueue_waiting %d\n", v)
}

func (q *queues) set(i, v int) {
	q.mu.Lock()
	q.waiting[i] = v
	q.mu.Unlock()
}

// file is one gateway's sidecar output, read at every change.
type file struct {
	path string
	mu   sync.Mutex
	// seen is when each (provider, state) was first read since reset.
	seen map[string]time.Time
	// revisions counts the changes of revision read since the reset
	// (a state flipping back returns to an earlier revision: it counts).
	revisions int
	last      string
	states    map[string]string // provider → its last state read
	flips     int
}

func (f *file) reset() {
	f.mu.Lock()
	f.seen, f.revisions, f.flips = map[string]time.Time{}, 0, 0
	f.mu.Unlock()
}

// read parses the file and records what it lists.
func (f *file) read() {
	data, err := os.ReadFile(f.path)
	if err != nil {
		return
	}
	at := time.Now()
	res, err := envelope.Validate(data, envelope.Options{})
	if err != nil {
		return
	}
	var doc struct {
		Overlay envelope.Overlay `json:"overlay"`
	}
	if json.Unmarshal(data, &doc) != nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.last != "" && res.Revision != f.last {
		f.revisions++
	}
	f.last = res.Revision
	for _, c := range doc.Overlay.Candidates {
		key := c.Site + "=" + c.AdmissionState
		if _, ok := f.seen[key]; !ok {
			f.seen[key] = at
		}
		if before, ok := f.states[c.Site]; ok && before != c.AdmissionState {
			f.flips++
		}
		f.states[c.Site] = c.AdmissionState
	}
}

// when returns when provider's state was first read since the reset.
func (f *file) when(provider, state string) (time.Time, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, ok := f.seen[provider+"="+state]
	return t, ok
}

func runBench(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	s := framework.NewSite(b, cp, framework.SiteOptions{Prefix: "admission", Name: site})
	gwNS, admin := s.Namespace(), s.Admin
	dir := b.TempDir()

	q := &queues{waiting: make([]int, providers), turn: make([]bool, providers)}
	for i := range providers {
		q.set(i, 10)
	}
	server := httptest.NewServer(q)
	defer server.Close()

	var gws []v1alpha1.ConsumerGateway
	for g := range gateways {
		gws = append(gws, v1alpha1.ConsumerGateway{Name: fmt.Sprintf("edge-%02d", g), Namespace: gwNS, SiteName: site})
	}
	policy := func(minimum string) *v1alpha1.AdmissionPolicy {
		return &v1alpha1.AdmissionPolicy{Mode: v1alpha1.AdmissionInstantaneous, Pressure: &v1alpha1.PressurePolicy{
			EnterThreshold: 0.85, ExitThreshold: 0.7, FailureThreshold: 1, SuccessThreshold: 1, MinimumStateDuration: minimum, RecoveryHoldDown: "1s"}}
	}
	measure.Must(b, admin.Create(ctx, &v1alpha1.GridNetwork{ObjectMeta: metav1.ObjectMeta{Name: network}, Spec: v1alpha1.GridNetworkSpec{
		ConsumerGateways: gws, ScoringPolicy: &v1alpha1.ScoringPolicy{Strategy: v1alpha1.ScoringQueueDepth}, AdmissionPolicy: policy("2s")}}))
	capacity := int32(100)
	names := make([]string, providers)
	for i := range providers {
		names[i] = fmt.Sprintf("p-%03d", i)
		measure.Must(b, admin.Create(ctx, &v1alpha1.InferenceProvider{ObjectMeta: metav1.ObjectMeta{Name: names[i]}, Spec: v1alpha1.InferenceProviderSpec{
			GridNetworkRef: network, ProviderKind: "vllm", BackendKind: "openai_compatible", Endpoint: "https://llm.invalid",
			Models: []v1alpha1.Model{{Name: "m1"}},
			MetricsConfig: &v1alpha1.MetricsConfig{MetricsEndpoint: fmt.Sprintf("%s/p/%d", server.URL, i), Timeout: "500ms",
				QueueCapacity: &capacity, SignalNames: v1alpha1.MetricSignalNames{QueueDepth: "queue_waiting"}},
		}}))
	}

	// The signals listener (with the site's identity) is what collects
	// providers' signals, from providers on loopback.
	identity := testpki.NewSite(b, site)
	s.StartAgent(b, framework.AgentOptions{Loopback: true, Args: append([]string{"--leader-elect=false", "--log-level", "warn",
		"--signals-addr", testproc.FreeAddr(b), "--signals-interval", "1s"}, identity.AgentArgs()...)})

	// A sidecar per gateway, each with its own ServiceAccount.
	files := make([]*file, gateways)
	watcher, err := fsnotify.NewWatcher()
	measure.Must(b, err)
	defer func() { _ = watcher.Close() }()
	byDir := map[string]*file{}
	for g, gw := range gws {
		cm := envelope.ConfigMapName(network, gw.Name)
		cfg, err := cp.ConfigMapReaderConfig(ctx, gwNS, gw.Name, cm)
		measure.Must(b, err)
		kc := filepath.Join(dir, gw.Name+".kubeconfig")
		measure.Must(b, controlplane.WriteKubeconfig(cfg, kc))
		out := filepath.Join(dir, gw.Name)
		measure.Must(b, os.MkdirAll(out, 0o755))
		files[g] = &file{path: filepath.Join(out, "routing-overlay.json"), states: map[string]string{}}
		files[g].reset()
		byDir[out] = files[g]
		measure.Must(b, watcher.Add(out))
		testproc.Start(b, framework.Bin(testbin.Sidecar), nil,
			"--kubeconfig", kc, "--namespace", gwNS, "--config-map", cm, "--output", files[g].path,
			"--expected-network", network, "--expected-gateway", gw.Name, "--expected-local-site", site,
			"--health-addr", testproc.FreeAddr(b), "--log-level", "warn")
	}
	go func() {
		for ev := range watcher.Events {
			if f := byDir[filepath.Dir(ev.Name)]; f != nil && filepath.Base(ev.Name) == filepath.Base(f.path) {
				f.read()
			}
		}
	}()
	everywhere := func(what string, provider, state string, within time.Duration) []time.Time {
		deadline := time.Now().Add(within)
		for {
			var at []time.Time
			for _, f := range files {
				if t, ok := f.when(provider, state); ok {
					at = append(at, t)
				}
			}
			if len(at) == len(files) {
				return at
			}
			if time.Now().After(deadline) {
				info, err := os.Stat(files[0].path)
				files[0].mu.Lock()
				seen := files[0].revisions
				files[0].mu.Unlock()
				b.Fatalf("%s: %d of %d gateways list %s %s (the first file: %v %v, %d revisions read)", what, len(at), len(files), provider, state, info, err, seen)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	for _, name := range names {
		everywhere("the first overlays", name, "new_and_existing", 2*time.Minute)
	}

	// React: one provider at a time crosses the threshold, then falls
	// back, each change past the previous one's minimum duration.
	var react []float64
	for r := range rounds {
		i := (r * 37) % providers
		for _, crossing := range []struct {
			waiting int
			state   string
		}{{95, "existing_only"}, {10, "new_and_existing"}} {
			time.Sleep(2500 * time.Millisecond) // past minimumStateDuration
			for _, f := range files {
				f.reset()
			}
			changed := time.Now()
			q.set(i, crossing.waiting)
			for _, at := range everywhere("round "+strconv.Itoa(r), names[i], crossing.state, 30*time.Second) {
				react = append(react, float64(at.Sub(changed).Microseconds())/1000)
			}
		}
	}

	// The write budget: every provider crosses at every scrape, the
	// minimum duration 10 s; then the same under upstream's default
	// stabilized policy.
	flap := func(p *v1alpha1.AdmissionPolicy) (revisionsPerMin, flapsPerMin float64) {
		var n v1alpha1.GridNetwork
		measure.Must(b, admin.Get(ctx, types.NamespacedName{Name: network}, &n))
		orig := n.DeepCopy()
		n.Spec.AdmissionPolicy = p
		measure.Must(b, admin.Patch(ctx, &n, client.MergeFrom(orig)))
		time.Sleep(3 * time.Second)
		for _, f := range files {
			f.reset()
		}
		q.flapping.Store(true)
		time.Sleep(flapFor)
		q.flapping.Store(false)
		var revisions, flips []float64
		for _, f := range files {
			f.mu.Lock()
			revisions = append(revisions, float64(f.revisions))
			flips = append(flips, float64(f.flips))
			f.mu.Unlock()
		}
		minutes := flapFor.Minutes()
		return slices.Max(revisions) / minutes, slices.Max(flips) / float64(providers) / minutes
	}
	revisions, flaps := flap(policy("10s"))
	fmt.Printf("admission providers=%d gateways=%d react_p99_ms=%.0f revisions_per_gateway_per_min=%.1f flaps=%.2f\n",
		providers, gateways, measure.Percentile(react, 99), revisions, flaps)
	stabilized := &v1alpha1.AdmissionPolicy{Mode: v1alpha1.AdmissionStabilized} // the CRD's default thresholds and timings
	stableRevisions, stableFlaps := flap(stabilized)
	fmt.Printf("admission-stabilized providers=%d gateways=%d revisions_per_gateway_per_min=%.1f flaps=%.2f\n",
		providers, gateways, stableRevisions, stableFlaps)
	b.ReportMetric(measure.Percentile(react, 99), "react_p99_ms")
	b.ReportMetric(revisions, "revisions/gateway/min")
}
