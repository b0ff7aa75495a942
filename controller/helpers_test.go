package controller_test

import (
	"context"
	"crypto/x509"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/controller"
	"github.com/gridsync/gridsync/controller/probe"
	"github.com/gridsync/gridsync/shared/envelope"
	"github.com/gridsync/gridsync/test/controlplane"
	"github.com/gridsync/gridsync/test/testproc"
)

var seq atomic.Int32

// env is one test's corner of a cluster: its own namespaces, a
// ServiceAccount with exactly the agent's RBAC, and names that no other
// test uses (the Grid resources are cluster-scoped).
type env struct {
	t        *testing.T
	cp       *controlplane.ControlPlane // the test's alone while it runs
	ctx      context.Context
	id       string
	agentNS  string // the agent's namespace (its Lease)
	gwNS     string // where the gateways run
	credNS   string // where credential Secrets live
	admin    client.Client
	saConfig *rest.Config
	logs     *testproc.Buffer
}

// newEnv runs the test in parallel with others, on a control plane that
// it has alone until it ends (its cleanups included).
func newEnv(t *testing.T) *env {
	t.Helper()
	t.Parallel()
	cp := <-planes
	t.Cleanup(func() { planes <- cp })
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	n := seq.Add(1)
	e := &env{t: t, cp: cp, ctx: ctx, id: fmt.Sprint(n), logs: &testproc.Buffer{}}
	e.agentNS, e.gwNS, e.credNS = fmt.Sprintf("agent-%d", n), fmt.Sprintf("gw-%d", n), fmt.Sprintf("cred-%d", n)
	for _, ns := range []string{e.agentNS, e.gwNS, e.credNS} {
		require.NoError(t, cp.EnsureNamespace(ctx, ns))
	}
	scheme, err := controller.Scheme()
	require.NoError(t, err)
	e.admin, err = client.New(cp.AdminConfig(), client.Options{Scheme: scheme})
	require.NoError(t, err)

	// Exactly what the agent's chart grants: cluster-wide read of the Grid
	// resources and their status, ConfigMaps and Secrets in the listed
	// namespaces, the Lease in its own.
	e.saConfig, err = cp.AgentConfig(ctx, e.agentNS, []string{e.gwNS, e.credNS})
	require.NoError(t, err)

	t.Cleanup(e.deleteGridObjects)
	return e
}

// requestLog records the agent's write requests (method and path).
type requestLog struct {
	mu     sync.Mutex
	writes []string
}

func (l *requestLog) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		if req.Method != http.MethodGet {
			l.mu.Lock()
			l.writes = append(l.writes, req.Method+" "+req.URL.Path)
			l.mu.Unlock()
		}
		return rt.RoundTrip(req)
	})
}

// since returns the writes after the first n, leaving out the Lease
// renewals of leader election, which are the only writes an idle leader
// makes by design.
func (l *requestLog) since(n int) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, w := range l.writes[n:] {
		if !strings.Contains(w, "/leases/") {
			out = append(out, w)
		}
	}
	return out
}

func (l *requestLog) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.writes)
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// agent is a running controller manager.
type agent struct {
	requests *requestLog
	t        *testing.T
	once     sync.Once
	cancel   context.CancelFunc
	done     chan error
	elected  <-chan struct{}
}

type agentOption func(*controller.ManagerOptions)

// withProbesTo lets the agent probe the test's HTTPS server on loopback,
// which probes never dial by default.
func withProbesTo(srv *httptest.Server) agentOption {
	return func(o *controller.ManagerOptions) {
		o.ProbeDestinations = probe.Destinations{AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}
		o.ProbeRootCAs = x509.NewCertPool()
		o.ProbeRootCAs.AddCert(srv.Certificate())
	}
}

