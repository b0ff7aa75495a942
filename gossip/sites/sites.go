// Package sites is what the control plane knows of the other sites of its
// networks and what it announces to them, in the control plane's own
// terms. The agent's membership layer (SWIM over memberlist) fills and
// carries these values; the controller reads and writes them through the
// small interface it declares, so that neither the controller nor its
// tests depend on how sites gossip.
package sites

import (
	"crypto/ed25519"
	"crypto/tls"
	"crypto/x509"
	"time"

	"github.com/gridsync/gridsync/gossip/seeds"
)

// SiteState is a remote site's membership state, as this site sees it.
type SiteState string

const (
	SiteAlive   SiteState = "Alive"
	SiteSuspect SiteState = "Suspect"
	// SiteDead: suspect for the whole suspicion window, or declared dead
	// by membership.
	SiteDead SiteState = "Dead"
	// SiteLeft: the site left membership on purpose (its agent stopped or
	// lost its lease).
	SiteLeft SiteState = "Left"
	// SiteUnknown: records of the site arrived (through another site)
	// before its membership did.
	SiteUnknown SiteState = "Unknown"
)

// Site is a remote site of a network.
type Site struct {
	Name       string
	Generation uint64
	State      SiteState
	// Since is when the site entered State.
	Since time.Time
	// SwimAddress is where its agent gossips.
	SwimAddress string
	// GatewayAddress is its data-plane gateway as it advertises it, in
	// the one spelling of ParseGatewayAddress: empty when it advertises
	// none, or one that does not read one way (GatewayInvalid).
	GatewayAddress string
	// GatewayInvalid: the address it advertises is ambiguous or
	// malformed, so it is no endpoint.
	GatewayInvalid bool
	// GatewayGeneration is the version of the signed record that
	// advertised (or withdrew) the address: a newer advertisement has a
	// greater one.
	GatewayGeneration uint64
	// CertPEM is its public certificate, after the structural check:
	// empty when it sent none or one that failed it.
	CertPEM string
	// CertInvalid: the PEM it sent has no certificate in it
	// (TrustMaterialInvalid).
	CertInvalid bool
	// Region and Zone are where it runs, as it signed them.
	Region, Zone string
	// Inference: it offers providers in the network.
	Inference bool
	// TrustBundleVersion is the version of the network's trust bundle the
	// site passes on (0: none), as it signed its record: it holds the
	// grid CAs that bundle names.
	TrustBundleVersion uint64
}

// RemoteProvider is a provider record of another site.
type RemoteProvider struct {
	Site string
	Provider
	// Stale: its site is not alive, so the record may be out of date
	// (rendered as not fresh once the site is trusted); it is dropped when
	// the site stays away for the stale TTL.
	Stale bool
}

// NetworkView is what membership knows of one network.
type NetworkView struct {
	// Enabled: this agent runs SWIM (a bind address is configured).
	Enabled bool
	// Running: this replica is the site's member now (it leads, and no
	// key hold is in force).
	Running bool
	// KeyPending: SWIM holds every send and receive until a key loads.
	KeyPending bool
	// Encrypted: SWIM runs now with a key, so what gossip says (the
	// addresses among it) was sent by a holder of a network's key and
	// reached here unaltered.
	Encrypted bool
	// Sites are the remote sites that announced the network, by name.
	Sites []Site
	// Providers are their provider records, by site then name.
	Providers []RemoteProvider
	// Signals are their gossiped provider signals, by site.
	Signals []RemoteSignals
	// GridID is the grid this site belongs to ("" until negotiated).
	GridID string
	// OpenKeys: the network is open here (it has no grid CA), and
	// SiteKeys are the keys its remote sites are held to, by site.
	OpenKeys bool
	SiteKeys []SiteKey
	// AlivePeers counts every other site membership holds alive,
	// whichever networks it announced (the reference's connectedSites).
	AlivePeers int
}

// NetworkSettings is what a network's spec asks of membership.
type NetworkSettings struct {
	// GridID pins the grid ID (spec.gridId); "" negotiates it.
	GridID string
	// Region and Zone are where this site runs, signed into its records.
	Region, Zone string
	// Swim are the network's timings; zero fields keep the agent's.
	Swim SwimTimings
}

// SwimTimings are membership timings a network asks for.
type SwimTimings struct {
	ProbeInterval, SuspicionTimeout time.Duration
	GossipNodes                     int
}

// RemoteSignals are one site's gossiped signals in a network.
type RemoteSignals struct {
	Site string
	// Version is the record's: a new one replaces the samples.
	Version uint64
	Signals []Signal
}

