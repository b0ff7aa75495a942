package overlaysync

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"

	"github.com/gridsync/gridsync/shared/envelope"
	"github.com/gridsync/gridsync/shared/publish"
)

// Syncer delivers one overlay ConfigMap to one file.
type Syncer struct {
	opts    Options
	client  rest.Interface
	file    *publish.File
	durable publish.Durability
	metrics *metrics

	// writeMu serializes the publications of s.file: the watch's and the
	// output guard's.
	writeMu sync.Mutex

	mu sync.Mutex
	st state
}

// accepted is a validated envelope on its way to disk.
type accepted struct {
	data []byte
	// packed is the compressed form the envelope came in, when it did:
	// once on disk, the envelope is kept as that (the last-known-good
	// to put back, rarely needed) instead of whole.
	packed     []byte
	result     envelope.Result
	receivedAt time.Time
}

// kept is what is held of an envelope once it is on disk: without its
// decompressed bytes when it came compressed, a fraction of their size.
func (a *accepted) kept() *accepted {
	if a.packed == nil {
		return a
	}
	return &accepted{packed: a.packed, result: a.result, receivedAt: a.receivedAt}
}

// envelope is the envelope's bytes, decompressed again when only the
// compressed form was kept.
func (a *accepted) envelope(maxBytes int) ([]byte, error) {
	if a.data != nil || a.packed == nil {
		return a.data, nil
	}
	return envelope.Decompress(a.packed, maxBytes)
}

// New prepares a Syncer: it removes stale temporary files next to the
// output and restores a valid overlay already on disk (a restarted
// container keeps its emptyDir) as last-known-good, so the gateway stays
// ready across a sidecar restart. A corrupt or foreign file on disk is not
// restored; the first valid update replaces it.
//
// config is the API client configuration (a ServiceAccount's, in a pod).
func New(config *rest.Config, opts Options) (*Syncer, error) {
	opts.defaults()
	if err := opts.validate(); err != nil {
		return nil, fmt.Errorf("overlay sync: %w", err)
	}
	client, err := newCoreClient(config)
	if err != nil {
		return nil, err
	}
	file, err := publish.New(opts.Output, opts.FileMode)
	if err != nil {
		return nil, err
	}
	durable, err := publish.Decide(opts.Fsync, filepath.Dir(opts.Output))
	if err != nil {
		return nil, fmt.Errorf("overlay sync: %w", err)
	}
	file.SetSync(durable.Sync)
	s := &Syncer{opts: opts, client: client, file: file, durable: durable}
	s.metrics = newMetrics(opts.Registerer, s.isReady, s.isDegraded, s.confirmedAt)
	s.restore()
	return s, nil
}

func (s *Syncer) validationOptions() envelope.Options {
	return envelope.Options{MaxBytes: s.opts.MaxBytes, Expect: s.opts.Expect, AcceptLegacy: s.opts.AcceptLegacy}
}

func (s *Syncer) restore() {
	log := s.opts.Logger
	// Not blocking: a FIFO or a leased file put at the output's name by
	// another container answers at once and is refused, so a restart is
	// never held by it; the output then counts as absent and the first
	// valid update replaces it.
	data, err := s.file.ReadCurrent(s.opts.MaxBytes + 1)
	if errors.Is(err, os.ErrNotExist) {
		log.Info("output_empty", "output", s.opts.Output)
		return
	}
	if err != nil {
		log.Warn("output_unreadable", "output", s.opts.Output, "error", err)
		return
	}
	res, err := envelope.Validate(data, s.validationOptions())
	if err != nil {
		log.Warn("output_invalid", "output", s.opts.Output, "reason", envelope.RejectionReason(err))
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.st.restored = true
	s.st.lastValidRevision = res.Revision
	s.st.lastGood = &accepted{data: data, result: res, receivedAt: s.opts.Now()}
	// The restored file keeps the gateway serving (ready, expiry counted
	// from now), but nothing has confirmed it yet: the sidecar may have
	// been killed in the middle of an outage, so until the API server
	// first answers it is degraded with source_unconfirmed, never "ready,
	// not degraded" on a file that may be far behind.
	s.st.lastConfirmedAt = s.opts.Now()
	s.st.apiReason = ReasonSourceUnconfirmed
	s.markOnDiskLocked(res.Revision, len(data))
	log.Info("overlay_restored", "revision", res.Revision, "output", s.opts.Output)
}

// Started reports whether a valid overlay is on disk (/startupz).
func (s *Syncer) Started() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st.onDisk
}

