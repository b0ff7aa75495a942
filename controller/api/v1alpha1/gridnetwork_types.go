package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// GridNetwork is a Grid network and the gateways that consume its routing
// overlays. The controller renders one overlay per consumer gateway and
// publishes it as the ConfigMap grid-overlay-<network>-<gateway> in the
// gateway's namespace.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=gnet
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Gateways",type=integer,JSONPath=`.status.gatewayCount`
// +kubebuilder:printcolumn:name="Distributed",type=integer,JSONPath=`.status.distributedCount`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 63",message="a GridNetwork name is at most 63 characters: it labels the network's overlay ConfigMaps"
type GridNetwork struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   GridNetworkSpec   `json:"spec,omitempty"`
	Status GridNetworkStatus `json:"status,omitempty"`
}

// GridNetworkSpec lists the gateways that consume the network's overlays.
type GridNetworkSpec struct {
	// ConsumerGateways receive one overlay each. A gateway is identified
	// by its name and namespace.
	//
	// +optional
	// +listType=map
	// +listMapKey=name
	// +listMapKey=namespace
	// +kubebuilder:validation:MaxItems=1000
	ConsumerGateways []ConsumerGateway `json:"consumerGateways,omitempty"`
}

// ConsumerGateway is a Praxis gateway that consumes the network's overlay.
type ConsumerGateway struct {
	// Name of the gateway, as in the overlay's scope.gateway.
	//
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`

	// Namespace the gateway runs in; its overlay ConfigMap is published
	// there.
	//
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Namespace string `json:"namespace"`

	// SiteName is the gateway's site (the overlay's local_site), matched by
	// providers' access policies through the label
	// grid.praxis.fast/site=<siteName>. Defaults to the network's name.
	//
	// +optional
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$`
	SiteName string `json:"siteName,omitempty"`
}

// OverlayPhase says where a gateway's overlay stands.
//
// +kubebuilder:validation:Enum=Pending;Distributed;Error
type OverlayPhase string

const (
	// OverlayPending: not rendered or published yet.
	OverlayPending OverlayPhase = "Pending"
	// OverlayDistributed: the ConfigMap holds the current revision.
	OverlayDistributed OverlayPhase = "Distributed"
	// OverlayError: the overlay could not be rendered or published; Reason
	// and Message say why.
	OverlayError OverlayPhase = "Error"
)

// GridNetworkStatus reports the overlay of every consumer gateway.
type GridNetworkStatus struct {
	// ObservedGeneration is the generation the status describes.
	//
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// GatewayCount and DistributedCount summarise OverlayStatus.
	//
	// +optional
	GatewayCount int32 `json:"gatewayCount,omitempty"`
	// +optional
	DistributedCount int32 `json:"distributedCount,omitempty"`

	// OverlayStatus has one entry per consumer gateway.
	//
	// +optional
	// +listType=map
	// +listMapKey=gatewayName
	// +listMapKey=namespace
	OverlayStatus []GatewayOverlayStatus `json:"overlayStatus,omitempty"`

	// Conditions: Ready is True when every gateway's overlay is
	// distributed.
	//
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// GatewayOverlayStatus is the published overlay of one gateway.
type GatewayOverlayStatus struct {
	GatewayName string `json:"gatewayName"`
	Namespace   string `json:"namespace"`
	// +optional
	ConfigMapName string `json:"configMapName,omitempty"`
	// +optional
	SchemaVersion string `json:"schemaVersion,omitempty"`
	// RenderedRevision is the content-addressed revision in the ConfigMap.
	// +optional
	RenderedRevision string `json:"renderedRevision,omitempty"`
	// +optional
	ContentDigest string `json:"contentDigest,omitempty"`
	// +optional
	ConfigMapResourceVersion string `json:"configMapResourceVersion,omitempty"`
	// RenderedAt is when the current revision was rendered; re-rendering
	// the same routing state does not move it.
	// +optional
	RenderedAt *metav1.Time `json:"renderedAt,omitempty"`
	// +optional
	CandidateCount int32        `json:"candidateCount"`
	Phase          OverlayPhase `json:"phase"`
	// +optional
	Reason string `json:"reason,omitempty"`
	// +optional
	Message string `json:"message,omitempty"`
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// GridNetworkList is a list of GridNetworks.
//
// +kubebuilder:object:root=true
type GridNetworkList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []GridNetwork `json:"items"`
}
