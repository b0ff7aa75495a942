package kubeconfig_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gridsync/gridsync/shared/kubeconfig"
)

func writeConfig(t *testing.T, server string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, os.WriteFile(path, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "`+server+`"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`), 0o600))
	return path
}

func TestAnExplicitKubeconfigWins(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	t.Setenv("KUBECONFIG", writeConfig(t, "https://from-env.example:6443"))
	cfg, err := kubeconfig.Load(writeConfig(t, "https://from-flag.example:6443"), "gridsync-test/1")
	require.NoError(t, err)
	assert.Equal(t, "https://from-flag.example:6443", cfg.Host)
	assert.Equal(t, "gridsync-test/1", cfg.UserAgent)
}

func TestOutOfClusterFallsBackToKUBECONFIG(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	t.Setenv("KUBECONFIG", writeConfig(t, "https://from-env.example:6443"))
	cfg, err := kubeconfig.Load("", "gridsync-test/1")
	require.NoError(t, err)
	assert.Equal(t, "https://from-env.example:6443", cfg.Host)
}

func TestAMissingKubeconfigNamesTheFlag(t *testing.T) {
	_, err := kubeconfig.Load(filepath.Join(t.TempDir(), "missing"), "x")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "--kubeconfig")
}
