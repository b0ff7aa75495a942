package listener

import (
	"net"
	"net/netip"
	"sync"
	"time"
)

// Bucket is a token bucket: Burst handshakes at once, refilled at Rate
// per second. A zero Rate turns the bucket off.
type Bucket struct {
	Rate  float64
	Burst int
}

// HandshakeLimits cap handshakes before the caller is known, when the
// source address is all there is. Token buckets rather than windows: a
// burst of reconnects after a restart passes, a sustained flood is held
// to the rate, and nothing resets at a window edge.
type HandshakeLimits struct {
	// PerAddress applies to every source address.
	PerAddress Bucket
	// PerPrefix64 and PerPrefix48 apply to the /64 and /48 of a global
	// IPv6 source: one host holds a whole /64, so a per-address cap alone
	// would not hold it.
	PerPrefix64 Bucket
	PerPrefix48 Bucket
	// IPv4PrefixBits, when set (8 to 31), also groups IPv4 sources by
	// that prefix under the PerPrefix64 budget: for callers that hold many
	// IPv4 addresses of one block. Off by default.
	IPv4PrefixBits int
	// MaxTracked bounds the buckets held; past it a new source is refused
	// until idle buckets are swept.
	MaxTracked int
}

// DefaultHandshakeLimits are generous for peers (a few connections per
// site, reconnecting every five minutes at most) and tight for a flood.
func DefaultHandshakeLimits() HandshakeLimits {
	return HandshakeLimits{
		PerAddress:  Bucket{Rate: 20, Burst: 40},
		PerPrefix64: Bucket{Rate: 50, Burst: 100},
		PerPrefix48: Bucket{Rate: 100, Burst: 200},
		MaxTracked:  65536,
	}
}

// Refusal reasons of the handshake limiter, a closed set (metric label).
const (
	limitedAddress  = "limited_address"
	limitedPrefix64 = "limited_prefix64"
	limitedPrefix48 = "limited_prefix48"
	limitedTable    = "limited_table_full"
)

// groupKind names which budget a group key is held to.
type groupKind uint8

const (
	groupAddress groupKind = iota
	groupPrefix64
	groupPrefix48
)

type groupKey struct {
	kind   groupKind
	prefix netip.Prefix
}

// groups returns the keys a source address is counted under: itself,
// and for a global IPv6 address its /64 and /48 (for IPv4 the configured
// stand-in prefix).
func (l HandshakeLimits) groups(addr netip.Addr) []groupKey {
	addr = addr.Unmap()
	keys := []groupKey{{groupAddress, netip.PrefixFrom(addr, addr.BitLen())}}
	switch {
	case addr.Is6() && addr.IsGlobalUnicast():
		p64, _ := addr.Prefix(64)
		p48, _ := addr.Prefix(48)
		keys = append(keys, groupKey{groupPrefix64, p64}, groupKey{groupPrefix48, p48})
	case addr.Is4() && l.IPv4PrefixBits >= 8 && l.IPv4PrefixBits < 32:
		p, _ := addr.Prefix(l.IPv4PrefixBits)
		keys = append(keys, groupKey{groupPrefix64, p})
	}
	return keys
}

func (l HandshakeLimits) bucket(kind groupKind) Bucket {
	switch kind {
	case groupPrefix64:
		return l.PerPrefix64
	case groupPrefix48:
		return l.PerPrefix48
	default:
		return l.PerAddress
	}
}

func refusalFor(kind groupKind) string {
	switch kind {
	case groupPrefix64:
		return limitedPrefix64
	case groupPrefix48:
		return limitedPrefix48
	default:
		return limitedAddress
	}
}

type tokens struct {
	level float64
	at    time.Time
}

// handshakeLimiter holds one bucket per group key.
type handshakeLimiter struct {
	limits HandshakeLimits
	now    func() time.Time

	mu      sync.Mutex
	buckets map[groupKey]*tokens
}

func newHandshakeLimiter(limits HandshakeLimits, now func() time.Time) *handshakeLimiter {
	return &handshakeLimiter{limits: limits, now: now, buckets: map[groupKey]*tokens{}}
}

// allow takes one handshake from every bucket the address is counted
// under, or none and says which budget refused it ("" when allowed).
func (h *handshakeLimiter) allow(remote net.Addr) string {
	addr, ok := addrOf(remote)
	if !ok {
		return limitedAddress // no address to hold to a budget: refuse
	}
	now := h.now()
	keys := h.limits.groups(addr)
	h.mu.Lock()
	defer h.mu.Unlock()
	held := make([]*tokens, 0, len(keys))
	for _, k := range keys {
		b := h.limits.bucket(k.kind)
		if b.Rate <= 0 {
			held = append(held, nil)
			continue
		}
		t := h.buckets[k]
		if t == nil {
			if len(h.buckets) >= h.limits.MaxTracked && !h.sweepLocked(now) {
				return limitedTable
			}
			t = &tokens{level: float64(b.Burst), at: now}
			h.buckets[k] = t
		}
		refill(t, b, now)
		if t.level < 1 {
			return refusalFor(k.kind)
		}
		held = append(held, t)
	}
	for _, t := range held {
		if t != nil {
			t.level--
		}
	}
	return ""
}

func refill(t *tokens, b Bucket, now time.Time) {
	if elapsed := now.Sub(t.at).Seconds(); elapsed > 0 {
		t.level += elapsed * b.Rate
		if t.level > float64(b.Burst) {
			t.level = float64(b.Burst)
		}
	}
	t.at = now
}

// sweepLocked drops buckets that have refilled (they hold nothing a new
// bucket would not) and reports whether room was made.
func (h *handshakeLimiter) sweepLocked(now time.Time) bool {
	for k, t := range h.buckets {
		b := h.limits.bucket(k.kind)
		refill(t, b, now)
		if t.level >= float64(b.Burst) {
			delete(h.buckets, k)
		}
	}
	return len(h.buckets) < h.limits.MaxTracked
}

// reset starts every budget over.
func (h *handshakeLimiter) reset() {
	h.mu.Lock()
	h.buckets = map[groupKey]*tokens{}
	h.mu.Unlock()
}

func addrOf(a net.Addr) (netip.Addr, bool) {
	switch v := a.(type) {
	case *net.TCPAddr:
		ip, ok := netip.AddrFromSlice(v.IP)
		return ip.Unmap(), ok
	case *net.UDPAddr:
		ip, ok := netip.AddrFromSlice(v.IP)
		return ip.Unmap(), ok
	default:
		ap, err := netip.ParseAddrPort(a.String())
		return ap.Addr().Unmap(), err == nil
	}
}
