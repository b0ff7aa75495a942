package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/shared/envelope"
	"github.com/gridsync/gridsync/test/framework"
	"github.com/gridsync/gridsync/test/measure"
	"github.com/gridsync/gridsync/test/testbin"
)

// The controller case: 1,000 providers with 4 models each, in 10
// networks of 5 gateways (50 gateways). Each provider is admitted to 2 of
// its network's 5 sites, so a gateway's overlay has 40 providers, 160
// candidates. The agent binary runs with its chart's RBAC.
const (
	gatewaysPerNetwork    = 5
	modelsPerProvider     = 4
	sitesAdmitted         = 2
	controllerQuietPeriod = 2 * time.Second
)

// The sizes measured, and the smoke run's.
var (
	benchNetworks        = measure.Size(10, 2)
	providersPerNetwork  = measure.Size(100, 10)
	candidatesPerGateway = providersPerNetwork * sitesAdmitted / gatewaysPerNetwork * modelsPerProvider
)

// BenchmarkController prints, for a cold start and for a change to one
// provider:
//
//	publish providers=<n> gateways=<m> reconcile_p50_ms=<> reconcile_p99_ms=<> writes=<> case=<> reconciles=<> converged_ms=<>
//
// The reconcile durations are the agent's own (its network_reconciled
// debug lines), over every reconcile that rendered until it has been
// quiet for 2 s.
// writes counts ConfigMap creations and updates seen by a watch; a change
// to one provider must write only the 2 ConfigMaps whose content changed.
// converged_ms runs from the start of the agent process (or the update's
// response) until the watch delivers the last expected overlay.
func BenchmarkController(b *testing.B) {
	for b.Loop() {
		benchController(b)
	}
}

func benchController(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	f := newFleet(ctx, b, false)
	start := time.Now()
	reconciles := f.runAgent(b)

	// Cold start: every gateway's overlay published.
	converged := waitOverlays(b, f.writes, f.gateways, func(r envelope.Result) bool { return r.CandidateCount == candidatesPerGateway }).Sub(start)
	waitQuiet(b, reconciles, start)
	fmt.Println(controllerLine(f.providers, f.gateways, "cold_start", reconciles.take(), f.writes.take(), converged))

	// One provider gains a model: the 2 gateways it is admitted to change.
	start = time.Now()
	var p v1alpha1.InferenceProvider
	measure.Must(b, f.admin.Get(ctx, client.ObjectKeyFromObject(f.changed), &p))
	p.Spec.Models = append(p.Spec.Models, v1alpha1.Model{Name: "model-new"})
	measure.Must(b, f.admin.Update(ctx, &p))
	converged = waitOverlays(b, f.writes, sitesAdmitted, func(r envelope.Result) bool { return r.CandidateCount == candidatesPerGateway+1 }).Sub(start)
	waitQuiet(b, reconciles, start)
	changeWrites := f.writes.take()
	fmt.Println(controllerLine(f.providers, f.gateways, "one_provider_changed", reconciles.take(), changeWrites, converged))
	if changeWrites != sitesAdmitted {
		b.Fatalf("a change to one provider wrote %d ConfigMaps, want %d", changeWrites, sitesAdmitted)
	}
}

// BenchmarkPraxisConfig prints, for the controller case's fleet with every
// gateway generating its praxis.yaml (its 40 admitted providers derived as
// tls endpoints, one mutual_tls hop), a cold start and a change of one
// provider's endpoint:
//
//	praxisconfig providers=<n> gateways=<m> render_p99_ms=<> writes=<> case=<> renders=<> render_p50_ms=<> converged_ms=<>
//
// render_*_ms are the agent's own per-gateway render times (its
// praxis_config_rendered debug lines); writes counts praxis.yaml
// ConfigMap creations and updates seen by a watch. The endpoint change
// must rewrite only the 2 configs whose bytes changed, and no overlay.
func BenchmarkPraxisConfig(b *testing.B) {
	for b.Loop() {
		benchPraxisConfig(b)
	}
}

