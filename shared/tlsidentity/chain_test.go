package tlsidentity_test

import (
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gridsync/gridsync/shared/tlsidentity"
	"github.com/gridsync/gridsync/test/testpki"
)

// expiredRoot is a self-signed root that expired an hour ago.
func expiredRoot(t *testing.T) []byte {
	t.Helper()
	return testpki.NewRootWith(t, "expired-root", testpki.Opts{NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-time.Hour)}).PEM
}

// certificatesIn returns the PEM block types in data.
func blockTypes(data []byte) []string {
	var types []string
	for {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			return types
		}
		types = append(types, b.Type)
	}
}

// Only certificates are published from the certificate and CA files: a
// stray key or text in them stays behind.
func TestOnlyCertificatesArePublished(t *testing.T) {
	f := newFixture(t)
	cert, key := f.root.Leaf(t, "leaf", testpki.Opts{})
	_, strayKey := f.root.Leaf(t, "other", testpki.Opts{})
	junk := []byte("# issued by hand\n")
	f.proj.Publish(map[string][]byte{
		"tls.crt": append(append(append([]byte(nil), junk...), cert...), strayKey...),
		"tls.key": key,
		"ca.crt":  append(append([]byte(nil), f.root.PEM...), strayKey...),
	})
	out := t.TempDir()
	opts := f.options()
	opts.OnChange = tlsidentity.PublishTo(out)
	_, err := tlsidentity.New(opts)
	require.NoError(t, err)

	for _, name := range []string{tlsidentity.FileCert, tlsidentity.FileCA} {
		data, err := os.ReadFile(filepath.Join(out, name))
		require.NoError(t, err)
		assert.Equal(t, []string{"CERTIFICATE"}, blockTypes(data), name)
		assert.NotContains(t, string(data), "issued by hand", name)
	}
}

// A CA bundle mid-rotation holds an expired old root next to the valid
// one: the identity is accepted (its chain verifies to the valid root),
// and the expired root is left out of what is published and of the CA
// expiry the alerts read.
func TestAnExpiredOldRootBesideAValidOneIsDropped(t *testing.T) {
	f := newFixture(t)
	cert, key := f.root.Leaf(t, "leaf", testpki.Opts{})
	f.proj.Publish(map[string][]byte{"tls.crt": cert, "tls.key": key, "ca.crt": append(expiredRoot(t), f.root.PEM...)})
	out := t.TempDir()
	opts := f.options()
	opts.OnChange = tlsidentity.PublishTo(out)
	r, err := tlsidentity.New(opts)
	require.NoError(t, err)
	assert.Equal(t, f.root.Cert.NotAfter.Unix(), r.Current().CANotAfter.Unix())

	data, err := os.ReadFile(filepath.Join(out, tlsidentity.FileCA))
	require.NoError(t, err)
	block, rest := pem.Decode(data)
	require.NotNil(t, block)
	assert.Empty(t, rest, "one root published")
	root, err := x509.ParseCertificate(block.Bytes)
	require.NoError(t, err)
	assert.Equal(t, "root", root.Subject.CommonName)
}