// Connected counts the alive sites.
func (v NetworkView) Connected() int {
	n := 0
	for _, s := range v.Sites {
		if s.State == SiteAlive {
			n++
		}
	}
	return n
}

// Signal is one sample of a site's provider signals, as gossiped: its age
// when the record was written rather than a time, so that no clock of
// another site is read.
type Signal struct {
	Provider string            `json:"p"`
	Metric   string            `json:"m"`
	Labels   map[string]string `json:"l,omitempty"`
	Value    float64           `json:"v"`
	AgeMs    int64             `json:"a"`
}

// Provider is what a remote site needs of one InferenceProvider to render
// it as a candidate once the site is trusted.
type Provider struct {
	Name    string   `json:"name"`
	Models  []string `json:"models"`
	Cluster string   `json:"cluster,omitempty"`
	// Phase is the provider's phase at its own site.
	Phase        string `json:"phase"`
	ProviderKind string `json:"providerKind,omitempty"`
	BackendKind  string `json:"backendKind,omitempty"`
	// Sites is the provider's access policy as a label selector over
	// grid.praxis.fast/site; empty admits every site.
	Sites string `json:"sites,omitempty"`
	// Credentialed: the final hop adds a credential (held at the
	// provider's site only).
	Credentialed bool `json:"credentialed,omitempty"`
	// Drained: its owner asked for no new sessions (trafficPolicy.drain).
	Drained bool `json:"drained,omitempty"`
	// Load names the normalised load series its site publishes for it
	// (grid_provider_queue_depth_ratio, …): a peer reads a missing one as
	// a failed scrape, not as a provider that measures nothing.
	Load []string `json:"load,omitempty"`
	// Weight is its placementPolicy.capacityWeight (0: unset). A reader
	// holds it within the schema's bounds: a site's word on its own
	// capacity reaches no further.
	Weight int32 `json:"weight,omitempty"`
}

// SeedResult is what announcing a network's seeds did.
type SeedResult struct {
	// Joined are addresses joined now; addresses of sites already alive
	// are not joined again.
	Joined []string
	// Failed are addresses that could not be joined, with why.
	Failed []seeds.Problem
	// Pending are addresses whose join is still running: its outcome is
	// in a later result, and the networks are told when it changes.
	Pending []string
	// Conflict: a seed belongs to another grid.
	Conflict bool
	// Seeds are the network's seed addresses the runtime now keeps (this
	// site's own removed): those announced, or for a rejoin the set last
	// announced (none: the network runs without seeds).
	Seeds []string
}

// Identity is how a network's records are signed and checked: every
// record a site gossips in a network with a grid CA is signed with that
// site's certificate key, and kept by the others only when the signature
// verifies against a certificate that chains to the grid CA and names the
// record's site.
type Identity struct {
	// Open: the network declares no grid CA (spec.tls.caSecretRef or
	// caConfigMapRef). No certificate vouches for its records: the SWIM
	// key authenticates them, and no site of it can become trusted (trust
	// needs the grid CA). Each site signs its records there with a key of
	// its own (RecordKey), and every other site holds a site's records to
	// the first key that signed them (trust on first use).
	Open bool
	// RecordKey is this site's key for the records of an open network,
	// the same in every open network and kept across restarts (a new key
	// is refused by every site that holds the old one). Nil: this site's
	// records there go unsigned, as an upstream Grid site's do.
	RecordKey ed25519.PrivateKey
	// SiteKeys are the keys the other sites of an open network were
	// held to before (kept in the network's status): a site the runtime
	// holds no key for yet is held to the one given here.
	SiteKeys []SiteKey
	// Roots are the grid CA's certificates. Nil in a network that is not
	// Open: the CA it declares did not load, and every record of another
	// site is refused until it does.
	Roots *x509.CertPool
	// RootCerts are the certificates Roots holds: a record's chain must
	// name one of them by key identifier before any of its signatures is
	// checked.
	RootCerts []*x509.Certificate
	// Signer is this site's certificate chain and key (tls.crt and tls.key
	// of the site Secret). Nil in a network that is not Open: nothing of
	// this site is announced there until the site has a certificate.
	Signer *tls.Certificate
}

// SiteKey is the key a site's records are held to in an open network.
type SiteKey struct {
	Site string
	// Fingerprint is the SHA-256 of the site's Ed25519 public key,
	// lowercase hex.
	Fingerprint string
	// Since is when it was bound: the first record signed with it was
	// kept.
	Since time.Time
}