// Ready applies the readiness policy (/readyz) and says why not.
func (s *Syncer) Ready() (bool, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st.readiness(s.opts.Now(), s.opts.ExpireAfter)
}

func (s *Syncer) isReady() bool { ok, _ := s.Ready(); return ok }

func (s *Syncer) isDegraded() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st.degradedReason() != ""
}

// Status returns the /status document.
func (s *Syncer) Status() Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.st.status(s.opts.Now(), s.opts.ExpireAfter)
	st.Namespace, st.ConfigMap, st.DataKey = s.opts.Namespace, s.opts.ConfigMap, s.opts.DataKey
	st.Source = SourceStatus{Namespace: s.opts.Namespace, ConfigMap: s.opts.ConfigMap, DataKey: s.opts.DataKey, ResourceVersion: s.st.resourceVersion}
	st.Output = s.opts.Output
	st.Fsync, st.OutputMedium = s.durable.Sync, s.durable.Medium
	return st
}

// Run delivers until ctx is done (nil) or, with Options.Once, until a
// valid overlay is on disk. It never returns because the API server is
// unreachable: it backs off and tries again.
func (s *Syncer) Run(ctx context.Context) error {
	s.opts.Logger.Info("sync_started", "namespace", s.opts.Namespace, "config_map", s.opts.ConfigMap, "data_key", s.opts.DataKey, "output", s.opts.Output,
		"output_medium", s.durable.Medium, "fsync_mode", string(s.durable.Mode), "fsync", s.durable.Sync)
	if !s.opts.Once {
		guardDone := make(chan struct{})
		gctx, stopGuard := context.WithCancel(ctx)
		go func() { defer close(guardDone); s.guardOutput(gctx) }()
		defer func() { stopGuard(); <-guardDone }()
	}
	retry := newBackoff(s.opts.BackoffMin, s.opts.BackoffMax)
	relist := true
	listed := false
	var rv string
	for {
		// Once: after the API has been asked at least once, so that a
		// newer revision than a restored file is still fetched.
		if s.opts.Once && listed && s.Started() {
			return nil
		}
		if relist {
			var err error
			rv, err = s.list(ctx, rv)
			if err != nil {
				if ctx.Err() != nil {
					return nil //nolint:nilerr // the list failed because we are shutting down
				}
				s.apiFailure("list", err)
				s.metrics.watchRestarted(reconnectListError)
				if !sleep(ctx, retry.Next()) {
					return nil
				}
				continue
			}
			retry.Reset()
			relist = false
			listed = true
			continue
		}

		end, lastRV, err := s.watch(ctx, rv)
		rv = lastRV
		switch end {
		case watchDone:
			return nil
		case watchExpired:
			s.opts.Logger.Info("watch_expired", "resource_version", rv)
			s.metrics.watchRestarted(reconnectExpired)
			relist = true
		case watchClosed:
			s.opts.Logger.Debug("watch_closed", "resource_version", rv)
			s.metrics.watchRestarted(reconnectClosed)
			retry.Reset()
		case watchIdle:
			// Nothing came back in time: a held request, a frozen path or
			// an overloaded server. Say so at once, rather than when the
			// connection's health check gives up, then relist after one
			// backoff step: the list is bounded too, and it finds the
			// source as it is now when the path heals.
			s.apiFailure("watch", errUnanswered)
			s.opts.Logger.Warn("watch_idle", "resource_version", rv, "idle_timeout", s.opts.WatchIdleTimeout.String())
			s.metrics.watchRestarted(reconnectIdle)
			relist = true
			if !sleep(ctx, retry.Next()) {
				return nil
			}
		case watchFailed:
			s.apiFailure("watch", err)
			s.metrics.watchRestarted(reconnectWatchError)
			// Resume from the last resourceVersion: the events missed while
			// the API was away, a deletion included, are replayed, or the
			// server answers 410 and a relist finds the current state.
			if !sleep(ctx, retry.Next()) {
				return nil
			}
		}
	}
}

