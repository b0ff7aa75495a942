package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// GridNetwork is a Grid network and the gateways that consume its routing
// overlays. The controller renders one overlay per consumer gateway and
// publishes it as the ConfigMap grid-overlay-<network>-<gateway> in the
// gateway's namespace.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName={gnet,gnw},categories=grid
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Grid ID",type=string,JSONPath=`.status.gridId`,priority=1
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Sites",type=integer,JSONPath=`.status.connectedSites`
// +kubebuilder:printcolumn:name="Gateways",type=integer,JSONPath=`.status.gatewayCount`
// +kubebuilder:printcolumn:name="Distributed",type=integer,JSONPath=`.status.distributedCount`
// +kubebuilder:printcolumn:name="Delivered",type=string,JSONPath=`.status.delivered`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 63",message="a GridNetwork name is at most 63 characters: it labels the network's overlay ConfigMaps"
type GridNetwork struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   GridNetworkSpec   `json:"spec,omitempty"`
	Status GridNetworkStatus `json:"status,omitempty"`
}

// GridNetworkSpec is the network: its gateways, how its sites find and
// trust each other, and which sites may connect.
//
// +kubebuilder:validation:XValidation:rule="!has(self.gatewayRefs) || !has(self.consumerGateways)",message="gatewayRefs and consumerGateways are one field under its earlier and its current name: set one of them"
type GridNetworkSpec struct {
	// GridID pins the grid this network's sites belong to: set, the site
	// adopts it instead of negotiating one and refuses peers of another
	// grid. Empty: negotiated on the first join.
	//
	// +optional
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^([a-zA-Z0-9][-a-zA-Z0-9_.]*)?$`
	GridID string `json:"gridId,omitempty"`
	// Region and Zone are where this site runs; they travel in the site's
	// signed records and fill its GridSite at the other sites.
	//
	// +optional
	// +nullable
	// +kubebuilder:validation:MaxLength=63
	Region string `json:"region,omitempty"`
	// +optional
	// +nullable
	// +kubebuilder:validation:MaxLength=63
	Zone string `json:"zone,omitempty"`
	// Swim tunes the site's membership protocol; the agent's flags are the
	// defaults of what is unset.
	//
	// +optional
	Swim *SwimTimings `json:"swim,omitempty"`
	// StaleCandidateTTLSeconds bounds how long a remote site's candidates
	// stay in the overlays (marked fresh: false) once the site is no
	// longer alive. Unset: as long as membership keeps the site's records.
	//
	// +optional
	// +nullable
	// +kubebuilder:validation:Minimum=1
	StaleCandidateTTLSeconds *int32 `json:"staleCandidateTtlSeconds,omitempty"`
	// BudgetPolicy is upstream's per-tenant spend tracking; accepted and
	// reported as not supported by this release.
	//
	// +optional
	// +nullable
	BudgetPolicy *BudgetPolicy `json:"budgetPolicy,omitempty"`
	// AdmissionPolicy says when a pressured provider stops taking new
	// sessions (existing_only) and when it takes them again. Unset: each
	// scrape decides alone, from 0.85 of the scoring strategy's signal,
	// and a provider whose signal is missing keeps taking new sessions.
	//
	// +optional
	// +nullable
	AdmissionPolicy *AdmissionPolicy `json:"admissionPolicy,omitempty"`
	// ScoringPolicy chooses the load signal providers are judged by.
	// Unset: noMetrics.
	//
	// +optional
	// +nullable
	ScoringPolicy *ScoringPolicy `json:"scoringPolicy,omitempty"`
	// RoutingPolicy orders candidates after admission: geographyFirst
	// (the default: locality tier, then freshness; each tier a selection
	// group of its own) or scoreFirst (freshness, then locality; fresh
	// admitted candidates of every site in one group).
	//
	// +optional
	// +nullable
	// +kubebuilder:validation:Enum=geographyFirst;scoreFirst
	RoutingPolicy string `json:"routingPolicy,omitempty"`
	// SelectionPolicy is how the gateway chooses among the candidates of
	// the first viable selection group; unset, the overlay carries none
	// and the gateway chooses deterministically (the lowest rank).
	//
	// +optional
	// +nullable
	SelectionPolicy *SelectionPolicy `json:"selectionPolicy,omitempty"`
	// MetricsRefreshInterval is upstream's; kept and reported as not
	// supported by this release (the agent's --signals-interval rules).
	//
	// +optional
	// +nullable
	// +kubebuilder:validation:Pattern=`^([1-9][0-9]*s|[1-9][0-9]{3,}ms)$`
	MetricsRefreshInterval string `json:"metricsRefreshInterval,omitempty"`

	// Seeds are SWIM addresses (host:port) of other sites to join.
	//
	// +optional
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=262
	Seeds []string `json:"seeds,omitempty"`

	// TLS names the grid CA, this site's certificate and the SWIM key.
	//
	// +optional
	TLS *GridTLS `json:"tls,omitempty"`

	// NetworkPolicy says which sites may connect at all; every site of the
	// network may when it is absent.
	//
	// +optional
	NetworkPolicy *NetworkPolicy `json:"networkPolicy,omitempty"`

	// PeerTrust says how remote sites are trusted.
	//
	// +optional
	PeerTrust *PeerTrust `json:"peerTrust,omitempty"`

	// SignalTransport says how provider signals cross sites: gossip (the
	// samples ride the membership state) or poll (each agent polls its
	// Active peers' /v1/site/signals over mutual TLS).
	//
	// +optional
	SignalTransport *SignalTransport `json:"signalTransport,omitempty"`

	// OverlayEncoding is the form of the gateways' overlay ConfigMaps:
	// Auto (the default) compresses a gateway's overlay when it is large
	// enough for that to pay and every pod of the gateway reports that it
	// reads the compressed form (a pod may also ask for a form, through its
	// chart); Zstd always compresses, for gateways known to read it; Plain
	// never does, which is the contract's form that every consumer reads.
	//
	// +optional
	// +kubebuilder:validation:Enum=Auto;Zstd;Plain
	OverlayEncoding OverlayEncoding `json:"overlayEncoding,omitempty"`

	// ConsumerGateways receive one overlay each. A gateway is identified
	// by its name and namespace.
	//
	// +optional
	// +listType=map
	// +listMapKey=name
	// +listMapKey=namespace
	// +kubebuilder:validation:MaxItems=500
	ConsumerGateways []ConsumerGateway `json:"consumerGateways,omitempty"`
	// GatewayRefs is consumerGateways under its earlier name.
	//
	// +optional
	// +nullable
	// +listType=map
	// +listMapKey=name
	// +listMapKey=namespace
	// +kubebuilder:validation:MaxItems=500
	GatewayRefs []ConsumerGateway `json:"gatewayRefs,omitempty"`
}

// OverlayEncoding is the form of a network's overlay ConfigMaps.
type OverlayEncoding string

// Overlay encodings.
const (
	OverlayEncodingAuto  OverlayEncoding = "Auto"
	OverlayEncodingZstd  OverlayEncoding = "Zstd"
	OverlayEncodingPlain OverlayEncoding = "Plain"
)

// SwimTimings are a network's membership timings, as durations ("5s").
type SwimTimings struct {
	// GossipNodes is how many peers each gossip round is sent to; 0 is
	// the default.
	//
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=64
	GossipNodes *int32 `json:"gossipNodes,omitempty"`
	// ProbeInterval is how often a peer is probed.
	//
	// +optional
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$`
	ProbeInterval string `json:"probeInterval,omitempty"`
	// SuspicionTimeout is how long a suspected peer is given before it is
	// declared dead.
	//
	// +optional
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$`
	SuspicionTimeout string `json:"suspicionTimeout,omitempty"`
}

// AdmissionPolicy is upstream's provider admission policy.
type AdmissionPolicy struct {
	// Mode: instantaneous (each observation decides alone) or stabilized
	// (pressure must repeat, states last, recovery is held down).
	//
	// +optional
	// +kubebuilder:default=instantaneous
	// +kubebuilder:validation:Enum=instantaneous;stabilized
	Mode AdmissionMode `json:"mode,omitempty"`
	// MissingMetrics is the state of a provider whose signal is missing
	// or stale: existingOnly, or excluded (left out of the overlays).
	//
	// +optional
	// +kubebuilder:default=existingOnly
	// +kubebuilder:validation:Enum=existingOnly;excluded
	MissingMetrics MissingMetricsPolicy `json:"missingMetrics,omitempty"`
	// Pressure holds the thresholds and timings.
	//
	// +optional
	// +kubebuilder:default={enterThreshold: 0.85, exitThreshold: 0.7, failureThreshold: 2, successThreshold: 3, minimumStateDuration: "10s", recoveryHoldDown: "30s"}
	Pressure *PressurePolicy `json:"pressure,omitempty"`
}

// AdmissionMode is how observations change a provider's admission.
type AdmissionMode string

const (
	AdmissionInstantaneous AdmissionMode = "instantaneous"
	AdmissionStabilized    AdmissionMode = "stabilized"
)

// MissingMetricsPolicy is what a provider without a fresh signal gets.
type MissingMetricsPolicy string

const (
	MissingMetricsExistingOnly MissingMetricsPolicy = "existingOnly"
	MissingMetricsExcluded     MissingMetricsPolicy = "excluded"
)

// PressurePolicy holds admission's thresholds (0-1) and timings.
//
// +kubebuilder:validation:XValidation:rule="self.exitThreshold < self.enterThreshold",message="exitThreshold must be less than enterThreshold"
type PressurePolicy struct {
	// EnterThreshold: at or above it a provider is pressured.
	//
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1
	EnterThreshold float64 `json:"enterThreshold"`
	// ExitThreshold: at or below it a pressured provider recovers.
	//
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1
	ExitThreshold float64 `json:"exitThreshold"`
	// FailureThreshold: pressured observations in a row to stop new
	// sessions (stabilized).
	//
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	FailureThreshold int32 `json:"failureThreshold"`
	// SuccessThreshold: recovered observations in a row to admit again
	// (stabilized).
	//
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	SuccessThreshold int32 `json:"successThreshold"`
	// MinimumStateDuration: how long a state lasts at least (whole
	// seconds, "10s"); also the least time between two revisions an
	// overlay gets from signals.
	//
	// +kubebuilder:validation:Pattern=`^[1-9][0-9]*s$`
	MinimumStateDuration string `json:"minimumStateDuration"`
	// RecoveryHoldDown: how long a recovery must last before new sessions
	// are admitted again (whole seconds).
	//
	// +kubebuilder:validation:Pattern=`^[1-9][0-9]*s$`
	RecoveryHoldDown string `json:"recoveryHoldDown"`
}

// SelectionPolicy is upstream's local request distribution policy.
type SelectionPolicy struct {
	// Mode: deterministic, roundRobin, random or weightedRandom (random
	// in proportion to the candidates' placementPolicy.capacityWeight).
	//
	// +kubebuilder:validation:Enum=deterministic;roundRobin;random;weightedRandom
	Mode string `json:"mode"`
}

// SelectionWeightedRandom is the selection mode that weighs candidates by
// their providers' capacityWeight.
const SelectionWeightedRandom = "weightedRandom"

// Routing policies.
const (
	RoutingGeographyFirst = "geographyFirst"
	RoutingScoreFirst     = "scoreFirst"
)

// ScoringPolicy is upstream's scoring policy.
type ScoringPolicy struct {
	// Strategy: noMetrics (load is not looked at), queueDepth or
	// kvCachePressure (that signal measures pressure).
	//
	// +kubebuilder:validation:Enum=noMetrics;queueDepth;kvCachePressure
	Strategy ScoringStrategy `json:"strategy"`
}

// ScoringStrategy names the signal providers are judged by.
type ScoringStrategy string

const (
	ScoringNoMetrics       ScoringStrategy = "noMetrics"
	ScoringQueueDepth      ScoringStrategy = "queueDepth"
	ScoringKVCachePressure ScoringStrategy = "kvCachePressure"
)

// BudgetPolicy tracks spend per tenant (upstream's shape).
type BudgetPolicy struct {
	// +optional
	// +kubebuilder:validation:MaxItems=1000
	Tenants []TenantBudget `json:"tenants,omitempty"`
}

// TenantBudget is one tenant's spending cap.
type TenantBudget struct {
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	TenantID string `json:"tenantId"`
	// +required
	// +kubebuilder:validation:Minimum=0
	CapUSD float64 `json:"capUsd"`
}

// ConsumerGateway is a Praxis gateway that consumes the network's overlay.
//
// +kubebuilder:validation:XValidation:rule="!has(self.localSiteName) || !has(self.siteName) || self.localSiteName == self.siteName",message="localSiteName and siteName are one field under its earlier and its current name: set one of them (or both, equal)"
// +kubebuilder:validation:XValidation:rule="!has(self.consumerConfig) || !has(self.praxisConfig)",message="consumerConfig and praxisConfig are one field under its earlier and its current name: set one of them"
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
	// grid.praxis.fast/site=<siteName>. A lowercase DNS label, as site
	// names are everywhere in the Grid. Defaults to the network's name.
	//
	// +optional
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	SiteName string `json:"siteName,omitempty"`
	// LocalSiteName is siteName under its earlier name.
	//
	// +optional
	// +nullable
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	LocalSiteName string `json:"localSiteName,omitempty"`

	// PraxisConfig, when generate is true, renders the gateway's whole
	// Praxis config into a ConfigMap.
	//
	// +optional
	PraxisConfig *PraxisConfig `json:"praxisConfig,omitempty"`
	// ConsumerConfig is praxisConfig under its earlier name.
	//
	// +optional
	// +nullable
	ConsumerConfig *PraxisConfig `json:"consumerConfig,omitempty"`

	// IdentityRollout rolls the gateway's Deployment when this site's
	// certificate changes, for gateways that load their client
	// certificate only at start: the agent patches one pod-template
	// annotation, grid.praxis.fast/site-identity-fingerprint. Off unless
	// set; the gateway grants get and patch on that one Deployment.
	//
	// +optional
	IdentityRollout *IdentityRollout `json:"identityRollout,omitempty"`

	// GridServing renders the serving config of a gateway that runs
	// upstream's embedded grid-gateway: serving-config.json in the
	// ConfigMap grid-serving-<network>-<gateway>, with the gateway's
	// candidates and admission states, this site's agent as the one peer
	// it polls for load, and the provider-hop allowlist.
	//
	// +optional
	GridServing *GridServing `json:"gridServing,omitempty"`

	// ProviderHopEndpoints are the mutual-TLS endpoints an embedded
	// gateway may send provider-hop context to: its allowlist, carried in
	// the serving config (gridServing).
	//
	// +optional
	// +listType=map
	// +listMapKey=cluster
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:XValidation:rule="has(self.transport) && self.transport.mode == 'mutual_tls' && has(self.transport.sni) && self.transport.sni.size() > 0",message="a provider-hop endpoint needs transport.mode mutual_tls and a nonblank sni"
	ProviderHopEndpoints []ClusterEndpoint `json:"providerHopEndpoints,omitempty"`
}

// GridServing is an embedded grid-gateway's serving config.
type GridServing struct {
	// Enabled renders it.
	//
	// +optional
	Enabled bool `json:"enabled,omitempty"`
	// SignalsAddress is this site's agent signals listener as the gateway
	// dials it (host:port). Defaults to the agent's signals Service.
	//
	// +optional
	// +kubebuilder:validation:MaxLength=260
	SignalsAddress string `json:"signalsAddress,omitempty"`
	// TLSMountPath is where the gateway mounts the grid CA (ca.crt) and
	// this site's identity (tls.crt, tls.key) its pollers present.
	//
	// +optional
	// +kubebuilder:default="/etc/praxis/tls"
	// +kubebuilder:validation:MaxLength=255
	TLSMountPath string `json:"tlsMountPath,omitempty"`
}

// MountReconciliationStatus is one delegated gateway's Deployment: the
// config slot its pod template mounts and how far its rollout is.
type MountReconciliationStatus struct {
	GatewayName string `json:"gatewayName"`
	Namespace   string `json:"namespace"`
	// +optional
	DeploymentName string `json:"deploymentName,omitempty"`
	// Phase: MountsReconciling (a patch was made), WaitingForSecret,
	// WaitingForRollout (a Deployment scaled to zero stays here), Ready
	// (the rollout is complete, no old replica remains, the generated
	// config is mounted at /etc/praxis), Error, or Disabled (delegation
	// turned off: the Deployment is left as it is).
	//
	// +kubebuilder:validation:Enum=MountsReconciling;WaitingForSecret;WaitingForRollout;Ready;Error;Disabled
	Phase string `json:"phase"`
	// +optional
	Reason string `json:"reason,omitempty"`
	// +optional
	Message string `json:"message,omitempty"`
	// ConfigMapName is the config slot the pod template mounts.
	//
	// +optional
	ConfigMapName string `json:"configMapName,omitempty"`
	// ConfigRevision is the generated config the pod template carries
	// (the first 16 hex digits of its SHA-256).
	//
	// +optional
	ConfigRevision string `json:"configRevision,omitempty"`
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// IdentityRollout names the gateway Deployment rolled on a new site
// certificate.
type IdentityRollout struct {
	// DeploymentName is the gateway's Deployment, in the gateway's
	// namespace.
	//
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	DeploymentName string `json:"deploymentName"`
}

// IdentityRolloutStatus is what the last identity rollout did.
type IdentityRolloutStatus struct {
	// Fingerprint is the site certificate the Deployment's pods are
	// rolled to (SHA-256 of the leaf, hex).
	// +optional
	Fingerprint string `json:"fingerprint,omitempty"`
	// Reason: IdentityRolled, IdentityCurrent, DeploymentForbidden,
	// DeploymentMissing or DeploymentPatchFailed.
	Reason string `json:"reason"`
	// +optional
	Message string `json:"message,omitempty"`
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

// NetworkPhase is the network's membership state.
//
// +kubebuilder:validation:Enum=Pending;Initializing;Active;Degraded
type NetworkPhase string

const (
	// NetworkPending: no SWIM membership runs for the network.
	NetworkPending NetworkPhase = "Pending"
	// NetworkInitializing: membership started, no peer yet.
	NetworkInitializing NetworkPhase = "Initializing"
	// NetworkActive: at least one peer is alive.
	NetworkActive NetworkPhase = "Active"
	// NetworkDegraded: peers are known but all suspect or dead.
	NetworkDegraded NetworkPhase = "Degraded"
)

// TrustBundleStatus is a network's signed trust bundle as this site
// holds it.
type TrustBundleStatus struct {
	// Version orders the bundles: the time it was signed, in Unix
	// nanoseconds, as a decimal string.
	//
	// +optional
	Version string `json:"version,omitempty"`
	// EvictedSites are the sites it evicts now (lifted evictions are
	// left out).
	//
	// +optional
	// +listType=set
	EvictedSites []string `json:"evictedSites,omitempty"`
	// Signed is the bundle as signed (base64 in the API): what the site
	// checks against the grid CA at start.
	//
	// +optional
	// +kubebuilder:validation:MaxLength=262144
	Signed []byte `json:"signed,omitempty"`
	// Chain are the bundles, oldest first, that changed the grid CAs the
	// network trusts since the CA this site is configured with (a CA
	// rotation): at start the site follows them from its configured CA
	// before it takes the newest.
	//
	// +optional
	// +kubebuilder:validation:MaxItems=8
	Chain [][]byte `json:"chain,omitempty"`
	// Roots are the SHA-256 fingerprints of the grid CAs the network
	// trusts now, when its trust bundle names them (a CA rotation).
	//
	// +optional
	// +kubebuilder:validation:MaxItems=4
	Roots []string `json:"roots,omitempty"`
	// Rotation is the issuer's account of a grid CA rotation under way.
	//
	// +optional
	Rotation *CARotationStatus `json:"rotation,omitempty"`
}

// Stages of a rotation of the grid CA (status.trustBundle.rotation.stage).
const (
	// CARotationAdded: a new CA is trusted beside the one that issues.
	CARotationAdded = "Added"
	// CARotationIssuing: the new CA issues; the old one is still trusted.
	CARotationIssuing = "Issuing"
	// CARotationRetired: the new CA alone.
	CARotationRetired = "Retired"
)

// CARotationStatus is where a grid CA rotation stands, as the issuer sees
// it.
type CARotationStatus struct {
	// Stage is Added (the new CA trusted beside the old one, the old
	// still issuing), Issuing (the new CA issues, the old one still
	// trusted) or Retired (the new CA alone).
	//
	// +optional
	Stage string `json:"stage,omitempty"`
	// NewCA is the SHA-256 fingerprint of the new CA.
	//
	// +optional
	NewCA string `json:"newCA,omitempty"`
	// Since is when the stage began here.
	//
	// +optional
	Since *metav1.Time `json:"since,omitempty"`
	// Sites counts the sites of the network this site knows, itself
	// included.
	//
	// +optional
	Sites int32 `json:"sites"`
	// SitesTrustingNewCA counts those that hold a bundle naming the new
	// CA (they accept its certificates).
	//
	// +optional
	SitesTrustingNewCA int32 `json:"sitesTrustingNewCA"`
	// SitesOnNewCA counts those whose certificate the new CA issued.
	//
	// +optional
	SitesOnNewCA int32 `json:"sitesOnNewCA"`
}

// ResetSiteKeyAnnotation, on a GridNetwork without a grid CA, names the
// remote sites (comma-separated) whose keys this site forgets: the next
// key to sign a record of each is bound. The agent applies it once and
// removes it (gridsync-agent reset-site-key writes it and waits).
const ResetSiteKeyAnnotation = "grid.praxis.fast/reset-site-key"

// SiteKeyBinding is the key a remote site's records are held to in a
// network without a grid CA: the first key that signed a record of the
// site kept here. Records of the site signed with another key, or not
// signed, are refused until the binding is reset (the annotation
// grid.praxis.fast/reset-site-key, or gridsync-agent reset-site-key).
type SiteKeyBinding struct {
	// Site is the remote site's name.
	//
	// +kubebuilder:validation:MaxLength=63
	Site string `json:"site"`
	// Fingerprint is the SHA-256 of the site's Ed25519 public key, in
	// lowercase hex.
	//
	// +kubebuilder:validation:Pattern=`^[0-9a-f]{64}$`
	Fingerprint string `json:"fingerprint"`
	// Since is when the site was bound to the key.
	Since metav1.Time `json:"since"`
}

// GridNetworkStatus reports the network's membership and the overlay of
// every consumer gateway.
type GridNetworkStatus struct {
	// ObservedGeneration is the generation the status describes.
	//
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Phase is the network's membership state.
	//
	// +optional
	Phase NetworkPhase `json:"phase,omitempty"`
	// GridID is the grid this site belongs to: spec.gridId when pinned,
	// else the one negotiated with the other sites.
	//
	// +optional
	GridID string `json:"gridId,omitempty"`
	// ConnectedSites counts the alive SWIM peers of this site, as the
	// reference defines it: every other site membership holds alive,
	// whichever networks it announced.
	//
	// +optional
	ConnectedSites int32 `json:"connectedSites"`
	// NetworkSites counts the alive remote sites that announced this
	// network (its phase follows this count).
	//
	// +optional
	NetworkSites int32 `json:"networkSites"`
	// RemoteProviderCount counts this network's provider records from
	// other sites.
	//
	// +optional
	RemoteProviderCount int32 `json:"remoteProviderCount"`
	// DistributedProviderCount is remoteProviderCount under upstream's
	// name, written with the same value for its clients.
	//
	// +optional
	DistributedProviderCount int32 `json:"distributedProviderCount"`

	// TrustBundle is the newest signed trust bundle of the network this
	// site holds: the sites the issuer evicted, signed with the grid CA.
	// It is kept here so that an eviction outlives a restart of the
	// agent; a bundle is used only when its signature verifies.
	//
	// +optional
	TrustBundle *TrustBundleStatus `json:"trustBundle,omitempty"`
	// SiteKeys, in a network without a grid CA, are the keys the remote
	// sites' records are held to, each site's the first that signed a
	// record of it here. They are kept here so that a binding outlives a
	// restart of the agent. Empty in a network with a grid CA.
	//
	// +optional
	// +listType=map
	// +listMapKey=site
	// +kubebuilder:validation:MaxItems=512
	SiteKeys []SiteKeyBinding `json:"siteKeys,omitempty"`

	// PraxisConfigStatus has one entry per gateway whose Praxis config is
	// generated.
	//
	// +optional
	// +listType=map
	// +listMapKey=gatewayName
	// +listMapKey=namespace
	PraxisConfigStatus []PraxisConfigStatus `json:"praxisConfigStatus,omitempty"`
	// ConsumerConfigStatus is praxisConfigStatus under upstream's name,
	// written with the same entries for its clients.
	//
	// +optional
	// +listType=map
	// +listMapKey=gatewayName
	// +listMapKey=namespace
	ConsumerConfigStatus []PraxisConfigStatus `json:"consumerConfigStatus,omitempty"`
	// ServingConfigStatus is each gridServing gateway's serving config:
	// its ConfigMap, and Rendered or Error with why.
	//
	// +optional
	// +listType=map
	// +listMapKey=gatewayName
	// +listMapKey=namespace
	ServingConfigStatus []PraxisConfigStatus `json:"servingConfigStatus,omitempty"`
	// MountReconciliationStatus has one entry per gateway whose mounts
	// are delegated: where its Deployment's rollout of the generated
	// config stands.
	//
	// +optional
	// +listType=map
	// +listMapKey=gatewayName
	// +listMapKey=namespace
	MountReconciliationStatus []MountReconciliationStatus `json:"mountReconciliationStatus,omitempty"`

	// GatewayCount and DistributedCount summarise OverlayStatus.
	//
	// +optional
	GatewayCount int32 `json:"gatewayCount,omitempty"`
	// +optional
	DistributedCount int32 `json:"distributedCount,omitempty"`
	// Delivered is pods on their gateway's rendered revision over pods
	// reporting, across the network's gateways ("48/50"); absent while no
	// sidecar reports.
	// +optional
	Delivered string `json:"delivered,omitempty"`

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
	CandidateCount int32 `json:"candidateCount"`
	// Encoding is the form the ConfigMap holds the overlay in: plain or
	// zstd (spec.overlayEncoding).
	// +optional
	Encoding string `json:"encoding,omitempty"`
	// EnvelopeBytes is the size of the envelope the gateway's file holds.
	// +optional
	EnvelopeBytes int64        `json:"envelopeBytes,omitempty"`
	Phase         OverlayPhase `json:"phase"`
	// +optional
	Reason string `json:"reason,omitempty"`
	// +optional
	Message string `json:"message,omitempty"`
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Delivery is what the gateway's pods report they serve, when their
	// sidecars report to the agent: the rendered ConfigMap is not serving
	// evidence, these reports are.
	// +optional
	Delivery *GatewayDelivery `json:"delivery,omitempty"`
	// IdentityRollout is the gateway Deployment's roll to this site's
	// current certificate (spec identityRollout).
	// +optional
	IdentityRollout *IdentityRolloutStatus `json:"identityRollout,omitempty"`
}

// SignalTransportMode is how signals cross sites.
//
// +kubebuilder:validation:Enum=gossip;poll
type SignalTransportMode string

// Signal transport modes.
const (
	SignalTransportGossip SignalTransportMode = "gossip"
	SignalTransportPoll   SignalTransportMode = "poll"
)

// SignalTransport is the grid-wide signal dissemination path.
type SignalTransport struct {
	// +optional
	// +kubebuilder:default=gossip
	Mode SignalTransportMode `json:"mode,omitempty"`
}

// GatewayDelivery summarises the delivery reports of one gateway's pods
// against the rendered revision.
type GatewayDelivery struct {
	// ReportingPods reported within the agent's forget age.
	ReportingPods int32 `json:"reportingPods"`
	// PodsOnRevision hold the rendered revision and report on time.
	PodsOnRevision int32 `json:"podsOnRevision"`
	// LaggingPods are on an older revision, rejecting, cold, or silent
	// for longer than the agent's silent age.
	LaggingPods int32 `json:"laggingPods"`
	// Lagging names up to ten lagging pods, with why.
	// +optional
	Lagging []LaggingPod `json:"lagging,omitempty"`
	// CommonRejectionReason is the most common last rejection reason
	// among the reporting pods.
	// +optional
	CommonRejectionReason string `json:"commonRejectionReason,omitempty"`
	// DeliveredAt is when the rendered revision reached every reporting
	// pod; absent while some lag.
	// +optional
	DeliveredAt *metav1.Time `json:"deliveredAt,omitempty"`
}

// LaggingPod is one pod behind the rendered revision.
type LaggingPod struct {
	Pod string `json:"pod"`
	// Reason: OlderRevision, Rejecting, Cold or Silent.
	Reason string `json:"reason"`
	// +optional
	Revision string `json:"revision,omitempty"`
}

// GridNetworkList is a list of GridNetworks.
//
// +kubebuilder:object:root=true
type GridNetworkList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []GridNetwork `json:"items"`
}

// HasGridCA reports whether the network declares a grid CA
// (spec.tls.caSecretRef or caConfigMapRef): its records are signed with
// certificates of it. Without one, each site signs with a key of its own.
func (n *GridNetwork) HasGridCA() bool {
	t := n.Spec.TLS
	return t != nil && (t.CASecretRef != nil || t.CAConfigMapRef != nil)
}
