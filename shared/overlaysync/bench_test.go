package overlaysync_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gridsync/gridsync/shared/envelope"
	"github.com/gridsync/gridsync/shared/overlaysync"
	"github.com/gridsync/gridsync/shared/publish"
	"github.com/gridsync/gridsync/test/testenvelope"
)

// BenchmarkUpdate delivers 64 KiB updates through a Syncer in this process,
// against the real API server, so that `go test -cpuprofile` sees the
// sidecar's own work per update: the watch event's decoding, validation,
// the canonical form and digest, and the write. (The delivery benchmark in
// test/bench runs the sidecar binary and measures it from outside.) The
// profile also holds the test's ConfigMap updates; focus it on the Syncer:
//
//	go test ./shared/overlaysync -run '^$' -bench Update -cpuprofile cpu.out
//	go tool pprof -top -focus 'overlaysync\.\(\*Syncer\)' overlaysync.test cpu.out
func BenchmarkUpdate(b *testing.B) {
	for _, medium := range []string{"tmpfs", "disk"} {
		b.Run("size=64KiB/medium="+medium, func(b *testing.B) { benchmarkUpdate(b, 64<<10, medium) })
	}
}

func benchmarkUpdate(b *testing.B, size int, medium string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	scope := envelope.Scope{Network: "bench-net", Gateway: "bench-gateway", LocalSite: "east-edge"}
	ns := fmt.Sprintf("bench-%d", namespaceSeq.Add(1))
	scope.Namespace = ns
	configMap := envelope.ConfigMapName(scope.Network, scope.Gateway)
	saConfig, err := cp.ConfigMapReaderConfig(ctx, ns, "gateway", configMap)
	if err != nil {
		b.Fatal(err)
	}
	// A folder shaped like a pod's emptyDir on the local disk, or tmpfs:
	// --fsync auto syncs neither.
	dir := filepath.Join(b.TempDir(), "pods", "bench", "volumes", "kubernetes.io~empty-dir", "routing")
	if medium == "tmpfs" {
		dir, err = os.MkdirTemp("/dev/shm", "gridsync-bench-")
		if err == nil {
			b.Cleanup(func() { _ = os.RemoveAll(dir) })
		}
	} else {
		err = os.MkdirAll(dir, 0o755)
	}
	if err != nil {
		b.Fatal(err)
	}

	// Two documents of the size alternate, so that every update is new.
	docs, revisions := make([][]byte, 2), make([]string, 2)
	for i := range docs {
		docs[i], revisions[i] = testenvelope.Sized(b, scope, i, size)
	}
	cms := cp.AdminClient().CoreV1().ConfigMaps(ns)
	put := func(doc []byte) {
		cm := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: configMap},
			Data:       map[string]string{envelope.DataKeyEnvelope: string(doc)},
		}
		if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := cms.Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: configMap},
		Data:       map[string]string{envelope.DataKeyEnvelope: string(docs[0])},
	}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}

	changed := make(chan struct{}, 1)
	s, err := overlaysync.New(saConfig, overlaysync.Options{
		Namespace: ns, ConfigMap: configMap, DataKey: envelope.DataKeyEnvelope,
		Output: filepath.Join(dir, "routing-overlay.json"), Expect: scope, Fsync: publish.SyncAuto,
		Logger: slog.New(slog.NewJSONHandler(io.Discard, nil)),
		Notify: func() {
			select {
			case changed <- struct{}{}:
			default:
			}
		},
	})
	if err != nil {
		b.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- s.Run(runCtx) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			b.Error(err)
		}
	}()
	waitWritten := func(revision string) {
		deadline := time.After(10 * time.Second)
		for s.Status().WrittenRevision != revision {
			select {
			case <-changed:
			case <-deadline:
				b.Fatalf("revision %s not written within 10s (status %+v)", revision, s.Status())
			}
		}
	}
	waitWritten(revisions[0])

	b.SetBytes(int64(len(docs[0])))
	b.ResetTimer()
	for i := range b.N {
		next := (i + 1) % 2
		put(docs[next])
		waitWritten(revisions[next])
	}
}
