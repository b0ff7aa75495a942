package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The shapes below are the Grid reference's. Praxis config generation is
// honoured by a release to come; until then a network that sets it says so
// in its Ready condition (reason FieldNotSupported, naming the fields).

// GridTLS names the network's trust material.
//
// +kubebuilder:validation:XValidation:rule="!has(self.swimKeyRef) || !has(self.swimKeySecretRef) || (self.swimKeyRef.name == self.swimKeySecretRef.name && self.swimKeyRef.__namespace__ == self.swimKeySecretRef.__namespace__ && has(self.swimKeyRef.key) == has(self.swimKeySecretRef.key) && (!has(self.swimKeyRef.key) || self.swimKeyRef.key == self.swimKeySecretRef.key))",message="swimKeyRef and swimKeySecretRef are one field under its earlier and its current name: set one of them (or both, equal)"
type GridTLS struct {
	// CASecretRef is the grid CA (tls.crt, tls.key).
	//
	// +optional
	// +nullable
	CASecretRef *NamespacedName `json:"caSecretRef,omitempty"`
	// CAConfigMapRef is the grid CA's public certificate, for sites that
	// do not hold its key.
	//
	// +optional
	CAConfigMapRef *NamespacedKeyRef `json:"caConfigMapRef,omitempty"`
	// SiteSecretRef is this site's certificate (tls.crt, tls.key,
	// ca.crt).
	//
	// +optional
	// +nullable
	SiteSecretRef *NamespacedName `json:"siteSecretRef,omitempty"`
	// SwimKeySecretRef is the 32-byte key that encrypts SWIM gossip.
	//
	// +optional
	// +nullable
	SwimKeySecretRef *NamespacedKeyRef `json:"swimKeySecretRef,omitempty"`
	// SwimKeyRef is swimKeySecretRef under its earlier name.
	//
	// +optional
	// +nullable
	SwimKeyRef *NamespacedKeyRef `json:"swimKeyRef,omitempty"`
	// SiteCertificate says how this site obtains its certificate. Unset:
	// issued here when caSecretRef holds the grid CA's key, provided
	// otherwise.
	//
	// +optional
	SiteCertificate *SiteCertificate `json:"siteCertificate,omitempty"`
}

// SiteCertificateMode is how a site obtains its certificate.
//
// +kubebuilder:validation:Enum=issuer;enrolled;provided
type SiteCertificateMode string

const (
	// SiteCertificateIssuer: this site holds the grid CA's key, issues
	// its own certificate and answers the enrolled sites' requests.
	SiteCertificateIssuer SiteCertificateMode = "issuer"
	// SiteCertificateEnrolled: this site holds only the grid CA's
	// certificate and obtains its own from the issuer by a certificate
	// request, with a one-time token the first time and its current
	// certificate after.
	SiteCertificateEnrolled SiteCertificateMode = "enrolled"
	// SiteCertificateProvided: the site Secret is the user's (from
	// cert-manager, say); the agent only checks it.
	SiteCertificateProvided SiteCertificateMode = "provided"
)

// SiteCertificate is how a site obtains its certificate.
//
// +kubebuilder:validation:XValidation:rule="self.mode != 'enrolled' || has(self.issuer)",message="siteCertificate.mode enrolled needs issuer (the issuer site's address and name)"
type SiteCertificate struct {
	// Mode: issuer, enrolled or provided.
	//
	// +required
	Mode SiteCertificateMode `json:"mode"`
	// Issuer is where an enrolled site enrols and renews.
	//
	// +optional
	Issuer *EnrollmentIssuer `json:"issuer,omitempty"`
	// EnrollmentTokenSecretRef is the one-time token the issuer's
	// operator gave this site (key "token" by default); needed only while
	// the site has no valid certificate.
	//
	// +optional
	EnrollmentTokenSecretRef *NamespacedKeyRef `json:"enrollmentTokenSecretRef,omitempty"`
	// RefuseRenewal (issuer) lists sites whose renewal and enrolment are
	// refused, whatever token they hold: each leaves the grid when its
	// current certificate expires, without rotating the grid CA.
	//
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=512
	// +kubebuilder:validation:items:MaxLength=63
	RefuseRenewal []string `json:"refuseRenewal,omitempty"`
	// EvictedSites (issuer) lists sites evicted from the network. The
	// issuer signs the list with the grid CA and every site, on receiving
	// it, refuses the evicted sites' records and connections and
	// withdraws their providers at once, whatever certificate they still
	// hold; their renewal and enrolment are refused. Removing a site
	// lifts its eviction: it comes back only with a certificate issued
	// after that (a new enrolment, with a new token).
	//
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=512
	// +kubebuilder:validation:items:MaxLength=63
	// +kubebuilder:validation:items:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	EvictedSites []string `json:"evictedSites,omitempty"`
}

