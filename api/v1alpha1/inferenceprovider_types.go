package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// SiteLabel is the label that names a gateway's site for access policies:
// a gateway of site S carries grid.praxis.fast/site=S.
const SiteLabel = "grid.praxis.fast/site"

// InferenceProvider is a backend that serves models to one Grid network.
// Every model becomes a routing candidate in the overlay of each gateway
// that its access policy admits, unless the provider is Unavailable. The
// candidate's site is the provider's name: a provider is a site of the
// network.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName={iprov,infpvd},categories=grid
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Network",type=string,JSONPath=`.spec.gridNetworkRef`
// +kubebuilder:printcolumn:name="Provider",type=string,JSONPath=`.spec.providerKind`,priority=1
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.reason`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type InferenceProvider struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   InferenceProviderSpec   `json:"spec,omitempty"`
	Status InferenceProviderStatus `json:"status,omitempty"`
}

// InferenceProviderSpec describes the provider.
//
// +kubebuilder:validation:XValidation:rule="!has(self.routingClusterRef) || !has(self.clusterName) || self.routingClusterRef == self.clusterName",message="routingClusterRef and clusterName are one field under its earlier and its current name: set one of them (or both, equal)"
type InferenceProviderSpec struct {
	// GridNetworkRef names the GridNetwork this provider serves (a name,
	// as in the Grid reference: gridNetworkRef: production).
	//
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	GridNetworkRef string `json:"gridNetworkRef"`

	// ProviderKind is what runs the provider (for example vllm, openai).
	//
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9_]*[a-z0-9])?$`
	ProviderKind string `json:"providerKind"`

	// BackendKind is the protocol the backend speaks (for example
	// openai_compatible).
	//
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9_]*[a-z0-9])?$`
	BackendKind string `json:"backendKind"`

	// Endpoint is the provider's base URL.
	//
	// +required
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:Pattern=`^https?://[^\s/?#]+([/?#]\S*)?$`
	Endpoint string `json:"endpoint"`

	// Models served; each becomes one candidate.
	//
	// +required
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=256
	Models []Model `json:"models"`

	// ClusterName is the routing identity of the provider's cluster (the
	// candidate's cluster). Defaults to the object's name.
	//
	// +optional
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`
	ClusterName string `json:"clusterName,omitempty"`
	// RoutingClusterRef is clusterName under its earlier name.
	//
	// +optional
	// +nullable
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`
	RoutingClusterRef string `json:"routingClusterRef,omitempty"`

	// SiteSelector says which sites host the provider: an agent whose
	// site's labels (grid.praxis.fast/site, and grid.praxis.fast/region
	// and grid.praxis.fast/zone from its network) it does not match
	// neither offers nor gossips the provider. Empty matches every site.
	//
	// +optional
	// +nullable
	SiteSelector *metav1.LabelSelector `json:"siteSelector,omitempty"`

	// Cost is the provider's price (upstream's shape); accepted and
	// reported as not supported by this release.
	//
	// +optional
	// +nullable
	Cost *ProviderCost `json:"cost,omitempty"`
	// TrafficPolicy is how the provider takes traffic.
	//
	// +optional
	// +nullable
	TrafficPolicy *TrafficPolicy `json:"trafficPolicy,omitempty"`
	// PlacementPolicy is the provider's share of new sessions against the
	// other candidates of its selection group, for networks whose
	// selectionPolicy is weightedRandom.
	//
	// +optional
	// +nullable
	PlacementPolicy *PlacementPolicy `json:"placementPolicy,omitempty"`

	// Auth says how the gateway authenticates to the provider.
	//
	// +optional
	// +nullable
	Auth *ProviderAuth `json:"auth,omitempty"`

	// AccessPolicy limits the gateways whose overlays carry this provider.
	//
	// +optional
	// +nullable
	AccessPolicy *AccessPolicy `json:"accessPolicy,omitempty"`

	// HealthCheck, when set, is probed by the controller; failures mark
	// the provider Degraded, then Unavailable.
	//
	// +optional
	// +nullable
	HealthCheck *HealthCheck `json:"healthCheck,omitempty"`

	// MetricsConfig, when set, has the agent scrape the provider's
	// Prometheus metrics into the site's signals (upstream's field).
	//
	// +optional
	// +nullable
	MetricsConfig *MetricsConfig `json:"metricsConfig,omitempty"`

	// TLS is how the agent verifies the provider's HTTPS endpoints (and
	// which certificate it presents to them) for health checks and
	// metrics scrapes alike; healthCheck.tls and metricsConfig.tls
	// override it for one of them. Without any, HTTPS is verified against
	// the system's roots.
	//
	// +optional
	// +nullable
	TLS *EndpointTLSConfig `json:"tls,omitempty"`
}