// startAgent runs the controller as the agent does, with the test's
// ServiceAccount, until the test ends or stop is called.
func (e *env) startAgent(opts ...agentOption) *agent {
	e.t.Helper()
	mo := controller.ManagerOptions{
		Options: controller.Options{
			Namespaces:      []string{e.gwNS, e.credNS},
			ProducerVersion: "test",
			// Secrets and ConfigMaps are not watched: tests see their
			// changes at a short resync.
			ResyncPeriod:   2 * time.Second,
			EventNamespace: e.agentNS,
			Logger:         slog.New(slog.NewJSONHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		},
		LeaderElection:          true,
		LeaderElectionNamespace: e.agentNS,
		LeaderElectionID:        "gridsync-agent",
		LeaseDuration:           4 * time.Second,
		RenewDeadline:           3 * time.Second,
		RetryPeriod:             500 * time.Millisecond,
		SeveralPerProcess:       true,
	}
	for _, o := range opts {
		o(&mo)
	}
	requests := &requestLog{}
	cfg := rest.CopyConfig(e.saConfig)
	cfg.Wrap(requests.wrap)
	mgr, err := controller.NewManager(cfg, mo)
	require.NoError(e.t, err)
	ctx, cancel := context.WithCancel(context.Background())
	a := &agent{requests: requests, t: e.t, cancel: cancel, done: make(chan error, 1), elected: mgr.Elected()}
	go func() { a.done <- mgr.Start(ctx) }()
	e.t.Cleanup(a.stop)
	return a
}

func (a *agent) stop() { a.once.Do(a.stopOnce) }

func (a *agent) stopOnce() {
	a.cancel()
	select {
	case err := <-a.done:
		if err != nil {
			a.t.Errorf("agent stopped with an error: %v", err)
		}
	case <-time.After(15 * time.Second):
		a.t.Error("agent did not stop within 15s")
	}
}

func (a *agent) leading() bool {
	select {
	case <-a.elected:
		return true
	default:
		return false
	}
}

func (e *env) meta(name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name + "-" + e.id, Labels: map[string]string{"test": e.id}}
}

func (e *env) create(obj client.Object) {
	e.t.Helper()
	require.NoError(e.t, e.admin.Create(e.ctx, obj))
}

// update re-reads obj, applies mutate and writes it, retrying conflicts.
func update[T client.Object](e *env, obj T, mutate func(T)) {
	e.t.Helper()
	for range 10 {
		require.NoError(e.t, e.admin.Get(e.ctx, client.ObjectKeyFromObject(obj), obj))
		mutate(obj)
		err := e.admin.Update(e.ctx, obj)
		if err == nil {
			return
		}
		require.True(e.t, apierrors.IsConflict(err), "update %s: %v", obj.GetName(), err)
	}
	e.t.Fatalf("update %s: conflicts did not stop", obj.GetName())
}

func (e *env) network(gateways ...v1alpha1.ConsumerGateway) *v1alpha1.GridNetwork {
	return &v1alpha1.GridNetwork{ObjectMeta: e.meta("net"), Spec: v1alpha1.GridNetworkSpec{ConsumerGateways: gateways}}
}

func (e *env) gateway(name, site string) v1alpha1.ConsumerGateway {
	return v1alpha1.ConsumerGateway{Name: name, Namespace: e.gwNS, SiteName: site}
}

func (e *env) provider(name, network string, models ...string) *v1alpha1.InferenceProvider {
	p := &v1alpha1.InferenceProvider{
		ObjectMeta: e.meta(name),
		Spec: v1alpha1.InferenceProviderSpec{
			GridNetworkRef: network,
			ProviderKind:   "vllm",
			BackendKind:    "openai_compatible",
			Endpoint:       "https://" + name + ".example",
		},
	}
	for _, m := range models {
		p.Spec.Models = append(p.Spec.Models, v1alpha1.Model{Name: m})
	}
	return p
}

func (e *env) secret(name string, data map[string][]byte) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.credNS}, Data: data}
}

func (e *env) bearer(secret, key string) *v1alpha1.ProviderAuth {
	return &v1alpha1.ProviderAuth{Strategy: "bearer_token", SecretRef: &v1alpha1.SecretKeyReference{Name: secret, Namespace: e.credNS, Key: key}}
}

