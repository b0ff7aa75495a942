package publish_test

import (
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gridsync/gridsync/shared/publish"
	"github.com/gridsync/gridsync/test/testfs"
)

func newFile(t *testing.T, dir string) *publish.File {
	t.Helper()
	f, err := publish.New(filepath.Join(dir, "routing-overlay.json"), 0o644)
	require.NoError(t, err)
	return f
}

// tempFiles lists the publisher's temporary files left in dir.
func tempFiles(t *testing.T, dir string) []string {
	t.Helper()
	matches, err := filepath.Glob(filepath.Join(dir, ".routing-overlay.json.tmp-*"))
	require.NoError(t, err)
	return matches
}

// assertOnlyTheSpare checks what publications leave beside the target: at
// most the spare, holding the content published before the last one.
func assertOnlyTheSpare(t *testing.T, dir string, previous []byte) {
	t.Helper()
	temps := tempFiles(t, dir)
	require.LessOrEqual(t, len(temps), 1, "temporary files: %v", temps)
	if len(temps) == 1 {
		got, err := os.ReadFile(temps[0])
		require.NoError(t, err)
		assert.Equal(t, previous, got, "the spare holds the previous content")
	}
}

func inode(t *testing.T, path string) uint64 {
	t.Helper()
	info, err := os.Stat(path)
	require.NoError(t, err)
	return info.Sys().(*syscall.Stat_t).Ino
}

// A publication puts the previous file aside and the next one rewrites it,
// when nobody has it open: the file system neither creates nor frees a
// file per publication.
func TestPublicationsAlternateBetweenTwoFiles(t *testing.T) {
	dir := t.TempDir()
	f := newFile(t, dir)
	inodes := map[uint64]bool{}
	for i, content := range []string{"first", "second, longer", "3", "fourth", ""} {
		_, err := f.Replace([]byte(content))
		require.NoError(t, err)
		got, err := os.ReadFile(f.Path())
		require.NoError(t, err)
		assert.Equal(t, content, string(got))
		info, err := os.Stat(f.Path())
		require.NoError(t, err)
		assert.Equal(t, os.FileMode(0o644), info.Mode().Perm())
		inodes[inode(t, f.Path())] = true
		if i > 0 {
			assert.Len(t, tempFiles(t, dir), 1, "the previous file is kept aside")
		}
	}
	assert.Len(t, inodes, 2, "two files in turn")
}

// A reader that opened the target before a publication keeps reading the
// content it opened, whole: the file it holds is not rewritten.
func TestAFileStillOpenIsNeverRewritten(t *testing.T) {
	dir := t.TempDir()
	f := newFile(t, dir)
	_, err := f.Replace([]byte("first"))
	require.NoError(t, err)
	reader, err := os.Open(f.Path())
	require.NoError(t, err)
	defer func() { _ = reader.Close() }()
	held := inode(t, f.Path())

	for _, content := range []string{"second", "third, which would overwrite first"} {
		_, err = f.Replace([]byte(content))
		require.NoError(t, err)
	}
	assert.NotEqual(t, held, inode(t, f.Path()), "the open file was not reused")
	got, err := io.ReadAll(reader)
	require.NoError(t, err)
	assert.Equal(t, "first", string(got))
	assertOnlyTheSpare(t, dir, []byte("second"))
}

