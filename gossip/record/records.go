package record

import (
	"bytes"
	"cmp"
	"encoding/json"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/gridsync/gridsync/gossip/sites"
)

// Kind is what a record describes.
type Kind string

const (
	// KindSite is a site's gateway address and public certificate in one
	// network.
	KindSite Kind = "site"
	// KindProviders is the whole set of a site's providers in one
	// network: a removed provider is a new version of the set, so single
	// providers never need tombstones.
	KindProviders Kind = "providers"
	// KindSignals is a site's provider signals in one network
	// (signalTransport gossip): the samples ride membership.
	KindSignals Kind = "signals"
)

// Kinds are every kind of record.
var Kinds = []Kind{KindSite, KindProviders, KindSignals}

// Record is one site's state of one kind in one network, as gossiped.
// Only its site writes it; copies merge by Version, last writer wins.
type Record struct {
	Network string `json:"n"`
	Site    string `json:"s"`
	Kind    Kind   `json:"k"`
	// Version orders the writes of a record, and is the time it was
	// signed: the origin takes it from its wall clock (Unix nanoseconds,
	// never less than its last version plus one), so a restarted or newly
	// elected agent of the site writes above what the one before it
	// wrote. A receiver refuses one too far ahead of its own clock or
	// older than the tombstone lifetime, so the origin signs its records
	// again well within that lifetime.
	Version uint64 `json:"v"`
	// Deleted is a tombstone: the site left the network. It expires.
	Deleted bool `json:"d,omitempty"`

	// GatewayAddress and CertPEM are a KindSite record's: the site's
	// data-plane gateway and its public certificate (never a key).
	GatewayAddress string `json:"ga,omitempty"`
	CertPEM        string `json:"pem,omitempty"`
	// Region and Zone are a KindSite record's: where the site runs.
	Region string `json:"rg,omitempty"`
	Zone   string `json:"zn,omitempty"`
	// TrustBundle is a KindSite record's: the newest trust bundle of the
	// network its site holds, as the grid CA signed it. Every site passes
	// on what it holds, so an eviction reaches a site that was away when
	// it was made from whichever site it meets first; a receiver keeps a
	// bundle only when the grid CA's signature on it verifies.
	TrustBundle []byte `json:"tb,omitempty"`

	// Providers are a KindProviders record's.
	Providers []sites.Provider `json:"p,omitempty"`

	// Signals are a KindSignals record's.
	Signals []sites.Signal `json:"sg,omitempty"`

	// Grid is the grid ID the record was signed for.
	Grid string `json:"g,omitempty"`
	// Chain is the signing certificate (DER) and any intermediates, not
	// the grid CA; Sig the signature over signedBytes. In a network
	// without a grid CA, Chain is the site's Ed25519 public key alone and
	// Sig the signature over openSignedBytes, or both are empty (a site
	// that does not sign, as an upstream Grid site).
	Chain [][]byte `json:"x,omitempty"`
	Sig   []byte   `json:"z,omitempty"`
}

type Key struct {
	Network, Site string
	Kind          Kind
}

func (r *Record) Key() Key { return Key{r.Network, r.Site, r.Kind} }

// Newer reports whether a should replace b: the greater version wins; on
// equal versions (two writers with one clock reading, which only a
// misconfigured site can cause) the greater encoding does, so every
// replica picks the same one.
func Newer(a, b *Record) bool {
	if a.Version != b.Version {
		return a.Version > b.Version
	}
	ea, _ := json.Marshal(a)
	eb, _ := json.Marshal(b)
	return bytes.Compare(ea, eb) > 0
}

// Store holds every record this site knows, its own included: push/pull
// carries all of them, so a site learns of sites it never talked to.
type Store struct {
	mu        sync.Mutex
	records   map[Key]*Record
	deletedAt map[Key]time.Time // when a tombstone was first seen
	// bySite indexes the records per site and network, so that the
	// once-a-tick questions (which sites have records, in which
	// networks) do not walk every record.
	bySite map[string]map[string]int
	// netSites counts the sites with records in each network.
	netSites map[string]int
	// bytes is the approximate size of every record held.
	bytes int64
}

// Caps on what the store holds of other sites, sized from what a real
// grid needs: a network of a few hundred sites, a site in a few dozen
// networks, each record well under a megabyte. A peer that holds the
// SWIM key could otherwise make this agent hold whatever it invents (the
// first round saw 600,000 records and 860 MiB of heap from six messages).
// A record that would go past a cap is dropped before it is stored, and
// counted.
const (
	MaxSitesPerNetwork = 512
	MaxNetworksPerSite = 64 // three records each
	MaxRecords         = 16384
	MaxRecordBytes     = 64 << 20 // every record together, approximately
)

// Reasons a record was dropped for a cap (grid_swim_messages_dropped_total).
const (
	DropSiteOverCap    = "site_over_cap"
	DropNetworkFull    = "network_full"
	DropStoreFull      = "store_full"
	DropStoreBytesFull = "store_bytes_full"
)

