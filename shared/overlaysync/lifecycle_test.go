package overlaysync_test

import (
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gridsync/gridsync/shared/envelope"
	"github.com/gridsync/gridsync/shared/overlaysync"
)

func TestSidecarKeepsLastKnownGoodWhenSourceDeletedAndRecoversOnRecreate(t *testing.T) {
	g := newGateway(t)
	r := g.start(g.options())
	doc, revision := g.envelopeFor(1)
	r.waitObserved(t, g.putEnvelope(doc))

	g.delete()
	st := r.waitStatus(t, "degraded after delete", func(st overlaysync.Status) bool { return st.DegradedReason == overlaysync.ReasonDeleted })
	assert.Equal(t, overlaysync.StateReadyDegraded, st.State)
	assert.True(t, st.Ready)
	assert.Equal(t, revision, st.WrittenRevision)
	assert.Equal(t, string(doc), readOutput(t, g.output()), "the file is kept")

	// Re-created with the same routing state: recovered, nothing written.
	st = r.waitObserved(t, g.putEnvelope(doc))
	assert.Equal(t, overlaysync.StateReady, st.State)

	// Re-created with new state after another delete: delivered.
	g.delete()
	r.waitStatus(t, "degraded after second delete", func(st overlaysync.Status) bool { return st.DegradedReason == overlaysync.ReasonDeleted })
	next, nextRevision := g.envelopeFor(2)
	st = r.waitObserved(t, g.putEnvelope(next))
	assert.Equal(t, overlaysync.StateReady, st.State)
	assert.Equal(t, nextRevision, st.WrittenRevision)
	assert.Equal(t, string(next), readOutput(t, g.output()))
}

func TestMissingDataKeyIsARejectionWithItsOwnReason(t *testing.T) {
	g := newGateway(t)
	r := g.start(g.options())
	doc, _ := g.envelopeFor(1)
	r.waitObserved(t, g.putEnvelope(doc))

	st := r.waitObserved(t, g.put(map[string]string{envelope.DataKeyBare: "{}"}))
	assert.Equal(t, overlaysync.ReasonMissingDataKey, st.DegradedReason)
	assert.Equal(t, string(doc), readOutput(t, g.output()))
	assert.Equal(t, 1.0, r.metric(t, "grid_overlay_sync_validation_failures_total", "reason", "missing_key"), "the upstream reason")
	assert.Equal(t, 1.0, r.metric(t, "grid_overlay_sync_rejections_total", "reason", overlaysync.ReasonMissingDataKey))
}

func TestRestartRestoresAValidOutputFile(t *testing.T) {
	g := newGateway(t)
	doc, revision := g.envelopeFor(1)
	require.NoError(t, os.WriteFile(g.output(), doc, 0o644))

	s, err := overlaysync.New(g.saConfig, g.options())
	require.NoError(t, err)
	st := s.Status()
	assert.True(t, st.Ready, "ready at once from the restored file, before any API call")
	assert.True(t, st.Restored)
	assert.Equal(t, revision, st.WrittenRevision)
	assert.True(t, s.Started())
	// ... but not confirmed: the sidecar may restart in the middle of an
	// outage, with a file far behind the source.
	assert.True(t, st.Degraded, "unconfirmed until the API server answers")
	assert.Equal(t, overlaysync.ReasonSourceUnconfirmed, st.DegradedReason)
	assert.Equal(t, overlaysync.StateReadyDegraded, st.State)

	// Once the source answers with the same revision nothing is written,
	// and the file still counts as restored.
	r := g.start(g.options())
	st = r.waitObserved(t, g.putEnvelope(doc))
	assert.Equal(t, overlaysync.StateReady, st.State)
	assert.True(t, st.Restored)
	assert.Zero(t, r.metric(t, "grid_overlay_sync_file_writes_total", "outcome", "success"))

	next, _ := g.envelopeFor(2)
	st = r.waitObserved(t, g.putEnvelope(next))
	assert.False(t, st.Restored, "replaced by a delivered revision")
}

