package publish

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"

	"golang.org/x/sys/unix"
)

// The shared folder is writable by the other containers of the pod, so
// what is at the target's name is not necessarily what this publisher put
// there: a FIFO (an open for reading would wait for a writer for ever), a
// file under a write lease (an open would wait out the kernel's
// lease-break-time, 45 s by default), a symbolic link, a folder. Every open
// of the target is therefore non-blocking and refuses what is not a
// regular file.

// ErrNotRegular: the target is not a regular file (a FIFO, a symbolic
// link, a folder, a device...).
var ErrNotRegular = errors.New("not a regular file")

// ErrInUse: the target is under another process's lease; opening it
// would wait until the lease is broken.
var ErrInUse = errors.New("held under another process's lease")

// openRegular opens path for reading without waiting on it: a FIFO or a
// leased file answers at once, and anything but a regular file is refused
// with ErrNotRegular, ErrInUse or fs.ErrNotExist.
func openRegular(path string) (*os.File, unix.Stat_t, error) {
	var st unix.Stat_t
	fd, err := ignoringEINTR(func() (int, error) {
		return unix.Open(path, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	})
	switch {
	case errors.Is(err, unix.EWOULDBLOCK):
		return nil, st, &fs.PathError{Op: "open", Path: path, Err: ErrInUse}
	case errors.Is(err, unix.ELOOP):
		// O_NOFOLLOW's answer for a symbolic link at the name.
		return nil, st, &fs.PathError{Op: "open", Path: path, Err: ErrNotRegular}
	case err != nil:
		return nil, st, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	if err := unix.Fstat(fd, &st); err != nil {
		_ = unix.Close(fd)
		return nil, st, &fs.PathError{Op: "fstat", Path: path, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		_ = unix.Close(fd)
		return nil, st, &fs.PathError{Op: "open", Path: path, Err: ErrNotRegular}
	}
	// A regular file never blocks a read; the flag only mattered for the
	// open. os.NewFile keeps the descriptor off the poller for a file.
	return os.NewFile(uintptr(fd), path), st, nil
}

// placed identifies the file this publisher last put at the target (or
// adopted there at start): a replacement, a removal or a write through
// another descriptor changes one of these.
type placed struct {
	dev, ino uint64
	size     int64
	mtime    unix.Timespec
	mode     uint32
}

func placedOf(st *unix.Stat_t) *placed {
	return &placed{dev: st.Dev, ino: st.Ino, size: st.Size, mtime: st.Mtim, mode: st.Mode}
}

// ReadCurrent reads up to limit bytes of the target without waiting on
// it (see openRegular) and adopts the file read as this publisher's: a
// later Intact compares against it. A restarted process calls it to
// restore what it published before.
func (f *File) ReadCurrent(limit int) ([]byte, error) {
	file, st, err := openRegular(f.path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = file.Close() }()
	data, err := io.ReadAll(io.LimitReader(file, int64(limit)))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", f.path, err)
	}
	f.inPlace = placedOf(&st)
	return data, nil
}

// Intact reports whether the file this publisher last put in place (or
// adopted with ReadCurrent) is still at the target, unchanged: the same
// file, size, modification time and mode. It is false when nothing was
// published yet, and when another process removed, replaced or rewrote
// the target; a publication puts it right. It never opens the target.
func (f *File) Intact() (bool, error) {
	if f.inPlace == nil {
		return false, nil
	}
	var st unix.Stat_t
	err := unix.Fstatat(unix.AT_FDCWD, f.path, &st, unix.AT_SYMLINK_NOFOLLOW)
	if errors.Is(err, unix.ENOENT) {
		return false, nil
	}
	if err != nil {
		return false, &fs.PathError{Op: "stat", Path: f.path, Err: err}
	}
	return *placedOf(&st) == *f.inPlace, nil
}
