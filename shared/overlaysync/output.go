package overlaysync

import (
	"context"
	"time"

	"github.com/gridsync/gridsync/shared/publish"
)

// guardOutput checks, every RetryWrite, that the file the Syncer put at
// the output is still there as it left it. The output's folder is shared
// with the pod's other containers: one of them may remove the file, or
// put another in its place, and the gateway would find no routes (or
// foreign ones) at its next read while everything here said ready. A
// missing output is put back from the last-known-good at once and
// reported as degraded (output_missing) until it is.
func (s *Syncer) guardOutput(ctx context.Context) {
	tick := time.NewTicker(s.opts.RetryWrite)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			s.checkOutput()
		}
	}
}

// checkOutput puts the last-known-good back when the output is not the
// file last published. A write waiting to be retried is left to its
// retry, which publishes a newer revision anyway.
func (s *Syncer) checkOutput() {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	s.mu.Lock()
	good, waiting := s.st.lastGood, s.st.pending != nil
	s.mu.Unlock()
	if good == nil || waiting {
		return
	}
	intact, err := s.file.Intact()
	if intact {
		return
	}
	log := s.opts.Logger
	s.mu.Lock()
	first := s.st.outputReason == ""
	s.st.outputReason = ReasonOutputMissing
	s.mu.Unlock()
	if first {
		s.metrics.outputLost()
		s.notify()
		if err != nil {
			log.Warn("output_missing", "output", s.opts.Output, "revision", good.result.Revision, "error", err)
		} else {
			log.Warn("output_missing", "output", s.opts.Output, "revision", good.result.Revision)
		}
	}
	data, err := good.envelope(s.opts.MaxBytes)
	if err != nil {
		// It was decompressed within the same bound before: only memory
		// corrupted under it could get here.
		log.Error("output_restore_failed", "output", s.opts.Output, "revision", good.result.Revision, "error", err)
		return
	}
	res, err := s.file.Replace(data)
	if err != nil && res != publish.Written {
		s.metrics.writeFailed()
		// Retried on the next tick; said once, so that a folder put at the
		// output's name does not flood the log.
		if first {
			log.Error("output_restore_failed", "output", s.opts.Output, "revision", good.result.Revision, "error", err)
		}
		return
	}
	doneAt := s.opts.Now()
	s.mu.Lock()
	s.st.outputReason = ""
	s.st.lastWrittenAt = doneAt
	s.mu.Unlock()
	s.metrics.writes.WithLabelValues("success").Inc()
	s.metrics.lastWrite.Set(unixSeconds(doneAt))
	s.notify()
	log.Info("output_republished", "output", s.opts.Output, "revision", good.result.Revision)
}
