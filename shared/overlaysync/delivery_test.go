package overlaysync_test

import (
	"context"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gridsync/gridsync/shared/envelope"
	"github.com/gridsync/gridsync/shared/overlaysync"
)

func TestDeliversAnOverlayCloseToTheObjectSizeLimit(t *testing.T) {
	g := newGateway(t)
	r := g.start(g.options())
	// Grow the overlay until it is just under the 1 MiB ConfigMap limit.
	doc, revision := buildEnvelope(t, g.scope, 1, 4800)
	require.Greater(t, len(doc), 1000*1000)
	require.Less(t, len(doc), 1<<20)

	st := r.waitObserved(t, g.putEnvelope(doc))
	assert.Equal(t, overlaysync.StateReady, st.State)
	assert.Equal(t, revision, st.WrittenRevision)
	assert.Equal(t, len(doc), st.PayloadBytes)
	assert.Equal(t, string(doc), readOutput(t, g.output()))
	t.Logf("delivered %d bytes in %.1f ms", len(doc), st.LastDeliveryLatencySeconds*1000)
}

// A reader loops over the output file while the sidecar delivers more
// than a thousand updates: every read must be a whole, valid envelope of
// this gateway's scope.
func TestConcurrentReaderNeverSeesAnInvalidFileAcrossAThousandUpdates(t *testing.T) {
	const updates = 1000
	g := newGateway(t)
	r := g.start(g.options())
	first, _ := g.envelopeFor(0)
	r.waitObserved(t, g.putEnvelope(first))

	var stop atomic.Bool
	var reads, invalid atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !stop.Load() {
			data, err := os.ReadFile(g.output())
			reads.Add(1)
			if err != nil {
				invalid.Add(1)
				continue
			}
			if _, err := envelope.Validate(data, envelope.Options{Expect: g.scope}); err != nil {
				invalid.Add(1)
			}
		}
	}()

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cms := g.admin.CoreV1().ConfigMaps(g.namespace)
	var last string
	for i := 1; i <= updates; i++ {
		doc, revision := buildEnvelope(t, g.scope, i, i%7)
		_, err := cms.Update(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: g.configMap},
			Data:       map[string]string{envelope.DataKeyEnvelope: string(doc)},
		}, metav1.UpdateOptions{})
		require.NoError(t, err)
		last = revision
	}
	r.waitStatus(t, "last update delivered", func(st overlaysync.Status) bool { return st.WrittenRevision == last })
	stop.Store(true)
	wg.Wait()

	writes := r.metric(t, "grid_overlay_sync_file_writes_total", "outcome", "success")
	t.Logf("updates=%d writes=%.0f reads=%d invalid=%d", updates, writes, reads.Load(), invalid.Load())
	assert.Zero(t, invalid.Load())
	assert.Positive(t, reads.Load())
	assert.GreaterOrEqual(t, writes, float64(updates)*0.9, "nearly every update is its own write")
}
