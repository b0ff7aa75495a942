package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const renderNetwork = `apiVersion: grid.praxis.fast/v1alpha1
kind: GridNetwork
metadata:
  name: production
spec:
  consumerGateways:
    - name: edge
      namespace: praxis-system
      siteName: east
      praxisConfig:
        generate: true
        clusterEndpoints:
          - cluster: vllm-a
            address: vllm-a.inference.svc:8000
            transport:
              mode: plaintext
        deriveTopology:
          fromProviders: []
    - name: other
      namespace: praxis-system
`

const renderProviders = `apiVersion: grid.praxis.fast/v1alpha1
kind: InferenceProvider
metadata:
  name: vllm-a
spec:
  gridNetworkRef: production
  providerKind: vllm
  backendKind: openai_compatible
  endpoint: http://vllm-a.inference.svc:8000
  models: [{name: llama-3-8b}]
  auth:
    strategy: bearer_token
    secretRef: {name: vllm-token, namespace: praxis-system, key: token}
---
apiVersion: grid.praxis.fast/v1alpha1
kind: InferenceProvider
metadata:
  name: unrouted
spec:
  gridNetworkRef: production
  providerKind: vllm
  backendKind: openai_compatible
  endpoint: http://unrouted:8000
  models: [{name: phi}]
---
apiVersion: v1
kind: Namespace
metadata:
  name: ignored
`

func writeManifest(t *testing.T, name, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(path, []byte(body), 0o600))
	return path
}

// The offline command prints what the agent generates, names what it
// withdrew, and exits 1 with the reference's reason when a config fails
// closed.
func TestRenderPraxisConfigPrintsTheGeneratedConfig(t *testing.T) {
	network, providers := writeManifest(t, "network.yaml", renderNetwork), writeManifest(t, "providers.yaml", renderProviders)
	var stdout, stderr bytes.Buffer
	require.Equal(t, 0, renderPraxisConfig([]string{"-f", network, "-f", providers, "--requirements"}, &stdout, &stderr), stderr.String())
	out := stdout.String()
	assert.Contains(t, out, "# ConfigMap praxis-system/praxis-consumer-config, key praxis.yaml")
	assert.Contains(t, out, `file: "/run/secrets/grid-credentials/praxis-system/vllm-token/token"`)
	assert.Contains(t, out, `local_site: "east"`)
	assert.Contains(t, out, `"purpose":"backendCredential"`)
	assert.Contains(t, stderr.String(), "withdrew cluster unrouted (phi)")

	broken := writeManifest(t, "broken.yaml", strings.Replace(renderNetwork, "mode: plaintext", "mode: mutual_tls", 1))
	stdout.Reset()
	stderr.Reset()
	assert.Equal(t, 1, renderPraxisConfig([]string{"-f", broken, "-f", providers}, &stdout, &stderr))
	assert.Contains(t, stderr.String(), "gateway praxis-system/edge: MissingSni: mutual_tls cluster endpoint vllm-a has no sni")
	assert.Empty(t, stdout.String())
}

func TestRenderPraxisConfigRefusesBadInput(t *testing.T) {
	network := writeManifest(t, "network.yaml", renderNetwork)
	for name, tc := range map[string]struct {
		args []string
		want string
	}{
		"no files":           {nil, "Usage"},
		"an unknown field":   {[]string{"-f", writeManifest(t, "typo.yaml", renderNetwork+"  sedds: []\n")}, "unknown field"},
		"several networks":   {[]string{"-f", network, "-f", writeManifest(t, "second.yaml", "---\n"+renderNetwork[:len(renderNetwork)-1]+"\n---\napiVersion: grid.praxis.fast/v1alpha1\nkind: GridNetwork\nmetadata: {name: second}\n")}, "--network"},
		"a missing network":  {[]string{"-f", network, "--network", "absent"}, `no GridNetwork "absent"`},
		"an unknown gateway": {[]string{"-f", network, "--gateway", "nope"}, "no gateway with praxisConfig.generate true named nope"},
	} {
		t.Run(name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			assert.Equal(t, 2, renderPraxisConfig(tc.args, &stdout, &stderr))
			assert.Contains(t, stderr.String(), tc.want)
		})
	}
}
