package controller_test

import (
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/controller"
)

// The schema refuses bad objects with a message that names the field, so
// a mistake is caught at kubectl apply and not by the controller.
func TestAPIServerRefusesInvalidGridObjects(t *testing.T) {
	e := newEnv(t)
	valid := func() *v1alpha1.InferenceProvider { return e.provider("valid", "net", "m") }
	tests := []struct {
		name   string
		field  string
		mutate func(p *v1alpha1.InferenceProvider)
	}{
		{name: "no models", field: "spec.models", mutate: func(p *v1alpha1.InferenceProvider) { p.Spec.Models = nil }},
		{name: "endpoint not a URL", field: "spec.endpoint", mutate: func(p *v1alpha1.InferenceProvider) { p.Spec.Endpoint = "east.example" }},
		{name: "no network", field: "spec.gridNetworkRef", mutate: func(p *v1alpha1.InferenceProvider) { p.Spec.GridNetworkRef = "" }},
		{name: "bad provider kind", field: "spec.providerKind", mutate: func(p *v1alpha1.InferenceProvider) { p.Spec.ProviderKind = "Not OK" }},
		{name: "health period too short", field: "spec.healthCheck.periodSeconds", mutate: func(p *v1alpha1.InferenceProvider) {
			p.Spec.HealthCheck = &v1alpha1.HealthCheck{Endpoint: "https://x.example/h", PeriodSeconds: 1}
		}},
		{name: "duplicate model", field: "spec.models", mutate: func(p *v1alpha1.InferenceProvider) {
			p.Spec.Models = []v1alpha1.Model{{Name: "m"}, {Name: "m"}}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := valid()
			p.Name += "-" + t.Name()[len(t.Name())-3:]
			tt.mutate(p)
			err := e.admin.Create(e.ctx, p)
			require.Error(t, err)
			assert.True(t, apierrors.IsInvalid(err), "%v", err)
			assert.Contains(t, err.Error(), tt.field)
		})
	}

	long := e.network()
	long.Name = "a-network-name-that-is-longer-than-sixty-three-characters-" + e.id + "-xxxxxxxx"
	err := e.admin.Create(e.ctx, long)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "at most 63 characters")

	bad := e.network(v1alpha1.ConsumerGateway{Name: "Edge_1", Namespace: e.gwNS})
	err = e.admin.Create(e.ctx, bad)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "spec.consumerGateways[0].name")

	// Site names are lowercase DNS labels, as everywhere in the Grid.
	for _, site := range []string{"East", "east_edge", "east.edge"} {
		err = e.admin.Create(e.ctx, e.network(v1alpha1.ConsumerGateway{Name: "edge", Namespace: e.gwNS, SiteName: site}))
		require.Error(t, err, site)
		assert.Contains(t, err.Error(), "spec.consumerGateways[0].siteName")
	}
	// An unknown auth strategy is refused; the reference's others are
	// accepted (and reported UnsupportedAuthStrategy).
	unknown := valid()
	unknown.Name += "-auth"
	unknown.Spec.Auth = &v1alpha1.ProviderAuth{Strategy: "magic"}
	err = e.admin.Create(e.ctx, unknown)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "spec.auth.strategy")

	// A health check may be empty. Its interval is not defaulted by the
	// schema (a defaulted periodSeconds would contradict an interval set
	// under its current name); the agent probes every 30 s.
	empty := valid()
	empty.Name += "-empty-hc"
	empty.Spec.HealthCheck = &v1alpha1.HealthCheck{}
	e.create(empty)
	assert.Equal(t, v1alpha1.HealthCheck{}, *empty.Spec.HealthCheck)
}

// warnings records the API server's warnings to a client.
type warnings struct {
	mu   sync.Mutex
	seen []string
}

func (w *warnings) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.seen = append(w.seen, text)
}

func (w *warnings) all() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.Join(w.seen, "\n")
}

