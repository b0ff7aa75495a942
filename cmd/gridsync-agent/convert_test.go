package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/gridsync/gridsync/internal/cli/convert"
)

// convert rewrites upstream's earlier manifests (stdin or files) into the
// current group and names, leaves other kinds alone, and prints nothing
// when a document has no equivalent.
func TestConvertRewritesEarlierManifests(t *testing.T) {
	in, err := os.ReadFile("../../controller/testdata/upstream-manifests.yaml")
	require.NoError(t, err)
	in = append(in, []byte("---\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: grid-system\n")...)
	var stdout, stderr bytes.Buffer
	require.Equal(t, 0, convertManifests(nil, bytes.NewReader(in), &stdout, &stderr), stderr.String())
	docs := strings.Split(strings.TrimPrefix(stdout.String(), "---\n"), "---\n")
	require.Len(t, docs, 8)
	var network map[string]any
	require.NoError(t, sigsyaml.Unmarshal([]byte(docs[1]), &network))
	assert.Equal(t, "grid.praxis.fast/v1alpha1", network["apiVersion"])
	spec := network["spec"].(map[string]any)
	assert.NotContains(t, spec, "gatewayRefs")
	gw := spec["consumerGateways"].([]any)[0].(map[string]any)
	assert.Equal(t, "east-a", gw["siteName"])
	pc := gw["praxisConfig"].(map[string]any)
	assert.Equal(t, true, pc["generate"])
	assert.Equal(t, "/run/secrets/grid-credentials", pc["credentialMountPath"])
	assert.NotContains(t, pc, "enabled")
	assert.Equal(t, "grid-swim-key", spec["tls"].(map[string]any)["swimKeySecretRef"].(map[string]any)["name"])
	assert.Contains(t, docs[7], "kind: Namespace")
	assert.NotContains(t, stdout.String(), "null")

	// One document without an equivalent: nothing is printed.
	bad := append(bytes.Clone(in), []byte("---\napiVersion: grid.praxis-proxy.io/v1alpha1\nkind: GridSite\nmetadata: {name: x}\nspec: {gridNetworkRef: n, egress: {address: 'a:1'}, gatewayEndpoint: {address: 'b:1'}}\n")...)
	stdout.Reset()
	stderr.Reset()
	assert.Equal(t, 1, convertManifests(nil, bytes.NewReader(bad), &stdout, &stderr))
	assert.Empty(t, stdout.String())
	assert.Contains(t, stderr.String(), "egress and gatewayEndpoint")
	assert.Contains(t, stderr.String(), "document 9")
}

// An input over the file limit, or a document over the API server's
// request limit, is refused with the limit named before anything is
// decoded, and nothing is printed; a document just under the limit is
// converted.
func TestConvertRefusesOversizedInput(t *testing.T) {
	// Where the limit falls is the convert package's test; here, that the
	// command refuses the whole input and writes nothing of it. (A
	// document at the limit converted here took half a minute under the
	// race detector: YAML of 3 MiB, decoded and encoded.)
	var stdout, stderr bytes.Buffer
	over := "apiVersion: v1\nkind: Namespace\nmetadata: {name: a}\n---\n" +
		"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: big}\ndata: {k: " + strings.Repeat("a", convert.MaxDocumentBytes) + "}\n"
	assert.Equal(t, 1, convertManifests(nil, strings.NewReader(over), &stdout, &stderr))
	assert.Empty(t, stdout.String())
	assert.Contains(t, stderr.String(), "document 2 is")
	assert.Contains(t, stderr.String(), "over the API server's limit of 3 MiB")

	path := filepath.Join(t.TempDir(), "huge.yaml")
	f, err := os.Create(path)
	require.NoError(t, err)
	line := strings.Repeat("# padding\n", 1<<16)
	for written := 0; written <= convert.MaxFileBytes; written += len(line) {
		_, err = f.WriteString(line)
		require.NoError(t, err)
	}
	require.NoError(t, f.Close())
	stdout.Reset()
	stderr.Reset()
	assert.Equal(t, 1, convertManifests([]string{"-f", path}, nil, &stdout, &stderr))
	assert.Empty(t, stdout.String())
	assert.Contains(t, stderr.String(), "over 32 MiB")
}