// EnrollmentIssuer is the site that issues certificates.
type EnrollmentIssuer struct {
	// Address of the issuer's signals listener, host:port.
	//
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=262
	Address string `json:"address"`
	// Site is the issuer's site name: its certificate must name it.
	//
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Site string `json:"site"`
}

// NamespacedName names an object in a namespace.
type NamespacedName struct {
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Namespace string `json:"namespace"`
	// Key is accepted as upstream writes it and reported as not supported:
	// the whole Secret is read.
	//
	// +optional
	// +nullable
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Key string `json:"key,omitempty"`
}

// NamespacedKeyRef names a key of an object in a namespace.
type NamespacedKeyRef struct {
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Namespace string `json:"namespace"`
	// Key within the object; each reference documents its default.
	//
	// +optional
	// +nullable
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Key string `json:"key,omitempty"`
}

// NetworkPolicy controls which sites may connect at all.
type NetworkPolicy struct {
	// DefaultAllow lets every site of the network connect; when false,
	// a gateway uses only its own site's providers.
	//
	// +optional
	// +kubebuilder:default=true
	DefaultAllow *bool `json:"defaultAllow,omitempty"`
	// Deny lists sites that may not connect: their providers reach no
	// overlay, and their gateways get an empty one.
	//
	// +optional
	// +listType=map
	// +listMapKey=site
	// +kubebuilder:validation:MaxItems=1000
	Deny []SiteRef `json:"deny,omitempty"`
}

// SiteRef names a site.
type SiteRef struct {
	// +required
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Site string `json:"site"`
}

// PeerTrust says how remote sites are trusted.
type PeerTrust struct {
	// Mode pinned (or upstream's pin) trusts a site whose GridSite pins
	// its certificate; spiffe trusts any site the grid CA signed.
	//
	// +optional
	// +kubebuilder:default=pinned
	// +kubebuilder:validation:Enum=pinned;pin;spiffe
	Mode string `json:"mode,omitempty"`
}

