package gossip

import (
	"cmp"
	"slices"
	"sort"

	"github.com/gridsync/gridsync/gossip/record"
	"github.com/gridsync/gridsync/gossip/sites"
	"github.com/gridsync/gridsync/trust/bundle"
)

func sortView(v *sites.NetworkView) {
	sort.Slice(v.Sites, func(i, j int) bool { return v.Sites[i].Name < v.Sites[j].Name })
	slices.SortFunc(v.Providers, func(a, b sites.RemoteProvider) int {
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
	Site       string          `json:"site"`
	Generation uint64          `json:"generation"`
	State      sites.SiteState `json:"state"`
	Address    string          `json:"address"`
}

// View is what membership knows of a network: the remote sites that
// announced it, their states and their provider records.
func (r *Runtime) View(network string) sites.NetworkView {
	r.mu.Lock()
	_, released := r.releasedLocked()
	v := sites.NetworkView{Enabled: true, Running: r.ml != nil, KeyPending: r.leading && !released, Encrypted: r.ml != nil && r.encrypted, GridID: r.grid.ID}
	members := make(map[string]member, len(r.members))
	for s, m := range r.members {
		members[s] = *m
		// An evicted site still answering from before its eviction is
		// no peer of this site's.
		if m.state == sites.SiteAlive && r.ml != nil && !r.evictedEverywhereLocked(s) {
			v.AlivePeers++
		}
	}
	departed := make([]string, 0, len(r.departed[network]))
	for s := range r.departed[network] {
		departed = append(departed, s)
	}
	r.mu.Unlock()
	known := map[string]*sites.Site{}
	for _, name := range departed {
		s := &sites.Site{Name: name, State: sites.SiteDead}
		if m, ok := members[name]; ok {
			s.Generation, s.State, s.Since, s.SwimAddress = m.generation, m.state, m.since, m.addr
		}
		known[name] = s
	}
	for _, rec := range r.store.OfNetwork(network) {
		if rec.Site == r.cfg.Site || rec.Deleted {
			continue
		}
		s := known[rec.Site]
		if s == nil {
			s = &sites.Site{Name: rec.Site, State: sites.SiteUnknown}
			if m, ok := members[rec.Site]; ok {
				s.Generation, s.State, s.Since, s.SwimAddress = m.generation, m.state, m.since, m.addr
			}
			known[rec.Site] = s
		}
		switch rec.Kind {
		case record.KindSite:
			s.Region, s.Zone = rec.Region, rec.Zone
			// What a site advertises is an endpoint only when it reads
			// one way; otherwise it is noted, and never dialled.
			s.GatewayAddress, s.GatewayGeneration = "", rec.Version
			if rec.GatewayAddress != "" {
				if ep, err := sites.ParseGatewayAddress(rec.GatewayAddress); err == nil {
					s.GatewayAddress = ep.Address()
				} else {
					s.GatewayInvalid = true
				}
			}
			s.TrustBundleVersion = bundle.VersionOf(rec.TrustBundle)
			switch record.ClassifyPEM(rec.CertPEM) {
			case record.CertValid:
				s.CertPEM = rec.CertPEM
			case record.CertInvalid:
				s.CertInvalid = true
			}
		case record.KindProviders:
			s.Inference = len(rec.Providers) > 0
			for _, p := range rec.Providers {
				v.Providers = append(v.Providers, sites.RemoteProvider{Site: rec.Site, Provider: p})
			}
		case record.KindSignals:
			if len(rec.Signals) > 0 {
				v.Signals = append(v.Signals, sites.RemoteSignals{Site: rec.Site, Version: rec.Version, Signals: rec.Signals})
			}
		}
	}
	for _, s := range known {
		v.Sites = append(v.Sites, *s)
	}
	if t := r.trustOf(network); t != nil && t.Open && t.Keys != nil {
		v.OpenKeys, v.SiteKeys = true, t.Keys.List()
	}
	for i := range v.Providers {
		v.Providers[i].Stale = known[v.Providers[i].Site].State != sites.SiteAlive
	}
	sortView(&v)
	return v
}
