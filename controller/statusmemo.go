package controller

import (
	"sync"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gridsync/gridsync/api/v1alpha1"
)

// maxWrittenStatuses bounds what a statusMemo holds: an entry lives from
// a status write until the cache shows it, so only an object deleted in
// between leaves one behind.
const maxWrittenStatuses = 4096

// statusMemo remembers the status the agent last wrote to each object,
// with the resourceVersion the write returned, until the informer cache
// shows that write.
//
// The cache lags the agent's own writes. A reconcile that builds the next
// status from the cached copy and skips the write when the two are equal
// goes wrong when a change is followed, within that lag, by its undo (a
// remote site's provider added and withdrawn, a site Active and then
// Unreachable): the undo equals the stale cached copy, the write is
// skipped, and the API server keeps the first change until the next
// resync. A merge patch computed from the stale copy goes wrong the same
// way: it leaves out every field the stale copy already had right. Only
// the leading agent writes these statuses, so what it wrote last is what
// the API server holds until the cache shows a version of its own.
type statusMemo[S any] struct {
	mu      sync.Mutex
	written map[types.NamespacedName]writtenStatus[S]
}

type writtenStatus[S any] struct {
	resourceVersion string
	status          *S
}

func newStatusMemo[S any]() *statusMemo[S] {
	return &statusMemo[S]{written: map[types.NamespacedName]writtenStatus[S]{}}
}

// current is the object's status as the API server holds it, as far as
// the agent knows: the cached one once the cache shows the agent's last
// write, else the one last written. The caller must not modify what it
// returns.
func (m *statusMemo[S]) current(key types.NamespacedName, cachedVersion string, cached *S) *S {
	m.mu.Lock()
	defer m.mu.Unlock()
	w, ok := m.written[key]
	if !ok {
		return cached
	}
	if w.resourceVersion == cachedVersion || equality.Semantic.DeepEqual(cached, w.status) {
		delete(m.written, key) // the cache caught up
		return cached
	}
	return w.status
}

// wrote records a status written; status must not be modified afterwards.
func (m *statusMemo[S]) wrote(key types.NamespacedName, resourceVersion string, status *S) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.written[key]; !ok && len(m.written) >= maxWrittenStatuses {
		clear(m.written) // the oldest are of deleted objects; the rest are written again
	}
	m.written[key] = writtenStatus[S]{resourceVersion: resourceVersion, status: status}
}

// forget drops an object's entry (the object is gone).
func (m *statusMemo[S]) forget(key types.NamespacedName) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.written, key)
}

// writtenStatuses are the memos of the three kinds whose status the
// agent writes.
type writtenStatuses struct {
	networks  *statusMemo[v1alpha1.GridNetworkStatus]
	sites     *statusMemo[v1alpha1.GridSiteStatus]
	providers *statusMemo[v1alpha1.InferenceProviderStatus]
}

func newWrittenStatuses() *writtenStatuses {
	return &writtenStatuses{
		networks:  newStatusMemo[v1alpha1.GridNetworkStatus](),
		sites:     newStatusMemo[v1alpha1.GridSiteStatus](),
		providers: newStatusMemo[v1alpha1.InferenceProviderStatus](),
	}
}