func benchPraxisConfig(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	f := newFleet(ctx, b, true)
	start := time.Now()
	log := f.runAgent(b)
	converged := waitConfigs(b, f.writes, f.gateways, func(string) bool { return true }).Sub(start)
	waitQuiet(b, log, start)
	log.take()
	fmt.Println(praxisLine(f.providers, f.gateways, "cold_start", log.takeRenders(), f.writes.takeConfigs(), converged))
	f.writes.take()

	start = time.Now()
	var p v1alpha1.InferenceProvider
	measure.Must(b, f.admin.Get(ctx, client.ObjectKeyFromObject(f.changed), &p))
	p.Spec.Endpoint = "https://moved.example:8443"
	measure.Must(b, f.admin.Update(ctx, &p))
	converged = waitConfigs(b, f.writes, sitesAdmitted, func(doc string) bool { return strings.Contains(doc, "moved.example:8443") }).Sub(start)
	waitQuiet(b, log, start)
	log.take()
	configWrites, overlayWrites := f.writes.takeConfigs(), f.writes.take()
	fmt.Println(praxisLine(f.providers, f.gateways, "one_endpoint_changed", log.takeRenders(), configWrites, converged))
	if configWrites != sitesAdmitted || overlayWrites != 0 {
		b.Fatalf("a change to one provider's endpoint wrote %d configs and %d overlays, want %d and 0", configWrites, overlayWrites, sitesAdmitted)
	}
}

func praxisLine(providers, gateways int, what string, durations []float64, writes int, converged time.Duration) string {
	return fmt.Sprintf("praxisconfig providers=%d gateways=%d render_p99_ms=%.2f writes=%d case=%s renders=%d render_p50_ms=%.2f converged_ms=%d",
		providers, gateways, measure.Percentile(durations, 99), writes, what, len(durations), measure.Percentile(durations, 50), converged.Milliseconds())
}

// fleet is the controller case's Grid objects, created before the agent
// starts, and a watch on the gateways' namespace.
type fleet struct {
	site                *framework.Site
	admin               client.WithWatch
	gwNS, credNS        string
	changed             *v1alpha1.InferenceProvider // admitted to 2 gateways
	providers, gateways int
	writes              *overlays
}

// newFleet creates the fleet; with praxis every gateway generates its
// praxis.yaml from its admitted providers.
func newFleet(ctx context.Context, b *testing.B, praxis bool) *fleet {
	// The agent watches the gateways' namespace and the credentials'.
	s := framework.NewSite(b, cp, framework.SiteOptions{Prefix: "controller", More: []string{"cred"}})
	n := s.ID
	f := &fleet{site: s, admin: s.Admin, gwNS: s.Namespace(), credNS: s.Namespaces[1]}
	for i := range 10 {
		measure.Must(b, f.admin.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("token-%d", i), Namespace: f.credNS},
			Data:       map[string][]byte{"token": []byte(fmt.Sprintf("bench-token-%d", i))},
		}))
	}
	for net := range benchNetworks {
		network := &v1alpha1.GridNetwork{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("bench%d-net-%02d", n, net)}}
		name := func(p int) string { return fmt.Sprintf("%s-provider-%03d", network.Name, p) }
		for g := range gatewaysPerNetwork {
			gw := v1alpha1.ConsumerGateway{Name: fmt.Sprintf("gateway-%d", g), Namespace: f.gwNS, SiteName: fmt.Sprintf("site-%d", g)}
			if praxis {
				// The providers admitted to site-g are p%5 == g and
				// (p+1)%5 == g.
				var admitted []string
				for p := range providersPerNetwork {
					if p%gatewaysPerNetwork == g || (p+1)%gatewaysPerNetwork == g {
						admitted = append(admitted, name(p))
					}
				}
				gw.PraxisConfig = &v1alpha1.PraxisConfig{
					Generate: true, ConfigMapName: fmt.Sprintf("praxis-%s-%s", network.Name, gw.Name),
					ClusterEndpoints: []v1alpha1.ClusterEndpoint{{Cluster: "west", Address: "127.0.0.1:30443",
						Transport: &v1alpha1.EndpointTransport{Mode: "mutual_tls", SNI: ptr("west.grid.internal")}}},
					DeriveTopology: &v1alpha1.DeriveTopology{FromProviders: admitted, Transport: &v1alpha1.EndpointTransport{
						Mode: "tls", SNI: ptr("inference-gateway.example"), CASecretRef: &v1alpha1.LocalSecretKeyRef{Name: "serving-ca"},
					}},
				}
			}
			network.Spec.ConsumerGateways = append(network.Spec.ConsumerGateways, gw)
		}
		measure.Must(b, f.admin.Create(ctx, network))
		for p := range providersPerNetwork {
			provider := &v1alpha1.InferenceProvider{
				ObjectMeta: metav1.ObjectMeta{Name: name(p)},
				Spec: v1alpha1.InferenceProviderSpec{
					GridNetworkRef: network.Name,
					ProviderKind:   "vllm", BackendKind: "openai_compatible",
					Endpoint: fmt.Sprintf("https://provider-%03d.example", p),
					AccessPolicy: &v1alpha1.AccessPolicy{SiteSelector: &metav1.LabelSelector{
						MatchExpressions: []metav1.LabelSelectorRequirement{{
							Key: v1alpha1.SiteLabel, Operator: metav1.LabelSelectorOpIn,
							Values: []string{fmt.Sprintf("site-%d", p%gatewaysPerNetwork), fmt.Sprintf("site-%d", (p+1)%gatewaysPerNetwork)},
						}},
					}},
				},
			}
			for m := range modelsPerProvider {
				provider.Spec.Models = append(provider.Spec.Models, v1alpha1.Model{Name: fmt.Sprintf("model-%d", m)})
			}
			if p%2 == 0 {
				provider.Spec.Auth = &v1alpha1.ProviderAuth{Strategy: "bearer_token", SecretRef: &v1alpha1.SecretKeyReference{
					Name: fmt.Sprintf("token-%d", p%10), Namespace: f.credNS, Key: "token",
				}}
			}
			measure.Must(b, f.admin.Create(ctx, provider))
			if f.changed == nil {
				f.changed = provider
			}
		}
	}
	f.providers, f.gateways = benchNetworks*providersPerNetwork, benchNetworks*gatewaysPerNetwork
	f.writes = watchOverlays(ctx, b, f.admin, f.gwNS)
	return f
}

