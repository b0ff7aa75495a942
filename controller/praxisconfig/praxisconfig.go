// Package praxisconfig renders a consumer gateway's whole Praxis config
// (praxis.yaml) from its GatewayRef.praxisConfig and the overlay rendered
// for it. It is pure: the reconciler gathers the inputs and applies the
// result, and the offline render command prints it.
//
// The config reads its routes from the overlay file the sidecar delivers,
// with the overlay's scope pinned; what it carries itself is what a route
// change cannot: the listener, the endpoint inventory with each cluster's
// transport security, the provider-hop allowlist and the credential
// filter's table. It fails closed: an endpoint without an explicit
// transport is never rendered as plain HTTP.
package praxisconfig

import (
	"cmp"
	"fmt"
	"net"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/shared/envelope"
	"github.com/gridsync/gridsync/trust/sitetrust"
)

// Reasons of a gateway's praxisConfigStatus, as the reference names them.
const (
	ReasonMissingTransport                = "MissingTransport"
	ReasonMissingSni                      = "MissingSni"
	ReasonPlaintextWithSni                = "PlaintextWithSni"
	ReasonMissingClusterEndpoint          = "MissingClusterEndpoint"
	ReasonPraxisConfigRenderFailed        = "PraxisConfigRenderFailed"
	ReasonPraxisConfigApplyFailed         = "PraxisConfigApplyFailed"
	ReasonProjectedCredentialsUnsupported = "ProjectedCredentialsUnsupported"
)

// Defaults of the API, applied here too so that a manifest read from a
// file (the offline command) renders as the API server would default it.
const (
	DefaultConfigMapName       = "praxis-consumer-config"
	DefaultListenerPort        = 8080
	DefaultCredentialMountPath = "/run/secrets/grid-credentials"
	DefaultTLSCertMountPath    = "/etc/praxis/tls"
	// BackendCAMountPath is where a tls endpoint's CA Secret is mounted:
	// <BackendCAMountPath>/<Secret name>/<key>.
	BackendCAMountPath = "/run/secrets/grid-backend-ca"
	// OverlayFile is where the gateway reads its overlay: the folder the
	// sidecar publishes into (or the overlay ConfigMap's volume).
	OverlayFile = "/etc/praxis/routing/routing-overlay.json"
	// AdminAddress is the health and metrics listener, loopback only.
	AdminAddress = "127.0.0.1:9901"
	// ShutdownTimeoutSecs is the gateway's drain time.
	ShutdownTimeoutSecs = 5
	// ReloadDebounceMS is the overlay watcher's debounce. The sidecar
	// publishes each revision with one atomic rename, so Praxis's default
	// of 500 ms would only add half a second to every route change.
	ReloadDebounceMS = 50
	// ModelHeader carries the requested model from json_body_field to
	// intelligent_route.
	ModelHeader = "X-Model"
	// DataKey is the generated ConfigMap's key.
	DataKey = "praxis.yaml"
)

// Error is a render that failed closed: Reason is the praxisConfigStatus
// reason, Message describes structure only (never a Secret's bytes).
type Error struct {
	Reason  string
	Message string
}

func (e *Error) Error() string { return e.Reason + ": " + e.Message }

func fail(reason, format string, args ...any) *Error {
	return &Error{Reason: reason, Message: fmt.Sprintf(format, args...)}
}

// Provider is a local provider of the network, for derived endpoints.
type Provider struct {
	// Identity is the routing identity: the provider's clusterName, else
	// its name; the cluster its candidates name.
	Identity string
	// Name is the object's name, for messages.
	Name string
	// Endpoint is the provider's base URL.
	Endpoint string
}

// SecretRef names a Secret (the network's grid CA and site Secrets).
type SecretRef struct {
	Namespace string
	Name      string
}

// Input is everything one gateway's config is rendered from.
type Input struct {
	Network   string
	Gateway   string
	Namespace string
	// LocalSite is the gateway's site (the overlay's local_site).
	LocalSite string
	Spec      v1alpha1.PraxisConfig
	// Candidates is the overlay rendered for the gateway.
	Candidates []envelope.Candidate
	// FinalHop reports whether a candidate's site is served by this
	// gateway as the final hop: its own site, and in this release the
	// providers of its own cluster (whose candidates carry the provider's
	// name as site). Only those candidates' credentials are injected here;
	// a remote site adds its own at its gateway.
	FinalHop func(site string) bool
	// Providers are the network's local providers, for deriveTopology.
	Providers []Provider
	// GridCA and Site are the network's spec.tls Secrets, listed as mount
	// requirements when a mutual_tls endpoint reads them; nil when unset.
	GridCA, Site *SecretRef
}

