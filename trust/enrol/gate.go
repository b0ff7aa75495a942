package enrol

import (
	"net"
	"net/netip"
	"sync"
)

// addressGate lets one request at a time through per source: an IPv4
// address, or an IPv6 /64 (one host holds a whole /64). It holds only the
// sources with a request under way, so it is bounded by the connections
// the listener admits.
type addressGate struct {
	mu   sync.Mutex
	busy map[netip.Prefix]bool
}

// sourceOf is the source remote (host:port, as http.Request.RemoteAddr)
// is counted under; ok is false when it names no address.
func sourceOf(remote string) (netip.Prefix, bool) {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		host = remote
	}
	addr, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Prefix{}, false
	}
	addr = addr.Unmap().WithZone("")
	bits := 32
	if addr.Is6() {
		bits = 64
	}
	p, _ := addr.Prefix(bits)
	return p, true
}

// enter takes the place of remote's source, or reports false while
// another request of that source holds it (or when remote names no
// address). release gives it back, once.
func (g *addressGate) enter(remote string) (release func(), ok bool) {
	src, ok := sourceOf(remote)
	if !ok {
		return nil, false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.busy[src] {
		return nil, false
	}
	if g.busy == nil {
		g.busy = map[netip.Prefix]bool{}
	}
	g.busy[src] = true
	var once sync.Once
	return func() {
		once.Do(func() {
			g.mu.Lock()
			delete(g.busy, src)
			g.mu.Unlock()
		})
	}, true
}
