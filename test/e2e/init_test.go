package e2e

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gridsync/gridsync/shared/envelope"
	"github.com/gridsync/gridsync/test/testbin"
)

func TestInitBlocksUntilTheConfigMapAppearsThenExitsZero(t *testing.T) {
	p := newPod(t)
	init := start(t, testbin.Init, nil, p.Args()...)

	time.Sleep(1500 * time.Millisecond)
	require.True(t, init.Running(), "must wait while the ConfigMap is missing")
	assert.NoFileExists(t, p.Output())

	// An invalid envelope keeps it waiting too.
	bad, _ := p.Envelope(1)
	bad = append([]byte(nil), bad...)
	bad[len(bad)-3] = ' ' // break the JSON
	p.Put(bad)
	time.Sleep(500 * time.Millisecond)
	require.True(t, init.Running(), "must wait while the envelope is invalid")

	doc, _ := p.Envelope(1)
	p.Put(doc)
	assert.Equal(t, 0, init.Wait(t, 10*time.Second))
	got, err := os.ReadFile(p.Output())
	require.NoError(t, err)
	assert.Equal(t, string(doc), string(got))
	assert.Contains(t, init.Log(), `"msg":"overlay_ready"`)
}

func TestInitExitsNonZeroWhenTheTimeoutPasses(t *testing.T) {
	p := newPod(t)
	init := start(t, testbin.Init, nil, p.Args("--timeout", "2s")...)
	assert.Equal(t, 1, init.Wait(t, 10*time.Second))
	assert.Contains(t, init.Log(), "within --timeout 2s")
	assert.Contains(t, init.Log(), "the ConfigMap does not exist")
	assert.NoFileExists(t, p.Output())
}

func TestInitExitsAtOnceWithAValidOverlayOnDisk(t *testing.T) {
	p := newPod(t)
	doc, _ := p.Envelope(1)
	require.NoError(t, os.WriteFile(p.Output(), doc, 0o644))
	// No API server at all: a restarted pod's emptyDir is enough.
	args := p.Args()
	args[1] = writeUnreachableKubeconfig(t)
	began := time.Now()
	init := start(t, testbin.Init, nil, args...)
	assert.Equal(t, 0, init.Wait(t, 5*time.Second))
	assert.Less(t, time.Since(began), 3*time.Second)
	assert.Contains(t, init.Log(), "overlay_already_on_disk")
}

func writeUnreachableKubeconfig(t *testing.T) string {
	t.Helper()
	path := t.TempDir() + "/kubeconfig"
	require.NoError(t, os.WriteFile(path, []byte(`apiVersion: v1
kind: Config
clusters: [{name: none, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: none, user: {token: none}}]
contexts: [{name: none, context: {cluster: none, user: none}}]
current-context: none
`), 0o600))
	return path
}

func TestInitRejectsBadFlagsNamingTheFlag(t *testing.T) {
	init := start(t, testbin.Init, nil, "--namespace", "x")
	assert.Equal(t, 2, init.Wait(t, 5*time.Second))
	assert.Contains(t, init.Log(), "--config-map is required (or set OVERLAY_SYNC_CONFIGMAP)")
	assert.Contains(t, init.Log(), "--expected-local-site is required")
}

// The init container reads the compressed form too, within its
// --max-bytes: a bomb keeps it waiting (refused as oversized), the real
// envelope lets the gateway start.
func TestInitTakesTheCompressedFormWithinItsBound(t *testing.T) {
	p := newPod(t)
	init := start(t, testbin.Init, nil, p.Args("--max-bytes", "65536")...)
	p.PutBinary(envelope.Compress(make([]byte, 64<<20)))
	require.Eventually(t, func() bool { return strings.Contains(init.Log(), `"reason":"oversized"`) }, 30*time.Second, 50*time.Millisecond,
		"the compressed form that declares more than the bound is refused:\n%s", init.Log())
	require.True(t, init.Running(), "must wait while the compressed form declares more than its bound")

	doc, _ := p.Envelope(1)
	p.PutCompressed(doc)
	assert.Equal(t, 0, init.Wait(t, 10*time.Second))
	got, err := os.ReadFile(p.Output())
	require.NoError(t, err)
	assert.Equal(t, string(doc), string(got), "the file holds the envelope, decompressed")
}