// The spare is only ever a regular file of the publisher's with one name:
// another name for it, a symbolic link or a FIFO put in its place is never
// written through.
func TestTheSpareIsNeverWrittenThroughAnotherName(t *testing.T) {
	for name, plant := range map[string]func(t *testing.T, spare, victim string){
		"hard link": func(t *testing.T, spare, victim string) {
			require.NoError(t, os.Link(spare, victim))
		},
		"symbolic link": func(t *testing.T, spare, victim string) {
			require.NoError(t, os.WriteFile(victim, []byte("victim"), 0o644))
			require.NoError(t, os.Remove(spare))
			require.NoError(t, os.Symlink(victim, spare))
		},
		"fifo": func(t *testing.T, spare, victim string) {
			require.NoError(t, os.Remove(spare))
			require.NoError(t, syscall.Mkfifo(spare, 0o644))
			require.NoError(t, os.WriteFile(victim, []byte("victim"), 0o644))
		},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			f := newFile(t, dir)
			for _, content := range []string{"first", "second"} {
				_, err := f.Replace([]byte(content))
				require.NoError(t, err)
			}
			temps := tempFiles(t, dir)
			require.Len(t, temps, 1)
			victim := filepath.Join(dir, "victim")
			before, err := os.ReadFile(temps[0])
			require.NoError(t, err)
			plant(t, temps[0], victim)
			want, err := os.ReadFile(victim)
			require.NoError(t, err)
			if name == "hard link" {
				require.Equal(t, before, want)
			}

			_, err = f.Replace([]byte("third"))
			require.NoError(t, err)
			got, err := os.ReadFile(f.Path())
			require.NoError(t, err)
			assert.Equal(t, "third", string(got))
			after, err := os.ReadFile(victim)
			require.NoError(t, err)
			assert.Equal(t, want, after, "written through the spare's other name")
			assertOnlyTheSpare(t, dir, []byte("second"))
		})
	}
}

func TestPublishWritesTheContentWithTheRequestedMode(t *testing.T) {
	dir := t.TempDir()
	f := newFile(t, dir)

	res, err := f.Publish([]byte("first"))
	require.NoError(t, err)
	assert.Equal(t, publish.Written, res)
	got, err := os.ReadFile(f.Path())
	require.NoError(t, err)
	assert.Equal(t, "first", string(got))
	info, err := os.Stat(f.Path())
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o644), info.Mode().Perm())

	res, err = f.Publish([]byte("second, longer"))
	require.NoError(t, err)
	assert.Equal(t, publish.Written, res)
	got, err = os.ReadFile(f.Path())
	require.NoError(t, err)
	assert.Equal(t, "second, longer", string(got))
	assertOnlyTheSpare(t, dir, []byte("first"))
}

func TestPublishDoesNotRewriteIdenticalContent(t *testing.T) {
	f := newFile(t, t.TempDir())
	_, err := f.Publish([]byte("same"))
	require.NoError(t, err)
	before, err := os.Stat(f.Path())
	require.NoError(t, err)

	res, err := f.Publish([]byte("same"))
	require.NoError(t, err)
	assert.Equal(t, publish.Unchanged, res)
	after, err := os.Stat(f.Path())
	require.NoError(t, err)
	assert.True(t, os.SameFile(before, after), "an identical payload must not replace the file")
}

func TestPublishRewritesATargetChangedBehindItsBack(t *testing.T) {
	f := newFile(t, t.TempDir())
	_, err := f.Publish([]byte("mine"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(f.Path(), []byte("edit"), 0o644))

	res, err := f.Publish([]byte("mine"))
	require.NoError(t, err)
	assert.Equal(t, publish.Written, res)
	got, err := os.ReadFile(f.Path())
	require.NoError(t, err)
	assert.Equal(t, "mine", string(got))

	require.NoError(t, os.Remove(f.Path()))
	res, err = f.Publish([]byte("mine"))
	require.NoError(t, err)
	assert.Equal(t, publish.Written, res)
}

func TestNewRemovesStaleTemporaryFilesOnly(t *testing.T) {
	dir := t.TempDir()
	stale := []string{".routing-overlay.json.tmp-123", ".routing-overlay.json.tmp-crash"}
	kept := []string{"routing-overlay.json", ".other.json.tmp-1", "notes.txt"}
	for _, name := range append(append([]string{}, stale...), kept...) {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte("x"), 0o644))
	}

	f := newFile(t, dir)
	assert.Empty(t, tempFiles(t, dir))
	for _, name := range kept {
		assert.FileExists(t, filepath.Join(dir, name))
	}
	removed, err := f.RemoveStaleTemps()
	require.NoError(t, err)
	assert.Zero(t, removed)
}

