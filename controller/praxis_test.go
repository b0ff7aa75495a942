package controller_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/controller"
	"github.com/gridsync/gridsync/controller/praxisconfig"
	"github.com/gridsync/gridsync/shared/envelope"
)

// praxisStatus waits until the network's praxisConfigStatus entry for
// gateway satisfies ok.
func (e *env) praxisStatus(network *v1alpha1.GridNetwork, gateway string, ok func(v1alpha1.PraxisConfigStatus) bool) v1alpha1.PraxisConfigStatus {
	e.t.Helper()
	var got v1alpha1.PraxisConfigStatus
	e.eventually("praxisConfigStatus of "+gateway, func() (bool, string) {
		var n v1alpha1.GridNetwork
		if err := e.admin.Get(e.ctx, client.ObjectKeyFromObject(network), &n); err != nil {
			return false, err.Error()
		}
		for _, s := range n.Status.PraxisConfigStatus {
			if s.GatewayName == gateway {
				got = s
				return ok(s), s.Phase + "/" + s.Reason + ": " + s.Message
			}
		}
		return false, "no entry"
	})
	return got
}

// praxisYAML waits until the generated ConfigMap's praxis.yaml satisfies
// ok, and returns the ConfigMap.
func (e *env) praxisYAML(name string, ok func(string) bool) *corev1.ConfigMap {
	e.t.Helper()
	var cm corev1.ConfigMap
	e.eventually("ConfigMap "+name, func() (bool, string) {
		if err := e.admin.Get(e.ctx, types.NamespacedName{Namespace: e.gwNS, Name: name}, &cm); err != nil {
			return false, err.Error()
		}
		return ok(cm.Data[praxisconfig.DataKey]), cm.Data[praxisconfig.DataKey]
	})
	return &cm
}

// loadBalancerClusters reads the clusters of a generated config.
func loadBalancerClusters(t *testing.T, doc string) map[string][]string {
	t.Helper()
	clusters, err := praxisconfig.AppliedClusters([]byte(doc))
	require.NoError(t, err)
	return clusters
}

