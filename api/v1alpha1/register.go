package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupVersion is the API group and version of these types.
var GroupVersion = schema.GroupVersion{Group: "grid.praxis.fast", Version: "v1alpha1"}

// AddToScheme registers the types with a scheme.
func AddToScheme(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion,
		&GridNetwork{}, &GridNetworkList{},
		&InferenceProvider{}, &InferenceProviderList{},
		&GridSite{}, &GridSiteList{},
	)
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
