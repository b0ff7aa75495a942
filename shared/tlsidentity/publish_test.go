package tlsidentity_test

import (
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gridsync/gridsync/shared/tlsidentity"
	"github.com/gridsync/gridsync/test/testpki"
)

// A reader in another container, looping over the published identity
// while it rotates, never pairs a certificate with another generation's
// key.
func TestThePublishedPairIsNeverMismatchedDuringRotations(t *testing.T) {
	const rotations = 60
	f := newFixture(t)
	f.publishLeaf(t, "gen-0", testpki.Opts{})
	out := t.TempDir()
	opts := f.options()
	opts.OnChange = tlsidentity.PublishTo(out)
	r, err := tlsidentity.New(opts)
	require.NoError(t, err)

	var stop atomic.Bool
	var reads, mismatched atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !stop.Load() {
			gen, err := os.Readlink(filepath.Join(out, "..data"))
			if err != nil {
				mismatched.Add(1)
				continue
			}
			certPEM, err1 := os.ReadFile(filepath.Join(out, gen, tlsidentity.FileCert))
			keyPEM, err2 := os.ReadFile(filepath.Join(out, gen, tlsidentity.FileKey))
			if err1 != nil || err2 != nil {
				continue // that generation was just replaced: read again
			}
			reads.Add(1)
			certBlock, _ := pem.Decode(certPEM)
			keyBlock, _ := pem.Decode(keyPEM)
			cert, err1 := x509.ParseCertificate(certBlock.Bytes)
			key, err2 := x509.ParseECPrivateKey(keyBlock.Bytes)
			if err1 != nil || err2 != nil || !key.PublicKey.Equal(cert.PublicKey) {
				mismatched.Add(1)
			}
		}
	}()
	for i := 1; i <= rotations; i++ {
		f.publishLeaf(t, "gen-n", testpki.Opts{})
		r.Poll()
	}
	stop.Store(true)
	wg.Wait()
	t.Logf("reads=%d mismatched=%d over %d rotations", reads.Load(), mismatched.Load(), rotations)
	assert.Positive(t, reads.Load())
	assert.Zero(t, mismatched.Load())
	assert.Equal(t, float64(rotations+1), f.reloads("certificate", "success"))
}