// Generation on a real API server with the agent's RBAC: the config and
// the mount-requirements document follow the endpoints, the Secrets and
// the providers; a broken edit keeps the last applied config; an idle
// network writes nothing; no token byte appears in anything the agent
// wrote.
func TestPraxisConfigFollowsTheNetwork(t *testing.T) {
	e := newEnv(t)
	const token = "sk-praxis-config-sentinel-0123456789"
	e.create(e.secret("api-token", map[string][]byte{"token": []byte(token)}))
	gw := e.gateway("edge", "east")
	gw.PraxisConfig = &v1alpha1.PraxisConfig{
		Generate: true,
		ClusterEndpoints: []v1alpha1.ClusterEndpoint{
			{Cluster: "api", Address: "127.0.0.1:18080", Transport: &v1alpha1.EndpointTransport{Mode: "plaintext"}},
			{Cluster: "secure", Address: "127.0.0.1:18443", Transport: &v1alpha1.EndpointTransport{
				Mode: "tls", SNI: ptrTo("secure.internal"), CASecretRef: &v1alpha1.LocalSecretKeyRef{Name: "secure-ca"},
			}},
		},
		DeriveTopology: &v1alpha1.DeriveTopology{FromProviders: []string{"derived"},
			Transport: &v1alpha1.EndpointTransport{Mode: "tls", SNI: ptrTo("derived.internal")}},
	}
	network := e.network(gw)
	e.create(network)
	api := e.provider("api", network.Name, "model-api")
	api.Spec.ClusterName = "api"
	api.Spec.Auth = e.bearer("api-token", "token")
	e.create(api)
	derived := e.provider("derived", network.Name, "model-derived")
	derived.Spec.ClusterName, derived.Spec.Endpoint = "derived", "https://127.0.0.1:18081/v1"
	e.create(derived)
	stray := e.provider("stray", network.Name, "model-stray") // not allowlisted: withdrawn
	e.create(stray)
	a := e.startAgent()
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(e.logs.String())
		}
	})

	cm := e.praxisYAML(praxisconfig.DefaultConfigMapName, func(doc string) bool { return strings.Contains(doc, "credential_inject") })
	doc := cm.Data[praxisconfig.DataKey]
	assert.Equal(t, map[string][]string{"api": {"127.0.0.1:18080"}, "secure": {"127.0.0.1:18443"}, "derived": {"127.0.0.1:18081"}}, loadBalancerClusters(t, doc))
	assert.Contains(t, doc, `file: "/run/secrets/grid-credentials/`+e.credNS+`/api-token/token"`)
	assert.Equal(t, "gridsync-agent", cm.Labels[envelope.LabelManagedBy])
	// The stray provider's candidate is withdrawn from this gateway and
	// named; the others reach the overlay.
	e.overlayOf(network, gw, func(r envelope.Result) bool { return r.CandidateCount == 2 })
	st := e.praxisStatus(network, "edge", func(s v1alpha1.PraxisConfigStatus) bool {
		return s.Phase == "Rendered" && strings.Contains(s.Message, "secure-ca")
	})
	assert.Contains(t, st.Message, "withdrew cluster "+stray.Name)
	assert.Equal(t, praxisconfig.DefaultConfigMapName, st.ConfigMapName)

	// The mount-requirements document lists what the config reads.
	var reqs corev1.ConfigMap
	require.NoError(t, e.admin.Get(e.ctx, types.NamespacedName{Namespace: e.gwNS, Name: praxisconfig.RequirementsConfigMapName(praxisconfig.DefaultConfigMapName)}, &reqs))
	var rdoc praxisconfig.RequirementsDocument
	require.NoError(t, json.Unmarshal([]byte(reqs.Data[praxisconfig.RequirementsKey]), &rdoc))
	assert.Equal(t, []praxisconfig.Requirement{
		{Purpose: praxisconfig.PurposeBackendCA, Secret: praxisconfig.RequirementSecret{Namespace: e.gwNS, Name: "secure-ca"},
			Items: []praxisconfig.RequirementItem{{Key: "ca.crt", Path: "/run/secrets/grid-backend-ca/secure-ca/ca.crt"}}},
		{Purpose: praxisconfig.PurposeBackendCredential, Secret: praxisconfig.RequirementSecret{Namespace: e.credNS, Name: "api-token"},
			Items: []praxisconfig.RequirementItem{{Key: "token", Path: "/run/secrets/grid-credentials/" + e.credNS + "/api-token/token"}}},
	}, rdoc.Requirements)

	// The CA Secret created: the status stops naming it; deleted: names
	// it again (each checked with a get at the resync).
	caSecret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "secure-ca", Namespace: e.gwNS}, Data: map[string][]byte{"ca.crt": []byte("-----BEGIN CERTIFICATE-----")}}
	e.create(caSecret)
	e.praxisStatus(network, "edge", func(s v1alpha1.PraxisConfigStatus) bool {
		return s.Phase == "Rendered" && !strings.Contains(s.Message, "not there yet")
	})
	require.NoError(t, e.admin.Delete(e.ctx, caSecret))
	e.praxisStatus(network, "edge", func(s v1alpha1.PraxisConfigStatus) bool {
		return strings.Contains(s.Message, e.gwNS+"/secure-ca")
	})
	e.create(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "secure-ca", Namespace: e.gwNS}, Data: map[string][]byte{"other": []byte("x")}})
	e.praxisStatus(network, "edge", func(s v1alpha1.PraxisConfigStatus) bool {
		return strings.Contains(s.Message, e.gwNS+"/secure-ca key ca.crt")
	})

	// An endpoint edited: the config follows.
	update(e, network, func(n *v1alpha1.GridNetwork) {
		n.Spec.ConsumerGateways[0].PraxisConfig.ClusterEndpoints[0].Address = "127.0.0.1:28080"
	})
	e.praxisYAML(praxisconfig.DefaultConfigMapName, func(doc string) bool { return strings.Contains(doc, "127.0.0.1:28080") })

	// A broken edit fails closed with the reference's reason, and the last
	// applied config stays, byte for byte.
	var before corev1.ConfigMap
	require.NoError(t, e.admin.Get(e.ctx, types.NamespacedName{Namespace: e.gwNS, Name: praxisconfig.DefaultConfigMapName}, &before))
	update(e, network, func(n *v1alpha1.GridNetwork) {
		n.Spec.ConsumerGateways[0].PraxisConfig.ClusterEndpoints[0].Transport = nil
	})
	st = e.praxisStatus(network, "edge", func(s v1alpha1.PraxisConfigStatus) bool { return s.Reason == praxisconfig.ReasonMissingTransport })
	assert.Equal(t, "Error", st.Phase)
	assert.Contains(t, st.Message, "api")
	e.eventually("Ready false", func() (bool, string) {
		var n v1alpha1.GridNetwork
		require.NoError(t, e.admin.Get(e.ctx, client.ObjectKeyFromObject(network), &n))
		c := condition(&n, "Ready")
		return c.Status == metav1.ConditionFalse && c.Reason == controller.ReasonPraxisConfigsNotRendered && strings.Contains(c.Message, "praxisConfig"), c.Reason + ": " + c.Message
	})
	// Meanwhile the overlay names only what the running config reaches:
	// the stray provider stays withdrawn (checked after a resync).
	time.Sleep(2500 * time.Millisecond)
	_, now := e.overlayOf(network, gw, anyRevision)
	assert.Equal(t, 2, now.CandidateCount)
	assert.Contains(t, st.Message, "withdrew the clusters the last applied config does not have: "+stray.Name)
	var after corev1.ConfigMap
	require.NoError(t, e.admin.Get(e.ctx, types.NamespacedName{Namespace: e.gwNS, Name: praxisconfig.DefaultConfigMapName}, &after))
	assert.Equal(t, before.ResourceVersion, after.ResourceVersion, "the last applied config stays")

	// Fixed again, then idle: over several resyncs the agent writes
	// nothing (its Lease aside).
	update(e, network, func(n *v1alpha1.GridNetwork) {
		n.Spec.ConsumerGateways[0].PraxisConfig.ClusterEndpoints[0].Transport = &v1alpha1.EndpointTransport{Mode: "plaintext"}
	})
	e.praxisStatus(network, "edge", func(s v1alpha1.PraxisConfigStatus) bool { return s.Phase == "Rendered" })
	time.Sleep(3 * time.Second) // the status write and any follow-up settle
	n := a.requests.count()
	time.Sleep(7 * time.Second) // three resyncs
	assert.Empty(t, a.requests.since(n), "an idle network writes nothing")

	// No token byte anywhere the agent wrote: ConfigMaps, the network's
	// status, Events, logs.
	var cms corev1.ConfigMapList
	require.NoError(t, e.admin.List(e.ctx, &cms, client.InNamespace(e.gwNS)))
	require.NotEmpty(t, cms.Items)
	for _, c := range cms.Items {
		for k, v := range c.Data {
			assert.NotContains(t, v, token, "ConfigMap %s key %s", c.Name, k)
		}
	}
	var got v1alpha1.GridNetwork
	require.NoError(t, e.admin.Get(e.ctx, client.ObjectKeyFromObject(network), &got))
	status, err := json.Marshal(got.Status)
	require.NoError(t, err)
	assert.NotContains(t, string(status), token)
	var events corev1.EventList
	require.NoError(t, e.admin.List(e.ctx, &events, client.InNamespace(e.agentNS)))
	for _, ev := range events.Items {
		assert.NotContains(t, ev.Message, token)
	}
	assert.NotContains(t, e.logs.String(), token)
}