// Withdrawal is a candidate cluster left out of the gateway's routes
// because no endpoint is configured for it and none could be derived.
type Withdrawal struct {
	Cluster string
	Models  []string
	Why     string
}

// Requirement is one Secret the config reads files of.
type Requirement struct {
	Purpose string            `json:"purpose"`
	Secret  RequirementSecret `json:"secret"`
	Items   []RequirementItem `json:"items"`
}

// RequirementSecret names the Secret; never its data.
type RequirementSecret struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
}

// RequirementItem is one key and the file it is read at.
type RequirementItem struct {
	Key  string `json:"key"`
	Path string `json:"path"`
}

// Purposes of a requirement.
const (
	PurposeBackendCredential = "backendCredential"
	PurposeBackendCA         = "backendCa"
	PurposeGridPeerCA        = "gridPeerCa"
	PurposeGridSiteIdentity  = "gridSiteIdentity"
)

// Result is a rendered config.
type Result struct {
	// YAML is praxis.yaml: the same inputs give the same bytes.
	YAML []byte
	// Candidates is the overlay the gateway gets: the input's, less the
	// withdrawn ones, in the same order.
	Candidates []envelope.Candidate
	Withdrawn  []Withdrawal
	// Requirements are the Secrets the config reads, sorted.
	Requirements []Requirement
	// HoldCredentials: projected credentials are enabled but the gateway
	// has not attested it supports them, and the overlay carries a
	// credential this gateway would inject: that overlay revision must not
	// reach the gateway yet.
	HoldCredentials bool
	// ProviderHopClusters are the mutual_tls clusters.
	ProviderHopClusters []string
	// Clusters counts the load_balancer entries.
	Clusters int
}

// endpoint is one load_balancer cluster, explicit or derived.
type endpoint struct {
	cluster   string
	address   string
	transport v1alpha1.EndpointTransport
}

