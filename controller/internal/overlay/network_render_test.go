package overlay

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/controller/render"
)

// The render stage alone: its inputs are arguments, its output a value, so
// it is tested without an API server, membership or the other stages.
func TestRenderStageGivesOneOverlayPerGatewayWhateverTheProviderOrder(t *testing.T) {
	gws := []render.Gateway{{Name: "edge", Namespace: "praxis", Site: "east"}, {Name: "west-gw", Namespace: "praxis", Site: "west"}}
	a := render.Provider{Name: "a", Cluster: "ca", Models: []string{"m1", "m2"}, Phase: v1alpha1.ProviderAvailable}
	b := render.Provider{Name: "b", Cluster: "cb", Models: []string{"m1"}, Phase: v1alpha1.ProviderDegraded}

	one := renderOverlays("net", gws, []render.Provider{a, b}, nil)
	two := renderOverlays("net", gws, []render.Provider{b, a}, nil)
	require.Len(t, one, 2)
	for i := range one {
		require.Equal(t, gws[i], one[i].gateway)
		require.Nil(t, one[i].hold, "only the consumer config stage holds a revision")
		require.Equal(t, one[i].overlay, two[i].overlay, "providers in any order give the same overlay")
		require.Len(t, one[i].overlay.Candidates, 3)
	}
	require.Equal(t, "east", one[0].overlay.LocalSite)
	require.Equal(t, "west", one[1].overlay.LocalSite)
}
