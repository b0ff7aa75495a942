package controller_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gridsync/gridsync/shared/envelope"
)

// A network and a provider written only with upstream's earlier names,
// by a client that does not ask for strict validation, are delivered as
// the current names would be: nothing is withdrawn for how a field is
// spelled.
func TestANetworkWrittenWithEarlierNamesIsDelivered(t *testing.T) {
	e := newEnv(t)
	name := "earlier-" + e.id
	network := gridObject("GridNetwork", name, map[string]any{
		"gatewayRefs": []any{map[string]any{"name": "edge", "namespace": e.gwNS, "localSiteName": "east"}},
	})
	network.SetLabels(map[string]string{"test": e.id})
	require.NoError(t, e.admin.Create(e.ctx, network, client.FieldValidation("Ignore")))
	provider := gridObject("InferenceProvider", "earlier-p-"+e.id, map[string]any{
		"gridNetworkRef": name, "providerKind": "vllm", "backendKind": "openai_compatible", "endpoint": "https://east.example",
		"models": []any{map[string]any{"name": "m"}}, "routingClusterRef": "cluster-east",
		"auth": map[string]any{"strategy": "bearer_token", "manual": true},
	})
	provider.SetLabels(map[string]string{"test": e.id})
	require.NoError(t, e.admin.Create(e.ctx, provider, client.FieldValidation("Ignore")))
	e.startAgent()

	typed := readNetwork(e, name)
	cm, res := e.overlayOf(typed, typed.Spec.ConsumerGateways[0], func(r envelope.Result) bool { return r.CandidateCount == 1 })
	assert.Equal(t, 1, res.CandidateCount)
	cands := candidatesOf(t, cm)
	require.Len(t, cands, 1)
	assert.Equal(t, "cluster-east", cands[0].Cluster, "routingClusterRef is the candidate's cluster")
	assert.Nil(t, cands[0].Credential, "manual: the credential is managed outside Grid")

}