// Projected credentials: with enableProjectedCredentials and without the
// gateway's attestation, a revision that carries a credential is held
// (ProjectedCredentialsUnsupported); the attestation releases it. The
// config has the filter with its empty table from the start.
func TestProjectedCredentialsHoldCredentialRevisions(t *testing.T) {
	e := newEnv(t)
	e.create(e.secret("tok", map[string][]byte{"token": []byte("sk-held")}))
	gw := e.gateway("edge", "east")
	gw.PraxisConfig = &v1alpha1.PraxisConfig{
		Generate: true, EnableProjectedCredentials: true,
		ClusterEndpoints: []v1alpha1.ClusterEndpoint{{Cluster: "plain", Address: "127.0.0.1:18080", Transport: &v1alpha1.EndpointTransport{Mode: "plaintext"}}},
	}
	network := e.network(gw)
	e.create(network)
	open := e.provider("open", network.Name, "model-open")
	open.Spec.ClusterName = "plain"
	e.create(open)
	e.startAgent()
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(e.logs.String())
		}
	})
	e.overlayOf(network, gw, func(r envelope.Result) bool { return r.CandidateCount == 1 })
	e.praxisYAML(praxisconfig.DefaultConfigMapName, func(doc string) bool {
		return strings.Contains(doc, `projected_credential_mount_base: "/run/secrets/grid-credentials"`)
	})

	// A provider with a credential: its revision is held.
	secured := e.provider("secured", network.Name, "model-secured")
	secured.Spec.ClusterName = "plain"
	secured.Spec.Auth = e.bearer("tok", "token")
	e.create(secured)
	st := e.gatewayStatus(network, "edge", func(s v1alpha1.GatewayOverlayStatus) bool {
		return s.Reason == praxisconfig.ReasonProjectedCredentialsUnsupported
	})
	assert.Equal(t, int32(1), st.CandidateCount, "the held entry keeps the revision the gateway has")
	e.praxisStatus(network, "edge", func(s v1alpha1.PraxisConfigStatus) bool {
		return s.Reason == praxisconfig.ReasonProjectedCredentialsUnsupported && s.Phase == "Error"
	})
	_, held := e.overlayOf(network, gw, anyRevision)
	assert.Equal(t, 1, held.CandidateCount, "the credential-bearing revision did not reach the ConfigMap")

	// The attestation releases it.
	update(e, network, func(n *v1alpha1.GridNetwork) {
		n.Spec.ConsumerGateways[0].PraxisConfig.SupportsProjectedCredentials = true
	})
	e.overlayOf(network, gw, func(r envelope.Result) bool { return r.CandidateCount == 2 })
	e.praxisStatus(network, "edge", func(s v1alpha1.PraxisConfigStatus) bool { return s.Phase == "Rendered" })
}

