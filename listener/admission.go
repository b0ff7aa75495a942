package listener

import (
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// ConnectionCaps cap the connections of named callers.
type ConnectionCaps struct {
	// Max bounds all gateway and peer connections together.
	Max int
	// ReservedForGateway of those the peers together never take: the
	// co-located gateway can always connect.
	ReservedForGateway int
	// PerSite bounds one peer site's connections.
	PerSite int
	// MaxAnonymous bounds connections without a site, on their own: they
	// are admitted only when some routes are open to them (see
	// Options.AnonymousPaths), else closed right after the handshake.
	MaxAnonymous int
	// MaxAnonymousPerAddress and MaxAnonymousPerPrefix are one source
	// address's and one IPv4 /24's or IPv6 /64's share of them: a pod
	// holds one, a node's pods share a block, and one flooding source
	// cannot take the slots of every other.
	MaxAnonymousPerAddress int
	MaxAnonymousPerPrefix  int
}

// DefaultConnectionCaps: a site needs a handful of connections, the
// gateway a few, and every gateway pod's sidecar one for its reports.
func DefaultConnectionCaps() ConnectionCaps {
	return ConnectionCaps{Max: 256, ReservedForGateway: 8, PerSite: 16, MaxAnonymous: 4096, MaxAnonymousPerAddress: 8, MaxAnonymousPerPrefix: 512}
}

// Outcomes of admission, a closed set (metric label).
const (
	admitted        = "admitted"
	overSiteCap     = "over_site_cap"
	overPeerCap     = "over_peer_cap"
	overTotalCap    = "over_total_cap"
	refusedUnnamed  = "closed_unnamed"
	refusedReissued = "closed_reissued_leaf"
	refusedEvicted  = "closed_evicted"
	refusedFull     = "closed_anonymous_full"
	refusedAddrFull = "closed_anonymous_address_full"
	refusedPrefFull = "closed_anonymous_prefix_full"
)

// counts are the connections held in one epoch: the caps start over when
// the TLS material reloads, so a rotation opens a fresh set and the old
// connections release into the set they were counted in.
type counts struct {
	total, peers, anonymous int
	perSite                 map[string]int
	anonymousBy             map[netip.Prefix]int // by address and by block
}

func newCounts() *counts {
	return &counts{perSite: map[string]int{}, anonymousBy: map[netip.Prefix]int{}}
}

// ticket is one admitted (or answered-with-503) connection.
type ticket struct {
	caller Caller
	// over is the cap it is past; such a connection is answered 503 and
	// closed, and not counted.
	over    string
	epoch   *counts
	counted bool

	// self and block are an anonymous caller's address and its block.
	self, block netip.Prefix

	transport string
	closeFn   func()
	closeOnce sync.Once
	ageTimer  *time.Timer
	// idleTimer closes an anonymous connection that carries no request;
	// active counts the requests it carries.
	idleTimer *time.Timer
	active    atomic.Int32
}

// begin counts a request of an anonymous connection, or refuses it past
// the per-connection limit.
func (t *ticket) begin() bool {
	if t.active.Add(1) > anonymousStreams {
		t.active.Add(-1)
		return false
	}
	t.idleTimer.Stop()
	return true
}

// end counts a request out; the last one starts the idle clock.
func (t *ticket) end(idle time.Duration) {
	if t.active.Add(-1) == 0 {
		t.idleTimer.Reset(idle)
	}
}

type admission struct {
	caps ConnectionCaps

	mu    sync.Mutex
	epoch *counts
}

func newAdmission(caps ConnectionCaps) *admission {
	return &admission{caps: caps, epoch: newCounts()}
}

// admit decides on a named (or anonymous) caller. It returns the ticket
// and the outcome; a nil ticket means close the connection now.
func (a *admission) admit(c Caller, anonymousAllowed bool, addr netip.Addr) (*ticket, string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	e := a.epoch
	t := &ticket{caller: c, epoch: e}
	peerRoom := a.caps.Max - a.caps.ReservedForGateway
	switch c.Kind {
	case Gateway:
		if e.total >= a.caps.Max {
			t.over = overTotalCap
			return t, t.over
		}
		e.total++
	case Site:
		switch {
		case e.perSite[c.Site] >= a.caps.PerSite:
			t.over = overSiteCap
			return t, t.over
		case e.peers >= peerRoom:
			t.over = overPeerCap
			return t, t.over
		}
		e.total++
		e.peers++
		e.perSite[c.Site]++
	default:
		if !anonymousAllowed {
			return nil, refusedUnnamed
		}
		self, block := sourceKeys(addr)
		switch {
		case e.anonymous >= a.caps.MaxAnonymous:
			return nil, refusedFull
		case a.caps.MaxAnonymousPerAddress > 0 && e.anonymousBy[self] >= a.caps.MaxAnonymousPerAddress:
			return nil, refusedAddrFull
		case a.caps.MaxAnonymousPerPrefix > 0 && e.anonymousBy[block] >= a.caps.MaxAnonymousPerPrefix:
			return nil, refusedPrefFull
		}
		e.anonymous++
		e.anonymousBy[self]++
		e.anonymousBy[block]++
		t.self, t.block = self, block
	}
	t.counted = true
	return t, admitted
}

// release gives a counted connection's place back to its epoch.
func (a *admission) release(t *ticket) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !t.counted {
		return
	}
	t.counted = false
	e := t.epoch
	switch t.caller.Kind {
	case Gateway:
		e.total--
	case Site:
		e.total--
		e.peers--
		if e.perSite[t.caller.Site]--; e.perSite[t.caller.Site] <= 0 {
			delete(e.perSite, t.caller.Site)
		}
	default:
		e.anonymous--
		for _, k := range []netip.Prefix{t.self, t.block} {
			if e.anonymousBy[k]--; e.anonymousBy[k] <= 0 {
				delete(e.anonymousBy, k)
			}
		}
	}
}

// reset opens a new epoch: every cap starts over.
func (a *admission) reset() {
	a.mu.Lock()
	a.epoch = newCounts()
	a.mu.Unlock()
}
