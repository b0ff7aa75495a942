package providerpolicy_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/controller/providerpolicy"
	"github.com/gridsync/gridsync/controller/render"
)

type secrets map[string]providerpolicy.SecretShape

func (s secrets) SecretShape(namespace, name string) (providerpolicy.SecretShape, bool, error) {
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
		health     providerpolicy.Health
		phase      v1alpha1.ProviderPhase
		reason     string
		credential bool
	}{
		{"no auth", nil, providerpolicy.Health{}, v1alpha1.ProviderAvailable, providerpolicy.ReasonReady, false},
		{"verified bearer token", func(p *v1alpha1.InferenceProvider) { p.Spec.Auth = bearer("good", "token") },
			providerpolicy.Health{}, v1alpha1.ProviderAvailable, providerpolicy.ReasonReady, true},
		{"unsupported strategy", func(p *v1alpha1.InferenceProvider) { p.Spec.Auth = &v1alpha1.ProviderAuth{Strategy: "mtls_only"} },
			providerpolicy.Health{}, v1alpha1.ProviderUnavailable, providerpolicy.ReasonUnsupportedAuthStrategy, false},
		{"bearer token without a reference", func(p *v1alpha1.InferenceProvider) { p.Spec.Auth = &v1alpha1.ProviderAuth{Strategy: "bearer_token"} },
			providerpolicy.Health{}, v1alpha1.ProviderUnavailable, providerpolicy.ReasonCredentialSecretRefInvalid, false},
		{"reference without a key", func(p *v1alpha1.InferenceProvider) { p.Spec.Auth = bearer("good", "") },
			providerpolicy.Health{}, v1alpha1.ProviderUnavailable, providerpolicy.ReasonCredentialSecretRefInvalid, false},
		{"reference into an unwatched namespace", func(p *v1alpha1.InferenceProvider) {
			p.Spec.Auth = bearer("good", "token")
			p.Spec.Auth.SecretRef.Namespace = "elsewhere"
		}, providerpolicy.Health{}, v1alpha1.ProviderUnavailable, providerpolicy.ReasonCredentialSecretRefInvalid, false},
		{"missing Secret", func(p *v1alpha1.InferenceProvider) { p.Spec.Auth = bearer("gone", "token") },
			providerpolicy.Health{}, v1alpha1.ProviderUnavailable, providerpolicy.ReasonCredentialSecretMissing, false},
		{"missing key", func(p *v1alpha1.InferenceProvider) { p.Spec.Auth = bearer("good", "nope") },
			providerpolicy.Health{}, v1alpha1.ProviderUnavailable, providerpolicy.ReasonCredentialSecretKeyMissing, false},
		{"invalid value", func(p *v1alpha1.InferenceProvider) { p.Spec.Auth = bearer("good", "other") },
			providerpolicy.Health{}, v1alpha1.ProviderUnavailable, providerpolicy.ReasonCredentialSecretValueInvalid, false},
		{"empty value", func(p *v1alpha1.InferenceProvider) { p.Spec.Auth = bearer("empty", "token") },
			providerpolicy.Health{}, v1alpha1.ProviderUnavailable, providerpolicy.ReasonCredentialSecretValueInvalid, false},
		{"externally managed credentials are neither checked nor projected", func(p *v1alpha1.InferenceProvider) {
			p.Spec.Auth = bearer("gone", "token")
			p.Spec.Auth.CredentialsManagedExternally = true
		}, providerpolicy.Health{}, v1alpha1.ProviderAvailable, providerpolicy.ReasonReady, false},
		{"externally managed, any strategy", func(p *v1alpha1.InferenceProvider) {
			p.Spec.Auth = &v1alpha1.ProviderAuth{Strategy: "sigv4", CredentialsManagedExternally: true}
		}, providerpolicy.Health{}, v1alpha1.ProviderAvailable, providerpolicy.ReasonReady, false},
		{"invalid access policy", func(p *v1alpha1.InferenceProvider) {
			p.Spec.AccessPolicy = &v1alpha1.AccessPolicy{SiteSelector: &metav1.LabelSelector{
				MatchExpressions: []metav1.LabelSelectorRequirement{{Key: v1alpha1.SiteLabel, Operator: "In"}},
			}}
		}, providerpolicy.Health{}, v1alpha1.ProviderUnavailable, providerpolicy.ReasonAccessPolicyInvalid, false},
		{"not probed yet counts as healthy", healthCheck, providerpolicy.Health{}, v1alpha1.ProviderAvailable, providerpolicy.ReasonReady, false},
		{"probe passing", healthCheck, providerpolicy.Health{Probed: true}, v1alpha1.ProviderAvailable, providerpolicy.ReasonReady, false},
		{"one failure degrades", healthCheck, providerpolicy.Health{Probed: true, ConsecutiveFailures: 1, LastError: "status 503"},
			v1alpha1.ProviderDegraded, providerpolicy.ReasonHealthCheckFailing, false},
		{"two failures still degraded", healthCheck, providerpolicy.Health{Probed: true, ConsecutiveFailures: 2},
			v1alpha1.ProviderDegraded, providerpolicy.ReasonHealthCheckFailing, false},
		{"three failures make it unavailable", healthCheck, providerpolicy.Health{Probed: true, ConsecutiveFailures: 3},
			v1alpha1.ProviderUnavailable, providerpolicy.ReasonHealthCheckFailed, false},
		{"health without a health check is ignored", nil, providerpolicy.Health{Probed: true, ConsecutiveFailures: 9},
			v1alpha1.ProviderAvailable, providerpolicy.ReasonReady, false},
		{"credentials decide before health", func(p *v1alpha1.InferenceProvider) {
			healthCheck(p)
			p.Spec.Auth = bearer("gone", "token")
		}, providerpolicy.Health{Probed: true, ConsecutiveFailures: 1}, v1alpha1.ProviderUnavailable, providerpolicy.ReasonCredentialSecretMissing, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, err := providerpolicy.Assess(newProvider(tt.mutate), providerpolicy.Options{
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
	v, err := providerpolicy.Assess(p, providerpolicy.Options{Secrets: secrets{}})
	require.NoError(t, err)
	assert.Equal(t, "c1", v.Provider.Cluster)
	assert.True(t, v.Provider.Admits(render.Gateway{Site: "west"}))
	assert.False(t, v.Provider.Admits(render.Gateway{Site: "east"}))
}

// Empty matchLabels = all sites in the grid (the reference's provider
// access policy): an empty selector admits every site, as no policy does.
func TestAnEmptyMatchLabelsAdmitsEverySite(t *testing.T) {
	for _, selector := range []*metav1.LabelSelector{{MatchLabels: map[string]string{}}, {}} {
		p := newProvider(func(p *v1alpha1.InferenceProvider) {
			p.Spec.AccessPolicy = &v1alpha1.AccessPolicy{SiteSelector: selector}
		})
		v, err := providerpolicy.Assess(p, providerpolicy.Options{Secrets: secrets{}})
		require.NoError(t, err)
		assert.Equal(t, v1alpha1.ProviderAvailable, v.Phase)
		for _, site := range []string{"east", "west", "a-site-nobody-named"} {
			assert.True(t, v.Provider.Admits(render.Gateway{Site: site}), "%+v admits %s", selector, site)
		}
	}
}

type failingSecrets struct{}

func (failingSecrets) SecretShape(string, string) (providerpolicy.SecretShape, bool, error) {
	return nil, false, errors.New("cache not synced")
}

func TestAssessReturnsLookupErrors(t *testing.T) {
	_, err := providerpolicy.Assess(newProvider(func(p *v1alpha1.InferenceProvider) { p.Spec.Auth = bearer("good", "token") }),
		providerpolicy.Options{Secrets: failingSecrets{}})
	require.Error(t, err)
}

// The chain's first check: a provider another site hosts is Pending,
// whatever else is wrong with it, and nothing is read (no Secrets).
func TestAProviderHostedElsewhereIsPending(t *testing.T) {
	p := newProvider(func(p *v1alpha1.InferenceProvider) {
		p.Spec.Auth = bearer("gone", "token")
		p.Spec.HealthCheck = &v1alpha1.HealthCheck{Endpoint: "https://east.example/health"}
	})
	v, err := providerpolicy.Assess(p, providerpolicy.Options{Elsewhere: "site east does not match spec.siteSelector",
		Health: providerpolicy.Health{Probed: true, ConsecutiveFailures: 5}})
	require.NoError(t, err)
	assert.Equal(t, v1alpha1.ProviderPending, v.Phase)
	assert.Equal(t, providerpolicy.ReasonSiteNotSelected, v.Reason)
	assert.Equal(t, "site east does not match spec.siteSelector", v.Message)
}

// A health check that cannot be sent degrades the provider with the
// health check's reason for the refusal, before what the probes found,
// after the credential.
func TestAHealthCheckNotSentDegradesWithItsReason(t *testing.T) {
	healthCheck := func(p *v1alpha1.InferenceProvider) {
		p.Spec.HealthCheck = &v1alpha1.HealthCheck{Endpoint: "https://east.example/health"}
	}
	health := providerpolicy.Health{Probed: true, ConsecutiveFailures: 4,
		Refusal: providerpolicy.RefusalTLSIdentityMismatch, RefusalMessage: "the certificate is not the key's"}
	v, err := providerpolicy.Assess(newProvider(healthCheck), providerpolicy.Options{Secrets: secrets{}, Health: health})
	require.NoError(t, err)
	assert.Equal(t, v1alpha1.ProviderDegraded, v.Phase)
	assert.Equal(t, providerpolicy.ReasonHealthCheckTLSIdentityMismatch, v.Reason)
	assert.Equal(t, "the health check is not sent: the certificate is not the key's", v.Message)

	v, err = providerpolicy.Assess(newProvider(func(p *v1alpha1.InferenceProvider) {
		healthCheck(p)
		p.Spec.Auth = bearer("gone", "token")
	}), providerpolicy.Options{Secrets: secrets{}, Health: health})
	require.NoError(t, err)
	assert.Equal(t, providerpolicy.ReasonCredentialSecretMissing, v.Reason, "the credential decides first")

	v, err = providerpolicy.Assess(newProvider(nil), providerpolicy.Options{Secrets: secrets{}, Health: health})
	require.NoError(t, err)
	assert.Equal(t, providerpolicy.ReasonReady, v.Reason, "no health check: nothing to refuse")
}

// A withheld token is said in the message, the reason unchanged.
func TestAWithheldTokenIsNoted(t *testing.T) {
	p := newProvider(func(p *v1alpha1.InferenceProvider) {
		p.Spec.HealthCheck = &v1alpha1.HealthCheck{Endpoint: "https://east.example/health"}
	})
	for _, failures := range []int{0, 1, 3} {
		v, err := providerpolicy.Assess(p, providerpolicy.Options{Secrets: secrets{},
			Health: providerpolicy.Health{Probed: true, TokenWithheld: true, ConsecutiveFailures: failures}})
		require.NoError(t, err)
		assert.Contains(t, v.Message, "probes carry no token", "%d failures", failures)
	}
}