// eventually waits up to 20 s for cond, then fails with its last word.
func (e *env) eventually(what string, cond func() (bool, string)) {
	e.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	var last string
	for time.Now().Before(deadline) {
		ok, why := cond()
		if ok {
			return
		}
		last = why
		time.Sleep(50 * time.Millisecond)
	}
	e.t.Fatalf("timed out waiting for %s: %s", what, last)
}

// overlayOf returns the gateway's ConfigMap once its envelope holds a
// revision for which accept returns true.
func (e *env) overlayOf(network *v1alpha1.GridNetwork, gateway v1alpha1.ConsumerGateway, accept func(envelope.Result) bool) (*corev1.ConfigMap, envelope.Result) {
	e.t.Helper()
	var cm corev1.ConfigMap
	var res envelope.Result
	key := types.NamespacedName{Namespace: gateway.Namespace, Name: envelope.ConfigMapName(network.Name, gateway.Name)}
	e.eventually("overlay ConfigMap "+key.String(), func() (bool, string) {
		if err := e.admin.Get(e.ctx, key, &cm); err != nil {
			return false, err.Error()
		}
		site := gateway.SiteName
		if site == "" {
			site = network.Name
		}
		doc, err := storedEnvelope(&cm)
		if err != nil {
			return false, err.Error()
		}
		res, err = envelope.Validate(doc, envelope.Options{MaxBytes: envelope.MaxBytesCeiling, Expect: envelope.Scope{
			Network: network.Name, Gateway: gateway.Name, Namespace: gateway.Namespace, LocalSite: site,
		}})
		if err != nil {
			return false, err.Error()
		}
		return accept(res), fmt.Sprintf("revision %s with %d candidates", res.Revision, res.CandidateCount)
	})
	return &cm, res
}

func anyRevision(envelope.Result) bool { return true }

// storedEnvelope is the envelope an overlay ConfigMap holds, in its plain
// or its compressed form.
func storedEnvelope(cm *corev1.ConfigMap) ([]byte, error) {
	if doc, ok := cm.Data[envelope.DataKeyEnvelope]; ok {
		return []byte(doc), nil
	}
	packed, ok := cm.BinaryData[envelope.CompressedKey(envelope.DataKeyEnvelope)]
	if !ok {
		return nil, fmt.Errorf("no overlay in either form")
	}
	return envelope.Decompress(packed, envelope.MaxBytesCeiling)
}

// gatewayStatus waits until the network's entry for gateway satisfies ok.
func (e *env) gatewayStatus(network *v1alpha1.GridNetwork, gateway string, ok func(v1alpha1.GatewayOverlayStatus) bool) v1alpha1.GatewayOverlayStatus {
	e.t.Helper()
	var got v1alpha1.GatewayOverlayStatus
	e.eventually(network.Name+"/"+gateway, func() (bool, string) {
		var n v1alpha1.GridNetwork
		if err := e.admin.Get(e.ctx, client.ObjectKeyFromObject(network), &n); err != nil {
			return false, err.Error()
		}
		for _, s := range n.Status.OverlayStatus {
			if s.GatewayName == gateway {
				got = s
				return ok(s), string(s.Phase) + "/" + s.Reason
			}
		}
		return false, "no entry"
	})
	return got
}

// providerPhase waits for a provider's phase and reason.
func (e *env) providerPhase(p *v1alpha1.InferenceProvider, phase v1alpha1.ProviderPhase, reason string) *v1alpha1.InferenceProvider {
	e.t.Helper()
	var got v1alpha1.InferenceProvider
	e.eventually(p.Name+" "+string(phase)+"/"+reason, func() (bool, string) {
		if err := e.admin.Get(e.ctx, client.ObjectKeyFromObject(p), &got); err != nil {
			return false, err.Error()
		}
		return got.Status.Phase == phase && got.Status.Reason == reason, string(got.Status.Phase) + "/" + got.Status.Reason
	})
	return &got
}