var capReasons = []string{DropSiteOverCap, DropNetworkFull, DropStoreFull, DropStoreBytesFull}

func NewStore() *Store {
	return &Store{records: map[Key]*Record{}, deletedAt: map[Key]time.Time{},
		bySite: map[string]map[string]int{}, netSites: map[string]int{}}
}

// index counts k in (added) or out (removed); s.mu held.
func (s *Store) index(k Key, added bool) {
	nets := s.bySite[k.Site]
	if nets == nil {
		nets = map[string]int{}
		s.bySite[k.Site] = nets
	}
	if added {
		if nets[k.Network]++; nets[k.Network] == 1 {
			s.netSites[k.Network]++
		}
		return
	}
	if nets[k.Network]--; nets[k.Network] <= 0 {
		delete(nets, k.Network)
		s.unindexNetwork(k.Network)
	}
	if len(nets) == 0 {
		delete(s.bySite, k.Site)
	}
}

func (s *Store) unindexNetwork(network string) {
	if s.netSites[network]--; s.netSites[network] <= 0 {
		delete(s.netSites, network)
	}
}

// overCap says which cap storing r would break, or "" (s.mu held).
func (s *Store) overCap(r *Record, cur *Record) string {
	grow := MemorySize(r)
	if cur != nil {
		grow -= MemorySize(cur)
	}
	if s.bytes+grow > MaxRecordBytes {
		return DropStoreBytesFull
	}
	if cur != nil {
		return ""
	}
	if len(s.records) >= MaxRecords {
		return DropStoreFull
	}
	nets := s.bySite[r.Site]
	if nets[r.Network] == 0 {
		if len(nets) >= MaxNetworksPerSite {
			return DropSiteOverCap
		}
		if s.netSites[r.Network] >= MaxSitesPerNetwork {
			return DropNetworkFull
		}
	}
	return ""
}

// MemorySize approximates what a record holds in memory: its strings and
// a fixed cost per element.
func MemorySize(r *Record) int64 {
	n := 128 + len(r.Network) + len(r.Site) + len(r.GatewayAddress) + len(r.CertPEM) + len(r.Grid) + len(r.Sig) + len(r.TrustBundle)
	for _, der := range r.Chain {
		n += 24 + len(der)
	}
	for _, p := range r.Providers {
		n += 96 + len(p.Name) + len(p.Cluster) + len(p.Phase) + len(p.ProviderKind) + len(p.BackendKind) + len(p.Sites)
		for _, m := range p.Models {
			n += 16 + len(m)
		}
	}
	for _, sg := range r.Signals {
		n += 64 + len(sg.Provider) + len(sg.Metric)
		for k, v := range sg.Labels {
			n += 32 + len(k) + len(v)
		}
	}
	return int64(n)
}

// Merge keeps r when it is newer than the copy held, and says so. This
// site's own records are always kept.
func (s *Store) Merge(r Record, now time.Time) bool {
	changed, _ := s.MergeCapped(r, now, false)
	return changed
}

// MergeCapped is merge, refusing (with the cap's reason) a record that
// would take the store past a cap when capped.
func (s *Store) MergeCapped(r Record, now time.Time, capped bool) (changed bool, refused string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := r.Key()
	cur, ok := s.records[k]
	if ok && !Newer(&r, cur) {
		return false, ""
	}
	if capped {
		if why := s.overCap(&r, cur); why != "" {
			return false, why
		}
	}
	if !ok {
		s.index(k, true)
	} else {
		s.bytes -= MemorySize(cur)
	}
	s.bytes += MemorySize(&r)
	s.records[k] = &r
	if r.Deleted {
		s.deletedAt[k] = now
	} else {
		delete(s.deletedAt, k)
	}
	return true, ""
}

func (s *Store) Count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.records)
}

func (s *Store) Get(k Key) (Record, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.records[k]
	if !ok {
		return Record{}, false
	}
	return *r, true
}

// All returns every record, tombstones included, in a stable order.
func (s *Store) All() []Record {
	s.mu.Lock()
	out := make([]Record, 0, len(s.records))
	for _, r := range s.records {
		out = append(out, *r)
	}
	s.mu.Unlock()
	sortRecords(out)
	return out
}

// compareKeys orders records and digests by network, site and kind.
func compareKeys(a, b Key) int {
	return cmp.Or(cmp.Compare(a.Network, b.Network), cmp.Compare(a.Site, b.Site), cmp.Compare(a.Kind, b.Kind))
}

func sortRecords(rs []Record) {
	slices.SortFunc(rs, func(a, b Record) int { return compareKeys(a.Key(), b.Key()) })
}

