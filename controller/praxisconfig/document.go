package praxisconfig

// The Praxis config keys the generated file uses, in the order they are
// written. Their names and nesting follow Praxis's own config (listeners,
// filter_chains, the intelligent_route, credential_inject and
// load_balancer filters, admin, telemetry), which refuses unknown fields.

type document struct {
	Listeners           []listener      `yaml:"listeners"`
	FilterChains        []filterChain   `yaml:"filter_chains"`
	Telemetry           *telemetryBlock `yaml:"telemetry,omitempty"`
	Admin               admin           `yaml:"admin"`
	ShutdownTimeoutSecs int             `yaml:"shutdown_timeout_secs"`
}

type listener struct {
	Name         string   `yaml:"name"`
	Address      string   `yaml:"address"`
	FilterChains []string `yaml:"filter_chains"`
}

type filterChain struct {
	Name    string `yaml:"name"`
	Filters []any  `yaml:"filters"`
}

type traceContextFilter struct {
	Filter string `yaml:"filter"`
}

type jsonBodyFieldFilter struct {
	Filter string `yaml:"filter"`
	Field  string `yaml:"field"`
	Header string `yaml:"header"`
}

type intelligentRouteFilter struct {
	Filter               string       `yaml:"filter"`
	ModelHeader          string       `yaml:"model_header"`
	OverlayFile          string       `yaml:"overlay_file"`
	ExpectedOverlayScope overlayScope `yaml:"expected_overlay_scope"`
	Reload               reload       `yaml:"reload"`
	ProviderHopClusters  []string     `yaml:"provider_hop_clusters,omitempty"`
}

type overlayScope struct {
	Network   string `yaml:"network"`
	Gateway   string `yaml:"gateway"`
	Namespace string `yaml:"namespace"`
	LocalSite string `yaml:"local_site"`
}

type reload struct {
	Enabled    bool `yaml:"enabled"`
	DebounceMS int  `yaml:"debounce_ms"`
}

type credentialInjectFilter struct {
	Filter                       string            `yaml:"filter"`
	Credentials                  []credentialEntry `yaml:"credentials"`
	ProjectedCredentialMountBase string            `yaml:"projected_credential_mount_base,omitempty"`
}

type credentialEntry struct {
	Name      string `yaml:"name"`
	Namespace string `yaml:"namespace"`
	Key       string `yaml:"key"`
	Strategy  string `yaml:"strategy"`
	File      string `yaml:"file"`
}

type loadBalancerFilter struct {
	Filter   string      `yaml:"filter"`
	Clusters []lbCluster `yaml:"clusters"`
}

type lbCluster struct {
	Name      string      `yaml:"name"`
	TLS       *clusterTLS `yaml:"tls,omitempty"`
	Endpoints []string    `yaml:"endpoints"`
}

type clusterTLS struct {
	CA         *tlsCA         `yaml:"ca,omitempty"`
	ClientCert *tlsClientCert `yaml:"client_cert,omitempty"`
	SNI        string         `yaml:"sni"`
	Verify     bool           `yaml:"verify"`
}

type tlsCA struct {
	CAPath string `yaml:"ca_path"`
}

type tlsClientCert struct {
	CertPath string `yaml:"cert_path"`
	KeyPath  string `yaml:"key_path"`
}

type telemetryBlock struct {
	OTLPEndpoint      string   `yaml:"otlp_endpoint,omitempty"`
	SamplingRate      *float64 `yaml:"sampling_rate,omitempty"`
	ServiceName       string   `yaml:"service_name,omitempty"`
	ServiceVersion    string   `yaml:"service_version,omitempty"`
	Environment       string   `yaml:"environment,omitempty"`
	BatchIntervalSecs *int64   `yaml:"batch_interval_secs,omitempty"`
	BatchSize         *int64   `yaml:"batch_size,omitempty"`
}

type admin struct {
	Address string `yaml:"address"`
}
