package overlaysync_test

import (
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gridsync/gridsync/shared/overlaysync"
	"github.com/gridsync/gridsync/test/testfs"
)

// A full volume keeps the last-known-good file, reports write_failed and
// retries until the write goes through, without a new update.
func TestAFullVolumeKeepsTheLastKnownGoodAndRetries(t *testing.T) {
	g := newGateway(t)
	dir := testfs.Mount(t, "size=16k")
	g.dir = dir

	r := g.start(g.options())
	small, _ := g.envelopeFor(1)
	r.waitObserved(t, g.putEnvelope(small))

	// Larger than the whole volume: the write must fail.
	big, bigRevision := buildEnvelope(t, g.scope, 2, 200)
	require.Greater(t, len(big), 16<<10)
	st := r.waitObserved(t, g.putEnvelope(big))
	assert.Equal(t, overlaysync.ReasonWriteFailed, st.DegradedReason)
	assert.True(t, st.Ready)
	assert.Equal(t, string(small), readOutput(t, g.output()), "the last-known-good stays")
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Len(t, entries, 1, "no temporary file is left behind")

	// Room again: the pending write goes through on its own.
	testfs.Remount(t, dir, "size=1m")
	st = r.waitStatus(t, "retried", func(st overlaysync.Status) bool { return st.WrittenRevision == bigRevision })
	assert.Equal(t, overlaysync.StateReady, st.State)
	assert.Equal(t, string(big), readOutput(t, g.output()))
	assert.Positive(t, r.metric(t, "grid_overlay_sync_file_writes_total", "outcome", "failure"))
}
