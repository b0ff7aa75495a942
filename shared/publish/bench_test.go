package publish_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/gridsync/gridsync/shared/publish"
)

// BenchmarkPublish measures one atomic replacement of a 64 KiB file,
// including the fsync of the file and of its folder, on the local disk and
// on tmpfs (/dev/shm, like a memory-backed emptyDir).
func BenchmarkPublish(b *testing.B) {
	media := []struct{ name, dir string }{
		{"disk", ""},
		{"tmpfs", "/dev/shm"},
	}
	for _, medium := range media {
		b.Run("size=64KiB/medium="+medium.name, func(b *testing.B) {
			dir := b.TempDir()
			if medium.dir != "" {
				var err error
				if dir, err = os.MkdirTemp(medium.dir, "gridsync-bench-"); err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { _ = os.RemoveAll(dir) })
			}
			f, err := publish.New(filepath.Join(dir, "routing-overlay.json"), 0o644)
			if err != nil {
				b.Fatal(err)
			}
			// Two payloads that differ, so that every iteration writes.
			payloads := [2][]byte{make([]byte, 64<<10), make([]byte, 64<<10)}
			payloads[1][0] = 1
			b.SetBytes(64 << 10)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if res, err := f.Publish(payloads[i%2]); err != nil || res != publish.Written {
					b.Fatalf("publish: %v %v", res, err)
				}
				i++
			}
		})
	}
}
