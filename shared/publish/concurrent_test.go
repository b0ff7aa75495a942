package publish_test

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// selfChecking returns a payload that proves its own integrity: a header
// with the body's length and sha256, then the body. A torn, truncated or
// mixed read cannot pass check.
func selfChecking(n, size int) []byte {
	body := bytes.Repeat([]byte{byte('a' + n%26)}, size)
	copy(body, fmt.Sprintf("payload %d ", n))
	sum := sha256.Sum256(body)
	return append([]byte(fmt.Sprintf("%d %x\n", len(body), sum)), body...)
}

func check(data []byte) bool {
	header, body, ok := bytes.Cut(data, []byte("\n"))
	if !ok {
		return false
	}
	var length int
	var sum string
	if _, err := fmt.Sscanf(string(header), "%d %s", &length, &sum); err != nil {
		return false
	}
	got := sha256.Sum256(body)
	return length == len(body) && sum == fmt.Sprintf("%x", got)
}

func TestConcurrentReaderNeverSeesAPartialOrMixedFile(t *testing.T) {
	const replacements = 1200
	dir := t.TempDir()
	f := newFile(t, dir)
	_, err := f.Publish(selfChecking(0, 1000))
	require.NoError(t, err)

	var stop atomic.Bool
	var reads, invalid atomic.Int64
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				data, err := os.ReadFile(f.Path())
				reads.Add(1)
				if err != nil || !check(data) {
					invalid.Add(1)
				}
			}
		}()
	}

	// Sizes vary so that an in-place write would expose a truncated or
	// mixed file.
	sizes := []int{100, 64 << 10, 3000, 200 << 10, 17}
	for i := 1; i <= replacements; i++ {
		_, err := f.Publish(selfChecking(i, sizes[i%len(sizes)]))
		require.NoError(t, err)
	}
	stop.Store(true)
	wg.Wait()

	t.Logf("reads=%d invalid=%d over %d replacements", reads.Load(), invalid.Load(), replacements)
	assert.Positive(t, reads.Load())
	assert.Zero(t, invalid.Load())
	assertOnlyTheSpare(t, dir, selfChecking(replacements-1, sizes[(replacements-1)%len(sizes)]))
}
