package base

import (
	"context"
	"fmt"
	"strconv"
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
	if caughtUp(cachedVersion, w.resourceVersion, func() bool { return equality.Semantic.DeepEqual(cached, w.status) }) {
		delete(m.written, key)
		return cached, cachedVersion
	}
	return w.status, w.resourceVersion
}

// caughtUp reports whether the cache shows a write: its version, or a
// later one. The API server's resourceVersions are etcd's revisions,
// integers that only grow; were they not (another storage), a cached
// status equal to the one written is taken for it, as the best guess. An
// older version whose status happens to equal the write (a change and its
// undo in between) is not the write: taking it for the write would let
// the cache's next, intermediate version be read as current.
func caughtUp(cached, written string, sameStatus func() bool) bool {
	if cached == written {
		return true
	}
	c, err1 := strconv.ParseUint(cached, 10, 64)
	w, err2 := strconv.ParseUint(written, 10, 64)
	if err1 != nil || err2 != nil {
		return sameStatus()
	}
	return c > w
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

// UpdateNetworkStatus sets the caller's fields of a network's status: set
// is applied to the latest status the agent knows of, which network must
// hold (the caller read it with ReadNetworkStatus, once: read again, the
// memo's own entry would look like a cache that caught up), and the
// result patched when it differs. Three reconcilers write parts of
// a GridNetwork's status, each only its own fields (membership its
// conditions, phase and counts; overlay the overlays, the consumer configs
// and Ready; delivery status the delivery fields), and a merge patch
// replaces a list such as conditions or overlayStatus whole: so the patch
// is made against the version read (an optimistic lock), carrying the
// others' fields over. A write of another in between is a conflict: the
// network is read again from the API server and set applied again, so
// that no writer undoes another's and none has to run its whole reconcile
// again. It returns the status before and after (equal when nothing was
// written).
func (e *Env) UpdateNetworkStatus(ctx context.Context, network *v1alpha1.GridNetwork, set func(next *v1alpha1.GridNetworkStatus)) (before, after *v1alpha1.GridNetworkStatus, err error) {
	current := network.DeepCopy()
	for attempt := 1; ; attempt++ {
		before = current.Status.DeepCopy()
		next := current.Status.DeepCopy()
		set(next)
		if equality.Semantic.DeepEqual(before, next) {
			return before, next, nil
		}
		err := e.writeNetworkStatus(ctx, current, next)
		if err == nil || !apierrors.IsConflict(err) || attempt == maxStatusAttempts {
			return before, next, err
		}
		current = &v1alpha1.GridNetwork{}
		if err := e.API.Get(ctx, client.ObjectKeyFromObject(network), current); err != nil {
			return before, before, fmt.Errorf("read GridNetwork %s again after a write conflict: %w", network.Name, err)
		}
		// What the API server holds now is what the other writers build
		// on too: the conflict dropped the memo's entry, and with nothing
		// left to write here the cache, which may lag, would be read in
		// its place (a change undone within the lag would then be taken
		// for written).
		e.Written.Networks.Wrote(client.ObjectKeyFromObject(network), current.ResourceVersion, current.Status.DeepCopy())
	}
}

// maxStatusAttempts bounds the writes of one UpdateNetworkStatus: a
// conflict each time means another replica writes too (the reconcile is
// then retried).
const maxStatusAttempts = 4

// writeNetworkStatus patches the network's status to next against the
// version read and records the write; on a conflict the memo's entry is
// dropped, in case another replica wrote.
func (e *Env) writeNetworkStatus(ctx context.Context, network *v1alpha1.GridNetwork, next *v1alpha1.GridNetworkStatus) error {
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
