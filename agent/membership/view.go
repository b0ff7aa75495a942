package membership

import (
	"cmp"
	"slices"
	"sort"

	"github.com/gridsync/gridsync/controller/sites"
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
