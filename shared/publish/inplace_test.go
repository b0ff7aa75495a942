package publish_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/gridsync/gridsync/shared/publish"
	"github.com/gridsync/gridsync/test/testfs"
)

// What another container may put at the target's name is refused without
// waiting on it, and the next publication replaces it.
func TestReadCurrentRefusesWhatIsNotAPlainFileAtOnce(t *testing.T) {
	cases := map[string]struct {
		plant func(t *testing.T, path string)
		want  error
	}{
		"a FIFO": {func(t *testing.T, path string) { require.NoError(t, unix.Mkfifo(path, 0o644)) }, publish.ErrNotRegular},
		"a symbolic link": {func(t *testing.T, path string) {
			target := filepath.Join(t.TempDir(), "elsewhere")
			require.NoError(t, os.WriteFile(target, []byte("{}"), 0o644))
			require.NoError(t, os.Symlink(target, path))
		}, publish.ErrNotRegular},
		"a folder": {func(t *testing.T, path string) { require.NoError(t, os.Mkdir(path, 0o755)) }, publish.ErrNotRegular},
		"a file under a write lease": {func(t *testing.T, path string) {
			require.NoError(t, os.WriteFile(path, []byte("leased"), 0o644))
			testfs.Lease(t, path)
		}, publish.ErrInUse},
		"nothing": {func(*testing.T, string) {}, fs.ErrNotExist},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			f := newFile(t, dir)
			c.plant(t, f.Path())
			done := make(chan error, 1)
			go func() { _, err := f.ReadCurrent(1 << 20); done <- err }()
			select {
			case err := <-done:
				require.ErrorIs(t, err, c.want)
			case <-time.After(10 * time.Second):
				t.Fatal("ReadCurrent waits on what is at the target")
			}
			intact, err := f.Intact()
			require.NoError(t, err)
			assert.False(t, intact, "nothing refused is adopted")
			if name == "a folder" {
				return // a folder cannot be renamed over: the caller reports the failed write
			}
			_, err = f.Publish([]byte("published"))
			require.NoError(t, err)
			got, err := os.ReadFile(f.Path())
			require.NoError(t, err)
			assert.Equal(t, "published", string(got))
		})
	}
}

// Intact follows the file last published: removing it, putting another in
// its place or rewriting it through another descriptor is noticed.
func TestIntactNoticesARemovedReplacedOrRewrittenTarget(t *testing.T) {
	dir := t.TempDir()
	f := newFile(t, dir)
	intact, err := f.Intact()
	require.NoError(t, err)
	assert.False(t, intact, "nothing published yet")

	publishAndCheck := func() {
		t.Helper()
		_, err := f.Replace([]byte(`{"a":1}`))
		require.NoError(t, err)
		intact, err := f.Intact()
		require.NoError(t, err)
		require.True(t, intact, "just published")
	}
	publishAndCheck()
	require.NoError(t, os.Remove(f.Path()))
	intact, err = f.Intact()
	require.NoError(t, err)
	assert.False(t, intact, "removed")

	publishAndCheck()
	other := filepath.Join(dir, "other")
	require.NoError(t, os.WriteFile(other, []byte(`{"a":1}`), 0o644))
	require.NoError(t, os.Rename(other, f.Path()))
	intact, err = f.Intact()
	require.NoError(t, err)
	assert.False(t, intact, "replaced by a file with the same content")

	publishAndCheck()
	require.NoError(t, os.WriteFile(f.Path(), []byte(`{"a":2,"b":3}`), 0o644))
	intact, err = f.Intact()
	require.NoError(t, err)
	assert.False(t, intact, "rewritten in place")

	// A restarted publisher adopts what it reads.
	restarted := newFile(t, dir)
	_, err = restarted.ReadCurrent(1 << 20)
	require.NoError(t, err)
	intact, err = restarted.Intact()
	require.NoError(t, err)
	assert.True(t, intact, "adopted by ReadCurrent")
}
