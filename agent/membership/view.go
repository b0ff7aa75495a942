package membership

import (
	"cmp"
	"slices"
	"sort"
	"time"
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
	// GatewayAddress is its data-plane gateway, as it advertises it.
	GatewayAddress string
	// CertPEM is its public certificate, after the structural check:
	// empty when it sent none or one that failed it.
	CertPEM string
	// CertInvalid: the PEM it sent has no certificate in it
	// (TrustMaterialInvalid).
	CertInvalid bool
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
	// Sites are the remote sites that announced the network, by name.
	Sites []Site
	// Providers are their provider records, by site then name.
	Providers []RemoteProvider
	// Signals are their gossiped provider signals, by site.
	Signals []RemoteSignals
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

func sortView(v *NetworkView) {
	sort.Slice(v.Sites, func(i, j int) bool { return v.Sites[i].Name < v.Sites[j].Name })
	slices.SortFunc(v.Providers, func(a, b RemoteProvider) int {
		return cmp.Or(cmp.Compare(a.Site, b.Site), cmp.Compare(a.Name, b.Name))
	})
}

// Status is the runtime's state for the agent's /status.
type Status struct {
	Enabled        bool           `json:"enabled"`
	Running        bool           `json:"running"`
	KeyPending     bool           `json:"key_pending"`
	Encrypted      bool           `json:"encrypted"`
	KeysInstalled  int            `json:"keys_installed"`
	Site           string         `json:"site"`
	Generation     uint64         `json:"generation,omitempty"`
	GridID         string         `json:"grid_id,omitempty"`
	AdvertiseAddr  string         `json:"advertise_addr,omitempty"`
	GatewayAddress string         `json:"gateway_address,omitempty"`
	Members        []MemberStatus `json:"members"`
	Records        int            `json:"records"`
}

// MemberStatus is one remote site in /status.
type MemberStatus struct {
	Site       string    `json:"site"`
	Generation uint64    `json:"generation"`
	State      SiteState `json:"state"`
	Address    string    `json:"address"`
}