func TestNewRefusesAMissingFolder(t *testing.T) {
	_, err := publish.New(filepath.Join(t.TempDir(), "missing", "file.json"), 0o644)
	require.Error(t, err)
	_, err = publish.New("", 0o644)
	require.Error(t, err)
}

func TestPublishOnAFullDiskKeepsThePreviousFile(t *testing.T) {
	dir := testfs.Mount(t, "size=64k")
	f := newFile(t, dir)
	_, err := f.Publish([]byte("previous good content"))
	require.NoError(t, err)

	res, err := f.Publish(make([]byte, 256<<10))
	require.ErrorIs(t, err, syscall.ENOSPC)
	assert.Equal(t, publish.NotWritten, res)
	res, err = f.Replace(make([]byte, 256<<10))
	require.ErrorIs(t, err, syscall.ENOSPC)
	assert.Equal(t, publish.NotWritten, res)

	got, err := os.ReadFile(f.Path())
	require.NoError(t, err)
	assert.Equal(t, "previous good content", string(got))
	assert.Empty(t, tempFiles(t, dir), "the failed temporary file must be removed")

	// Space is free again, so the next publish succeeds.
	_, err = f.Publish([]byte("next good content"))
	require.NoError(t, err)
}

func TestPublishToAReadOnlyFolderKeepsThePreviousFile(t *testing.T) {
	dir := testfs.Mount(t, "size=64k")
	f := newFile(t, dir)
	_, err := f.Publish([]byte("previous good content"))
	require.NoError(t, err)
	testfs.Remount(t, dir, "ro")

	res, err := f.Publish([]byte("new content"))
	require.ErrorIs(t, err, syscall.EROFS)
	assert.Equal(t, publish.NotWritten, res)
	got, err := os.ReadFile(f.Path())
	require.NoError(t, err)
	assert.Equal(t, "previous good content", string(got))
	assert.Empty(t, tempFiles(t, dir))
}

func TestPublishComparesTheWholeContent(t *testing.T) {
	big := make([]byte, 40<<10) // larger than one comparison chunk
	bigChanged := append([]byte(nil), big...)
	bigChanged[len(bigChanged)-1] = 1
	tests := []struct {
		name     string
		current  []byte
		next     []byte
		expected publish.Result
	}{
		{"same", []byte("abc"), []byte("abc"), publish.Unchanged},
		{"shorter", []byte("abcdef"), []byte("abc"), publish.Written},
		{"longer", []byte("abc"), []byte("abcdef"), publish.Written},
		{"same size, other bytes", []byte("abc"), []byte("abd"), publish.Written},
		{"empty to empty", []byte{}, []byte{}, publish.Unchanged},
		{"large, same", big, big, publish.Unchanged},
		{"large, last byte differs", big, bigChanged, publish.Written},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFile(t, t.TempDir())
			_, err := f.Publish(tt.current)
			require.NoError(t, err)
			res, err := f.Publish(tt.next)
			require.NoError(t, err)
			assert.Equal(t, tt.expected, res)
			got, err := os.ReadFile(f.Path())
			require.NoError(t, err)
			assert.Equal(t, tt.next, got)
		})
	}
}

func TestReplaceWritesEvenIdenticalContent(t *testing.T) {
	f := newFile(t, t.TempDir())
	_, err := f.Publish([]byte("same"))
	require.NoError(t, err)
	before, err := os.Stat(f.Path())
	require.NoError(t, err)
	res, err := f.Replace([]byte("same"))
	require.NoError(t, err)
	assert.Equal(t, publish.Written, res)
	after, err := os.Stat(f.Path())
	require.NoError(t, err)
	assert.False(t, os.SameFile(before, after), "Replace does not compare")
}