// Two gateways naming one ConfigMap: the first keeps it, the second says
// PraxisConfigApplyFailed; a ConfigMap somebody else made is never
// overwritten.
func TestPraxisConfigMapOwnership(t *testing.T) {
	e := newEnv(t)
	spec := func(name string) *v1alpha1.PraxisConfig {
		return &v1alpha1.PraxisConfig{Generate: true, ConfigMapName: name,
			ClusterEndpoints: []v1alpha1.ClusterEndpoint{{Cluster: "c", Address: "127.0.0.1:1", Transport: &v1alpha1.EndpointTransport{Mode: "plaintext"}}}}
	}
	first, second, third := e.gateway("first", "east"), e.gateway("second", "east"), e.gateway("third", "east")
	first.PraxisConfig, second.PraxisConfig, third.PraxisConfig = spec("shared"), spec("shared"), spec("hand-made")
	e.create(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "hand-made", Namespace: e.gwNS}, Data: map[string]string{"praxis.yaml": "mine"}})
	network := e.network(first)
	e.create(network)
	e.startAgent()
	e.praxisStatus(network, "first", func(s v1alpha1.PraxisConfigStatus) bool { return s.Phase == "Rendered" })
	update(e, network, func(n *v1alpha1.GridNetwork) {
		n.Spec.ConsumerGateways = append(n.Spec.ConsumerGateways, second, third)
	})
	st := e.praxisStatus(network, "second", func(s v1alpha1.PraxisConfigStatus) bool { return s.Phase == "Error" })
	assert.Equal(t, praxisconfig.ReasonPraxisConfigApplyFailed, st.Reason)
	assert.Contains(t, st.Message, "configMapName")
	st = e.praxisStatus(network, "third", func(s v1alpha1.PraxisConfigStatus) bool { return s.Phase == "Error" })
	assert.Contains(t, st.Message, "not labelled")
	cm := e.praxisYAML("hand-made", func(string) bool { return true })
	assert.Equal(t, "mine", cm.Data["praxis.yaml"])
	shared := e.praxisYAML("shared", func(string) bool { return true })
	assert.Equal(t, "first", shared.Labels[envelope.LabelGateway])
}