// PraxisConfig is the opt-in generation of a gateway's Praxis config.
//
// +kubebuilder:validation:XValidation:rule="!has(self.enabled) || !has(self.generate) || self.enabled == self.generate",message="enabled and generate are one field under its earlier and its current name: set one of them (or both, equal)"
// +kubebuilder:validation:XValidation:rule="!has(self.credentialMountBase) || !has(self.credentialMountPath) || self.credentialMountBase == self.credentialMountPath",message="credentialMountBase and credentialMountPath are one field under its earlier and its current name: set one of them (or both, equal)"
type PraxisConfig struct {
	// +optional
	Generate bool `json:"generate,omitempty"`
	// Enabled is generate under its earlier name.
	//
	// +optional
	Enabled bool `json:"enabled,omitempty"`
	// +optional
	// +kubebuilder:default=praxis-consumer-config
	// +kubebuilder:validation:MaxLength=253
	ConfigMapName string `json:"configMapName,omitempty"`
	// +optional
	// +kubebuilder:default=8080
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	ListenerPort int32 `json:"listenerPort,omitempty"`
	// +optional
	// +listType=map
	// +listMapKey=cluster
	// +kubebuilder:validation:MaxItems=128
	ClusterEndpoints []ClusterEndpoint `json:"clusterEndpoints,omitempty"`
	// +optional
	DeriveTopology *DeriveTopology `json:"deriveTopology,omitempty"`
	// +optional
	EnableProjectedCredentials bool `json:"enableProjectedCredentials,omitempty"`
	// +optional
	SupportsProjectedCredentials bool `json:"supportsProjectedCredentials,omitempty"`
	// CredentialMountPath is where credential Secrets are mounted
	// (/run/secrets/grid-credentials when unset; not a schema default, so
	// that its earlier name can be written alone).
	//
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	CredentialMountPath string `json:"credentialMountPath,omitempty"`
	// CredentialMountBase is credentialMountPath under its earlier name.
	//
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	CredentialMountBase string `json:"credentialMountBase,omitempty"`
	// +optional
	// +kubebuilder:default=/etc/praxis/tls
	TLSCertMountPath string `json:"tlsCertMountPath,omitempty"`
	// Telemetry adds process-level OTLP settings and the trace_context
	// filter to the generated config. Collector headers are not a field:
	// they are credentials, set on the gateway as
	// OTEL_EXPORTER_OTLP_HEADERS from a Secret.
	//
	// +optional
	Telemetry *GatewayTelemetry `json:"telemetry,omitempty"`
	// MountReconciliation delegates the gateway Deployment's generated
	// config and Secret mounts to the agent: it stages each generated
	// config in a second ConfigMap slot and rolls the Deployment once per
	// change. The Deployment must opt in too (its annotations) and grant
	// the agent get and patch on itself.
	//
	// +optional
	MountReconciliation *MountReconciliation `json:"mountReconciliation,omitempty"`
}

// MountReconciliation names the gateway Deployment and container whose
// config source and Secret mounts the agent reconciles.
//
// +kubebuilder:validation:XValidation:rule="!has(self.enabled) || !self.enabled || (has(self.deploymentName) && size(self.deploymentName) > 0)",message="deploymentName is required when mount reconciliation is enabled"
type MountReconciliation struct {
	// +optional
	Enabled bool `json:"enabled,omitempty"`
	// DeploymentName is the gateway's Deployment, in the gateway's
	// namespace.
	//
	// +optional
	// +kubebuilder:validation:MaxLength=253
	DeploymentName string `json:"deploymentName,omitempty"`
	// ContainerName is the Praxis container: the only one whose mounts
	// change.
	//
	// +optional
	// +kubebuilder:default=praxis
	// +kubebuilder:validation:MaxLength=63
	ContainerName string `json:"containerName,omitempty"`
}

// GatewayTelemetry is the OpenTelemetry export of a generated Praxis
// config, written at the config's root.
type GatewayTelemetry struct {
	// OTLPEndpoint is the collector, http(s)://host[:port][/path]; empty
	// leaves it to OTEL_EXPORTER_OTLP_ENDPOINT on the gateway.
	//
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:Pattern=`^(|https?://[^/?#@\s]+(:[0-9]+)?(/[^\s?#]*)?)$`
	OTLPEndpoint string `json:"otlpEndpoint,omitempty"`
	// SamplingRate is the root spans' sampling probability, 0 to 1.
	//
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1
	SamplingRate *float64 `json:"samplingRate,omitempty"`
	// +optional
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:Pattern=`^.*\S.*$`
	ServiceName string `json:"serviceName,omitempty"`
	// +optional
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:Pattern=`^.*\S.*$`
	ServiceVersion string `json:"serviceVersion,omitempty"`
	// Environment is the deployment.environment resource attribute.
	//
	// +optional
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:Pattern=`^.*\S.*$`
	Environment string `json:"environment,omitempty"`
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=300
	BatchIntervalSecs *int64 `json:"batchIntervalSecs,omitempty"`
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65536
	BatchSize *int64 `json:"batchSize,omitempty"`
}

// ClusterEndpoint is where a load_balancer cluster is reached.
type ClusterEndpoint struct {
	// Cluster is a candidate's cluster name.
	//
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Cluster string `json:"cluster"`
	// Address is host:port.
	//
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=262
	Address string `json:"address"`
	// Transport is required when a config is rendered: a missing one
	// fails closed (MissingTransport).
	//
	// +optional
	// +nullable
	Transport *EndpointTransport `json:"transport,omitempty"`
}

