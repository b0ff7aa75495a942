package publish_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gridsync/gridsync/shared/publish"
	"github.com/gridsync/gridsync/test/testfs"
)

func pair(n int) map[string][]byte {
	return map[string][]byte{
		"tls.crt": []byte(fmt.Sprintf("certificate of generation %d", n)),
		"tls.key": []byte(fmt.Sprintf("key of generation %d", n)),
	}
}

func generations(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var out []string
	for _, e := range entries {
		if e.IsDir() && strings.HasPrefix(e.Name(), "..") {
			out = append(out, e.Name())
		}
	}
	return out
}

func TestGenerationPublishesThroughDataAndRemovesTheOldOne(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, publish.Generation(dir, pair(1), 0o644))
	got, err := os.ReadFile(filepath.Join(dir, "tls.key"))
	require.NoError(t, err)
	assert.Equal(t, "key of generation 1", string(got))
	link, err := os.Readlink(filepath.Join(dir, "tls.crt"))
	require.NoError(t, err)
	assert.Equal(t, "..data/tls.crt", link, "visible names resolve through ..data")
	first := generations(t, dir)
	require.Len(t, first, 1)

	require.NoError(t, publish.Generation(dir, pair(2), 0o644))
	got, err = os.ReadFile(filepath.Join(dir, "tls.crt"))
	require.NoError(t, err)
	assert.Equal(t, "certificate of generation 2", string(got))
	second := generations(t, dir)
	require.Len(t, second, 1, "the replaced generation is removed")
	assert.NotEqual(t, first, second)
	info, err := os.Stat(filepath.Join(dir, "tls.key"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o644), info.Mode().Perm())
}

// The folder is created on first use: the chart points --identity-dir at
// a subfolder of the pod's emptyDir, which starts empty.
func TestGenerationCreatesItsFolder(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "identity")
	require.NoError(t, publish.Generation(dir, map[string][]byte{"tls.crt": []byte("cert")}, 0o644))
	got, err := os.ReadFile(filepath.Join(dir, "tls.crt"))
	require.NoError(t, err)
	assert.Equal(t, "cert", string(got))
}

func TestGenerationRefusesNamesOutsideTheFolder(t *testing.T) {
	for _, name := range []string{"", "../x", "a/b", "..data", "..hidden"} {
		err := publish.Generation(t.TempDir(), map[string][]byte{name: []byte("x")}, 0o644)
		assert.Error(t, err, "name %q", name)
	}
	assert.Error(t, publish.Generation(t.TempDir(), nil, 0o644))
}

func TestAFailedGenerationLeavesThePreviousOneWhole(t *testing.T) {
	dir := testfs.Mount(t, "size=64k")
	require.NoError(t, publish.Generation(dir, pair(1), 0o644))
	big := map[string][]byte{"tls.crt": make([]byte, 128<<10), "tls.key": []byte("k")}
	require.Error(t, publish.Generation(dir, big, 0o644))
	got, err := os.ReadFile(filepath.Join(dir, "tls.crt"))
	require.NoError(t, err)
	assert.Equal(t, "certificate of generation 1", string(got))
	assert.Len(t, generations(t, dir), 1, "the failed generation is cleaned up")
}

// A reader that resolves ..data once and reads both files, as
// shared/tlsidentity does, never pairs two generations.
func TestReadersNeverSeeAMismatchedPairDuringRotations(t *testing.T) {
	const rotations = 500
	dir := t.TempDir()
	require.NoError(t, publish.Generation(dir, pair(0), 0o644))

	var stop atomic.Bool
	var reads, mismatched atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !stop.Load() {
			gen, err := os.Readlink(filepath.Join(dir, publish.DataLink))
			if err != nil {
				mismatched.Add(1)
				continue
			}
			cert, err1 := os.ReadFile(filepath.Join(dir, gen, "tls.crt"))
			key, err2 := os.ReadFile(filepath.Join(dir, gen, "tls.key"))
			if err1 != nil || err2 != nil {
				continue // the generation was replaced while reading: read again
			}
			reads.Add(1)
			var c, k int
			_, _ = fmt.Sscanf(string(cert), "certificate of generation %d", &c)
			_, _ = fmt.Sscanf(string(key), "key of generation %d", &k)
			if c != k {
				mismatched.Add(1)
			}
		}
	}()
	for i := 1; i <= rotations; i++ {
		require.NoError(t, publish.Generation(dir, pair(i), 0o644))
	}
	stop.Store(true)
	wg.Wait()
	t.Logf("reads=%d mismatched=%d over %d rotations", reads.Load(), mismatched.Load(), rotations)
	assert.Positive(t, reads.Load())
	assert.Zero(t, mismatched.Load())
}
