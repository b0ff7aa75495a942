package praxisconfig

// The Praxis config keys the generated file uses, in the order they are
// written. Their names and nesting follow Praxis's own config (listeners,
// filter_chains, the intelligent_route, credential_inject and
// load_balancer filters, admin, telemetry), which refuses unknown fields.

type document struct {
	Listeners           []listener
	FilterChains        []filterChain
	Telemetry           *telemetryBlock
	Admin               admin
	ShutdownTimeoutSecs int
}

func (d document) write(w *writer) {
	w.key(0, "listeners")
	w.open()
	for _, l := range d.Listeners {
		w.item(2, "name")
		w.str(l.Name)
		w.key(4, "address")
		w.str(l.Address)
		w.key(4, "filter_chains")
		w.strs(6, l.FilterChains)
	}
	w.key(0, "filter_chains")
	w.open()
	for _, c := range d.FilterChains {
		w.item(2, "name")
		w.str(c.Name)
		w.key(4, "filters")
		w.open()
		for _, f := range c.Filters {
			f.write(w, 6)
		}
	}
	if t := d.Telemetry; t != nil {
		t.write(w)
	}
	w.key(0, "admin")
	w.open()
	w.key(2, "address")
	w.str(d.Admin.Address)
	w.key(0, "shutdown_timeout_secs")
	w.integer(int64(d.ShutdownTimeoutSecs))
}

type listener struct {
	Name         string
	Address      string
	FilterChains []string
}

type filterChain struct {
	Name    string
	Filters []filter
}

// filter is one filter of a chain, written as a list item at indent.
type filter interface{ write(w *writer, indent int) }

type traceContextFilter struct{}

func (traceContextFilter) write(w *writer, indent int) {
	w.item(indent, "filter")
	w.str("trace_context")
}

type jsonBodyFieldFilter struct {
	Field  string
	Header string
}

func (f jsonBodyFieldFilter) write(w *writer, indent int) {
	w.item(indent, "filter")
	w.str("json_body_field")
	w.key(indent+2, "field")
	w.str(f.Field)
	w.key(indent+2, "header")
	w.str(f.Header)
}

type intelligentRouteFilter struct {
	ModelHeader          string
	OverlayFile          string
	ExpectedOverlayScope overlayScope
	Reload               reload
	ProviderHopClusters  []string
}

func (f intelligentRouteFilter) write(w *writer, indent int) {
	in := indent + 2
	w.item(indent, "filter")
	w.str("intelligent_route")
	w.key(in, "model_header")
	w.str(f.ModelHeader)
	w.key(in, "overlay_file")
	w.str(f.OverlayFile)
	s := f.ExpectedOverlayScope
	w.key(in, "expected_overlay_scope")
	w.open()
	for _, kv := range [...][2]string{{"network", s.Network}, {"gateway", s.Gateway}, {"namespace", s.Namespace}, {"local_site", s.LocalSite}} {
		w.key(in+2, kv[0])
		w.str(kv[1])
	}
	w.key(in, "reload")
	w.open()
	w.key(in+2, "enabled")
	w.boolean(f.Reload.Enabled)
	w.key(in+2, "debounce_ms")
	w.integer(int64(f.Reload.DebounceMS))
	if len(f.ProviderHopClusters) > 0 {
		w.key(in, "provider_hop_clusters")
		w.strs(in+2, f.ProviderHopClusters)
	}
}

type overlayScope struct {
	Network   string
	Gateway   string
	Namespace string
	LocalSite string
}

type reload struct {
	Enabled    bool
	DebounceMS int
}

type credentialInjectFilter struct {
	Credentials                  []credentialEntry
	ProjectedCredentialMountBase string
}

func (f credentialInjectFilter) write(w *writer, indent int) {
	in := indent + 2
	w.item(indent, "filter")
	w.str("credential_inject")
	w.key(in, "credentials")
	if len(f.Credentials) == 0 {
		w.emptyList()
	} else {
		w.open()
		for _, c := range f.Credentials {
			w.item(in+2, "name")
			w.str(c.Name)
			for _, kv := range [...][2]string{{"namespace", c.Namespace}, {"key", c.Key}, {"strategy", c.Strategy}, {"file", c.File}} {
				w.key(in+4, kv[0])
				w.str(kv[1])
			}
		}
	}
	if f.ProjectedCredentialMountBase != "" {
		w.key(in, "projected_credential_mount_base")
		w.str(f.ProjectedCredentialMountBase)
	}
}

type credentialEntry struct {
	Name      string
	Namespace string
	Key       string
	Strategy  string
	File      string
}

type loadBalancerFilter struct {
	Clusters []lbCluster
}

func (f loadBalancerFilter) write(w *writer, indent int) {
	in := indent + 2
	w.item(indent, "filter")
	w.str("load_balancer")
	w.key(in, "clusters")
	if len(f.Clusters) == 0 {
		w.emptyList()
		return
	}
	w.open()
	c4 := in + 4 // a cluster's keys
	for _, c := range f.Clusters {
		w.item(in+2, "name")
		w.str(c.Name)
		if t := c.TLS; t != nil {
			w.key(c4, "tls")
			w.open()
			if t.CA != nil {
				w.key(c4+2, "ca")
				w.open()
				w.key(c4+4, "ca_path")
				w.str(t.CA.CAPath)
			}
			if t.ClientCert != nil {
				w.key(c4+2, "client_cert")
				w.open()
				w.key(c4+4, "cert_path")
				w.str(t.ClientCert.CertPath)
				w.key(c4+4, "key_path")
				w.str(t.ClientCert.KeyPath)
			}
			w.key(c4+2, "sni")
			w.str(t.SNI)
			w.key(c4+2, "verify")
			w.boolean(t.Verify)
		}
		w.key(c4, "endpoints")
		w.strs(c4+2, c.Endpoints)
	}
}

type lbCluster struct {
	Name      string
	TLS       *clusterTLS
	Endpoints []string
}

type clusterTLS struct {
	CA         *tlsCA
	ClientCert *tlsClientCert
	SNI        string
	Verify     bool
}

type tlsCA struct {
	CAPath string
}

type tlsClientCert struct {
	CertPath string
	KeyPath  string
}

type telemetryBlock struct {
	OTLPEndpoint      string
	SamplingRate      *float64
	ServiceName       string
	ServiceVersion    string
	Environment       string
	BatchIntervalSecs *int64
	BatchSize         *int64
}

// write writes the root telemetry block; "{}" when it sets nothing.
func (t telemetryBlock) write(w *writer) {
	w.key(0, "telemetry")
	if t == (telemetryBlock{}) {
		w.buf.WriteString(" {}\n")
		return
	}
	w.open()
	if t.OTLPEndpoint != "" {
		w.key(2, "otlp_endpoint")
		w.str(t.OTLPEndpoint)
	}
	if t.SamplingRate != nil {
		w.key(2, "sampling_rate")
		w.float(*t.SamplingRate)
	}
	for _, kv := range [...][2]string{{"service_name", t.ServiceName}, {"service_version", t.ServiceVersion}, {"environment", t.Environment}} {
		if kv[1] != "" {
			w.key(2, kv[0])
			w.str(kv[1])
		}
	}
	if t.BatchIntervalSecs != nil {
		w.key(2, "batch_interval_secs")
		w.integer(*t.BatchIntervalSecs)
	}
	if t.BatchSize != nil {
		w.key(2, "batch_size")
		w.integer(*t.BatchSize)
	}
}

type admin struct {
	Address string
}
