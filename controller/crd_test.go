package controller_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/gridsync/gridsync/api/v1alpha1"
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
