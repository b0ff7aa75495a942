package assess_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/controller/assess"
	"github.com/gridsync/gridsync/controller/render"
)

type secrets map[string]assess.SecretShape

func (s secrets) SecretShape(namespace, name string) (assess.SecretShape, bool, error) {
	shape, ok := s[namespace+"/"+name]
	return shape, ok, nil
}

func bearer(name, key string) *v1alpha1.ProviderAuth {
	return &v1alpha1.ProviderAuth{Strategy: "bearer_token", SecretRef: &v1alpha1.SecretKeyReference{Name: name, Namespace: "creds", Key: key}}
}

func newProvider(mutate func(*v1alpha1.InferenceProvider)) *v1alpha1.InferenceProvider {
	p := &v1alpha1.InferenceProvider{
		ObjectMeta: metav1.ObjectMeta{Name: "east-provider"},
		Spec: v1alpha1.InferenceProviderSpec{
			GridNetworkRef: "net",
			Models:         []v1alpha1.Model{{Name: "m1"}, {Name: "m2"}},
			Endpoint:       "https://east.example",
		},
	}
	if mutate != nil {
		mutate(p)
	}
	return p
}

func TestAssess(t *testing.T) {
	store := secrets{
		"creds/good":  {"token": true, "other": false},
		"creds/empty": {"token": false},
	}
	healthCheck := func(p *v1alpha1.InferenceProvider) {
		p.Spec.HealthCheck = &v1alpha1.HealthCheck{Endpoint: "https://east.example/health", PeriodSeconds: 5}
	}
	tests := []struct {
		name       string
		mutate     func(*v1alpha1.InferenceProvider)
		health     assess.Health
		phase      v1alpha1.ProviderPhase
		reason     string
		credential bool
	}{
		{"no auth", nil, assess.Health{}, v1alpha1.ProviderAvailable, assess.ReasonReady, false},
		{"verified bearer token", func(p *v1alpha1.InferenceProvider) { p.Spec.Auth = bearer("good", "token") },
			assess.Health{}, v1alpha1.ProviderAvailable, assess.ReasonReady, true},
		{"unsupported strategy", func(p *v1alpha1.InferenceProvider) { p.Spec.Auth = &v1alpha1.ProviderAuth{Strategy: "mtls_only"} },
			assess.Health{}, v1alpha1.ProviderUnavailable, assess.ReasonUnsupportedAuthStrategy, false},
		{"bearer token without a reference", func(p *v1alpha1.InferenceProvider) { p.Spec.Auth = &v1alpha1.ProviderAuth{Strategy: "bearer_token"} },
			assess.Health{}, v1alpha1.ProviderUnavailable, assess.ReasonCredentialSecretRefInvalid, false},
		{"reference without a key", func(p *v1alpha1.InferenceProvider) { p.Spec.Auth = bearer("good", "") },
			assess.Health{}, v1alpha1.ProviderUnavailable, assess.ReasonCredentialSecretRefInvalid, false},
		{"reference into an unwatched namespace", func(p *v1alpha1.InferenceProvider) {
			p.Spec.Auth = bearer("good", "token")
			p.Spec.Auth.SecretRef.Namespace = "elsewhere"
		}, assess.Health{}, v1alpha1.ProviderUnavailable, assess.ReasonCredentialSecretRefInvalid, false},
		{"missing Secret", func(p *v1alpha1.InferenceProvider) { p.Spec.Auth = bearer("gone", "token") },
			assess.Health{}, v1alpha1.ProviderUnavailable, assess.ReasonCredentialSecretMissing, false},
		{"missing key", func(p *v1alpha1.InferenceProvider) { p.Spec.Auth = bearer("good", "nope") },
			assess.Health{}, v1alpha1.ProviderUnavailable, assess.ReasonCredentialSecretKeyMissing, false},
		{"invalid value", func(p *v1alpha1.InferenceProvider) { p.Spec.Auth = bearer("good", "other") },
			assess.Health{}, v1alpha1.ProviderUnavailable, assess.ReasonCredentialSecretValueInvalid, false},
		{"empty value", func(p *v1alpha1.InferenceProvider) { p.Spec.Auth = bearer("empty", "token") },
			assess.Health{}, v1alpha1.ProviderUnavailable, assess.ReasonCredentialSecretValueInvalid, false},
		{"externally managed credentials are neither checked nor projected", func(p *v1alpha1.InferenceProvider) {
			p.Spec.Auth = bearer("gone", "token")
			p.Spec.Auth.CredentialsManagedExternally = true
		}, assess.Health{}, v1alpha1.ProviderAvailable, assess.ReasonReady, false},
		{"externally managed, any strategy", func(p *v1alpha1.InferenceProvider) {
			p.Spec.Auth = &v1alpha1.ProviderAuth{Strategy: "sigv4", CredentialsManagedExternally: true}
		}, assess.Health{}, v1alpha1.ProviderAvailable, assess.ReasonReady, false},
		{"invalid access policy", func(p *v1alpha1.InferenceProvider) {
			p.Spec.AccessPolicy = &v1alpha1.AccessPolicy{SiteSelector: &metav1.LabelSelector{
				MatchExpressions: []metav1.LabelSelectorRequirement{{Key: v1alpha1.SiteLabel, Operator: "In"}},
			}}
		}, assess.Health{}, v1alpha1.ProviderUnavailable, assess.ReasonAccessPolicyInvalid, false},
		{"not probed yet counts as healthy", healthCheck, assess.Health{}, v1alpha1.ProviderAvailable, assess.ReasonReady, false},
		{"probe passing", healthCheck, assess.Health{Probed: true}, v1alpha1.ProviderAvailable, assess.ReasonReady, false},
		{"one failure degrades", healthCheck, assess.Health{Probed: true, ConsecutiveFailures: 1, LastError: "status 503"},
			v1alpha1.ProviderDegraded, assess.ReasonHealthCheckFailing, false},
		{"two failures still degraded", healthCheck, assess.Health{Probed: true, ConsecutiveFailures: 2},
			v1alpha1.ProviderDegraded, assess.ReasonHealthCheckFailing, false},
		{"three failures make it unavailable", healthCheck, assess.Health{Probed: true, ConsecutiveFailures: 3},
			v1alpha1.ProviderUnavailable, assess.ReasonHealthCheckFailed, false},
		{"health without a health check is ignored", nil, assess.Health{Probed: true, ConsecutiveFailures: 9},
			v1alpha1.ProviderAvailable, assess.ReasonReady, false},
		{"credentials decide before health", func(p *v1alpha1.InferenceProvider) {
			healthCheck(p)
			p.Spec.Auth = bearer("gone", "token")
		}, assess.Health{Probed: true, ConsecutiveFailures: 1}, v1alpha1.ProviderUnavailable, assess.ReasonCredentialSecretMissing, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, err := assess.Assess(newProvider(tt.mutate), assess.Options{
				Secrets:                store,
				SecretNamespaceWatched: func(ns string) bool { return ns == "creds" },
				Health:                 tt.health,
			})
			require.NoError(t, err)
			assert.Equal(t, tt.phase, v.Phase)
			assert.Equal(t, tt.reason, v.Reason)
			assert.NotEmpty(t, v.Message)
			assert.Equal(t, tt.phase, v.Provider.Phase)
			assert.Equal(t, tt.credential, v.Provider.Credential != nil)
			assert.Equal(t, []string{"m1", "m2"}, v.Provider.Models)
			assert.Equal(t, "east-provider", v.Provider.Cluster, "the cluster defaults to the name")
		})
	}
}

func TestAssessedAccessPolicySelectsSites(t *testing.T) {
	p := newProvider(func(p *v1alpha1.InferenceProvider) {
		p.Spec.ClusterName = "c1"
		p.Spec.AccessPolicy = &v1alpha1.AccessPolicy{SiteSelector: &metav1.LabelSelector{MatchLabels: map[string]string{v1alpha1.SiteLabel: "west"}}}
	})
	v, err := assess.Assess(p, assess.Options{Secrets: secrets{}})
	require.NoError(t, err)
	assert.Equal(t, "c1", v.Provider.Cluster)
	assert.True(t, v.Provider.Admits(render.Gateway{Site: "west"}))
	assert.False(t, v.Provider.Admits(render.Gateway{Site: "east"}))
}

type failingSecrets struct{}

func (failingSecrets) SecretShape(string, string) (assess.SecretShape, bool, error) {
	return nil, false, errors.New("cache not synced")
}

func TestAssessReturnsLookupErrors(t *testing.T) {
	_, err := assess.Assess(newProvider(func(p *v1alpha1.InferenceProvider) { p.Spec.Auth = bearer("good", "token") }),
		assess.Options{Secrets: failingSecrets{}})
	require.Error(t, err)
}