// deriveTopology absent, a candidate without an explicit entry fails the
// render (MissingClusterEndpoint, nothing applied; later, the last config
// kept byte for byte); deriveTopology with an empty fromProviders
// derives nothing and withdraws the candidate, named; the provider
// allowlisted, its endpoint is derived.
func TestDeriveTopologyAbsentFailsTheRenderAndAnEmptyListWithdraws(t *testing.T) {
	e := newEnv(t)
	e.logOnFailure()
	gw := e.gateway("edge", "east")
	gw.PraxisConfig = &v1alpha1.PraxisConfig{Generate: true,
		ClusterEndpoints: []v1alpha1.ClusterEndpoint{{Cluster: "api", Address: "127.0.0.1:18080", Transport: &v1alpha1.EndpointTransport{Mode: "plaintext"}}}}
	network := e.network(gw)
	e.create(network)
	api := e.provider("api", network.Name, "model-api")
	api.Spec.ClusterName = "api"
	e.create(api)
	derivable := e.provider("derivable", network.Name, "model-derivable")
	derivable.Spec.ClusterName, derivable.Spec.Endpoint = "derivable", "https://127.0.0.1:18081/v1"
	e.create(derivable)
	e.startAgent()

	st := e.praxisStatus(network, "edge", func(s v1alpha1.PraxisConfigStatus) bool { return s.Phase == "Error" })
	assert.Equal(t, praxisconfig.ReasonMissingClusterEndpoint, st.Reason)
	assert.Contains(t, st.Message, "cluster derivable")
	var none corev1.ConfigMap
	err := e.admin.Get(e.ctx, types.NamespacedName{Namespace: e.gwNS, Name: praxisconfig.DefaultConfigMapName}, &none)
	assert.True(t, apierrors.IsNotFound(err), "nothing applied: %v", err)

	setDerive := func(dt *v1alpha1.DeriveTopology) {
		update(e, network, func(n *v1alpha1.GridNetwork) { n.Spec.ConsumerGateways[0].PraxisConfig.DeriveTopology = dt })
	}
	transport := &v1alpha1.EndpointTransport{Mode: "tls", SNI: ptrTo("derived.internal")}
	setDerive(&v1alpha1.DeriveTopology{FromProviders: []string{}, Transport: transport})
	st = e.praxisStatus(network, "edge", func(s v1alpha1.PraxisConfigStatus) bool { return s.Phase == "Rendered" })
	assert.Contains(t, st.Message, "withdrew cluster derivable")
	cm := e.praxisYAML(praxisconfig.DefaultConfigMapName, func(string) bool { return true })
	assert.Equal(t, map[string][]string{"api": {"127.0.0.1:18080"}}, loadBalancerClusters(t, cm.Data[praxisconfig.DataKey]), "nothing derived")
	e.overlayOf(network, gw, func(r envelope.Result) bool { return r.CandidateCount == 1 })

	setDerive(&v1alpha1.DeriveTopology{FromProviders: []string{"derivable"}, Transport: transport})
	cm = e.praxisYAML(praxisconfig.DefaultConfigMapName, func(doc string) bool { return strings.Contains(doc, "127.0.0.1:18081") })
	e.overlayOf(network, gw, func(r envelope.Result) bool { return r.CandidateCount == 2 })

	setDerive(nil)
	st = e.praxisStatus(network, "edge", func(s v1alpha1.PraxisConfigStatus) bool {
		return s.Phase == "Error" && s.Reason == praxisconfig.ReasonMissingClusterEndpoint
	})
	assert.Contains(t, st.Message, "cluster derivable")
	kept := e.praxisYAML(praxisconfig.DefaultConfigMapName, func(string) bool { return true })
	assert.Equal(t, cm.Data, kept.Data, "the last applied config keeps serving")
}

// A gateway without siteName takes the network's name as its site; a
// network's name may hold a dot, which no site name does, so its config
// is not rendered (PraxisConfigRenderFailed, naming siteName), while a
// gateway of the same network that names its site renders.
func TestPraxisConfigOfANetworkWhoseNameIsNoSiteName(t *testing.T) {
	e := newEnv(t)
	spec := func(configMap string) *v1alpha1.PraxisConfig {
		return &v1alpha1.PraxisConfig{Generate: true, ConfigMapName: configMap,
			ClusterEndpoints: []v1alpha1.ClusterEndpoint{{Cluster: "c", Address: "127.0.0.1:1", Transport: &v1alpha1.EndpointTransport{Mode: "plaintext"}}}}
	}
	unnamed, named := e.gateway("unnamed", ""), e.gateway("named", "east")
	unnamed.PraxisConfig, named.PraxisConfig = spec("unnamed-config"), spec("named-config")
	network := e.network(unnamed, named)
	network.Name = "grid-" + e.id + ".east"
	e.create(network)
	e.startAgent()

	st := e.praxisStatus(network, "unnamed", func(s v1alpha1.PraxisConfigStatus) bool { return s.Phase == "Error" })
	assert.Equal(t, praxisconfig.ReasonPraxisConfigRenderFailed, st.Reason)
	assert.Contains(t, st.Message, "siteName")
	assert.Contains(t, st.Message, network.Name)
	e.praxisStatus(network, "named", func(s v1alpha1.PraxisConfigStatus) bool { return s.Phase == "Rendered" })
	var cm corev1.ConfigMap
	err := e.admin.Get(e.ctx, types.NamespacedName{Namespace: e.gwNS, Name: "unnamed-config"}, &cm)
	assert.True(t, apierrors.IsNotFound(err), "no config rendered for a site that is no site name: %v", err)
}

func ptrTo[T any](v T) *T { return &v }
