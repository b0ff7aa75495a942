package controller_test

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/controller"
	"github.com/gridsync/gridsync/controller/servingconfig"
)

// servingDoc is serving-config.json as the embedded gateway reads it.
type servingDoc struct {
	LocalSite  string `json:"local_site"`
	Candidates []struct {
		Name, Site, Cluster string
		StableID            string `json:"stable_id"`
		Admission           string `json:"admission_state"`
	} `json:"candidates"`
	Peers []struct {
		Site, Addr, Path string
		ServerName       string `json:"server_name"`
		CA               string `json:"grid_ca_path"`
		Cert             string `json:"client_cert_path"`
		Key              string `json:"client_key_path"`
		Pins             []string
	} `json:"peers"`
	Hops []struct {
		Cluster, Address string
		ServerName       string `json:"server_name"`
	} `json:"provider_hop_endpoints"`
}

// serving waits until the gateway's serving config satisfies ok.
func (e *env) serving(network *v1alpha1.GridNetwork, gw v1alpha1.ConsumerGateway, what string, ok func(servingDoc) bool) servingDoc {
	e.t.Helper()
	var doc servingDoc
	key := types.NamespacedName{Namespace: gw.Namespace, Name: servingconfig.ConfigMapName(network.Name, gw.Name)}
	e.eventually("serving config: "+what, func() (bool, string) {
		var cm corev1.ConfigMap
		if err := e.admin.Get(e.ctx, key, &cm); err != nil {
			return false, err.Error()
		}
		doc = servingDoc{}
		if err := json.Unmarshal([]byte(cm.Data[servingconfig.DataKey]), &doc); err != nil {
			return false, err.Error()
		}
		return ok(doc), cm.Data[servingconfig.DataKey]
	})
	return doc
}

// A gateway running upstream's embedded grid-gateway gets its serving
// config: the candidates of its overlay in the same order with the same
// admission states (a drain reaches it too), this site's agent as the one
// peer it polls (no pins: the gateway checks the agent's SPIFFE ID), the
// TLS files it presents, and the provider-hop allowlist. Without an
// address to poll the status and Ready say so; a gateway that stops
// asking has its candidates withdrawn.
func TestServingConfigForTheEmbeddedGateway(t *testing.T) {
	e := newEnv(t)
	sni := "west.grid.internal"
	embedded := e.gateway("embedded", "east")
	embedded.GridServing = &v1alpha1.GridServing{Enabled: true} // no address yet: the agent has none either
	embedded.ProviderHopEndpoints = []v1alpha1.ClusterEndpoint{{Cluster: "west", Address: "west-gateway.grid.example:8443",
		Transport: &v1alpha1.EndpointTransport{Mode: "mutual_tls", SNI: &sni}}}
	plain := e.gateway("plain", "east")
	network := e.network(embedded, plain)
	e.create(network)
	a, b := e.provider("a", network.Name, "m1"), e.provider("b", network.Name, "m1")
	e.create(a)
	e.create(b)
	e.startAgent()

	got := e.networkStatus(network, "no address to poll", func(n *v1alpha1.GridNetwork) (bool, string) {
		c := meta.FindStatusCondition(n.Status.Conditions, "Ready")
		return c != nil && c.Reason == controller.ReasonServingConfigFailed, fmt.Sprintf("%+v %+v", c, n.Status.ServingConfigStatus)
	})
	require.Len(t, got.Status.ServingConfigStatus, 1)
	assert.Contains(t, got.Status.ServingConfigStatus[0].Message, "signalsAddress")

	e.patchNetwork(network, func(n *v1alpha1.GridNetwork) {
		n.Spec.ConsumerGateways[0].GridServing.SignalsAddress = "grid-agent-signals.grid-system.svc:9443"
	})
	doc := e.serving(network, embedded, "two admitted candidates", func(d servingDoc) bool { return len(d.Candidates) == 2 })
	assert.Equal(t, "east", doc.LocalSite)
	require.Len(t, doc.Peers, 1)
	p := doc.Peers[0]
	assert.Equal(t, []string{"east", "grid-agent-signals.grid-system.svc:9443", "/v1/site/signals", "east.grid.internal"},
		[]string{p.Site, p.Addr, p.Path, p.ServerName})
	assert.Equal(t, []string{"/etc/praxis/tls/ca.crt", "/etc/praxis/tls/tls.crt", "/etc/praxis/tls/tls.key"}, []string{p.CA, p.Cert, p.Key})
	assert.Empty(t, p.Pins)
	require.Len(t, doc.Hops, 1)
	assert.Equal(t, []string{"west", "west-gateway.grid.example:8443", sni}, []string{doc.Hops[0].Cluster, doc.Hops[0].Address, doc.Hops[0].ServerName})
	noServing := types.NamespacedName{Namespace: plain.Namespace, Name: servingconfig.ConfigMapName(network.Name, plain.Name)}
	assert.True(t, apierrors.IsNotFound(e.admin.Get(e.ctx, noServing, &corev1.ConfigMap{})), "a gateway without gridServing gets none")

	// The same order and admission as the overlay, after a drain.
	e.patchProvider(a, func(p *v1alpha1.InferenceProvider) { p.Spec.TrafficPolicy = &v1alpha1.TrafficPolicy{Drain: true} })
	doc = e.serving(network, embedded, "the drained provider existing_only, last", func(d servingDoc) bool {
		return len(d.Candidates) == 2 && d.Candidates[1].Site == a.Name && d.Candidates[1].Admission == "existing_only"
	})
	cm, _ := e.overlayOf(network, embedded, anyRevision)
	overlay := candidatesOf(t, cm)
	require.Len(t, overlay, 2)
	for i, c := range doc.Candidates {
		assert.Equal(t, []string{overlay[i].Site, overlay[i].Cluster, overlay[i].StableID, overlay[i].Admission},
			[]string{c.Site, c.Cluster, c.StableID, c.Admission})
	}
	e.networkStatus(network, "Ready again", func(n *v1alpha1.GridNetwork) (bool, string) {
		c := meta.FindStatusCondition(n.Status.Conditions, "Ready")
		return c != nil && c.Status == "True", fmt.Sprintf("%+v", c)
	})

	e.patchNetwork(network, func(n *v1alpha1.GridNetwork) { n.Spec.ConsumerGateways[0].GridServing.Enabled = false })
	e.serving(network, embedded, "withdrawn once the gateway stops asking", func(d servingDoc) bool { return d.Candidates != nil && len(d.Candidates) == 0 })
}