// EndpointTransport is an endpoint's transport security.
//
// +kubebuilder:validation:XValidation:rule="self.mode == 'tls' || !has(self.caSecretRef)",message="caSecretRef is only valid for tls transport"
type EndpointTransport struct {
	// +required
	// +kubebuilder:validation:Enum=mutual_tls;tls;plaintext
	Mode string `json:"mode"`
	// SNI is required for mutual_tls and tls.
	//
	// +optional
	// +kubebuilder:validation:MaxLength=253
	// +nullable
	SNI *string `json:"sni,omitempty"`
	// CASecretRef is a CA bundle Secret in the gateway's namespace.
	//
	// +optional
	CASecretRef *LocalSecretKeyRef `json:"caSecretRef,omitempty"`
}

// LocalSecretKeyRef is a key of a Secret in the gateway's namespace.
type LocalSecretKeyRef struct {
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// +optional
	// +kubebuilder:default=ca.crt
	// +kubebuilder:validation:MinLength=1
	Key string `json:"key,omitempty"`
}

// DeriveTopology fills endpoints from the named providers' declarations.
type DeriveTopology struct {
	// FromProviders are routing identities (clusterName, else name).
	//
	// +optional
	// +kubebuilder:validation:MaxItems=128
	// +kubebuilder:validation:items:MaxLength=253
	FromProviders []string `json:"fromProviders,omitempty"`
	// Transport is the trust of every derived endpoint; its mode is tls.
	//
	// +optional
	// +kubebuilder:validation:XValidation:rule="self.mode == 'tls'",message="deriveTopology.transport.mode must be tls"
	Transport *EndpointTransport `json:"transport,omitempty"`
}

// PraxisConfigStatus is the generated Praxis config of one gateway.
type PraxisConfigStatus struct {
	GatewayName string `json:"gatewayName"`
	Namespace   string `json:"namespace"`
	// +optional
	ConfigMapName string `json:"configMapName,omitempty"`
	// +kubebuilder:validation:Enum=Rendered;Error;Disabled
	Phase string `json:"phase"`
	// +optional
	Reason string `json:"reason,omitempty"`
	// +optional
	Message string `json:"message,omitempty"`
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// GridSite is a remote site of a Grid network. It is discovered over SWIM
// gossip; it becomes routable (Active) only after its gateway passed a
// mutual-TLS probe against the grid CA, its server name and a pinned
// certificate. A departed site is kept: it is evidence.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=gs,categories=grid
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Network",type=string,JSONPath=`.spec.gridNetworkRef`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.reason`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type GridSite struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   GridSiteSpec   `json:"spec,omitempty"`
	Status GridSiteStatus `json:"status,omitempty"`
}

// GridSiteSpec is how to reach and trust a remote site.
//
// +kubebuilder:validation:XValidation:rule="!has(self.egress) || !has(self.gatewayEndpoint) || (has(self.egress.address) == has(self.gatewayEndpoint.address) && (!has(self.egress.address) || self.egress.address == self.gatewayEndpoint.address) && has(self.egress.tls) == has(self.gatewayEndpoint.tls) && (!has(self.egress.tls) || (has(self.egress.tls.mode) == has(self.gatewayEndpoint.tls.mode) && (!has(self.egress.tls.mode) || self.egress.tls.mode == self.gatewayEndpoint.tls.mode) && has(self.egress.tls.serverName) == has(self.gatewayEndpoint.tls.serverName) && (!has(self.egress.tls.serverName) || self.egress.tls.serverName == self.gatewayEndpoint.tls.serverName))))",message="egress and gatewayEndpoint are one field under its earlier and its current name: set one of them (or both, equal)"
type GridSiteSpec struct {
	// GridNetworkRef names the site's GridNetwork.
	//
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	GridNetworkRef string `json:"gridNetworkRef"`
	// +optional
	// +nullable
	GatewayEndpoint *GatewayEndpoint `json:"gatewayEndpoint,omitempty"`
	// Egress is gatewayEndpoint under its earlier name: upstream's
	// address and tls only.
	//
	// +optional
	// +kubebuilder:validation:XValidation:rule="!has(self.host) && !has(self.port) && !has(self.protocol) && !has(self.addressScope) && !has(self.generation)",message="egress, upstream's earlier name, carries address and tls only: write the structured endpoint under gatewayEndpoint"
	// +nullable
	Egress *GatewayEndpoint `json:"egress,omitempty"`
	// +optional
	// +nullable
	Trust *SiteTrust `json:"trust,omitempty"`
	// Region and Zone are where the site runs: written by the agent from
	// what the site signs into its records.
	//
	// +optional
	// +nullable
	// +kubebuilder:validation:MaxLength=63
	Region string `json:"region,omitempty"`
	// +optional
	// +nullable
	// +kubebuilder:validation:MaxLength=63
	Zone string `json:"zone,omitempty"`
	// SovereigntyZone is upstream's data-residency label; accepted and
	// reported as not supported by this release.
	//
	// +optional
	// +nullable
	// +kubebuilder:validation:MaxLength=63
	SovereigntyZone string `json:"sovereigntyZone,omitempty"`
}