// Render renders one gateway's config, or says why it cannot.
func Render(in Input) (Result, error) {
	spec := withDefaults(in.Spec)
	for _, p := range []struct{ field, path string }{
		{"credentialMountPath", spec.CredentialMountPath},
		{"tlsCertMountPath", spec.TLSCertMountPath},
	} {
		if !cleanAbsolute(p.path) {
			return Result{}, fail(ReasonPraxisConfigRenderFailed, "praxisConfig.%s %q is not an absolute, normalized path below /", p.field, p.path)
		}
	}
	if strings.TrimSpace(in.LocalSite) == "" {
		return Result{}, fail(ReasonPraxisConfigRenderFailed, "the gateway has no site: set siteName on the GatewayRef")
	}
	// A gateway without siteName takes the network's name, which may be
	// no site name (a dot, say): the config pins its overlay to that site.
	if err := sitetrust.ValidSiteName(in.LocalSite); err != nil {
		return Result{}, fail(ReasonPraxisConfigRenderFailed, "the gateway's site is not a valid site identity (%v): set siteName on the GatewayRef", err)
	}

	explicit, err := explicitEndpoints(spec.ClusterEndpoints)
	if err != nil {
		return Result{}, err
	}
	derived, notDerived, err := deriveEndpoints(spec.DeriveTopology, in.Providers, explicit)
	if err != nil {
		return Result{}, err
	}
	endpoints := make(map[string]endpoint, len(explicit)+len(derived))
	for _, e := range explicit {
		endpoints[e.cluster] = e
	}
	for _, e := range derived {
		endpoints[e.cluster] = e
	}

	// Every candidate's cluster needs an endpoint: with deriveTopology a
	// candidate without one is withdrawn from this gateway's routes, and
	// without it the render fails.
	// kept shares the input until a candidate is withdrawn.
	kept := in.Candidates
	withdrawn := map[string]*Withdrawal{}
	for i, c := range in.Candidates {
		if strings.TrimSpace(c.Cluster) == "" {
			return Result{}, fail(ReasonPraxisConfigRenderFailed, "candidate %s at site %s has a blank cluster", c.Name, c.Site)
		}
		if _, ok := endpoints[c.Cluster]; ok {
			if len(withdrawn) > 0 {
				kept = append(kept, c)
			}
			continue
		}
		if len(withdrawn) == 0 {
			kept = append(make([]envelope.Candidate, 0, len(in.Candidates)), in.Candidates[:i]...)
		}
		if spec.DeriveTopology == nil {
			return Result{}, fail(ReasonMissingClusterEndpoint,
				"candidate cluster %s (model %s) has no praxisConfig.clusterEndpoints entry: add one, or allowlist its provider in deriveTopology.fromProviders", c.Cluster, c.Name)
		}
		w := withdrawn[c.Cluster]
		if w == nil {
			why := notDerived[c.Cluster]
			if why == "" {
				why = "not a provider of this cluster in deriveTopology.fromProviders (a remote site's hop needs an explicit mutual_tls entry)"
			}
			w = &Withdrawal{Cluster: c.Cluster, Why: why}
			withdrawn[c.Cluster] = w
		}
		if !slices.Contains(w.Models, c.Name) {
			w.Models = append(w.Models, c.Name)
		}
	}
	if kept == nil {
		kept = []envelope.Candidate{}
	}
	if len(endpoints) == 0 {
		return Result{}, fail(ReasonMissingClusterEndpoint, "the gateway has no cluster endpoints: a config needs at least one clusterEndpoints entry (or a derivable provider) to route to")
	}

	telemetry, err := renderTelemetry(spec.Telemetry)
	if err != nil {
		return Result{}, err
	}

	res := Result{Candidates: kept}
	for _, w := range withdrawn {
		slices.Sort(w.Models)
		res.Withdrawn = append(res.Withdrawn, *w)
	}
	slices.SortFunc(res.Withdrawn, func(a, b Withdrawal) int { return cmp.Compare(a.Cluster, b.Cluster) })

	clusters := make([]endpoint, 0, len(endpoints))
	for _, e := range endpoints {
		clusters = append(clusters, e)
	}
	slices.SortFunc(clusters, func(a, b endpoint) int { return cmp.Compare(a.cluster, b.cluster) })
	reqs := newRequirements()
	lb := loadBalancerFilter{}
	for _, e := range clusters {
		lb.Clusters = append(lb.Clusters, renderCluster(e, spec.TLSCertMountPath, in, reqs))
		if e.transport.Mode == modeMutualTLS {
			res.ProviderHopClusters = append(res.ProviderHopClusters, e.cluster)
		}
	}
	res.Clusters = len(clusters)

	// Credentials: only those of candidates this gateway is the final hop
	// for, as file references; never a token.
	credentials, held := credentialEntries(kept, in.FinalHop, spec.CredentialMountPath, reqs)
	var inject *credentialInjectFilter
	switch {
	case spec.EnableProjectedCredentials:
		// An empty table that resolves the selected reference under the
		// projected root at request time: a later credential-bearing
		// revision cannot bypass injection.
		inject = &credentialInjectFilter{Credentials: []credentialEntry{}, ProjectedCredentialMountBase: spec.CredentialMountPath}
		res.HoldCredentials = held && !spec.SupportsProjectedCredentials
	case len(credentials) > 0:
		inject = &credentialInjectFilter{Credentials: credentials}
	}

	var filters []filter
	if telemetry != nil {
		filters = append(filters, traceContextFilter{})
	}
	filters = append(filters,
		jsonBodyFieldFilter{Field: "model", Header: ModelHeader},
		intelligentRouteFilter{
			ModelHeader: ModelHeader,
			OverlayFile: OverlayFile,
			ExpectedOverlayScope: overlayScope{
				Network: in.Network, Gateway: in.Gateway, Namespace: in.Namespace, LocalSite: in.LocalSite,
			},
			Reload:              reload{Enabled: true, DebounceMS: ReloadDebounceMS},
			ProviderHopClusters: res.ProviderHopClusters,
		})
	if inject != nil {
		filters = append(filters, *inject)
	}
	filters = append(filters, lb)

	doc := document{
		Listeners: []listener{{
			Name: "public", Address: net.JoinHostPort("0.0.0.0", strconv.Itoa(int(spec.ListenerPort))),
			FilterChains: []string{"consumer-chain"},
		}},
		FilterChains:        []filterChain{{Name: "consumer-chain", Filters: filters}},
		Telemetry:           telemetry,
		Admin:               admin{Address: AdminAddress},
		ShutdownTimeoutSecs: ShutdownTimeoutSecs,
	}
	if err := reqs.err; err != nil {
		return Result{}, err
	}
	var w writer
	w.buf.Grow(1024 + 256*len(clusters) + 192*len(credentials))
	w.buf.WriteString(header(in))
	doc.write(&w)
	res.YAML = w.buf.Bytes()
	res.Requirements = reqs.list()
	return res, nil
}

// header names what the file is for a reader of the ConfigMap; it holds
// nothing that changes between renders of the same inputs.
func header(in Input) string {
	return fmt.Sprintf("# Praxis config of gateway %s/%s in Grid network %s, generated by gridsync from the\n"+
		"# GridNetwork's praxisConfig. Routes come from %s; edit the GridNetwork, not this file.\n",
		in.Namespace, in.Gateway, in.Network, OverlayFile)
}