// request starts a request for the ConfigMap collection. client-go's own
// retries are off: on a dropped connection they would wait up to ten
// seconds and then hand back an empty watch that looks like a normal
// close, hiding the outage. The Syncer's backoff decides instead.
func (s *Syncer) request() *rest.Request {
	return s.client.Get().
		Namespace(s.opts.Namespace).
		Resource("configmaps").
		MaxRetries(0)
}

func (s *Syncer) selector() string {
	return fields.OneTermEqualSelector("metadata.name", s.opts.ConfigMap).String()
}

// listTimeout bounds one list call, unless the watch idle timeout is
// shorter; a watch is bounded by the idle timeout, from the request to its
// first byte and between events.
const listTimeout = 30 * time.Second

// list reads the current state of the one ConfigMap and returns the list's
// resourceVersion to watch from.
//
// A relist (seen is the last resourceVersion this Syncer saw) asks for
// any state not older than seen: the API server answers it from its watch
// cache, never from etcd, however many pods relist at once (after an API
// server restart, a thousand of them), and the answer never goes back in
// time past what was already published. The first list (seen empty) is a
// consistent read. A server that cannot reach seen in time (a restored
// etcd with older revisions) answers "too large resource version": the
// Syncer then falls back to a consistent read.
func (s *Syncer) list(ctx context.Context, seen string) (string, error) {
	lctx, cancel := context.WithTimeout(ctx, min(listTimeout, s.opts.WatchIdleTimeout))
	defer cancel()
	opts := metav1.ListOptions{FieldSelector: s.selector()}
	if seen != "" {
		opts.ResourceVersion, opts.ResourceVersionMatch = seen, metav1.ResourceVersionMatchNotOlderThan
	}
	list := &corev1.ConfigMapList{}
	err := s.request().VersionedParams(&opts, parameterCodec).Do(lctx).Into(list)
	if seen != "" && apierrors.HasStatusCause(err, metav1.CauseTypeResourceVersionTooLarge) {
		s.opts.Logger.Info("list_resource_version_too_large", "resource_version", seen)
		opts.ResourceVersion, opts.ResourceVersionMatch = "", ""
		list = &corev1.ConfigMapList{}
		err = s.request().VersionedParams(&opts, parameterCodec).Do(lctx).Into(list)
	}
	if err != nil {
		return "", err
	}
	receivedAt := s.opts.Now()
	s.confirm(receivedAt)
	if len(list.Items) == 0 {
		s.absent(ReasonNotFound, list.ResourceVersion)
	} else {
		s.observe(&list.Items[0], receivedAt)
	}
	return list.ResourceVersion, nil
}

type watchEnd int

const (
	watchDone watchEnd = iota
	watchClosed
	watchExpired
	watchIdle
	watchFailed
)