func ptr[T any](v T) *T { return &v }

// runAgent starts the agent binary with the chart's RBAC for the fleet.
func (f *fleet) runAgent(b *testing.B) *reconcileLog {
	return runAgent(b, f.site.AgentArgs(freeAddr(b), framework.AgentOptions{Args: []string{"--log-level", "debug"}})...)
}

func controllerLine(providers, gateways int, what string, durations []float64, writes int, converged time.Duration) string {
	return fmt.Sprintf("publish providers=%d gateways=%d reconcile_p50_ms=%.2f reconcile_p99_ms=%.2f writes=%d case=%s reconciles=%d converged_ms=%d",
		providers, gateways, measure.Percentile(durations, 50), measure.Percentile(durations, 99), writes, what, len(durations), converged.Milliseconds())
}

// overlays follows the ConfigMaps of a namespace through a watch: it
// counts creations and updates, and keeps each one's validated envelope
// and when it arrived, so that the benchmark never polls the API server
// (polling would take CPU from the agent on this 2-core machine).
type overlays struct {
	mu      sync.Mutex
	writes  int
	results map[string]envelope.Result
	at      map[string]time.Time
	// Generated praxis.yaml ConfigMaps (named praxis-*): their writes and
	// latest documents.
	configWrites int
	configs      map[string]string
}

// take returns the overlay writes since the last take.
func (o *overlays) take() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := o.writes
	o.writes = 0
	return n
}

// takeConfigs returns the praxis.yaml writes since the last take.
func (o *overlays) takeConfigs() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := o.configWrites
	o.configWrites = 0
	return n
}

// matchingConfigs returns how many praxis.yaml documents accept takes,
// and when the last of them arrived.
func (o *overlays) matchingConfigs(accept func(string) bool) (int, time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	n, last := 0, time.Time{}
	for name, doc := range o.configs {
		if accept(doc) {
			n++
			if o.at[name].After(last) {
				last = o.at[name]
			}
		}
	}
	return n, last
}

// matching returns how many overlays accept takes, and when the last of
// them arrived.
func (o *overlays) matching(accept func(envelope.Result) bool) (int, time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	n, last := 0, time.Time{}
	for name, res := range o.results {
		if accept(res) {
			n++
			if o.at[name].After(last) {
				last = o.at[name]
			}
		}
	}
	return n, last
}

