package overlaysync_test

import (
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/gridsync/gridsync/shared/overlaysync"
	"github.com/gridsync/gridsync/test/testfs"
)

// newWithin runs overlaysync.New, failing the test if it waits on the
// output (a blocking open of a FIFO never returns).
func newWithin(t *testing.T, g *gateway, opts overlaysync.Options) *overlaysync.Syncer {
	t.Helper()
	type made struct {
		s   *overlaysync.Syncer
		err error
	}
	done := make(chan made, 1)
	go func() { s, err := overlaysync.New(g.saConfig, opts); done <- made{s, err} }()
	select {
	case m := <-done:
		require.NoError(t, m.err)
		return m.s
	case <-time.After(10 * time.Second):
		// Unblock the open, so that the goroutine ends with the test.
		if f, err := os.OpenFile(g.output(), os.O_WRONLY|unix.O_NONBLOCK, 0); err == nil {
			_ = f.Close()
		}
		t.Fatal("New waits on what another container put at the output")
		return nil
	}
}

// Another container of the pod can put a FIFO, or a file under its write
// lease, at the output's name and leave it there across a restart of the
// sidecar. A restart neither waits on it nor restores it: it counts as no
// output, and the source's envelope takes its place.
func TestRestartDoesNotWaitOnWhatIsAtTheOutput(t *testing.T) {
	cases := map[string]func(t *testing.T, g *gateway){
		"a FIFO": func(t *testing.T, g *gateway) { require.NoError(t, unix.Mkfifo(g.output(), 0o644)) },
		"a valid overlay under a write lease": func(t *testing.T, g *gateway) {
			doc, _ := g.envelopeFor(1)
			require.NoError(t, os.WriteFile(g.output(), doc, 0o644))
			testfs.Lease(t, g.output())
		},
	}
	for name, plant := range cases {
		t.Run(name, func(t *testing.T) {
			g := newGateway(t)
			plant(t, g)
			s := newWithin(t, g, g.options())
			assert.False(t, s.Started(), "what could not be read is not restored")
			assert.False(t, s.Status().Restored)

			doc, revision := g.envelopeFor(2)
			rv := g.putEnvelope(doc)
			r := g.start(g.options())
			st := r.waitObserved(t, rv)
			assert.Equal(t, revision, st.WrittenRevision)
			assert.Equal(t, overlaysync.StateReady, st.State)
			info, err := os.Lstat(g.output())
			require.NoError(t, err)
			assert.True(t, info.Mode().IsRegular(), "the output is a file again")
			assert.Equal(t, string(doc), readOutput(t, g.output()))
		})
	}
}

// The output's folder is shared: a file removed or replaced by another
// container is put back from the last-known-good within a retry tick, and
// reported (output_missing, upstream write_failed) for as long as it
// cannot be.
func TestAMissingOutputIsPutBackAndReportedMeanwhile(t *testing.T) {
	g := newGateway(t)
	opts := g.options()
	opts.RetryWrite = 100 * time.Millisecond
	r := g.start(opts)
	doc, revision := g.envelopeFor(1)
	st := r.waitObserved(t, g.putEnvelope(doc))
	require.Equal(t, revision, st.WrittenRevision)

	require.NoError(t, os.Remove(g.output()))
	require.Eventually(t, func() bool {
		data, err := os.ReadFile(g.output())
		return err == nil && string(data) == string(doc)
	}, 10*time.Second, 10*time.Millisecond, "the removed output is put back")
	r.waitStatus(t, "back and no longer degraded", func(st overlaysync.Status) bool { return !st.Degraded })
	assert.Equal(t, 1.0, r.metric(t, "grid_overlay_sync_output_missing_total"))

	// A file of someone else's in its place is replaced the same way.
	require.NoError(t, os.WriteFile(g.output()+".other", []byte(`{"routes":[]}`), 0o644))
	require.NoError(t, os.Rename(g.output()+".other", g.output()))
	require.Eventually(t, func() bool {
		data, err := os.ReadFile(g.output())
		return err == nil && string(data) == string(doc)
	}, 10*time.Second, 10*time.Millisecond, "the replaced output is put back")
	r.waitStatus(t, "back and no longer degraded", func(st overlaysync.Status) bool { return !st.Degraded })
	assert.Equal(t, 2.0, r.metric(t, "grid_overlay_sync_output_missing_total"))

	// A folder at the output's name cannot be renamed over: degraded until
	// it goes.
	require.NoError(t, os.Remove(g.output()))
	require.NoError(t, os.Mkdir(g.output(), 0o755))
	require.NoError(t, os.WriteFile(g.output()+"/keep", nil, 0o644))
	st = r.waitStatus(t, "degraded while the output is missing", func(st overlaysync.Status) bool { return st.Degraded })
	assert.Equal(t, overlaysync.ReasonOutputMissing, st.DegradedReason)
	require.NotNil(t, st.UpstreamDegradedReason)
	assert.Equal(t, "write_failed", *st.UpstreamDegradedReason)
	assert.Equal(t, overlaysync.StateReadyDegraded, st.State)
	require.NoError(t, os.RemoveAll(g.output()))
	r.waitStatus(t, "back once the folder is gone", func(st overlaysync.Status) bool { return !st.Degraded })
	assert.Equal(t, string(doc), readOutput(t, g.output()))
	assert.Equal(t, 3.0, r.metric(t, "grid_overlay_sync_output_missing_total"))
}
