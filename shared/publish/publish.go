// Package publish replaces one file atomically, so that a reader of the
// target path sees either the previous content or the new content, whole,
// and never a partial or mixed file, even across a crash or a full disk.
//
// The algorithm: write a temporary file in the target's folder (a rename
// is only atomic within one file system), fsync it, rename it over the
// target, then fsync the folder so that the rename itself survives a power
// loss. Any failure before the rename removes the temporary file and leaves
// the target untouched. The two fsyncs can be left out (SetSync) where
// durability buys nothing; the rename keeps the publication atomic.
package publish

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// tempInfix marks this package's temporary files: ".<target>.tmp-<random>".
// The leading dot keeps them out of the way of readers that list the folder.
const tempInfix = ".tmp-"

// Result says what Publish did.
type Result int

const (
	// NotWritten: the target is unchanged because the write failed. It is
	// the zero value, so that no error path can claim a write by accident.
	NotWritten Result = iota
	// Written: the target now holds the new content.
	Written
	// Unchanged: the target already held exactly this content; nothing was
	// written, so readers watching the folder see no event.
	Unchanged
)

func (r Result) String() string {
	switch r {
	case Written:
		return "written"
	case Unchanged:
		return "unchanged"
	default:
		return "not written"
	}
}

// File publishes content to one target path.
type File struct {
	path string
	dir  string
	perm fs.FileMode
	sync bool
}

// New prepares publication to path with the given file mode and removes
// temporary files that an earlier process left behind when it crashed
// between writing and renaming. The folder must exist.
func New(path string, perm fs.FileMode) (*File, error) {
	if path == "" {
		return nil, errors.New("publish: empty target path")
	}
	f := &File{path: path, dir: filepath.Dir(path), perm: perm, sync: true}
	info, err := os.Stat(f.dir)
	if err != nil {
		return nil, fmt.Errorf("publish %s: %w", path, err)
	}
	if !info.IsDir() {
		return nil, fmt.Errorf("publish %s: %s is not a folder", path, f.dir)
	}
	if _, err := f.RemoveStaleTemps(); err != nil {
		return nil, err
	}
	return f, nil
}

// SetSync says whether publications are fsynced (the default) or only
// renamed into place (see Decide).
func (f *File) SetSync(on bool) { f.sync = on }

// Path is the target path.
func (f *File) Path() string { return f.path }

func (f *File) tempPattern() string {
	return "." + filepath.Base(f.path) + tempInfix
}

