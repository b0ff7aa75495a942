// Package v1alpha1 holds the Grid API types that the controller reads:
// GridNetwork (a network and the gateways that consume its overlays) and
// InferenceProvider (a backend serving models to a network). Both are
// cluster-scoped.
//
// The CRD manifests and the deepcopy functions are generated from these
// types by the pinned controller-gen (`make generate`); a check fails when
// the committed output no longer matches.
//
// +kubebuilder:object:generate=true
// +groupName=grid.praxis.fast
package v1alpha1
