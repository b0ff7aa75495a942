package envelope_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/gridsync/gridsync/shared/envelope"
)

func TestFNV1a32MatchesTheContractVectors(t *testing.T) {
	assert.Equal(t, "811c9dc5", envelope.FNV1a32(""))
	assert.Equal(t, "c04727d3", envelope.FNV1a32("net/gw"))
}

func TestConfigMapNameMatchesTheContractVectors(t *testing.T) {
	tests := []struct{ network, gateway, want string }{
		{"net", "gw", "grid-overlay-net-gw"},
		{strings.Repeat("a", 50), strings.Repeat("b", 50), "grid-overlay-aaaaaaaaaaaaaaaaaaaa-bbbbbbbbbbbbbbbbbbbb-2f446ea4"},
		{"production-network-east", "inference-edge-gateway-primary-01", "grid-overlay-production-network-e-inference-edge-gatew-ddfa7093"},
	}
	for _, tt := range tests {
		got := envelope.ConfigMapName(tt.network, tt.gateway)
		assert.Equal(t, tt.want, got)
		assert.LessOrEqual(t, len(got), 63)
	}
}

func TestConfigMapNameKeepsTheLongFormAtExactly63Bytes(t *testing.T) {
	// "grid-overlay-" (13) + network + "-" + gateway = 63
	network, gateway := strings.Repeat("n", 24), strings.Repeat("g", 25)
	assert.Equal(t, "grid-overlay-"+network+"-"+gateway, envelope.ConfigMapName(network, gateway))
	assert.NotEqual(t, "grid-overlay-"+network+"-"+gateway+"x", envelope.ConfigMapName(network, gateway+"x"))
}

func TestStableIDHashesKindNameSiteCluster(t *testing.T) {
	assert.Equal(t, envelope.FNV1a32("inference_model/m/s/c"), envelope.StableID("inference_model", "m", "s", "c"))
}