// DigestEntry is a record's identity and version: what push/pull sends
// instead of the records themselves, so that an idle grid exchanges a few
// bytes per record.
type DigestEntry struct {
	Network string `json:"n"`
	Site    string `json:"s"`
	Kind    Kind   `json:"k"`
	Version uint64 `json:"v"`
}

func (s *Store) Digest() []DigestEntry {
	s.mu.Lock()
	out := make([]DigestEntry, 0, len(s.records))
	for _, r := range s.records {
		out = append(out, DigestEntry{r.Network, r.Site, r.Kind, r.Version})
	}
	s.mu.Unlock()
	slices.SortFunc(out, func(a, b DigestEntry) int {
		return compareKeys(Key{a.Network, a.Site, a.Kind}, Key{b.Network, b.Site, b.Kind})
	})
	return out
}

// MissingFrom returns the records of the given networks that a peer with
// digest d lacks or holds an older version of.
func (s *Store) MissingFrom(d []DigestEntry, networks []string) []Record {
	theirs := make(map[Key]uint64, len(d))
	for _, e := range d {
		theirs[Key{e.Network, e.Site, e.Kind}] = e.Version
	}
	wanted := make(map[string]bool, len(networks))
	for _, n := range networks {
		wanted[n] = true
	}
	s.mu.Lock()
	var out []Record
	for k, r := range s.records {
		if !wanted[k.Network] {
			continue
		}
		if v, ok := theirs[k]; !ok || v < r.Version {
			out = append(out, *r)
		}
	}
	s.mu.Unlock()
	sortRecords(out)
	return out
}

// Expire drops tombstones older than ttl.
func (s *Store) Expire(now time.Time, ttl time.Duration) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for k, at := range s.deletedAt {
		// Kept until what it withdrew is too old to be taken again
		// anywhere (a receiver refuses a record written longer than the
		// lifetime ago; clocks may differ by MaxClockSkew), so that a
		// replay of it cannot bring it back.
		if r := s.records[k]; r != nil && now.Sub(time.Unix(0, int64(min(r.Version, uint64(1<<63-1))))) < ttl+MaxClockSkew {
			continue
		}
		if now.Sub(at) >= ttl {
			if r := s.records[k]; r != nil {
				s.bytes -= MemorySize(r)
			}
			delete(s.records, k)
			delete(s.deletedAt, k)
			s.index(k, false)
			n++
		}
	}
	return n
}

// Remove forgets one record.
func (s *Store) Remove(k Key) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.records[k]
	if !ok {
		return
	}
	s.bytes -= MemorySize(r)
	delete(s.records, k)
	delete(s.deletedAt, k)
	s.index(k, false)
}

// DropSite forgets every record of a site, and returns the networks it
// had records in.
func (s *Store) DropSite(site string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var networks []string
	for network := range s.bySite[site] {
		networks = append(networks, network)
		for _, kind := range Kinds {
			k := Key{network, site, kind}
			if r := s.records[k]; r != nil {
				s.bytes -= MemorySize(r)
			}
			delete(s.records, k)
			delete(s.deletedAt, k)
		}
		s.unindexNetwork(network)
	}
	delete(s.bySite, site)
	sort.Strings(networks)
	return networks
}

// SiteNames returns the sites that have records.
func (s *Store) SiteNames() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.bySite))
	for site := range s.bySite {
		out = append(out, site)
	}
	return out
}

// NetworksOf returns the networks a site has records in.
func (s *Store) NetworksOf(site string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.bySite[site]))
	for n := range s.bySite[site] {
		out = append(out, n)
	}
	return out
}

// HoldsSite reports whether records of a site are held in a network: the
// site got past the checks before.
func (s *Store) HoldsSite(network, site string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bySite[site][network] > 0
}

// OfSite returns the records of one site.
func (s *Store) OfSite(site string) []Record {
	s.mu.Lock()
	var out []Record
	for network := range s.bySite[site] {
		for _, kind := range Kinds {
			if r, ok := s.records[Key{network, site, kind}]; ok {
				out = append(out, *r)
			}
		}
	}
	s.mu.Unlock()
	sortRecords(out)
	return out
}

// OfNetwork returns the records of one network.
func (s *Store) OfNetwork(network string) []Record {
	s.mu.Lock()
	var out []Record
	for site, nets := range s.bySite {
		if nets[network] == 0 {
			continue
		}
		for _, kind := range Kinds {
			if r, ok := s.records[Key{network, site, kind}]; ok {
				out = append(out, *r)
			}
		}
	}
	s.mu.Unlock()
	sortRecords(out)
	return out
}

// VersionClock issues record versions: wall-clock nanoseconds, never less
// than the last one plus one.
type VersionClock struct {
	mu   sync.Mutex
	last uint64
	Now  func() time.Time
}

func (c *VersionClock) Next() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	v := uint64(c.Now().UnixNano())
	if v <= c.last {
		v = c.last + 1
	}
	c.last = v
	return v
}