// GatewayEndpoint is the site's data-plane gateway. The reference's
// address (host:port) is kept as it is written; a production endpoint is
// structured: host and port, protocol, address scope and generation, with
// the SNI in tls.serverName. An address that does not read one way (see
// the gossip package's README) is never dialled or routed to.
//
// +kubebuilder:validation:XValidation:rule="has(self.host) == has(self.port)",message="host and port are set together"
// +kubebuilder:validation:XValidation:rule="!has(self.host) || (isIP(self.host) ? ip.isCanonical(self.host) && (ip(self.host).isGlobalUnicast() || ip(self.host).isLoopback()) : !format.dns1123Subdomain().validate(self.host).hasValue() && !self.host.matches('(^|[.])[0-9]+$'))",message="host is a lowercase DNS name not ending in a number, or a canonical IP address a site can be reached at (not unspecified, multicast or link-local)"
// +kubebuilder:validation:XValidation:rule="!has(self.address) || !has(self.host) || self.address.substring(0, self.address.lastIndexOf(':')) == (self.host.contains(':') ? '[' + self.host + ']' : self.host) && self.address.substring(self.address.lastIndexOf(':') + 1).matches('^[1-9][0-9]{0,4}$') && int(self.address.substring(self.address.lastIndexOf(':') + 1)) == self.port",message="address and host:port name one endpoint: they must agree (IPv6 in brackets)"
// +kubebuilder:validation:XValidation:rule="!has(self.addressScope) || !has(self.host) || !isIP(self.host) || (self.addressScope == 'Loopback') == ip(self.host).isLoopback() && (self.addressScope == 'Private') == [cidr('10.0.0.0/8'), cidr('172.16.0.0/12'), cidr('192.168.0.0/16'), cidr('100.64.0.0/10'), cidr('fc00::/7')].exists(c, c.containsIP(self.host))",message="addressScope does not hold the host's address (Loopback: 127.0.0.0/8, ::1; Private: RFC 1918, 100.64.0.0/10, fc00::/7; Public: any other)"
// +kubebuilder:validation:XValidation:rule="!has(self.protocol) || (self.protocol == 'HTTP') == (has(self.tls) && has(self.tls.mode) && self.tls.mode == 'Plaintext')",message="protocol HTTPS goes with tls.mode Mutual, HTTP with Plaintext"
type GatewayEndpoint struct {
	// Address is host:port, from gossip for a discovered site.
	//
	// +optional
	// +kubebuilder:validation:MaxLength=262
	Address string `json:"address,omitempty"`
	// Host is the gateway's DNS name or IP address (IPv6 without
	// brackets).
	//
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Host string `json:"host,omitempty"`
	// Port is the gateway's port.
	//
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port,omitempty"`
	// Protocol is what the gateway speaks there: HTTPS (tls.mode Mutual,
	// the default) or HTTP (Plaintext, for diagnostics only).
	//
	// +optional
	// +kubebuilder:validation:Enum=HTTPS;HTTP
	Protocol string `json:"protocol,omitempty"`
	// AddressScope is where the gateway's address lies: Public, Private
	// (RFC 1918, 100.64.0.0/10, fc00::/7) or Loopback (development). The
	// probe dials an address of that scope only, checked on every
	// resolved address, so a name that resolves elsewhere is not dialled.
	// Unset: not checked.
	//
	// +optional
	// +kubebuilder:validation:Enum=Public;Private;Loopback
	AddressScope string `json:"addressScope,omitempty"`
	// Generation orders the endpoint's versions: a discovered site's is
	// the version its site signed the advertisement with. The agent
	// replaces the endpoint only with one of a greater generation, never
	// with an older one.
	//
	// +optional
	// +kubebuilder:validation:Minimum=0
	Generation int64 `json:"generation,omitempty"`
	// +optional
	TLS *GatewayTLS `json:"tls,omitempty"`
}