// EndpointTLSConfig is the trust for a provider's HTTPS endpoint: only
// the CA it names verifies the server (never the system's roots), and,
// for mutual TLS, the certificate the agent presents. When its material
// cannot be read or used, the health check or scrape it serves is not
// made at all (fail closed), and the provider's status names the reason
// (…TlsSecretMissing, …TlsKeyMissing, …TlsMaterialInvalid,
// …TlsIdentityMismatch). The agent reads the named Secrets and ConfigMaps
// with get, in the namespaces it works in, at every check: a rotated CA or
// certificate is used from the next one on.
//
// +kubebuilder:validation:XValidation:rule="has(self.caSecretRef) != has(self.caConfigMapRef)",message="set exactly one of caSecretRef and caConfigMapRef: the provider's server is verified against that CA only"
type EndpointTLSConfig struct {
	// CASecretRef names the CA certificates (PEM) in a Secret; key
	// defaults to ca.crt.
	//
	// +optional
	// +nullable
	CASecretRef *NamespacedKeyRef `json:"caSecretRef,omitempty"`
	// CAConfigMapRef names the CA certificates (PEM) in a ConfigMap (as
	// OpenShift's service CA and trust-manager publish them); key
	// defaults to ca.crt.
	//
	// +optional
	// +nullable
	CAConfigMapRef *NamespacedKeyRef `json:"caConfigMapRef,omitempty"`
	// ClientCertificateSecretRef names the certificate and key (PEM) the
	// agent presents for mutual TLS.
	//
	// +optional
	// +nullable
	ClientCertificateSecretRef *ClientCertificateSecretRef `json:"clientCertificateSecretRef,omitempty"`
	// ServerName is the name the server's certificate must carry, when
	// it is not the endpoint's host (it is also sent as SNI).
	//
	// +optional
	// +nullable
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`
	ServerName string `json:"serverName,omitempty"`
}

// ClientCertificateSecretRef is a Secret holding a certificate and its
// private key, in PEM.
type ClientCertificateSecretRef struct {
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Namespace string `json:"namespace"`
	// CertificateKey is the key of the certificate chain.
	//
	// +optional
	// +kubebuilder:default="tls.crt"
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	CertificateKey string `json:"certificateKey,omitempty"`
	// PrivateKeyKey is the key of the private key.
	//
	// +optional
	// +kubebuilder:default="tls.key"
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	PrivateKeyKey string `json:"privateKeyKey,omitempty"`
}

// EndpointAuthServiceAccountToken: a short-lived token of the agent's
// scraper ServiceAccount, requested with the TokenRequest API.
const EndpointAuthServiceAccountToken = "serviceAccountToken"

// EndpointAuth is the credential the agent sends to a provider's metrics
// or health endpoint: a bearer token of the scraper ServiceAccount that
// the agent chart creates (granted only get on /metrics), such as
// kube-rbac-proxy and the API server's own TokenReview accept. It is
// sent over HTTPS only, unless allowPlaintext.
type EndpointAuth struct {
	// +required
	// +kubebuilder:validation:Enum=serviceAccountToken
	Type string `json:"type"`
	// AllowPlaintext lets the token travel over http://; off, such an
	// endpoint is not contacted (…PlaintextRefused).
	//
	// +optional
	AllowPlaintext bool `json:"allowPlaintext,omitempty"`
}

// TrafficPolicy is how a provider takes traffic.
type TrafficPolicy struct {
	// Drain: no new sessions (every overlay lists the provider
	// existing_only); sessions already on it continue.
	//
	// +optional
	Drain bool `json:"drain,omitempty"`
}

// Placement modes.
const PlacementStatic = "static"

// PlacementPolicy is a provider's share of new sessions.
type PlacementPolicy struct {
	// Mode: static, a capacity the owner declares.
	//
	// +optional
	// +kubebuilder:default=static
	// +kubebuilder:validation:Enum=static
	Mode string `json:"mode,omitempty"`
	// CapacityWeight is the provider's capacity relative to the other
	// providers of its group: with weights 1 and 3 the second is meant to
	// take three new sessions in four.
	//
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	CapacityWeight int32 `json:"capacityWeight,omitempty"`
}

// ProviderCost is what the provider charges, in US dollars.
type ProviderCost struct {
	// +optional
	// +kubebuilder:validation:Minimum=0
	PerMillionInputTokens *float64 `json:"perMillionInputTokens,omitempty"`
	// +optional
	// +kubebuilder:validation:Minimum=0
	PerMillionOutputTokens *float64 `json:"perMillionOutputTokens,omitempty"`
}

// MetricsConfig says where and how the provider's Prometheus metrics are
// scraped, and which of its series are the load signals.
//
// +kubebuilder:validation:XValidation:rule="!has(self.metricsEndpoint) || !has(self.endpoint) || self.metricsEndpoint == self.endpoint",message="metricsEndpoint and endpoint are one field under its earlier and its current name: set one of them (or both, equal)"
type MetricsConfig struct {
	// MetricsEndpoint is the base URL scraped instead of spec.endpoint.
	//
	// +optional
	// +nullable
	// +kubebuilder:validation:MinLength=1
	MetricsEndpoint string `json:"metricsEndpoint,omitempty"`
	// Endpoint is metricsEndpoint under its current name.
	//
	// +optional
	// +nullable
	// +kubebuilder:validation:MinLength=1
	Endpoint string `json:"endpoint,omitempty"`
	// Path is appended to the base URL.
	//
	// +optional
	// +kubebuilder:default="/metrics"
	Path string `json:"path,omitempty"`
	// Timeout bounds one scrape ("2s", "500ms").
	//
	// +optional
	// +kubebuilder:default="2s"
	// +kubebuilder:validation:Pattern=`^[0-9]+(ms|s)$`
	Timeout string `json:"timeout,omitempty"`
	// SignalNames maps each signal to the provider's metric name; a
	// signal without a name is not read (absent, neutral).
	//
	// +optional
	// +nullable
	SignalNames MetricSignalNames `json:"signalNames,omitempty"`
	// PoolName, when set, reads only samples whose "name" label is it.
	//
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +nullable
	PoolName string `json:"poolName,omitempty"`
	// QueueCapacity normalises a raw queue size to 0-1.
	//
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +nullable
	QueueCapacity *int32 `json:"queueCapacity,omitempty"`
	// StaleMetricsSeconds is how long a sample is served after it was
	// scraped; past it the signal is absent. Default: three scrape
	// intervals.
	//
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +nullable
	StaleMetricsSeconds *int32 `json:"staleMetricsSeconds,omitempty"`
	// TLS overrides spec.tls for the scrapes.
	//
	// +optional
	// +nullable
	TLS *EndpointTLSConfig `json:"tls,omitempty"`
	// Auth is the credential sent with each scrape.
	//
	// +optional
	// +nullable
	Auth *EndpointAuth `json:"auth,omitempty"`
}

// MetricSignalNames maps signals to metric names.
type MetricSignalNames struct {
	// QueueDepth: normalised queue depth (0-1), or a raw size with
	// queueCapacity.
	// +optional
	// +nullable
	QueueDepth string `json:"queueDepth,omitempty"`
	// KVCacheUtilization: KV-cache utilisation (0-1).
	// +optional
	// +nullable
	KVCacheUtilization string `json:"kvCacheUtilization,omitempty"`
	// LatencyP99Ms: p99 request latency in milliseconds.
	// +optional
	// +nullable
	LatencyP99Ms string `json:"latencyP99Ms,omitempty"`
	// PrefixCacheHitRatio: prefix-cache hit ratio (0-1).
	// +optional
	// +nullable
	PrefixCacheHitRatio string `json:"prefixCacheHitRatio,omitempty"`
	// ErrorRate: normalised error rate (0-1).
	// +optional
	// +nullable
	ErrorRate string `json:"errorRate,omitempty"`
	// Healthy: a health gauge, any positive value healthy.
	// +optional
	// +nullable
	Healthy string `json:"healthy,omitempty"`
}

// Model is a model the provider serves.
type Model struct {
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^\S+$`
	Name string `json:"name"`
	// Capabilities the model offers (text_generation, tool_use, ...);
	// they travel with the provider's records to the other sites.
	//
	// +optional
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=63
	Capabilities []string `json:"capabilities,omitempty"`
	// ContextWindow is the model's context size in tokens; it travels
	// with the provider's records.
	//
	// +optional
	// +nullable
	// +kubebuilder:validation:Minimum=0
	ContextWindow *int64 `json:"contextWindow,omitempty"`
}

