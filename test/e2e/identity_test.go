package e2e

import (
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gridsync/gridsync/test/testbin"
	"github.com/gridsync/gridsync/test/testpki"
)

// commonNameIn reads the certificate published in the shared volume as
// the gateway would, through ..data resolved once, and checks that the
// key beside it is from the same generation (same public key).
func commonNameIn(t *testing.T, dir string) string {
	t.Helper()
	gen, err := os.Readlink(filepath.Join(dir, "..data"))
	if err != nil {
		return ""
	}
	certPEM, err1 := os.ReadFile(filepath.Join(dir, gen, "tls.crt"))
	keyPEM, err2 := os.ReadFile(filepath.Join(dir, gen, "tls.key"))
	if err1 != nil || err2 != nil {
		return ""
	}
	block, _ := pem.Decode(certPEM)
	require.NotNil(t, block)
	cert, err := x509.ParseCertificate(block.Bytes)
	require.NoError(t, err)
	keyBlock, _ := pem.Decode(keyPEM)
	require.NotNil(t, keyBlock)
	key, err := x509.ParseECPrivateKey(keyBlock.Bytes)
	require.NoError(t, err)
	require.True(t, key.PublicKey.Equal(cert.PublicKey), "certificate and key from different generations")
	return cert.Subject.CommonName
}

func identityArgs(proj *testpki.Projection, dir string) []string {
	return []string{
		"--identity-cert", proj.Path("tls.crt"), "--identity-key", proj.Path("tls.key"),
		"--identity-ca", proj.Path("ca.crt"), "--identity-dir", dir, "--identity-interval", "50ms",
	}
}

func TestSidecarPublishesOnlyValidIdentityGenerations(t *testing.T) {
	p := newPod(t)
	doc, _ := p.Envelope(1)
	p.Put(doc)
	root := testpki.NewRoot(t, "root")
	proj := testpki.NewProjection(t)
	project := func(name string, o testpki.Opts) {
		cert, key := root.Leaf(t, name, o)
		proj.Publish(map[string][]byte{"tls.crt": cert, "tls.key": key, "ca.crt": root.PEM})
	}
	project("gateway-1", testpki.Opts{})
	identityDir := filepath.Join(t.TempDir(), "identity")
	require.NoError(t, os.Mkdir(identityDir, 0o755))
	addr := freeAddr(t)
	sidecar := start(t, testbin.Sidecar, nil, append(p.Args("--health-addr", addr), identityArgs(proj, identityDir)...)...)
	waitOK(t, "http://"+addr+"/readyz")
	assert.Equal(t, "gateway-1", commonNameIn(t, identityDir))

	project("gateway-2", testpki.Opts{})
	require.Eventually(t, func() bool { return commonNameIn(t, identityDir) == "gateway-2" }, 5*time.Second, 10*time.Millisecond)

	// A mismatched pair is never published; /status says why.
	cert, _ := root.Leaf(t, "gateway-3", testpki.Opts{})
	_, otherKey := root.Leaf(t, "other", testpki.Opts{})
	proj.Publish(map[string][]byte{"tls.crt": cert, "tls.key": otherKey, "ca.crt": root.PEM})
	require.Eventually(t, func() bool {
		_, body := get(t, "http://"+addr+"/status")
		return strings.Contains(body, `"last_rejection_reason": "mismatch"`)
	}, 5*time.Second, 10*time.Millisecond)
	assert.Equal(t, "gateway-2", commonNameIn(t, identityDir))
	_, metrics := get(t, "http://"+addr+"/metrics")
	assert.Contains(t, metrics, `gridsync_identity_reloads_total{material_type="certificate",result="rejected"} 1`)
	assert.Contains(t, metrics, `gridsync_identity_not_after_timestamp_seconds{material_type="certificate"}`)
	assert.NotContains(t, sidecar.Log(), "PRIVATE KEY")
}

func TestSidecarRefusesToStartWithAnInvalidIdentity(t *testing.T) {
	p := newPod(t)
	proj := testpki.NewProjection(t)
	proj.Publish(map[string][]byte{"tls.crt": []byte("junk"), "tls.key": []byte("junk")})
	sidecar := start(t, testbin.Sidecar, nil, append(p.Args("--health-addr", freeAddr(t)),
		"--identity-cert", proj.Path("tls.crt"), "--identity-key", proj.Path("tls.key"), "--identity-dir", t.TempDir())...)
	assert.Equal(t, 1, sidecar.Wait(t, 10*time.Second))
	assert.Contains(t, sidecar.Log(), "certificate rejected (unparseable)")
}

func TestInitWaitsForTheFirstValidIdentity(t *testing.T) {
	p := newPod(t)
	doc, _ := p.Envelope(1)
	p.Put(doc)
	root := testpki.NewRoot(t, "root")
	proj := testpki.NewProjection(t) // empty: the Secret is not there yet
	identityDir := t.TempDir()
	init := start(t, testbin.Init, nil, append(p.Args(), identityArgs(proj, identityDir)...)...)
	time.Sleep(1500 * time.Millisecond)
	require.True(t, init.Running(), "must wait for the identity")
	assert.NoFileExists(t, p.Output())

	cert, key := root.Leaf(t, "gateway", testpki.Opts{})
	proj.Publish(map[string][]byte{"tls.crt": cert, "tls.key": key, "ca.crt": root.PEM})
	assert.Equal(t, 0, init.Wait(t, 10*time.Second))
	assert.Equal(t, "gateway", commonNameIn(t, identityDir))
	assert.FileExists(t, p.Output())
	assert.Contains(t, init.Log(), "waiting_for_identity")
}

func TestInitExitsNonZeroWhenNoValidIdentityArrivesInTime(t *testing.T) {
	p := newPod(t)
	doc, _ := p.Envelope(1)
	p.Put(doc)
	proj := testpki.NewProjection(t)
	proj.Publish(map[string][]byte{"tls.crt": []byte("junk"), "tls.key": []byte("junk")})
	init := start(t, testbin.Init, nil, append(p.Args("--timeout", "2s"),
		"--identity-cert", proj.Path("tls.crt"), "--identity-key", proj.Path("tls.key"), "--identity-dir", t.TempDir())...)
	assert.Equal(t, 1, init.Wait(t, 10*time.Second))
	assert.Contains(t, init.Log(), "no valid TLS identity within --timeout 2s")
	assert.Contains(t, init.Log(), "unparseable")
	assert.NoFileExists(t, p.Output(), "no overlay before the identity")
}