// transport.caSecretRef names a Secret of the gateway's namespace and has
// no namespace of its own (the reference's field-specific change): strict
// field validation refuses one, naming it; Warn accepts the object with a
// warning and Ignore silently, both pruning it. spec.tls.caSecretRef keeps
// its namespace.
func TestTransportCASecretRefNamespaceIsRefusedOrPruned(t *testing.T) {
	e := newEnv(t)
	recorded := &warnings{}
	cfg := rest.CopyConfig(e.cp.AdminConfig())
	cfg.WarningHandler = recorded
	scheme, err := controller.Scheme()
	require.NoError(t, err)
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	require.NoError(t, err)

	caRef := func() map[string]any { return map[string]any{"name": "backend-ca", "namespace": "elsewhere"} }
	network := func(name string) *unstructured.Unstructured {
		transport := map[string]any{"mode": "tls", "sni": "api.internal", "caSecretRef": caRef()}
		return gridObject("GridNetwork", name, map[string]any{
			"tls": map[string]any{"caSecretRef": map[string]any{"name": "grid-ca", "namespace": e.credNS}},
			"consumerGateways": []any{map[string]any{"name": "edge", "namespace": e.gwNS, "praxisConfig": map[string]any{
				"generate":         true,
				"clusterEndpoints": []any{map[string]any{"cluster": "api", "address": "api.internal:443", "transport": transport}},
				"deriveTopology":   map[string]any{"fromProviders": []any{"p"}, "transport": map[string]any{"mode": "tls", "sni": "gw.internal", "caSecretRef": caRef()}},
			}}},
		})
	}
	const endpointField = "spec.consumerGateways[0].praxisConfig.clusterEndpoints[0].transport.caSecretRef.namespace"
	const derivedField = "spec.consumerGateways[0].praxisConfig.deriveTopology.transport.caSecretRef.namespace"

	err = c.Create(e.ctx, network("ca-ns-strict-"+e.id), client.FieldValidation("Strict"))
	require.Error(t, err)
	assert.True(t, apierrors.IsBadRequest(err), "%v", err)
	assert.Contains(t, err.Error(), endpointField)
	assert.Contains(t, err.Error(), derivedField)

	for _, mode := range []string{"Warn", "Ignore"} {
		before := recorded.all()
		name := "ca-ns-" + strings.ToLower(mode) + "-" + e.id
		require.NoError(t, c.Create(e.ctx, network(name), client.FieldValidation(mode)), mode)
		t.Cleanup(func() { _ = e.admin.Delete(e.ctx, &v1alpha1.GridNetwork{ObjectMeta: metav1.ObjectMeta{Name: name}}) })
		warned := strings.TrimPrefix(recorded.all(), before)
		if mode == "Warn" {
			assert.Contains(t, warned, endpointField, "Warn says what it pruned")
		} else {
			assert.NotContains(t, warned, "caSecretRef", "Ignore drops it silently")
		}
		got := &unstructured.Unstructured{}
		got.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("GridNetwork"))
		require.NoError(t, e.admin.Get(e.ctx, client.ObjectKey{Name: name}, got))
		gw := got.Object["spec"].(map[string]any)["consumerGateways"].([]any)[0].(map[string]any)["praxisConfig"].(map[string]any)
		endpointRef := gw["clusterEndpoints"].([]any)[0].(map[string]any)["transport"].(map[string]any)["caSecretRef"]
		derivedRef := gw["deriveTopology"].(map[string]any)["transport"].(map[string]any)["caSecretRef"]
		want := map[string]any{"name": "backend-ca", "key": "ca.crt"}
		assert.Equal(t, want, endpointRef, "%s: the namespace pruned", mode)
		assert.Equal(t, want, derivedRef, "%s: the namespace pruned", mode)
		assert.Equal(t, e.credNS, readNetwork(e, name).Spec.TLS.CASecretRef.Namespace, "spec.tls.caSecretRef keeps its namespace")
	}
}

// The agent maps the Grid kinds without asking discovery (so that it can
// start while the API server is unreachable): what it maps them to must be
// what the installed CRDs serve, and every other kind still comes from
// discovery.
func TestGridMappingMatchesTheCRDs(t *testing.T) {
	e := newEnv(t)
	mgr, err := controller.NewManager(e.saConfig, controller.ManagerOptions{SeveralPerProcess: true})
	require.NoError(t, err)
	httpClient, err := rest.HTTPClientFor(e.saConfig)
	require.NoError(t, err)
	discovered, err := apiutil.NewDynamicRESTMapper(e.saConfig, httpClient)
	require.NoError(t, err)
	kinds := []schema.GroupKind{{Group: corev1.GroupName, Kind: "ConfigMap"}, {Group: "coordination.k8s.io", Kind: "Lease"}}
	for _, obj := range []runtime.Object{&v1alpha1.GridNetwork{}, &v1alpha1.InferenceProvider{}, &v1alpha1.GridSite{}} {
		gvk, err := apiutil.GVKForObject(obj, mgr.GetScheme())
		require.NoError(t, err)
		kinds = append(kinds, gvk.GroupKind())
	}
	for _, gk := range kinds {
		want, err := discovered.RESTMapping(gk)
		require.NoError(t, err, gk.String())
		got, err := mgr.GetRESTMapper().RESTMapping(gk)
		require.NoError(t, err, gk.String())
		assert.Equal(t, want.Resource, got.Resource, gk.String())
		assert.Equal(t, want.GroupVersionKind, got.GroupVersionKind, gk.String())
		assert.Equal(t, want.Scope.Name(), got.Scope.Name(), gk.String())
	}
}
