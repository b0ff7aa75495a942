package overlaysync

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"
	"unsafe"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/gridsync/gridsync/shared/envelope"
	"github.com/gridsync/gridsync/shared/publish"
)

// observe handles one state of the ConfigMap: validate, then publish an
// accepted new revision, or keep the last-known-good and report why not.
func (s *Syncer) observe(cm *corev1.ConfigMap, receivedAt time.Time) {
	s.mu.Lock()
	s.st.lastObservedAt = receivedAt
	s.mu.Unlock()
	s.metrics.lastObserved.Set(unixSeconds(receivedAt))
	// The resourceVersion in /status is the last one fully handled.
	defer func() {
		s.mu.Lock()
		s.st.resourceVersion = cm.ResourceVersion
		s.mu.Unlock()
	}()

	payload, packed, err := s.envelopeOf(cm)
	var res envelope.Result
	if err == nil {
		res, err = envelope.Validate(payload, s.validationOptions())
	}
	if err != nil {
		var rej *envelope.Rejection
		if errors.As(err, &rej) {
			s.reject(string(rej.Reason), rej.Detail, cm.ResourceVersion)
		}
		return
	}

	s.mu.Lock()
	s.st.observedRevision = res.Revision
	s.st.lastValidRevision = res.Revision
	unchanged := s.st.onDisk && s.st.writtenRevision == res.Revision
	if unchanged {
		// The same routing state (perhaps re-rendered with new
		// timestamps): nothing to write, and nothing wrong any more.
		s.st.sourceReason = ""
		s.st.pending = nil
	}
	s.mu.Unlock()
	if unchanged {
		s.metrics.unchanged()
		s.opts.Logger.Debug("overlay_unchanged", "revision", res.Revision, "resource_version", cm.ResourceVersion)
		return
	}
	s.write(&accepted{data: payload, packed: packed, result: res, receivedAt: receivedAt})
}

// envelopeOf returns the envelope a ConfigMap holds: the data key's text,
// or else its compressed form (binaryData, the data key with ".zst"),
// decompressed within the size bound. The digest the validator checks is
// the decompressed envelope's, so the compressed bytes are trusted no
// further than the plain ones. A missing key is a *Rejection too.
// The compressed bytes are returned too (nil for the plain form).
func (s *Syncer) envelopeOf(cm *corev1.ConfigMap) (doc, packed []byte, err error) {
	if data, ok := cm.Data[s.opts.DataKey]; ok {
		return bytesOf(data), nil, nil
	}
	compressedKey := envelope.CompressedKey(s.opts.DataKey)
	packed, ok := cm.BinaryData[compressedKey]
	if !ok {
		return nil, nil, &envelope.Rejection{Reason: ReasonMissingDataKey,
			Detail: fmt.Sprintf("ConfigMap has no data key %q nor binaryData key %q", s.opts.DataKey, compressedKey)}
	}
	doc, err = envelope.Decompress(packed, s.opts.MaxBytes)
	return doc, packed, err
}

// write publishes an accepted envelope; a failed write keeps the
// last-known-good file, marks the Syncer degraded and is retried.
func (s *Syncer) write(a *accepted) {
	log := s.opts.Logger
	// Only a new revision gets here, so the file cannot already hold it.
	s.writeMu.Lock()
	res, err := s.file.Replace(a.data)
	s.writeMu.Unlock()
	doneAt := s.opts.Now()
	if err != nil && res != publish.Written {
		s.metrics.writeFailed()
		s.mu.Lock()
		retry := s.st.pending == a
		s.st.pending = a
		s.mu.Unlock()
		// Retried every RetryWrite: the first failure is an error, the
		// retries of the same revision are debug, so a full disk does not
		// flood the log.
		level := slog.LevelError
		if retry {
			level = slog.LevelDebug
		}
		log.Log(context.Background(), level, "overlay_write_failed", "revision", a.result.Revision, "output", s.opts.Output, "error", err)
		return
	}
	if err != nil {
		// In place and visible, but the folder sync failed.
		log.Warn("overlay_write_not_durable", "revision", a.result.Revision, "error", err)
	}
	s.metrics.writes.WithLabelValues("success").Inc()
	latency := doneAt.Sub(a.receivedAt)
	s.metrics.deliveryLatency.Observe(latency.Seconds())
	if rendered := a.result.Provenance.RenderedAt; !rendered.IsZero() && !doneAt.Before(rendered) {
		s.metrics.renderToDisk.Observe(doneAt.Sub(rendered).Seconds())
	}
	s.metrics.lastWrite.Set(unixSeconds(doneAt))
	s.metrics.accepted()

	s.mu.Lock()
	s.st.pending = nil
	s.st.lastGood = a.kept()
	s.st.outputReason = ""
	s.st.sourceReason = ""
	s.st.restored = false
	s.st.lastWrittenAt = doneAt
	s.st.lastDeliveryLatency = latency
	s.markOnDiskLocked(a.result.Revision, len(a.data))
	s.mu.Unlock()
	s.notify()
	log.Info("overlay_written", "revision", a.result.Revision, "candidates", a.result.CandidateCount,
		"bytes", len(a.data), "delivery_latency_ms", float64(latency.Microseconds())/1000)
}

