package controller_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/shared/envelope"
)

// Every credential problem makes the provider Unavailable with its own
// reason and takes its candidates out; a Secret change is noticed without
// touching the provider; and the token never leaves the Secret.
func TestCredentialProblemsMakeTheProviderUnavailableAndTokensNeverLeak(t *testing.T) {
	const token = "tok-5f1e9a7c-do-not-leak"
	e := newEnv(t)
	gw := e.gateway("edge", "east")
	network := e.network(gw)
	e.create(network)
	p := e.provider("east-provider", network.Name, "model-a")
	p.Spec.Auth = e.bearer("east-token", "token")
	e.create(p)
	e.create(e.provider("plain", network.Name, "model-b"))
	e.startAgent()

	withCandidates := func(n int) func(envelope.Result) bool {
		return func(r envelope.Result) bool { return r.CandidateCount == n }
	}
	e.providerPhase(p, v1alpha1.ProviderUnavailable, "CredentialSecretMissing")
	e.overlayOf(network, gw, withCandidates(1))

	secret := e.secret("east-token", map[string][]byte{"other": []byte(token)})
	e.create(secret)
	e.providerPhase(p, v1alpha1.ProviderUnavailable, "CredentialSecretKeyMissing")

	update(e, secret, func(s *corev1.Secret) { s.Data = map[string][]byte{"token": {0xff, 0xfe}} })
	e.providerPhase(p, v1alpha1.ProviderUnavailable, "CredentialSecretValueInvalid")
	e.overlayOf(network, gw, withCandidates(1))

	update(e, secret, func(s *corev1.Secret) { s.Data = map[string][]byte{"token": []byte(token)} })
	got := e.providerPhase(p, v1alpha1.ProviderAvailable, "Ready")
	cm, _ := e.overlayOf(network, gw, withCandidates(2))
	assert.Equal(t, v1alpha1.ProviderAvailable, got.Status.Phase)

	update(e, p, func(p *v1alpha1.InferenceProvider) { p.Spec.Auth.Strategy = "mtls_only" })
	e.providerPhase(p, v1alpha1.ProviderUnavailable, "UnsupportedAuthStrategy")
	update(e, p, func(p *v1alpha1.InferenceProvider) {
		p.Spec.Auth.Strategy = "bearer_token"
		p.Spec.Auth.SecretRef.Key = ""
	})
	e.providerPhase(p, v1alpha1.ProviderUnavailable, "CredentialSecretRefInvalid")

	// Nowhere but in the Secret: not in overlays, statuses, events, logs.
	require.Contains(t, cm.Data[envelope.DataKeyEnvelope], `"secretRef"`, "the overlay carries the reference")
	for where, text := range e.publicPlaces() {
		assert.False(t, strings.Contains(text, token), "the token appears in %s", where)
	}
}

// publicPlaces is everything of the test a secret must never reach, by
// where it is: the agent's logs, the overlay ConfigMaps, the Grid
// objects with their statuses, and the Events of the test's namespaces.
func (e *env) publicPlaces() map[string]string {
	e.t.Helper()
	places := map[string]string{"agent logs": e.logs.String()}
	require.NotEmpty(e.t, places["agent logs"])
	var cms corev1.ConfigMapList
	require.NoError(e.t, e.admin.List(e.ctx, &cms, client.InNamespace(e.gwNS)))
	require.NotEmpty(e.t, cms.Items)
	places["ConfigMaps"] = mustJSON(e.t, cms)
	var providers v1alpha1.InferenceProviderList
	require.NoError(e.t, e.admin.List(e.ctx, &providers))
	places["providers"] = mustJSON(e.t, providers)
	var networks v1alpha1.GridNetworkList
	require.NoError(e.t, e.admin.List(e.ctx, &networks))
	places["networks"] = mustJSON(e.t, networks)
	for _, ns := range []string{e.agentNS, e.gwNS, e.credNS} {
		var events eventsv1.EventList
		require.NoError(e.t, e.admin.List(e.ctx, &events, client.InNamespace(ns)))
		places["events in "+ns] = mustJSON(e.t, events)
	}
	return places
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	data, err := json.Marshal(v)
	require.NoError(t, err)
	return string(data)
}