// GatewayTLS is how the gateway is verified.
//
// +kubebuilder:validation:XValidation:rule="self.mode != 'Plaintext' || !has(self.serverName)",message="serverName must be absent for Plaintext"
type GatewayTLS struct {
	// +optional
	// +kubebuilder:default=Mutual
	// +kubebuilder:validation:Enum=Mutual;Plaintext
	Mode string `json:"mode,omitempty"`
	// ServerName is the DNS SAN the gateway's certificate must carry.
	//
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +nullable
	ServerName string `json:"serverName,omitempty"`
}

// SiteTrust pins the site's gateway certificate.
//
// +kubebuilder:validation:XValidation:rule="!has(self.certFingerprint) || !has(self.canonicalFingerprints)",message="certFingerprint (upstream's earlier pin) and canonicalFingerprints cannot both be set"
type SiteTrust struct {
	// CanonicalFingerprints are sha256 digests of the leaf's DER: the
	// current one, and the next during a rotation.
	//
	// +optional
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=2
	// +kubebuilder:validation:items:Pattern=`^[0-9a-f]{64}$`
	// +nullable
	CanonicalFingerprints []string `json:"canonicalFingerprints,omitempty"`
	// CertFingerprint is upstream's earlier pin: the sha256 of the PEM
	// encoding of the site's certificate, as colon-separated lowercase hex
	// bytes. A gateway whose leaf, PEM-encoded, hashes to it is pinned.
	//
	// +optional
	// +nullable
	// +kubebuilder:validation:Pattern=`^[0-9a-f]{2}(:[0-9a-f]{2}){31}$`
	CertFingerprint string `json:"certFingerprint,omitempty"`
}

// SitePhase is where a remote site stands.
//
// +kubebuilder:validation:Enum=Pending;Discovered;Connecting;Active;Unreachable;Left;Evicted
type SitePhase string

// GridSiteStatus is what is known of the site.
type GridSiteStatus struct {
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// +optional
	Phase SitePhase `json:"phase,omitempty"`
	// +optional
	Reason string `json:"reason,omitempty"`
	// +optional
	Message string `json:"message,omitempty"`
	// PublicCertPem is the site's public certificate as gossiped, after a
	// structural check; it is not trusted for that.
	//
	// +optional
	PublicCertPem string `json:"publicCertPem,omitempty"`
	// +optional
	Capabilities *SiteCapabilities `json:"capabilities,omitempty"`
	// +optional
	LastProbeTime *metav1.Time `json:"lastProbeTime,omitempty"`
	// +optional
	LastTransitionTime *metav1.Time `json:"lastTransitionTime,omitempty"`
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// SiteCapabilities are the broad capability classes a site offers.
type SiteCapabilities struct {
	// +optional
	Inference bool `json:"inference,omitempty"`
	// +optional
	AgentTools bool `json:"agentTools,omitempty"`
	// +optional
	AgentToAgent bool `json:"agentToAgent,omitempty"`
}

// GridSiteList is a list of GridSites.
//
// +kubebuilder:object:root=true
type GridSiteList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []GridSite `json:"items"`
}
