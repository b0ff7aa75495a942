package base

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gridsync/gridsync/api/v1alpha1"
)

func TestStatusMemoAnswersForALaggingCache(t *testing.T) {
	m := NewStatusMemo[v1alpha1.GridNetworkStatus]()
	key := types.NamespacedName{Name: "n"}
	stale := &v1alpha1.GridNetworkStatus{RemoteProviderCount: 1}
	assert.Same(t, stale, m.Current(key, "10", stale), "nothing written: the cache's")

	written := &v1alpha1.GridNetworkStatus{RemoteProviderCount: 2}
	m.Wrote(key, "11", written)
	assert.Same(t, written, m.Current(key, "10", stale), "the cache has not seen the write: what was written")
	assert.Same(t, written, m.Current(key, "10", stale), "and again, until it has")

	caughtUp := &v1alpha1.GridNetworkStatus{RemoteProviderCount: 2}
	assert.Same(t, caughtUp, m.Current(key, "11", caughtUp), "the cache shows the write: the cache's")
	assert.Same(t, stale, m.Current(key, "10", stale), "and the entry is gone")

	// A later version of the object (its spec changed) with the status
	// written: the cache's, and the entry goes.
	m.Wrote(key, "12", &v1alpha1.GridNetworkStatus{RemoteProviderCount: 3})
	later := &v1alpha1.GridNetworkStatus{RemoteProviderCount: 3}
	assert.Same(t, later, m.Current(key, "13", later))
	assert.Empty(t, m.written)

	// An older version whose status equals the one written (a change and
	// its undo since) is not the write: the write is what holds, until the
	// cache shows its version or a later one.
	m.Wrote(key, "20", written)
	undone := &v1alpha1.GridNetworkStatus{RemoteProviderCount: 2}
	assert.Same(t, written, m.Current(key, "18", undone), "an older version equal to the write")
	assert.Same(t, written, m.Current(key, "19", stale), "so the version between is not taken for current")
	assert.Same(t, undone, m.Current(key, "21", undone), "a later version: the cache's")

	m.Wrote(key, "14", written)
	m.Forget(key)
	assert.Same(t, stale, m.Current(key, "10", stale), "a deleted object's entry is forgotten")
}

// Latest gives the resourceVersion beside the status: the cache's with
// the cache's status, the write's with the written one.
func TestStatusMemoGivesTheVersionToWriteAgainst(t *testing.T) {
	m := NewStatusMemo[v1alpha1.GridNetworkStatus]()
	key := types.NamespacedName{Name: "n"}
	stale := &v1alpha1.GridNetworkStatus{RemoteProviderCount: 1}
	status, version := m.Latest(key, "10", stale)
	assert.Same(t, stale, status)
	assert.Equal(t, "10", version)

	written := &v1alpha1.GridNetworkStatus{RemoteProviderCount: 2}
	m.Wrote(key, "11", written)
	status, version = m.Latest(key, "10", stale)
	assert.Same(t, written, status)
	assert.Equal(t, "11", version, "the write's version, not the lagging cache's")

	status, version = m.Latest(key, "12", &v1alpha1.GridNetworkStatus{RemoteProviderCount: 2})
	assert.Equal(t, int32(2), status.RemoteProviderCount)
	assert.Equal(t, "12", version, "the cache caught up, with a later version of its own")
}

func TestStatusMemoIsBounded(t *testing.T) {
	m := NewStatusMemo[v1alpha1.GridSiteStatus]()
	for i := range maxWrittenStatuses + 10 {
		m.Wrote(types.NamespacedName{Name: fmt.Sprintf("n-%d", i)}, "1", &v1alpha1.GridSiteStatus{})
	}
	assert.LessOrEqual(t, len(m.written), maxWrittenStatuses)
}
