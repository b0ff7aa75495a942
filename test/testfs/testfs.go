// Package testfs mounts small private tmpfs file systems for tests that
// need a real full or read-only volume.
//
// Mounting needs root. CI runs as root, and there a mount failure fails
// the test; only a developer running without root and outside CI sees
// these tests skip, with the reason.
package testfs

import (
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// Mount mounts a tmpfs with options (for example "size=64k") on a new
// temporary folder and unmounts it when the test ends.
func Mount(t testing.TB, options string) string {
	t.Helper()
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, options); err != nil {
		if os.Geteuid() != 0 && os.Getenv("CI") == "" {
			t.Skipf("mounting a test tmpfs needs root: %v", err)
		}
		t.Fatalf("mount tmpfs at %s: %v", dir, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

// Remount changes a mounted tmpfs's options: "ro" makes it read-only;
// anything else (for example "size=1m") is passed on, read-write.
func Remount(t testing.TB, dir, options string) {
	t.Helper()
	flags := uintptr(unix.MS_REMOUNT)
	data := options
	if options == "ro" {
		flags |= unix.MS_RDONLY
		data = ""
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", flags, data); err != nil {
		t.Fatalf("remount %s with %q: %v", dir, options, err)
	}
}

// Lease takes a write lease on the file at path, as another container
// sharing the volume could, and releases it when the test ends. While it
// is held, an open of the file by anyone else waits for the kernel's
// lease-break-time (45 s by default) unless it is non-blocking, which
// fails at once with EWOULDBLOCK. A lease needs the file's owner (or
// CAP_LEASE) and no other open descriptor of it.
func Lease(t testing.TB, path string) {
	t.Helper()
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("open %s for a lease: %v", path, err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETLEASE, unix.F_WRLCK); err != nil {
		_ = unix.Close(fd)
		t.Fatalf("take a write lease on %s: %v", path, err)
	}
	t.Cleanup(func() {
		_, _ = unix.FcntlInt(uintptr(fd), unix.F_SETLEASE, unix.F_UNLCK)
		_ = unix.Close(fd)
	})
}
