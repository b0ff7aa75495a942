package overlaysync_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/gridsync/gridsync/shared/envelope"
	"github.com/gridsync/gridsync/shared/overlaysync"
	"github.com/gridsync/gridsync/test/controlplane"
)

var namespaceSeq atomic.Int64

// gateway is one gateway's overlay source in its own namespace, with a
// ServiceAccount whose Role allows get/list/watch on that one ConfigMap.
type gateway struct {
	t         *testing.T
	namespace string
	configMap string
	scope     envelope.Scope
	admin     kubernetes.Interface
	saConfig  *rest.Config
	dir       string
}

// fixtureScope is the scope of most contract fixtures.
var fixtureScope = envelope.Scope{Network: "glb-demo", Gateway: "glb-demo-edge-gateway", Namespace: "grid-system", LocalSite: "east-edge"}

func newGateway(t *testing.T) *gateway {
	t.Helper()
	return newGatewayFor(t, fixtureScope)
}

// newGatewayFor prepares a gateway that expects scope; its ConfigMap is
// named after the scope's network and gateway.
func newGatewayFor(t *testing.T, scope envelope.Scope) *gateway {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ns := fmt.Sprintf("gateway-%d", namespaceSeq.Add(1))
	t.Logf("namespace %s", ns)
	g := &gateway{
		t:         t,
		namespace: ns,
		scope:     scope,
		admin:     cp.AdminClient(),
		dir:       t.TempDir(),
	}
	g.configMap = envelope.ConfigMapName(g.scope.Network, g.scope.Gateway)
	var err error
	g.saConfig, err = cp.ConfigMapReaderConfig(ctx, ns, "gateway", g.configMap)
	require.NoError(t, err)
	return g
}

func (g *gateway) output() string { return filepath.Join(g.dir, "routing-overlay.json") }

