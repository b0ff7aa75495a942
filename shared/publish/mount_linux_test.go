package publish_test

import (
	"os"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// smallFilesystem mounts a private tmpfs with the given options (a size,
// to run out of space for real) and unmounts it when the test ends.
// Mounting needs root; CI runs as root, so there the test never skips.
func smallFilesystem(t *testing.T, options string) string {
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

// remount changes a test tmpfs's flags, for example to read-only.
func remount(t *testing.T, dir, options string) {
	t.Helper()
	flags := uintptr(unix.MS_REMOUNT)
	if options == "ro" {
		flags |= unix.MS_RDONLY
	}
	require.NoError(t, unix.Mount("tmpfs", dir, "tmpfs", flags, ""))
}