// AuthStrategyBearerToken sends a token from a Secret as a bearer token.
// It is the only strategy this controller supports; the others of the
// Grid reference are accepted and reported UnsupportedAuthStrategy.
const AuthStrategyBearerToken = "bearer_token"

// ProviderAuth is the provider's authentication. Only a reference to the
// credential leaves the Secret: the overlay carries the reference, the
// gateway reads the token itself.
//
// +kubebuilder:validation:XValidation:rule="!has(self.manual) || !has(self.credentialsManagedExternally) || self.manual == self.credentialsManagedExternally",message="manual and credentialsManagedExternally are one field under its earlier and its current name: set one of them (or both, equal)"
type ProviderAuth struct {
	// Strategy is one of the Grid reference's strategies; only
	// bearer_token is implemented, the others make the provider
	// Unavailable with reason UnsupportedAuthStrategy.
	//
	// +required
	// +kubebuilder:validation:Enum=bearer_token;api_key;custom;mtls_only;oauth2;service_account;sigv4
	Strategy string `json:"strategy"`

	// SecretRef locates the token; required for bearer_token.
	//
	// +optional
	// +nullable
	SecretRef *SecretKeyReference `json:"secretRef,omitempty"`

	// CredentialsManagedExternally says authentication is managed outside
	// Grid: the controller neither reads the Secret, nor puts a credential
	// reference into the candidates, nor sends a token in health probes.
	//
	// +optional
	CredentialsManagedExternally bool `json:"credentialsManagedExternally,omitempty"`
	// Manual is credentialsManagedExternally under its earlier name.
	//
	// +optional
	Manual bool `json:"manual,omitempty"`
}