func (g *gateway) options() overlaysync.Options {
	return overlaysync.Options{
		Namespace: g.namespace,
		ConfigMap: g.configMap,
		DataKey:   envelope.DataKeyEnvelope,
		Output:    g.output(),
		Expect:    g.scope,
		Logger:    slog.New(slog.NewJSONHandler(testWriter{g.t}, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
}

// running is a Syncer running in the background with its own registry.
type running struct {
	*overlaysync.Syncer
	registry *prometheus.Registry
	stop     func()
	done     chan error
}

// start runs a Syncer with the ServiceAccount's client (or config when
// given, for a proxied connection) until the test ends.
func (g *gateway) start(opts overlaysync.Options, config ...*rest.Config) *running {
	g.t.Helper()
	cfg := g.saConfig
	if len(config) > 0 {
		cfg = config[0]
	}
	reg := prometheus.NewRegistry()
	opts.Registerer = reg
	s, err := overlaysync.New(cfg, opts)
	require.NoError(g.t, err)
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{Syncer: s, registry: reg, done: make(chan error, 1)}
	go func() { r.done <- s.Run(ctx) }()
	r.stop = func() {
		cancel()
		select {
		case err := <-r.done:
			require.NoError(g.t, err)
		case <-time.After(10 * time.Second):
			g.t.Error("Run did not return within 10s of cancel")
		}
	}
	g.t.Cleanup(func() {
		if ctx.Err() == nil {
			r.stop()
		}
	})
	return r
}

// put creates or updates the ConfigMap with data under the envelope key
// and returns its new resourceVersion.
func (g *gateway) put(data map[string]string) string {
	g.t.Helper()
	return g.putConfigMap(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: g.configMap}, Data: data})
}

// putConfigMap creates or replaces the gateway's ConfigMap with cm and
// returns its new resourceVersion.
func (g *gateway) putConfigMap(cm *corev1.ConfigMap) string {
	g.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cms := g.admin.CoreV1().ConfigMaps(g.namespace)
	updated, err := cms.Update(ctx, cm, metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) {
		updated, err = cms.Create(ctx, cm, metav1.CreateOptions{})
	}
	require.NoError(g.t, err)
	return updated.ResourceVersion
}

func (g *gateway) putEnvelope(doc []byte) string {
	return g.put(map[string]string{envelope.DataKeyEnvelope: string(doc)})
}

func (g *gateway) delete() {
	g.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(g.t, g.admin.CoreV1().ConfigMaps(g.namespace).Delete(ctx, g.configMap, metav1.DeleteOptions{}))
}

// envelopeFor builds a valid envelope for this gateway; variant changes
// the routing state and so the revision.
func (g *gateway) envelopeFor(variant int) ([]byte, string) {
	g.t.Helper()
	return buildEnvelope(g.t, g.scope, variant, 0)
}

// buildEnvelope builds a valid envelope; padCandidates adds candidates to
// reach a size.
func buildEnvelope(t testing.TB, scope envelope.Scope, variant, padCandidates int) ([]byte, string) {
	t.Helper()
	rank := int64(variant)
	overlay := envelope.Overlay{
		Network:   scope.Network,
		LocalSite: scope.LocalSite,
		Candidates: []envelope.Candidate{{
			Kind: envelope.CandidateKindInferenceModel, Name: "model-east", Site: "east-provider",
			Cluster: "sim-east-provider", Fresh: true, Rank: &rank,
		}},
	}
	for i := range padCandidates {
		r := int64(i + 1)
		overlay.Candidates = append(overlay.Candidates, envelope.Candidate{
			Kind: envelope.CandidateKindInferenceModel, Name: fmt.Sprintf("padding-model-%06d", i), Site: "west-provider",
			Cluster: fmt.Sprintf("sim-west-provider-%06d", i), Fresh: true, Rank: &r,
		})
	}
	doc, revision, err := envelope.Build(overlay, scope, envelope.Provenance{
		Producer: "gridsync-tests", SourceName: scope.Network, SourceGeneration: int64(variant), RenderedAt: time.Now(),
	})
	require.NoError(t, err)
	return doc, revision
}

// waitObserved waits until the Syncer has handled resourceVersion rv.
func (r *running) waitObserved(t *testing.T, rv string) overlaysync.Status {
	t.Helper()
	var st overlaysync.Status
	require.Eventually(t, func() bool {
		st = r.Status()
		return st.Source.ResourceVersion == rv
	}, 20*time.Second, 5*time.Millisecond, "resourceVersion %s never observed (last status %+v)", rv, st)
	return r.Status()
}

func (r *running) waitStatus(t *testing.T, what string, cond func(overlaysync.Status) bool) overlaysync.Status {
	t.Helper()
	var st overlaysync.Status
	require.Eventually(t, func() bool {
		st = r.Status()
		return cond(st)
	}, 30*time.Second, 5*time.Millisecond, "%s (last status %+v)", what, st)
	return st
}

// metric returns the value of the first counter or gauge series of name
// that carries the given label pairs.
func (r *running) metric(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	families, err := r.registry.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	metrics:
		for _, m := range f.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				found := false
				for _, lp := range m.GetLabel() {
					if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
						found = true
					}
				}
				if !found {
					continue metrics
				}
			}
			switch {
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue()
			}
		}
	}
	return 0
}

func readOutput(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	return string(data)
}

// testWriter sends log lines to the test's log, so that a failing test
// shows what the Syncer did.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

// newProxy puts a cuttable, freezable TCP proxy in front of the API server
// for the test.
func newProxy(t *testing.T) *controlplane.Proxy {
	t.Helper()
	proxy, err := cp.NewProxy()
	require.NoError(t, err)
	t.Cleanup(func() { _ = proxy.Close() })
	return proxy
}

// newHoldingProxy puts an HTTPS proxy that can hold or delay requests in
// front of the API server for the test.
func newHoldingProxy(t *testing.T) *controlplane.HoldingProxy {
	t.Helper()
	proxy, err := cp.NewHoldingProxy()
	require.NoError(t, err)
	t.Cleanup(func() { _ = proxy.Close() })
	return proxy
}
