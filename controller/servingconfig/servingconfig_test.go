package servingconfig_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/controller/servingconfig"
	"github.com/gridsync/gridsync/shared/envelope"
)

func input() servingconfig.Input {
	sni := "west.grid.internal"
	return servingconfig.Input{
		LocalSite: "east", AgentAddress: "agent-signals.grid-system.svc:9443", ServerName: "east.grid.internal",
		Candidates: []envelope.Candidate{
			{Kind: "inference_model", Name: "m", Site: "p", Cluster: "c", StableID: "0badf00d", AdmissionState: "existing_only", Fresh: true},
		},
		HopEndpoints: []v1alpha1.ClusterEndpoint{{Cluster: "west", Address: "west.example:8443",
			Transport: &v1alpha1.EndpointTransport{Mode: "mutual_tls", SNI: &sni}}},
	}
}

func TestRenderWritesTheGatewaysKeysInItsOrder(t *testing.T) {
	doc, err := servingconfig.Render(input())
	require.NoError(t, err)
	again, err := servingconfig.Render(input())
	require.NoError(t, err)
	assert.Equal(t, doc, again, "the same input gives the same bytes")
	var top map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(doc, &top))
	keys := []string{"local_site", "window_secs", "load_window_ms", "candidates", "peers", "provider_hop_endpoints"}
	last := -1
	for _, k := range keys {
		i := strings.Index(string(doc), `"`+k+`"`)
		require.Positive(t, i, k)
		assert.Greater(t, i, last, "%s in order", k)
		last = i
	}
	assert.Len(t, top, len(keys))
	assert.Contains(t, string(doc), `"grid_ca_path": "/etc/praxis/tls/ca.crt"`)
	assert.NotContains(t, string(doc), "credential", "never a credential reference")
	assert.NotContains(t, string(doc), "pins", "the gateway reads no pins")
	assert.False(t, strings.HasSuffix(string(doc), "\n"))

	in := input()
	in.HopEndpoints = nil
	doc, err = servingconfig.Render(in)
	require.NoError(t, err)
	assert.NotContains(t, string(doc), "provider_hop_endpoints", "no allowlist: no key")
}

func TestRenderRefusesWhatTheGatewayCouldNotUse(t *testing.T) {
	for name, change := range map[string]func(*servingconfig.Input){
		"no site":          func(in *servingconfig.Input) { in.LocalSite = "" },
		"no agent address": func(in *servingconfig.Input) { in.AgentAddress = "" },
		"address sans port": func(in *servingconfig.Input) {
			in.AgentAddress = "agent-signals.grid-system.svc"
		},
		"relative mount":  func(in *servingconfig.Input) { in.TLSMountPath = "etc/tls" },
		"unclean mount":   func(in *servingconfig.Input) { in.TLSMountPath = "/etc/../tls" },
		"hop without TLS": func(in *servingconfig.Input) { in.HopEndpoints[0].Transport = nil },
		"hop blank SNI": func(in *servingconfig.Input) {
			blank := " "
			in.HopEndpoints[0].Transport.SNI = &blank
		},
	} {
		in := input()
		change(&in)
		_, err := servingconfig.Render(in)
		assert.Error(t, err, name)
	}
}

func TestWithdrawnKeepsEverythingButTheCandidates(t *testing.T) {
	doc, err := servingconfig.Render(input())
	require.NoError(t, err)
	w := servingconfig.Withdrawn(doc)
	var got, before map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(w, &got))
	require.NoError(t, json.Unmarshal(doc, &before))
	assert.JSONEq(t, "[]", string(got["candidates"]))
	delete(got, "candidates")
	delete(before, "candidates")
	assert.Equal(t, before, got)
	assert.Equal(t, []byte("not json"), servingconfig.Withdrawn([]byte("not json")))
}

func TestConfigMapNameFollowsTheOverlays(t *testing.T) {
	assert.Equal(t, "grid-serving-net-edge", servingconfig.ConfigMapName("net", "edge"))
	long := servingconfig.ConfigMapName(strings.Repeat("n", 40), strings.Repeat("g", 40))
	assert.LessOrEqual(t, len(long), 63)
	assert.True(t, strings.HasPrefix(long, "grid-serving-"))
}
