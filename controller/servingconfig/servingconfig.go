// Package servingconfig renders the serving config of upstream's embedded
// grid-gateway: serving-config.json in the ConfigMap
// grid-serving-<network>-<gateway>, which that gateway watches (every few
// seconds, GRID_SERVING_CONFIG) beside its startup praxis.yaml. It holds
// the gateway's changing candidate list (the same candidates, in the same
// order and with the same admission states as the gateway's overlay), the
// one peer it polls for live load (this site's agent, at its signals
// listener: the gateway polls nobody else and checks that agent's SPIFFE
// ID; pins are for the agent's own polls of other sites), and the
// provider-hop allowlist (GatewayRef.providerHopEndpoints). It is pure.
package servingconfig

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"path"
	"strings"
	"time"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/shared/envelope"
)

// DataKey is the ConfigMap key of the document.
const DataKey = "serving-config.json"

// DefaultTLSMountPath is where the gateway chart mounts the grid CA
// (ca.crt) and the site identity (tls.crt, tls.key) its pollers read.
const DefaultTLSMountPath = "/etc/praxis/tls"

// Defaults of the gateway's view of load: how long a series is kept, how
// fresh a sample must be to order by it, and how often it polls.
const (
	WindowSeconds = 60
	LoadWindow    = 30 * time.Second
	PollInterval  = 2 * time.Second
	PollTimeout   = 2 * time.Second
)

// SignalsPath is where the agent serves signals.
const SignalsPath = "/v1/site/signals"

// ConfigMapName is the serving ConfigMap of a gateway:
// grid-serving-<network>-<gateway>, cut and hashed like the overlay's
// when that exceeds an object name.
func ConfigMapName(network, gateway string) string {
	return "grid-serving-" + strings.TrimPrefix(envelope.ConfigMapName(network, gateway), "grid-overlay-")
}

// Input is what one gateway's serving config is made of.
type Input struct {
	LocalSite string
	// Candidates are the gateway's overlay candidates, in order.
	Candidates []envelope.Candidate
	// AgentAddress is this site's agent signals listener as the gateway
	// dials it (host:port); ServerName the name its certificate carries
	// (the site's DNS name).
	AgentAddress, ServerName string
	// TLSMountPath holds ca.crt, tls.crt and tls.key in the gateway.
	TLSMountPath string
	// HopEndpoints are the gateway's providerHopEndpoints.
	HopEndpoints []v1alpha1.ClusterEndpoint
}

// document is serving-config.json, keys in the gateway's order.
type document struct {
	LocalSite    string        `json:"local_site"`
	WindowSecs   int           `json:"window_secs"`
	LoadWindowMS int64         `json:"load_window_ms"`
	Candidates   []candidate   `json:"candidates"`
	Peers        []peer        `json:"peers"`
	ProviderHops []providerHop `json:"provider_hop_endpoints,omitempty"`
}

type candidate struct {
	Kind           string `json:"kind"`
	Name           string `json:"name"`
	Site           string `json:"site"`
	Cluster        string `json:"cluster"`
	StableID       string `json:"stable_id,omitempty"`
	AdmissionState string `json:"admission_state,omitempty"`
}

type peer struct {
	Site             string `json:"site"`
	Addr             string `json:"addr"`
	ServerName       string `json:"server_name"`
	Authority        string `json:"authority"`
	Path             string `json:"path"`
	IntervalMS       int64  `json:"interval_ms"`
	ConnectTimeoutMS int64  `json:"connect_timeout_ms"`
	RequestTimeoutMS int64  `json:"request_timeout_ms"`
	GridCAPath       string `json:"grid_ca_path"`
	ClientCertPath   string `json:"client_cert_path"`
	ClientKeyPath    string `json:"client_key_path"`
}

type providerHop struct {
	Cluster    string `json:"cluster"`
	Address    string `json:"address"`
	ServerName string `json:"server_name"`
}

// Render renders serving-config.json: the same input gives the same
// bytes. It refuses what the gateway would refuse (or could not use).
func Render(in Input) ([]byte, error) {
	if in.LocalSite == "" {
		return nil, errors.New("the gateway has no site")
	}
	if _, _, err := net.SplitHostPort(in.AgentAddress); err != nil || in.AgentAddress == "" {
		return nil, fmt.Errorf("no signals address of this site's agent to poll (%q): set gridServing.signalsAddress, or run the agent with a signals Service", in.AgentAddress)
	}
	mount := in.TLSMountPath
	if mount == "" {
		mount = DefaultTLSMountPath
	}
	if !path.IsAbs(mount) || path.Clean(mount) != mount {
		return nil, fmt.Errorf("gridServing.tlsMountPath %q is not an absolute, normalized path", mount)
	}
	doc := document{
		LocalSite: in.LocalSite, WindowSecs: WindowSeconds, LoadWindowMS: LoadWindow.Milliseconds(),
		Candidates: make([]candidate, 0, len(in.Candidates)),
		Peers: []peer{{
			Site: in.LocalSite, Addr: in.AgentAddress, ServerName: in.ServerName, Authority: in.ServerName, Path: SignalsPath,
			IntervalMS: PollInterval.Milliseconds(), ConnectTimeoutMS: PollTimeout.Milliseconds(), RequestTimeoutMS: PollTimeout.Milliseconds(),
			GridCAPath: path.Join(mount, "ca.crt"), ClientCertPath: path.Join(mount, "tls.crt"), ClientKeyPath: path.Join(mount, "tls.key"),
		}},
	}
	for _, c := range in.Candidates {
		doc.Candidates = append(doc.Candidates, candidate{Kind: c.Kind, Name: c.Name, Site: c.Site, Cluster: c.Cluster,
			StableID: c.StableID, AdmissionState: c.AdmissionState})
	}
	for _, e := range in.HopEndpoints {
		// The schema holds every entry to mutual_tls with a nonblank SNI;
		// checked again so that a config is never rendered without them.
		if e.Transport == nil || e.Transport.Mode != "mutual_tls" || e.Transport.SNI == nil || strings.TrimSpace(*e.Transport.SNI) == "" {
			return nil, fmt.Errorf("providerHopEndpoints %s: needs transport.mode mutual_tls and a nonblank sni", e.Cluster)
		}
		doc.ProviderHops = append(doc.ProviderHops, providerHop{Cluster: e.Cluster, Address: e.Address, ServerName: *e.Transport.SNI})
	}
	return encode(doc)
}

// encode writes a document as indented JSON without a final newline.
func encode(doc document) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(doc); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// Withdrawn is a rendered document with no candidate: what a gateway that
// left its network gets, so that it routes nowhere rather than keep the
// last list. A document that does not parse is returned as it was.
func Withdrawn(doc []byte) []byte {
	var d document
	if json.Unmarshal(doc, &d) != nil {
		return doc
	}
	d.Candidates = []candidate{}
	out, err := encode(d)
	if err != nil {
		return doc
	}
	return out
}
