package overlay

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/controller/render"
)

// What the discovery API reads is a copy: the reconcile that published it
// goes on changing its own providers (the admission stage), and a later
// publication replaces it without touching the map a reader holds.
func TestSnapshotPublishesCopiesAndReplacesWholeMaps(t *testing.T) {
	var s Snapshot
	require.Nil(t, s.Load())
	s.attempted("failing")
	require.Equal(t, &Providers{}, s.Load()["failing"], "a network whose reconcile failed is known, with no providers")

	local := []render.Provider{{Name: "a", Models: []string{"m1"}, Phase: v1alpha1.ProviderAvailable}}
	remote := []render.Remote{{Site: "west", Name: "b", Models: []string{"m2"}, Phase: v1alpha1.ProviderDegraded}}
	s.publish("net", local, remote)
	held := s.Load()
	local[0].Models[0], local[0].Phase = "changed", v1alpha1.ProviderUnavailable
	remote[0].Models[0], remote[0].Stale = "changed", true
	require.Equal(t, []string{"m1"}, held["net"].Local[0].Models)
	require.Equal(t, v1alpha1.ProviderAvailable, held["net"].Local[0].Phase)
	require.Equal(t, []string{"m2"}, held["net"].Remote[0].Models)
	require.False(t, held["net"].Remote[0].Stale)

	s.attempted("net")
	require.Equal(t, "a", s.Load()["net"].Local[0].Name, "a failed reconcile keeps what an earlier one published")
	s.publish("net", nil, nil)
	s.forget("failing")
	require.Len(t, held, 2, "a reader's map is never changed")
	require.Len(t, held["net"].Local, 1)
	require.Equal(t, map[string]*Providers{"net": {}}, s.Load())
}
