package node

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gridsync/gridsync/test/measure"
	"github.com/gridsync/gridsync/test/testnode"
)

// mountReplicas is the delegated Deployment's size (the smoke run's: 2).
var mountReplicas = measure.Size(10, 2)

// BenchmarkMounts measures delegated mount reconciliation on the node: a
// gateway Deployment of ten replicas from the real chart, rolled by the
// agent. One credential reference added to its provider, from the update
// to a Ready mountReconciliationStatus (every replica of the new template
// available, no older one left, seen by the agent), and how many
// pod-template patches the agent made for it. It prints
//
//	mounts replicas=10 change_to_ready_ms=<> patches=<>
func BenchmarkMounts(b *testing.B) {
	for i := range b.N {
		b.StopTimer()
		ctx := b.Context()
		ns := fmt.Sprintf("bench-mounts-%d", i)
		d, err := testnode.Delegate(ctx, cp, ns, mountReplicas, 2*time.Second, nil)
		measure.Must(b, err)
		_, err = cp.AdminClient().CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "token-a", Namespace: ns},
			Data: map[string][]byte{"token": []byte("a-1")}}, metav1.CreateOptions{})
		measure.Must(b, err)
		provider, err := d.Provider(ctx)
		measure.Must(b, err)
		_, before, err := d.WaitReady(ctx, 0, 5*time.Minute) // the bootstrap config replaced
		measure.Must(b, err)
		patches := d.Patches()

		b.StartTimer()
		start := time.Now()
		measure.Must(b, d.SetCredential(ctx, provider, "token-a"))
		_, after, err := d.WaitReady(ctx, before.Generation, 5*time.Minute)
		elapsed := time.Since(start)
		b.StopTimer()
		measure.Must(b, err)
		if after.Generation-before.Generation != 1 {
			b.Fatalf("the pod template changed %d times, want once", after.Generation-before.Generation)
		}
		fmt.Printf("mounts replicas=%d change_to_ready_ms=%.0f patches=%d\n", mountReplicas, float64(elapsed.Milliseconds()), d.Patches()-patches)
		// The agent still runs to take its finalizer off the network.
		measure.Must(b, d.Admin.Delete(ctx, provider))
		measure.Must(b, d.Admin.Delete(ctx, d.Network))
		measure.Must(b, d.Stop())
		measure.Must(b, cp.AdminClient().CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}))
	}
}
