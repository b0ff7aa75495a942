package publish_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/gridsync/gridsync/shared/publish"
)

// BenchmarkPublish measures one atomic replacement of a 64 KiB file,
// including the fsync of the file and of its folder, on the local disk and
// on tmpfs (/dev/shm, like a memory-backed emptyDir): Publish, which first
// compares the current file, and Replace, which the sidecar uses because
// it compares revisions instead.
func BenchmarkPublish(b *testing.B) {
	ops := []struct {
		name string
		do   func(*publish.File, []byte) (publish.Result, error)
	}{
		{"publish", (*publish.File).Publish},
		{"replace", (*publish.File).Replace},
	}
	media := []struct{ name, dir string }{
		{"disk", ""},
		{"tmpfs", "/dev/shm"},
	}
	for _, op := range ops {
		for _, medium := range media {
			for _, sync := range []bool{true, false} {
				benchmarkPublish(b, op.name, op.do, medium.name, medium.dir, sync)
			}
		}
	}
}

// benchmarkPublish publishes 64 KiB over and over; sync false is what
// --fsync auto does in an emptyDir.
func benchmarkPublish(b *testing.B, op string, do func(*publish.File, []byte) (publish.Result, error), medium, mediumDir string, sync bool) {
	{
		b.Run(fmt.Sprintf("op=%s/size=64KiB/medium=%s/fsync=%v", op, medium, sync), func(b *testing.B) {
			dir := b.TempDir()
			if mediumDir != "" {
				var err error
				if dir, err = os.MkdirTemp(mediumDir, "gridsync-bench-"); err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { _ = os.RemoveAll(dir) })
			}
			f, err := publish.New(filepath.Join(dir, "routing-overlay.json"), 0o644)
			if err != nil {
				b.Fatal(err)
			}
			f.SetSync(sync)
			// Two payloads that differ, so that every iteration writes.
			payloads := [2][]byte{make([]byte, 64<<10), make([]byte, 64<<10)}
			payloads[1][0] = 1
			b.SetBytes(64 << 10)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if res, err := do(f, payloads[i%2]); err != nil || res != publish.Written {
					b.Fatalf("publish: %v %v", res, err)
				}
				i++
			}
		})
	}
}