func TestRestartNeverReportsACorruptOutputFileAsValid(t *testing.T) {
	for name, content := range map[string]string{
		"truncated":     `{"schema_version": "1.0.0", "revision": {`,
		"another scope": "",
		"empty":         "",
		"not json":      "routes: all",
	} {
		t.Run(name, func(t *testing.T) {
			g := newGateway(t)
			if name == "another scope" {
				other := g.scope
				other.LocalSite = "west-edge"
				doc, _ := buildEnvelope(t, other, 1, 0)
				content = string(doc)
			}
			require.NoError(t, os.WriteFile(g.output(), []byte(content), 0o644))

			r := g.start(g.options())
			st := r.Status()
			assert.Equal(t, overlaysync.StateCold, st.State)
			assert.False(t, st.Ready)
			assert.False(t, r.Started())

			doc, revision := g.envelopeFor(1)
			st = r.waitObserved(t, g.putEnvelope(doc))
			assert.Equal(t, overlaysync.StateReady, st.State)
			assert.Equal(t, revision, st.WrittenRevision)
			assert.Equal(t, string(doc), readOutput(t, g.output()))
		})
	}
}

func TestColdStartWithoutOutputWaitsForTheConfigMap(t *testing.T) {
	g := newGateway(t)
	r := g.start(g.options())
	st := r.waitStatus(t, "not found reported", func(st overlaysync.Status) bool { return st.DegradedReason == overlaysync.ReasonNotFound })
	assert.Equal(t, overlaysync.StateCold, st.State)
	assert.NoFileExists(t, g.output())

	doc, _ := g.envelopeFor(1)
	st = r.waitObserved(t, g.putEnvelope(doc))
	assert.True(t, r.Started())
	assert.Equal(t, overlaysync.StateReady, st.State)
	assert.Equal(t, string(doc), readOutput(t, g.output()))
}

func TestOnceReturnsAfterTheFirstValidOverlay(t *testing.T) {
	g := newGateway(t)
	opts := g.options()
	opts.Once = true
	r := g.start(opts)
	bad := fixture(t, "invalid-digest.json")
	r.waitObserved(t, g.putEnvelope(bad))
	select {
	case err := <-r.done:
		t.Fatalf("Run returned (%v) before a valid overlay was on disk", err)
	default:
	}
	doc, _ := g.envelopeFor(1)
	g.putEnvelope(doc)
	require.NoError(t, <-r.done)
	assert.Equal(t, string(doc), readOutput(t, g.output()))
	r.done <- nil // for the cleanup's stop
}

func TestOnceFetchesANewerRevisionThanTheRestoredFile(t *testing.T) {
	g := newGateway(t)
	old, _ := g.envelopeFor(1)
	require.NoError(t, os.WriteFile(g.output(), old, 0o644))
	newer, revision := g.envelopeFor(2)
	g.putEnvelope(newer)

	opts := g.options()
	opts.Once = true
	r := g.start(opts)
	require.NoError(t, <-r.done)
	r.done <- nil // for the cleanup's stop
	assert.Equal(t, revision, r.Status().WrittenRevision)
	assert.Equal(t, string(newer), readOutput(t, g.output()))
}

// The output found at start is read only as far as the size limit: an
// endless one (here a pipe that never ends) is refused as oversized.
func TestRestartReadsTheOutputOnlyUpToTheSizeLimit(t *testing.T) {
	g := newGateway(t)
	require.NoError(t, syscall.Mkfifo(g.output(), 0o600))
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		w, err := os.OpenFile(g.output(), os.O_WRONLY, 0)
		if err != nil {
			return
		}
		defer func() { _ = w.Close() }()
		chunk := make([]byte, 64<<10)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := w.Write(chunk); err != nil {
				return // the reader closed its end
			}
		}
	}()
	done := make(chan *overlaysync.Syncer, 1)
	go func() {
		s, err := overlaysync.New(g.saConfig, g.options())
		assert.NoError(t, err)
		done <- s
	}()
	select {
	case s := <-done:
		require.NotNil(t, s)
		assert.False(t, s.Started(), "an oversized output is not restored")
	case <-time.After(10 * time.Second):
		t.Fatal("New read the endless output without a bound")
	}
}
