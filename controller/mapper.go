package controller

import (
	"net/http"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	"github.com/gridsync/gridsync/api/v1alpha1"
)

// gridKinds are the Grid API's kinds, all cluster-scoped, by the resource
// their CRDs serve them as (TestGridMappingMatchesTheCRDs holds the two
// together).
var gridKinds = map[string]string{
	"GridNetwork":       "gridnetworks",
	"InferenceProvider": "inferenceproviders",
	"GridSite":          "gridsites",
}

// newRESTMapper maps the Grid API's kinds from what the agent was built
// with and every other kind through the API server's discovery, as
// controller-runtime's mapper does.
//
// Setup registers the Grid informers and indexes before the manager
// starts. Asking discovery for them there made an agent that started while
// the API server was unreachable, or refused discovery, exit at once; with
// the Grid kinds known, nothing is asked of the API server before the
// manager runs, whose informers list the networks and retry in the
// background until the API server answers. SWIM stays held meanwhile: it
// runs only once this replica leads, and is released only by a network's
// key (or a network declaring none), which needs the list.
func newRESTMapper(cfg *rest.Config, httpClient *http.Client) (meta.RESTMapper, error) {
	discovered, err := apiutil.NewDynamicRESTMapper(cfg, httpClient)
	if err != nil {
		return nil, err
	}
	grid := meta.NewDefaultRESTMapper([]schema.GroupVersion{v1alpha1.GroupVersion})
	for kind, resource := range gridKinds {
		grid.AddSpecific(v1alpha1.GroupVersion.WithKind(kind), v1alpha1.GroupVersion.WithResource(resource),
			v1alpha1.GroupVersion.WithResource(strings.ToLower(kind)), meta.RESTScopeRoot)
	}
	return gridFirstMapper{RESTMapper: discovered, grid: grid}, nil
}

// gridFirstMapper answers the mappings of the Grid kinds itself and asks
// discovery for the rest.
type gridFirstMapper struct {
	meta.RESTMapper
	grid *meta.DefaultRESTMapper
}

func (m gridFirstMapper) RESTMapping(gk schema.GroupKind, versions ...string) (*meta.RESTMapping, error) {
	if gk.Group == v1alpha1.GroupVersion.Group {
		if mapping, err := m.grid.RESTMapping(gk, versions...); err == nil {
			return mapping, nil
		}
	}
	return m.RESTMapper.RESTMapping(gk, versions...)
}

func (m gridFirstMapper) RESTMappings(gk schema.GroupKind, versions ...string) ([]*meta.RESTMapping, error) {
	if gk.Group == v1alpha1.GroupVersion.Group {
		if mappings, err := m.grid.RESTMappings(gk, versions...); err == nil && len(mappings) > 0 {
			return mappings, nil
		}
	}
	return m.RESTMapper.RESTMappings(gk, versions...)
}