// RemoveStaleTemps deletes this target's leftover temporary files and
// returns how many it removed. Only one publisher may own a target, so any
// temporary file present when it starts is stale.
func (f *File) RemoveStaleTemps() (int, error) {
	entries, err := os.ReadDir(f.dir)
	if err != nil {
		return 0, fmt.Errorf("list %s: %w", f.dir, err)
	}
	prefix := f.tempPattern()
	removed := 0
	var errs []error
	for _, e := range entries {
		if e.IsDir() || !strings.HasPrefix(e.Name(), prefix) {
			continue
		}
		if err := os.Remove(filepath.Join(f.dir, e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
			continue
		}
		removed++
	}
	if err := errors.Join(errs...); err != nil {
		return removed, fmt.Errorf("remove stale temporary files in %s: %w", f.dir, err)
	}
	return removed, nil
}

// ErrNotDurable is returned with Written when the new content is in place
// and visible to readers but the folder could not be synced, so the rename
// might not survive a power loss.
var ErrNotDurable = errors.New("renamed into place but not synced to disk")

// Publish atomically replaces the target with content, unless the target
// already holds exactly that content. On any error other than ErrNotDurable
// the target is unchanged and no temporary file is left behind.
func (f *File) Publish(content []byte) (Result, error) {
	if same, err := f.holds(content); err != nil {
		return NotWritten, err
	} else if same {
		return Unchanged, nil
	}
	return f.Replace(content)
}

// Replace is Publish without the comparison, for a caller that already
// knows the content is new (the sidecar compares revisions): it saves
// reading the current file back. It returns Written, with ErrNotDurable
// when only the folder sync failed; on any other error the target is
// unchanged.
func (f *File) Replace(content []byte) (Result, error) {
	renamed, err := f.replace(content)
	if err != nil {
		err = fmt.Errorf("publish %s: %w", f.path, err)
		if renamed {
			return Written, err
		}
		return NotWritten, err
	}
	return Written, nil
}

// holds reports whether the target's content equals content. The file is
// compared, not a remembered hash, so a target changed or removed behind
// the publisher's back is rewritten.
func (f *File) holds(content []byte) (bool, error) {
	info, err := os.Stat(f.path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("publish %s: %w", f.path, err)
	}
	if !info.Mode().IsRegular() || info.Size() != int64(len(content)) || info.Mode().Perm() != f.perm {
		return false, nil
	}
	same, err := fileEquals(f.path, content)
	if err != nil {
		return false, fmt.Errorf("publish %s: read current content: %w", f.path, err)
	}
	return same, nil
}

// fileEquals compares a file with content in small chunks, so that the
// check allocates nothing in proportion to the payload.
func fileEquals(path string, content []byte) (bool, error) {
	file, err := os.Open(path)
	if err != nil {
		return false, err
	}
	defer func() { _ = file.Close() }()
	var buf [16 << 10]byte
	for {
		n, err := io.ReadFull(file, buf[:min(len(buf), len(content)+1)])
		if n > len(content) || !bytes.Equal(buf[:n], content[:n]) {
			return false, nil
		}
		content = content[n:]
		switch {
		case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
			return len(content) == 0, nil
		case err != nil:
			return false, err
		}
	}
}

// replace writes content through a temporary file; renamed reports whether
// the new content reached the target path.
//
// It works on raw descriptors relative to the folder: an *os.File would
// register each descriptor with the network poller, which costs five
// system calls that a regular file never needs, and the sidecar publishes
// on every routing change.
func (f *File) replace(content []byte) (renamed bool, err error) {
	dirFD, err := ignoringEINTR(func() (int, error) {
		return unix.Open(f.dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	})
	if err != nil {
		return false, fmt.Errorf("open folder: %w", err)
	}
	defer func() { _ = unix.Close(dirFD) }()

	tmpName, fd, err := f.createTemp(dirFD)
	if err != nil {
		return false, fmt.Errorf("create temporary file: %w", err)
	}
	defer func() {
		if fd >= 0 {
			_ = unix.Close(fd)
		}
		if !renamed {
			if rmErr := unix.Unlinkat(dirFD, tmpName, 0); rmErr != nil && !errors.Is(rmErr, unix.ENOENT) {
				err = errors.Join(err, fmt.Errorf("remove temporary file: %w", rmErr))
			}
		}
	}()

	if !f.sync {
		if err := allocate(fd, len(content)); err != nil {
			return false, fmt.Errorf("allocate temporary file: %w", err)
		}
	}
	if err := writeAll(fd, content); err != nil {
		return false, fmt.Errorf("write temporary file: %w", err)
	}
	// The umask may have taken bits off; readers in another container (the
	// gateway) may run as another user.
	if err := unix.Fchmod(fd, uint32(f.perm.Perm())); err != nil {
		return false, fmt.Errorf("set mode of temporary file: %w", err)
	}
	// Without this fsync a crash after the rename could leave the target
	// pointing at a file whose data never reached the disk: an empty file.
	if f.sync {
		if _, err := ignoringEINTR(func() (int, error) { return 0, unix.Fsync(fd) }); err != nil {
			return false, fmt.Errorf("sync temporary file: %w", err)
		}
	}
	closeErr := unix.Close(fd)
	fd = -1
	if closeErr != nil {
		return false, fmt.Errorf("close temporary file: %w", closeErr)
	}
	if err := unix.Renameat(dirFD, tmpName, dirFD, filepath.Base(f.path)); err != nil {
		return false, fmt.Errorf("rename into place: %w", err)
	}
	renamed = true
	if !f.sync {
		return true, nil
	}
	// The rename is a change to the folder; it is durable only once the
	// folder is synced. The new content is already visible to readers, so a
	// failure here is reported but not undone.
	if _, err := ignoringEINTR(func() (int, error) { return 0, unix.Fsync(dirFD) }); err != nil {
		return true, fmt.Errorf("sync folder %s: %w: %w", f.dir, ErrNotDurable, err)
	}
	return true, nil
}

// createTemp creates a new temporary file next to the target, readable
// only by its owner until replace sets the final mode.
func (f *File) createTemp(dirFD int) (string, int, error) {
	for range 100 {
		name := f.tempPattern() + strconv.FormatUint(rand.Uint64(), 36)
		fd, err := ignoringEINTR(func() (int, error) {
			return unix.Openat(dirFD, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, 0o600)
		})
		if errors.Is(err, unix.EEXIST) {
			continue
		}
		return name, fd, err
	}
	return "", -1, errors.New("no free temporary file name after 100 tries")
}

// allocate reserves the file's blocks before it is written, when nothing
// will sync it. ext4 allocates a written file's blocks late (delayed
// allocation), and a rename that replaces a file whose blocks are still
// unallocated makes the renaming process start their writeback there and
// then (auto_da_alloc, a guard for programs that never fsync): on a
// disk-backed emptyDir that was most of what an update cost beyond tmpfs.
// Blocks allocated up front leave nothing delayed; the writeback happens
// later in the kernel's flusher, as for any file. KEEP_SIZE leaves the
// length to the write, so the last partial block is not zeroed first. A
// file system without fallocate is written as before; a full one is
// refused here, before a byte is written.
func allocate(fd, size int) error {
	if size == 0 {
		return nil
	}
	_, err := ignoringEINTR(func() (int, error) {
		return 0, unix.Fallocate(fd, unix.FALLOC_FL_KEEP_SIZE, 0, int64(size))
	})
	if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOSYS) {
		return nil
	}
	return err
}

func writeAll(fd int, content []byte) error {
	for len(content) > 0 {
		n, err := unix.Write(fd, content)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return err
		}
		content = content[n:]
	}
	return nil
}

// ignoringEINTR retries a system call that a signal interrupted; the Go
// runtime sends signals to preempt goroutines.
func ignoringEINTR(call func() (int, error)) (int, error) {
	for {
		n, err := call()
		if !errors.Is(err, unix.EINTR) {
			return n, err
		}
	}
}

// syncDir makes the entries of a folder (renames, new files) durable.
func syncDir(dir string) error {
	fd, err := ignoringEINTR(func() (int, error) {
		return unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	})
	if err != nil {
		return &fs.PathError{Op: "open", Path: dir, Err: err}
	}
	if _, err := ignoringEINTR(func() (int, error) { return 0, unix.Fsync(fd) }); err != nil {
		_ = unix.Close(fd)
		return &fs.PathError{Op: "fsync", Path: dir, Err: err}
	}
	return unix.Close(fd)
}