// SecretKeyReference is a key in a namespaced Secret.
type SecretKeyReference struct {
	// +optional
	Name string `json:"name,omitempty"`
	// +optional
	Namespace string `json:"namespace,omitempty"`
	// +optional
	// +nullable
	Key string `json:"key,omitempty"`
}

// AccessPolicy selects the gateway sites that may use the provider.
type AccessPolicy struct {
	// SiteSelector matches a gateway's site labels
	// (grid.praxis.fast/site=<siteName>). Empty selects every site.
	//
	// +optional
	SiteSelector *metav1.LabelSelector `json:"siteSelector,omitempty"`
}

// HealthCheck is an HTTP probe of the provider. Every field is optional:
// an empty healthCheck probes the provider's endpoint every 30 s.
//
// +kubebuilder:validation:XValidation:rule="!has(self.interval) || !has(self.periodSeconds) || duration(self.interval).getMilliseconds() == self.periodSeconds * 1000",message="interval and periodSeconds are one setting under its current and its earlier name: set one of them (or both, equal)"
type HealthCheck struct {
	// Endpoint is the URL probed with GET, when it is not the provider's
	// own endpoint; a 2xx answer is healthy.
	//
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:Pattern=`^https?://[^\s/?#]+([/?#]\S*)?$`
	// +nullable
	Endpoint string `json:"endpoint,omitempty"`

	// Path is appended to the probed URL (endpoint, or the provider's
	// own), as upstream's probes do.
	//
	// +optional
	// +nullable
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:Pattern=`^/\S*$`
	Path string `json:"path,omitempty"`

	// Interval between probes, a duration from 5s to 1h ("30s", "2m").
	//
	// +optional
	// +nullable
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('5s') && duration(self) <= duration('1h')",message="interval is between 5s and 1h"
	Interval string `json:"interval,omitempty"`

	// PeriodSeconds is interval under its earlier name, in seconds
	// (default 30 when neither is set).
	//
	// +optional
	// +kubebuilder:validation:Minimum=5
	// +kubebuilder:validation:Maximum=3600
	PeriodSeconds int32 `json:"periodSeconds,omitempty"`

	// Timeout bounds one probe ("5s", "500ms"); at most 5s and the
	// interval (the default).
	//
	// +optional
	// +nullable
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$`
	Timeout string `json:"timeout,omitempty"`

	// TLS overrides spec.tls for the probes.
	//
	// +optional
	// +nullable
	TLS *EndpointTLSConfig `json:"tls,omitempty"`

	// Auth is the credential sent with each probe, instead of the
	// provider's own bearer token.
	//
	// +optional
	// +nullable
	Auth *EndpointAuth `json:"auth,omitempty"`
}

// ProviderPhase is the provider's state as the controller sees it.
//
// +kubebuilder:validation:Enum=Pending;Available;Degraded;Unavailable
type ProviderPhase string

const (
	// ProviderPending: not reconciled yet.
	ProviderPending ProviderPhase = "Pending"
	// ProviderAvailable: routed to, fresh.
	ProviderAvailable ProviderPhase = "Available"
	// ProviderDegraded: still routed to, but its candidates are not fresh.
	ProviderDegraded ProviderPhase = "Degraded"
	// ProviderUnavailable: left out of every overlay.
	ProviderUnavailable ProviderPhase = "Unavailable"
)

// InferenceProviderStatus is the provider's observed state.
type InferenceProviderStatus struct {
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// +optional
	Phase ProviderPhase `json:"phase,omitempty"`
	// Reason is a CamelCase word for the phase (for example
	// CredentialSecretMissing, HealthCheckFailing).
	// +optional
	Reason string `json:"reason,omitempty"`
	// +optional
	Message string `json:"message,omitempty"`
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// InferenceProviderList is a list of InferenceProviders.
//
// +kubebuilder:object:root=true
type InferenceProviderList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []InferenceProvider `json:"items"`
}