// withDefaults fills what the API server defaults.
func withDefaults(s v1alpha1.PraxisConfig) v1alpha1.PraxisConfig {
	if s.ConfigMapName == "" {
		s.ConfigMapName = DefaultConfigMapName
	}
	if s.ListenerPort == 0 {
		s.ListenerPort = DefaultListenerPort
	}
	if s.CredentialMountPath == "" {
		s.CredentialMountPath = DefaultCredentialMountPath
	}
	if s.TLSCertMountPath == "" {
		s.TLSCertMountPath = DefaultTLSCertMountPath
	}
	return s
}

// ConfigMapName is the generated ConfigMap's name for a spec.
func ConfigMapName(s v1alpha1.PraxisConfig) string { return withDefaults(s).ConfigMapName }

// credentialEntries is the static credential table: one entry per
// credential reference of the candidates this gateway is the final hop
// for, at {mount}/{namespace}/{name}/{key} (the projected layout, so that
// Secrets of one name in two namespaces never alias). held reports
// whether any such candidate carries a credential.
func credentialEntries(candidates []envelope.Candidate, finalHop func(string) bool, mount string, reqs *requirements) ([]credentialEntry, bool) {
	seen := map[envelope.Credential]bool{}
	var out []credentialEntry
	for _, c := range candidates {
		if c.Credential == nil || finalHop == nil || !finalHop(c.Site) {
			continue
		}
		cred := *c.Credential
		if seen[cred] {
			continue
		}
		seen[cred] = true
		ref := cred.SecretRef
		file := path.Join(mount, ref.Namespace, ref.Name, ref.Key)
		out = append(out, credentialEntry{Name: ref.Name, Namespace: ref.Namespace, Key: ref.Key, Strategy: cred.Strategy, File: file})
		reqs.add(PurposeBackendCredential, ref.Namespace, ref.Name, ref.Key, file)
	}
	slices.SortFunc(out, func(a, b credentialEntry) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name), cmp.Compare(a.Key, b.Key), cmp.Compare(a.Strategy, b.Strategy))
	})
	return out, len(out) > 0
}

// renderTelemetry is the root telemetry block; nil when not asked for.
func renderTelemetry(t *v1alpha1.GatewayTelemetry) (*telemetryBlock, error) {
	if t == nil {
		return nil, nil
	}
	if t.SamplingRate != nil && (*t.SamplingRate < 0 || *t.SamplingRate > 1) {
		return nil, fail(ReasonPraxisConfigRenderFailed, "telemetry.samplingRate must be between 0 and 1")
	}
	if t.BatchIntervalSecs != nil && (*t.BatchIntervalSecs < 1 || *t.BatchIntervalSecs > 300) {
		return nil, fail(ReasonPraxisConfigRenderFailed, "telemetry.batchIntervalSecs must be between 1 and 300")
	}
	if t.BatchSize != nil && (*t.BatchSize < 1 || *t.BatchSize > 65536) {
		return nil, fail(ReasonPraxisConfigRenderFailed, "telemetry.batchSize must be between 1 and 65536")
	}
	if e := t.OTLPEndpoint; e != "" {
		u, err := url.Parse(e)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
			// User info would put a collector credential in the ConfigMap.
			return nil, fail(ReasonPraxisConfigRenderFailed, "telemetry.otlpEndpoint must be http(s)://host[:port][/path] without credentials, query or fragment")
		}
	}
	for field, v := range map[string]string{"serviceName": t.ServiceName, "serviceVersion": t.ServiceVersion, "environment": t.Environment} {
		if v != "" && strings.TrimSpace(v) == "" {
			return nil, fail(ReasonPraxisConfigRenderFailed, "telemetry.%s must not be blank when set", field)
		}
	}
	return &telemetryBlock{
		OTLPEndpoint: t.OTLPEndpoint, SamplingRate: t.SamplingRate,
		ServiceName: t.ServiceName, ServiceVersion: t.ServiceVersion, Environment: t.Environment,
		BatchIntervalSecs: t.BatchIntervalSecs, BatchSize: t.BatchSize,
	}, nil
}

// cleanAbsolute: absolute, normalized, and not / or directly below it.
func cleanAbsolute(p string) bool {
	return strings.HasPrefix(p, "/") && path.Clean(p) == p && path.Dir(p) != "/" && p != "/"
}

// validKey is a Secret data key.
func validKey(k string) bool {
	if k == "" || k == "." || k == ".." || len(k) > 253 {
		return false
	}
	for _, r := range k {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.'
		if !ok {
			return false
		}
	}
	return true
}
