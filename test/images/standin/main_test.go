package main

import (
	"crypto/tls"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gridsync/gridsync/shared/publish"
	"github.com/gridsync/gridsync/test/testpki"
)

// The identity's two files are read from one generation while generations
// of two different pairs are published as fast as they can be: no read
// pairs one's certificate with the other's key. Opening tls.crt and
// tls.key by their visible names instead tears pairs here.
func TestTheIdentityIsReadFromOneGeneration(t *testing.T) {
	root := testpki.NewRoot(t, "ca")
	var pairs [2]map[string][]byte
	for i, name := range []string{"a.example", "b.example"} {
		cert, key := root.Leaf(t, name, testpki.Opts{})
		pairs[i] = map[string][]byte{"tls.crt": cert, "tls.key": key}
	}
	dir := t.TempDir()
	require.NoError(t, publish.GenerationSynced(dir, pairs[0], 0o644, false))

	var swaps atomic.Int64
	stop := make(chan struct{})
	published := make(chan error, 1)
	go func() {
		for i := 1; ; i++ {
			select {
			case <-stop:
				published <- nil
				return
			default:
			}
			if err := publish.GenerationSynced(dir, pairs[i%2], 0o644, false); err != nil {
				published <- err
				return
			}
			swaps.Add(1)
		}
	}()

	// Enough of both to have torn a pair read by name (a few per hundred
	// swaps on a loaded machine), bounded in time.
	var reads, torn int
	for deadline := time.Now().Add(10 * time.Second); (reads < 1000 || swaps.Load() < 200) && time.Now().Before(deadline); {
		cert, key, cerr, kerr := readIdentity(dir)
		if cerr != nil || kerr != nil {
			continue // a generation replaced between the readlink and the reads
		}
		reads++
		if _, err := tls.X509KeyPair(cert, key); err != nil {
			torn++
		}
	}
	close(stop)
	require.NoError(t, <-published)
	t.Logf("%d reads during %d swaps", reads, swaps.Load())
	assert.Zero(t, torn, "reads that paired one generation's certificate with another's key")
	assert.GreaterOrEqual(t, reads, 1000)
	assert.GreaterOrEqual(t, swaps.Load(), int64(200))
}
