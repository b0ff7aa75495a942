package publish

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// auto syncs on a disk folder and not on tmpfs nor in a disk-backed
// emptyDir (told by its path within its filesystem); always and never
// override the medium.
func TestDecideByMedium(t *testing.T) {
	disk := t.TempDir()
	var st unix.Statfs_t
	require.NoError(t, unix.Statfs(disk, &st))
	if st.Type == unix.TMPFS_MAGIC {
		t.Fatalf("the test's temporary folder %s is on tmpfs: set TMPDIR to a disk folder", disk)
	}
	emptyDir := filepath.Join(disk, "pods", "uid", "volumes", "kubernetes.io~empty-dir", "routing")
	require.NoError(t, os.MkdirAll(emptyDir, 0o755))
	shm, err := os.MkdirTemp("/dev/shm", "gridsync-publish-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(shm) })

	for _, c := range []struct {
		dir    string
		mode   SyncMode
		medium string
		sync   bool
	}{
		{disk, SyncAuto, MediumDisk, true},
		{disk, "", MediumDisk, true},
		{emptyDir, SyncAuto, MediumEmptyDir, false},
		{shm, SyncAuto, MediumTmpfs, false},
		{shm, SyncAlways, MediumTmpfs, true},
		{emptyDir, SyncAlways, MediumEmptyDir, true},
		{disk, SyncNever, MediumDisk, false},
	} {
		d, err := Decide(c.mode, c.dir)
		require.NoError(t, err)
		assert.Equal(t, c.medium, d.Medium, c.dir)
		assert.Equal(t, c.sync, d.Sync, "%s %s", c.mode, c.dir)
	}
	_, err = Decide(SyncAuto, filepath.Join(disk, "missing"))
	assert.Error(t, err)
	_, err = ParseSyncMode("sometimes")
	assert.Error(t, err)
	assert.Equal(t, `/a b\x`, UnescapeMount(`/a\040b\x`))
}

// Without the fsyncs a publication is as atomic as with them: the target
// holds the new content whole, and only the spare is left. The blocks
// allocated ahead of the write never lengthen the file.
func TestReplaceWithoutSync(t *testing.T) {
	dir := t.TempDir()
	f, err := New(filepath.Join(dir, "routing-overlay.json"), 0o644)
	require.NoError(t, err)
	f.SetSync(false)
	for _, content := range []string{"first", "second, longer", strings.Repeat("x", 65488), "short", ""} {
		res, err := f.Replace([]byte(content))
		require.NoError(t, err)
		assert.Equal(t, Written, res)
		got, err := os.ReadFile(f.Path())
		require.NoError(t, err)
		assert.Equal(t, content, string(got))
		info, err := os.Stat(f.Path())
		require.NoError(t, err)
		assert.Equal(t, int64(len(content)), info.Size())
	}
	// The target, and the previous file kept aside for the next publication.
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Len(t, entries, 2)

	id := filepath.Join(dir, "identity")
	require.NoError(t, GenerationSynced(id, map[string][]byte{"tls.crt": []byte("c"), "tls.key": []byte("k")}, 0o644, false))
	got, err := os.ReadFile(filepath.Join(id, "tls.key"))
	require.NoError(t, err)
	assert.Equal(t, "k", string(got))
}
