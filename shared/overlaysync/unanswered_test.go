package overlaysync_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gridsync/gridsync/shared/overlaysync"
)

// A proxy (or an overloaded API server) that holds the watch request
// without answering, on a connection whose health checks pass: the idle
// timeout must bound the wait for the first byte, the sidecar must say the
// source is unconfirmed, and an update must still arrive (by relisting).
func TestAWatchRequestThatIsNeverAnsweredIsNoticed(t *testing.T) {
	g := newGateway(t)
	proxy := newHoldingProxy(t)
	opts := fastRetry(g.options())
	opts.WatchIdleTimeout = time.Second
	r := g.start(opts, proxy.Config(g.saConfig))
	first, _ := g.envelopeFor(1)
	r.waitObserved(t, g.putEnvelope(first))

	proxy.HoldWatches()
	r.waitStatus(t, "unconfirmed while watches are held", func(st overlaysync.Status) bool {
		return st.DegradedReason == overlaysync.ReasonSourceUnconfirmed && st.State == overlaysync.StateReadyDegraded
	})
	require.Eventually(t, func() bool { return proxy.Held.Load() > 0 }, 10*time.Second, 10*time.Millisecond, "a watch request is held")
	second, secondRevision := g.envelopeFor(2)
	g.putEnvelope(second)
	st := r.waitStatus(t, "update delivered although every watch is held", func(st overlaysync.Status) bool {
		return st.WrittenRevision == secondRevision
	})
	assert.Equal(t, string(second), readOutput(t, g.output()))
	assert.Positive(t, r.metric(t, "grid_overlay_sync_watch_restarts_total", "reason", "idle"))
	assert.True(t, st.Ready, "the last-known-good keeps serving")

	proxy.Release()
	third, thirdRevision := g.envelopeFor(3)
	r.waitObserved(t, g.putEnvelope(third))
	assert.Equal(t, thirdRevision, r.Status().WrittenRevision)
}

// Every response delayed beyond the idle timeout: no answer ever arrives
// in time, so the sidecar stays degraded (not "ready") the whole time, and
// recovers once responses are prompt again.
func TestResponsesDelayedBeyondTheIdleTimeoutKeepTheSourceUnconfirmed(t *testing.T) {
	g := newGateway(t)
	proxy := newHoldingProxy(t)
	opts := fastRetry(g.options())
	opts.WatchIdleTimeout = time.Second
	r := g.start(opts, proxy.Config(g.saConfig))
	first, firstRevision := g.envelopeFor(1)
	r.waitObserved(t, g.putEnvelope(first))

	// The watch already open stays live; it goes idle within a second,
	// and every request after it is answered too late.
	proxy.DelayAll(4 * time.Second)
	r.waitStatus(t, "unconfirmed", func(st overlaysync.Status) bool {
		return st.DegradedReason == overlaysync.ReasonSourceUnconfirmed
	})
	second, secondRevision := g.envelopeFor(2)
	g.putEnvelope(second)
	// Each request now times out before its answer: the state must hold.
	// A request cut off mid-answer reads as the API being unreachable,
	// which says the source is unconfirmed just as well; what must never
	// be seen is a fresh, undegraded state.
	notFresh := []string{overlaysync.ReasonSourceUnconfirmed, overlaysync.ReasonAPIUnreachable}
	for range 30 {
		st := r.Status()
		if st.WrittenRevision == firstRevision {
			assert.Contains(t, notFresh, st.DegradedReason, "never reported fresh while no answer arrives")
			assert.Equal(t, overlaysync.StateReadyDegraded, st.State)
		}
		time.Sleep(100 * time.Millisecond)
	}
	assert.Equal(t, firstRevision, r.Status().WrittenRevision, "no answer arrived, so nothing new was written")

	proxy.DelayAll(0)
	r.waitRecovered(t, secondRevision)
}

// A frozen TCP path: the connection stays open and carries nothing. The
// idle timeout says so at once, not when HTTP/2's health check gives up
// on the connection (tens of seconds later).
func TestAFrozenPathIsReportedAtTheIdleTimeout(t *testing.T) {
	g := newGateway(t)
	proxy := newProxy(t)
	opts := fastRetry(g.options())
	opts.WatchIdleTimeout = 2 * time.Second
	r := g.start(opts, proxy.Config(g.saConfig))
	first, _ := g.envelopeFor(1)
	r.waitObserved(t, g.putEnvelope(first))

	proxy.Freeze()
	frozenAt := time.Now()
	second, secondRevision := g.envelopeFor(2)
	g.putEnvelope(second)
	r.waitStatus(t, "unconfirmed on the frozen path", func(st overlaysync.Status) bool {
		return st.DegradedReason == overlaysync.ReasonSourceUnconfirmed
	})
	assert.Less(t, time.Since(frozenAt), 10*time.Second, "reported within the idle timeout and a backoff step")

	proxy.Thaw()
	r.waitRecovered(t, secondRevision)
}

// The API coming back must not hide a rejection that still stands: the
// watch resumes from where it was and replays nothing, so the rejection
// has to be remembered apart from the outage.
func TestARejectionOutlivesAnOutage(t *testing.T) {
	g := newGateway(t)
	proxy := newProxy(t)
	r := g.start(fastRetry(g.options()), proxy.Config(g.saConfig))
	first, _ := g.envelopeFor(1)
	r.waitObserved(t, g.putEnvelope(first))
	r.waitObserved(t, g.put(map[string]string{"unrelated": "x"}))
	require.Equal(t, overlaysync.ReasonMissingDataKey, r.Status().DegradedReason)

	proxy.Cut()
	r.waitStatus(t, "cut off", func(st overlaysync.Status) bool { return st.DegradedReason == overlaysync.ReasonAPIUnreachable })
	proxy.Restore()
	st := r.waitStatus(t, "reconnected", func(st overlaysync.Status) bool { return st.DegradedReason != overlaysync.ReasonAPIUnreachable })
	assert.Equal(t, overlaysync.ReasonMissingDataKey, st.DegradedReason)
	assert.Equal(t, overlaysync.StateReadyDegraded, st.State)
}

// waitRecovered waits until revision is on disk and nothing is degraded.
func (r *running) waitRecovered(t *testing.T, revision string) {
	t.Helper()
	st := r.waitStatus(t, "recovered", func(st overlaysync.Status) bool {
		return st.WrittenRevision == revision && st.DegradedReason == ""
	})
	assert.Equal(t, overlaysync.StateReady, st.State)
}