// watch follows the ConfigMap from rv until the watch ends, and returns
// how it ended and the last resourceVersion seen.
func (s *Syncer) watch(ctx context.Context, rv string) (watchEnd, string, error) {
	// Spread server-side watch timeouts over 5 to 10 minutes, as client-go's
	// reflector does, so that a fleet does not reconnect in step.
	timeout := int64((5*time.Minute + rand.N(5*time.Minute)) / time.Second)
	// The idle timeout also bounds the wait for the response headers: a
	// proxy or an overloaded server may hold the request on a connection
	// whose health checks still pass, and client-go would wait for ever.
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	unanswered := time.AfterFunc(s.opts.WatchIdleTimeout, cancel)
	w, err := s.request().VersionedParams(&metav1.ListOptions{
		Watch:               true,
		FieldSelector:       s.selector(),
		ResourceVersion:     rv,
		AllowWatchBookmarks: true,
		TimeoutSeconds:      &timeout,
	}, parameterCodec).Watch(wctx)
	if !unanswered.Stop() {
		if w != nil {
			w.Stop()
		}
		if ctx.Err() != nil {
			return watchDone, rv, nil
		}
		return watchIdle, rv, nil
	}
	if err != nil {
		if ctx.Err() != nil {
			return watchDone, rv, nil
		}
		if isExpired(err) {
			return watchExpired, rv, nil
		}
		return watchFailed, rv, err
	}
	defer w.Stop()

	// client-go answers a connection dropped during the request with a
	// stand-in watch that is already closed. A live stream is proof that
	// the API server serves the source again; the stand-in is not.
	var first *watch.Event
	select {
	case ev, ok := <-w.ResultChan():
		if !ok {
			return watchFailed, rv, errShortWatch
		}
		first = &ev
	default:
	}
	s.confirm(s.opts.Now())

	idle := time.NewTimer(s.opts.WatchIdleTimeout)
	defer idle.Stop()
	var retryC <-chan time.Time
	for {
		if first != nil {
			ev := *first
			first = nil
			if end, done := s.handleEvent(ev, &rv); done {
				return end.kind, rv, end.err
			}
			continue
		}
		if s.hasPending() && retryC == nil {
			retryC = time.After(s.opts.RetryWrite)
		}
		select {
		case <-ctx.Done():
			return watchDone, rv, nil
		case <-idle.C:
			return watchIdle, rv, nil
		case <-retryC:
			retryC = nil
			s.retryPending()
		case ev, ok := <-w.ResultChan():
			if ctx.Err() != nil {
				return watchDone, rv, nil
			}
			if !ok {
				return watchClosed, rv, nil
			}
			idle.Reset(s.opts.WatchIdleTimeout)
			if end, done := s.handleEvent(ev, &rv); done {
				return end.kind, rv, end.err
			}
		}
	}
}

type ending struct {
	kind watchEnd
	err  error
}

// handleEvent applies one watch event and advances *rv; done says the
// watch must end.
func (s *Syncer) handleEvent(ev watch.Event, rv *string) (ending, bool) {
	receivedAt := s.opts.Now()
	switch ev.Type {
	case watch.Added, watch.Modified:
		cm, ok := ev.Object.(*corev1.ConfigMap)
		if !ok {
			return ending{watchFailed, fmt.Errorf("unexpected %T in watch", ev.Object)}, true
		}
		*rv = cm.ResourceVersion
		s.confirm(receivedAt)
		s.observe(cm, receivedAt)
		if s.opts.Once && s.Started() {
			return ending{kind: watchDone}, true
		}
	case watch.Deleted:
		if obj, err := meta.Accessor(ev.Object); err == nil {
			*rv = obj.GetResourceVersion()
		}
		s.confirm(receivedAt)
		s.absent(ReasonDeleted, *rv)
	case watch.Bookmark:
		if obj, err := meta.Accessor(ev.Object); err == nil {
			*rv = obj.GetResourceVersion()
		}
		s.confirm(receivedAt)
	case watch.Error:
		err := apierrors.FromObject(ev.Object)
		if isExpired(err) {
			return ending{kind: watchExpired}, true
		}
		return ending{watchFailed, err}, true
	}
	return ending{}, false
}

var (
	errShortWatch = errors.New("watch stream closed before it started (connection lost)")
	errUnanswered = errors.New("no answer from the API server within the watch idle timeout")
)

func isExpired(err error) bool {
	return apierrors.IsResourceExpired(err) || apierrors.IsGone(err)
}

// sleep waits d or until ctx is done; it reports whether to go on.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
