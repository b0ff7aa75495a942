// Package publish replaces one file atomically, so that a reader of the
// target path sees either the previous content or the new content, whole,
// and never a partial or mixed file, even across a crash or a full disk.
//
// The algorithm: write a temporary file in the target's folder (a rename
// is only atomic within one file system), fsync it, put it in the target's
// place with one rename, then fsync the folder so that the rename itself
// survives a power loss. Any failure before the rename removes the
// temporary file and leaves the target untouched. The two fsyncs can be
// left out (SetSync) where durability buys nothing; the rename keeps the
// publication atomic.
//
// The rename exchanges the two names, so the previous file is not freed:
// it becomes the next publication's temporary file, rewritten only once
// no reader has it open (reuseSpare). A file system then neither creates
// nor frees a file per publication, which on ext4 was most of what one
// cost beyond tmpfs. The folder holds the target and that one hidden file.
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

	// spare names, in the folder, the file that held the target's content
	// before the last publication: the exchange that put the new content
	// in place left the old file there instead of freeing it. The next
	// publication rewrites it when nobody has it open (see reuseSpare).
	spare string
	// noExchange is set once the folder's file system refuses to exchange
	// two names; publications then rename over the target, as before.
	noExchange bool
	// inPlace is the file last put at the target (see Intact).
	inPlace *placed
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
// check allocates nothing in proportion to the payload. What is not a
// regular file, or cannot be opened at once, is not equal: it is replaced.
func fileEquals(path string, content []byte) (bool, error) {
	file, _, err := openRegular(path)
	if errors.Is(err, ErrNotRegular) || errors.Is(err, ErrInUse) || errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
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

	tmpName, fd, reused := f.reuseSpare(dirFD)
	if !reused {
		if tmpName, fd, err = f.createTemp(dirFD); err != nil {
			return false, fmt.Errorf("create temporary file: %w", err)
		}
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

	if !f.sync && !reused {
		if err := allocate(fd, len(content)); err != nil {
			return false, fmt.Errorf("allocate temporary file: %w", err)
		}
	}
	if err := writeAll(fd, content); err != nil {
		return false, fmt.Errorf("write temporary file: %w", err)
	}
	if reused {
		// The spare may have held a longer content.
		if err := unix.Ftruncate(fd, int64(len(content))); err != nil {
			return false, fmt.Errorf("truncate temporary file: %w", err)
		}
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
	// What the file is once written: a rename changes none of it, so
	// Intact can tell it from anything put in its place later.
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return false, fmt.Errorf("stat temporary file: %w", err)
	}
	closeErr := unix.Close(fd)
	fd = -1
	if closeErr != nil {
		return false, fmt.Errorf("close temporary file: %w", closeErr)
	}
	exchanged, err := f.swapIn(dirFD, tmpName)
	if err != nil {
		return false, fmt.Errorf("rename into place: %w", err)
	}
	renamed = true
	f.inPlace = placedOf(&st)
	if exchanged {
		f.spare = tmpName
	}
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

// swapIn puts the temporary file tmpName in the target's place. When the
// target is a regular file the two names are exchanged in one atomic step
// (exchanged): the previous content stays, under tmpName, for reuseSpare.
// Otherwise (no target yet, something else there, a file system without
// the exchange) tmpName is renamed over the target.
func (f *File) swapIn(dirFD int, tmpName string) (exchanged bool, err error) {
	target := filepath.Base(f.path)
	if !f.noExchange {
		var st unix.Stat_t
		if unix.Fstatat(dirFD, target, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFREG {
			err := unix.Renameat2(dirFD, tmpName, dirFD, target, unix.RENAME_EXCHANGE)
			if err == nil {
				return true, nil
			}
			if !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOSYS) && !errors.Is(err, unix.EOPNOTSUPP) {
				return false, err
			}
			f.noExchange = true
		}
	}
	return false, unix.Renameat(dirFD, tmpName, dirFD, target)
}

// reuseSpare opens the spare for rewriting, when that cannot show a reader
// anything but whole files. The spare held the target's previous content,
// so a reader that opened the target before the last publication may still
// be reading it: rewriting it then would tear that read. A write lease is
// granted only while no other descriptor has the file open, and while it
// is held an open(2) of the file waits until it is released; so the file
// is rewritten only when nobody reads it, and nobody can begin to before
// the rewrite is complete (replace holds the lease until the descriptor is
// closed). The spare must also be a regular file of this publisher with no
// other name (a hard link elsewhere would show the rewrite there).
//
// Reusing the spare spares the file system an inode's creation, its
// blocks' allocation and the old inode's release on every publication: on
// ext4 most of what a publication costs beyond tmpfs. When it cannot be
// reused the spare is removed and the publication creates a new file.
func (f *File) reuseSpare(dirFD int) (name string, fd int, ok bool) {
	name, f.spare = f.spare, ""
	if name == "" {
		return "", -1, false
	}
	// O_NONBLOCK: a FIFO put there must not block the open; it is refused
	// below like anything but a regular file.
	fd, err := ignoringEINTR(func() (int, error) {
		return unix.Openat(dirFD, name, unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	})
	if err == nil {
		var st unix.Stat_t
		if unix.Fstat(fd, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFREG && st.Nlink == 1 && int(st.Uid) == os.Geteuid() {
			if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETLEASE, unix.F_WRLCK); err == nil {
				return name, fd, true
			}
		}
		_ = unix.Close(fd)
	}
	_ = unix.Unlinkat(dirFD, name, 0)
	return "", -1, false
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