// markOnDiskLocked records the revision now on disk. s.mu is held.
func (s *Syncer) markOnDiskLocked(revision string, size int) {
	s.st.writtenRevision = revision
	s.st.payloadBytes = size
	s.metrics.payloadBytes.Set(float64(size))
	// One series: the previous revision's goes away.
	s.metrics.revisionInfo.Reset()
	s.metrics.revisionInfo.WithLabelValues(revision).Set(1)
	s.st.onDisk = true
}

// reject keeps the last-known-good file and reports the bounded reason.
// detail is for the log only; it never contains envelope content.
func (s *Syncer) reject(reason, detail, resourceVersion string) {
	now := s.opts.Now()
	s.mu.Lock()
	s.st.sourceReason = reason
	s.st.observedRevision = ""
	s.st.lastRejectionReason = reason
	s.st.lastRejectionAt = now
	serving := s.st.writtenRevision
	s.mu.Unlock()
	s.metrics.rejected(reason)
	s.notify()
	s.opts.Logger.Warn("overlay_rejected", "reason", reason, "detail", detail,
		"resource_version", resourceVersion, "serving_revision", serving)
}

// absent handles a ConfigMap that is not there (deleted, or never created
// yet): the file stays, the Syncer is degraded until it comes back.
func (s *Syncer) absent(reason, resourceVersion string) {
	s.mu.Lock()
	s.st.sourceReason = reason
	s.st.observedRevision = ""
	s.st.resourceVersion = resourceVersion
	s.st.pending = nil
	serving := s.st.writtenRevision
	s.mu.Unlock()
	s.metrics.absent(reason)
	s.notify()
	event := "config_map_absent"
	if reason == ReasonDeleted {
		event = "overlay_source_deleted" // the upstream sidecar's name
	}
	s.opts.Logger.Warn(event, "reason", reason, "serving_revision", serving)
}

// confirmedAt is when the API server last answered for the source.
func (s *Syncer) confirmedAt() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st.lastConfirmedAt
}

// confirm records that the API server answered for the source at t.
func (s *Syncer) confirm(t time.Time) {
	s.mu.Lock()
	s.st.lastConfirmedAt = t
	recovered := s.st.apiReason != ""
	s.st.apiReason = ""
	s.mu.Unlock()
	if recovered {
		s.notify()
		s.opts.Logger.Info("api_reachable")
	}
}

// apiFailure marks the Syncer degraded while the API cannot be used:
// api_forbidden when it refuses this identity (fix the RBAC),
// source_unconfirmed when a request got no answer in time, else
// api_unreachable. The first failure of a kind is a warning; repeats are
// debug, so an outage does not flood the log.
func (s *Syncer) apiFailure(op string, err error) {
	reason := ReasonAPIUnreachable
	switch {
	case apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err):
		reason = ReasonAPIForbidden
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, errUnanswered):
		reason = ReasonSourceUnconfirmed
	}
	s.mu.Lock()
	first := s.st.apiReason != reason
	s.st.apiReason = reason
	s.mu.Unlock()
	s.metrics.apiFailed(reason)
	if first {
		s.notify()
		s.opts.Logger.Warn(reason, "op", op, "error", err)
	} else {
		s.opts.Logger.Debug(reason, "op", op, "error", err)
	}
}

func (s *Syncer) hasPending() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st.pending != nil
}

func (s *Syncer) retryPending() {
	s.mu.Lock()
	p := s.st.pending
	s.mu.Unlock()
	if p != nil {
		s.write(p)
	}
}

// bytesOf views a ConfigMap value as bytes without copying it: a 1 MiB
// envelope would otherwise be copied on every update only to be read.
// Nothing writes through the view: the validator and the publisher only
// read their input.
func bytesOf(s string) []byte {
	return unsafe.Slice(unsafe.StringData(s), len(s))
}

func unixSeconds(t time.Time) float64 {
	return float64(t.UnixNano()) / 1e9
}

// notify tells the owner that something changed (Options.Notify).
func (s *Syncer) notify() {
	if s.opts.Notify != nil {
		s.opts.Notify()
	}
}
