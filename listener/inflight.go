package listener

import (
	"net"
	"net/netip"
	"sync"
)

// InFlightLimits cap the TCP handshakes under way at once: a half-open
// connection holds a socket, a goroutine and a TLS state until the
// handshake timeout, and the rate buckets alone let a few hundred
// addresses hold thousands (the first round held 8,000 from 200
// addresses in 1.8 s, and ran the agent out of descriptors).
type InFlightLimits struct {
	Total      int
	PerAddress int
	// PerPrefix bounds an IPv4 /24 or an IPv6 /64 (a node's pods, one
	// host's addresses).
	PerPrefix int
}

// DefaultInFlightLimits leave room for a node's pods reconnecting
// together (their handshakes take milliseconds; a refused one retries)
// and hold a flood to half of a 1,024-descriptor limit.
func DefaultInFlightLimits() InFlightLimits {
	return InFlightLimits{Total: 512, PerAddress: 16, PerPrefix: 256}
}

// Refusals of the in-flight caps (metric outcomes).
const (
	inFlightTotal   = "inflight_total"
	inFlightAddress = "inflight_address"
	inFlightPrefix  = "inflight_prefix"
)

type inFlight struct {
	lim InFlightLimits

	mu    sync.Mutex
	total int
	by    map[netip.Prefix]int
}

func newInFlight(lim InFlightLimits) *inFlight {
	return &inFlight{lim: lim, by: map[netip.Prefix]int{}}
}

// sourceKeys are the address itself and its /24 (IPv4) or /64 (IPv6).
func sourceKeys(addr netip.Addr) (self, block netip.Prefix) {
	addr = addr.Unmap()
	self = netip.PrefixFrom(addr, addr.BitLen())
	bits := 64
	if addr.Is4() {
		bits = 24
	}
	block, _ = addr.Prefix(bits)
	return self, block
}

// acquire takes a place for a handshake from remote, or says which cap
// refused it. release gives the place back.
func (f *inFlight) acquire(remote net.Addr) (release func(), refused string) {
	addr, ok := addrOf(remote)
	if !ok {
		return nil, inFlightAddress
	}
	self, block := sourceKeys(addr)
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case f.total >= f.lim.Total:
		return nil, inFlightTotal
	case f.by[self] >= f.lim.PerAddress:
		return nil, inFlightAddress
	case f.by[block] >= f.lim.PerPrefix:
		return nil, inFlightPrefix
	}
	f.total++
	f.by[self]++
	f.by[block]++
	var once sync.Once
	return func() {
		once.Do(func() {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.total--
			for _, k := range []netip.Prefix{self, block} {
				if f.by[k]--; f.by[k] <= 0 {
					delete(f.by, k)
				}
			}
		})
	}, ""
}