func watchOverlays(ctx context.Context, b *testing.B, admin client.WithWatch, ns string) *overlays {
	w, err := admin.Watch(ctx, &corev1.ConfigMapList{}, client.InNamespace(ns))
	measure.Must(b, err)
	o := &overlays{results: map[string]envelope.Result{}, at: map[string]time.Time{}, configs: map[string]string{}}
	go func() {
		defer w.Stop()
		for ev := range w.ResultChan() {
			cm, ok := ev.Object.(*corev1.ConfigMap)
			if !ok || (ev.Type != watch.Added && ev.Type != watch.Modified) {
				continue
			}
			now := time.Now()
			switch {
			case strings.HasPrefix(cm.Name, "praxis-"):
				o.mu.Lock()
				o.configWrites++
				o.configs[cm.Name], o.at[cm.Name] = cm.Data["praxis.yaml"], now
				o.mu.Unlock()
			case strings.HasPrefix(cm.Name, "grid-overlay-"):
				res, err := envelope.Validate([]byte(cm.Data[envelope.DataKeyEnvelope]), envelope.Options{})
				o.mu.Lock()
				o.writes++
				if err == nil {
					o.results[cm.Name], o.at[cm.Name] = res, now
				}
				o.mu.Unlock()
			}
		}
	}()
	return o
}

// reconcileLog collects the durations of the agent's network reconciles
// from its debug log.
type reconcileLog struct {
	mu        sync.Mutex
	durations []float64
	last      time.Time
	renders   []float64 // praxis_config_rendered
}

func (r *reconcileLog) takeRenders() []float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	d := r.renders
	r.renders = nil
	return d
}

func (r *reconcileLog) take() []float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	d := r.durations
	r.durations = nil
	return d
}

// quietSince reports whether the agent has reconciled after since and
// not at all in the last controllerQuietPeriod.
func (r *reconcileLog) quietSince(since time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last.After(since) && time.Since(r.last) >= controllerQuietPeriod
}

func (r *reconcileLog) read(stderr io.Reader) {
	scanner := bufio.NewScanner(stderr)
	scanner.Buffer(make([]byte, 64<<10), 1<<20)
	for scanner.Scan() {
		var line struct {
			Msg        string  `json:"msg"`
			DurationMS float64 `json:"duration_ms"`
			Rendered   *bool   `json:"rendered"`
		}
		if json.Unmarshal(scanner.Bytes(), &line) != nil {
			continue
		}
		r.mu.Lock()
		switch line.Msg {
		case "network_reconciled":
			// A reconcile that stopped before rendering (the network
			// waiting for its membership's first reconcile) is not
			// one of the pipeline's: it neither counts nor ends the
			// quiet.
			if line.Rendered != nil && !*line.Rendered {
				break
			}
			r.durations = append(r.durations, line.DurationMS)
			r.last = time.Now()
		case "praxis_config_rendered":
			r.renders = append(r.renders, line.DurationMS)
		}
		r.mu.Unlock()
	}
}

// runAgent starts the agent binary until the benchmark ends.
func runAgent(b *testing.B, args ...string) *reconcileLog {
	cmd := exec.Command(framework.Bin(testbin.Agent), args...) //nolint:noctx // stopped with SIGTERM below
	stderr, err := cmd.StderrPipe()
	measure.Must(b, err)
	measure.Must(b, cmd.Start())
	log := &reconcileLog{}
	done := make(chan struct{})
	go func() { log.read(stderr); close(done) }()
	b.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		<-done
		if err := cmd.Wait(); err != nil {
			b.Errorf("agent: %v", err)
		}
	})
	return log
}

// waitQuiet waits until the agent has reconciled after since (the
// ConfigMaps can be written before the reconcile that wrote them ends)
// and has then been quiet for a while.
func waitQuiet(b *testing.B, r *reconcileLog, since time.Time) {
	deadline := time.Now().Add(time.Minute)
	for !r.quietSince(since) {
		if time.Now().After(deadline) {
			b.Fatal("the agent did not settle within a minute")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitOverlays waits until at least n overlays are taken by accept and
// returns when the last of them arrived.
func waitOverlays(b *testing.B, o *overlays, n int, accept func(envelope.Result) bool) time.Time {
	deadline := time.Now().Add(5 * time.Minute)
	for {
		got, last := o.matching(accept)
		if got >= n {
			return last
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d overlays published", got, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitConfigs waits until at least n praxis.yaml documents are taken by
// accept and returns when the last of them arrived.
func waitConfigs(b *testing.B, o *overlays, n int, accept func(string) bool) time.Time {
	deadline := time.Now().Add(5 * time.Minute)
	for {
		got, last := o.matchingConfigs(accept)
		if got >= n {
			return last
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d praxis configs applied", got, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
