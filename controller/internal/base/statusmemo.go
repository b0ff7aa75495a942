package base

import (
	"context"
	"fmt"
	"sync"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gridsync/gridsync/api/v1alpha1"
)

// maxWrittenStatuses bounds what a StatusMemo holds: an entry lives from
// a status write until the cache shows it, so only an object deleted in
// between leaves one behind.
const maxWrittenStatuses = 4096

// StatusMemo remembers the status the agent last wrote to each object,
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
type StatusMemo[S any] struct {
	mu      sync.Mutex
	written map[types.NamespacedName]writtenStatus[S]
}

type writtenStatus[S any] struct {
	resourceVersion string
	status          *S
}

func NewStatusMemo[S any]() *StatusMemo[S] {
	return &StatusMemo[S]{written: map[types.NamespacedName]writtenStatus[S]{}}
}

// Current is the object's status as the API server holds it, as far as
// the agent knows: the cached one once the cache shows the agent's last
// write, else the one last written. The caller must not modify what it
// returns.
func (m *StatusMemo[S]) Current(key types.NamespacedName, cachedVersion string, cached *S) *S {
	status, _ := m.Latest(key, cachedVersion, cached)
	return status
}

// Latest is Current with the resourceVersion that status goes with: the
// one to write against, as an optimistic lock, when several reconcilers
// write parts of one status (each records its writes here, so each
// builds on the others' last write even before the cache shows it).
func (m *StatusMemo[S]) Latest(key types.NamespacedName, cachedVersion string, cached *S) (*S, string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	w, ok := m.written[key]
	if !ok {
		return cached, cachedVersion
	}
	if w.resourceVersion == cachedVersion || equality.Semantic.DeepEqual(cached, w.status) {
		delete(m.written, key) // the cache caught up
		return cached, cachedVersion
	}
	return w.status, w.resourceVersion
}

// Wrote records a status written; status must not be modified afterwards.
func (m *StatusMemo[S]) Wrote(key types.NamespacedName, resourceVersion string, status *S) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.written[key]; !ok && len(m.written) >= maxWrittenStatuses {
		clear(m.written) // the oldest are of deleted objects; the rest are written again
	}
	m.written[key] = writtenStatus[S]{resourceVersion: resourceVersion, status: status}
}

// Forget drops an object's entry (the object is gone).
func (m *StatusMemo[S]) Forget(key types.NamespacedName) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.written, key)
}

// WrittenStatuses are the memos of the three kinds whose status the
// agent writes.
type WrittenStatuses struct {
	Networks  *StatusMemo[v1alpha1.GridNetworkStatus]
	Sites     *StatusMemo[v1alpha1.GridSiteStatus]
	Providers *StatusMemo[v1alpha1.InferenceProviderStatus]
}

func NewWrittenStatuses() *WrittenStatuses {
	return &WrittenStatuses{
		Networks:  NewStatusMemo[v1alpha1.GridNetworkStatus](),
		Sites:     NewStatusMemo[v1alpha1.GridSiteStatus](),
		Providers: NewStatusMemo[v1alpha1.InferenceProviderStatus](),
	}
}

// ReadNetworkStatus replaces the cached network's status and
// resourceVersion with the latest the agent knows of (see Latest): what
// a status write is built from and made against.
func (e *Env) ReadNetworkStatus(network *v1alpha1.GridNetwork) {
	current, version := e.Written.Networks.Latest(client.ObjectKeyFromObject(network), network.ResourceVersion, &network.Status)
	network.Status, network.ResourceVersion = *current.DeepCopy(), version
}

// WriteNetworkStatus patches the network's status to next and records the
// write. Several reconcilers write parts of a GridNetwork's status (the
// overlay reconciler most of it, the delivery status reconciler the
// delivery fields), and a merge patch replaces a list such as
// overlayStatus whole: so the patch is made against the version read (an
// optimistic lock), and each writer builds next from what
// ReadNetworkStatus gave, carrying the other's fields over. A write of the
// other in between is a conflict, retried (RetryConflicts) once the memo
// or the cache shows it, never undone; the memo's entry is dropped then,
// in case another replica wrote.
func (e *Env) WriteNetworkStatus(ctx context.Context, network *v1alpha1.GridNetwork, next *v1alpha1.GridNetworkStatus) error {
	key := client.ObjectKeyFromObject(network)
	orig := network.DeepCopy()
	network.Status = *next
	if err := e.Client.Status().Patch(ctx, network, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		if apierrors.IsConflict(err) {
			e.Written.Networks.Forget(key)
		}
		return fmt.Errorf("patch status of GridNetwork %s: %w", network.Name, err)
	}
	e.Written.Networks.Wrote(key, network.ResourceVersion, network.Status.DeepCopy())
	e.Metrics.StatusWrites.WithLabelValues("GridNetwork").Inc()
	return nil
}
