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
