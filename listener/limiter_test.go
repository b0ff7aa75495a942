package listener

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSourcesAreGroupedByAddressAndGlobalIPv6Prefixes(t *testing.T) {
	l := DefaultHandshakeLimits()
	prefixes := func(a string) []string {
		var out []string
		for _, k := range l.groups(netip.MustParseAddr(a)) {
			out = append(out, k.prefix.String())
		}
		return out
	}
	assert.Equal(t, []string{"2001:db8:1:2:3:4:5:6/128", "2001:db8:1:2::/64", "2001:db8:1::/48"}, prefixes("2001:db8:1:2:3:4:5:6"))
	assert.Equal(t, []string{"192.0.2.7/32"}, prefixes("192.0.2.7"), "IPv4: the address only")
	assert.Equal(t, []string{"192.0.2.7/32"}, prefixes("::ffff:192.0.2.7"), "an IPv4-mapped address is IPv4")
	assert.Equal(t, []string{"::1/128"}, prefixes("::1"), "loopback is not global")
	assert.Equal(t, []string{"fe80::1/128"}, prefixes("fe80::1"), "link-local is not global")
	l.IPv4PrefixBits = 24
	assert.Equal(t, []string{"192.0.2.7/32", "192.0.2.0/24"}, prefixes("192.0.2.7"), "the IPv4 stand-in")
}

// A host holding a whole /64 cannot multiply its budget by its addresses,
// and a network holding a /48 cannot by its /64s.
func TestABlockIsHeldToItsBudgetWhateverTheAddresses(t *testing.T) {
	now := time.Unix(0, 0)
	h := newHandshakeLimiter(HandshakeLimits{
		PerAddress: Bucket{Rate: 1, Burst: 2}, PerPrefix64: Bucket{Rate: 1, Burst: 5}, PerPrefix48: Bucket{Rate: 1, Burst: 8},
		MaxTracked: 1000,
	}, func() time.Time { return now })
	addr := func(s string) net.Addr { return &net.TCPAddr{IP: net.ParseIP(s), Port: 1} }

	allowed := 0
	for i := range 10 {
		if h.allow(addr("2001:db8:1:2::"+string(rune('a'+i)))) == "" {
			allowed++
		}
	}
	assert.Equal(t, 5, allowed, "ten addresses of one /64 share its five")
	assert.Equal(t, limitedPrefix64, h.allow(addr("2001:db8:1:2::ff")))
	assert.Empty(t, h.allow(addr("2001:db8:1:3::1")), "another /64 of the /48 has budget")
	assert.Empty(t, h.allow(addr("2001:db8:1:3::2")))
	assert.Empty(t, h.allow(addr("2001:db8:1:4::1")))
	assert.Equal(t, limitedPrefix48, h.allow(addr("2001:db8:1:5::1")), "the /48's eight are spent")
	assert.Empty(t, h.allow(addr("2001:db8:2::1")), "another /48 is untouched")

	assert.Empty(t, h.allow(addr("192.0.2.1")))
	assert.Empty(t, h.allow(addr("192.0.2.1")))
	assert.Equal(t, limitedAddress, h.allow(addr("192.0.2.1")), "an address past its burst")
	now = now.Add(time.Second)
	assert.Empty(t, h.allow(addr("192.0.2.1")), "refilled at its rate")

	h.reset()
	assert.Empty(t, h.allow(addr("2001:db8:1:5::1")), "a reset starts every budget over")
}

// The table of buckets is bounded: idle (refilled) buckets are swept to
// make room, and when none is idle a new source is refused.
func TestTheBucketTableIsBounded(t *testing.T) {
	now := time.Unix(0, 0)
	h := newHandshakeLimiter(HandshakeLimits{PerAddress: Bucket{Rate: 1, Burst: 2}, MaxTracked: 2}, func() time.Time { return now })
	a := &net.TCPAddr{IP: net.ParseIP("192.0.2.1")}
	b := &net.TCPAddr{IP: net.ParseIP("192.0.2.2")}
	c := &net.TCPAddr{IP: net.ParseIP("192.0.2.3")}
	require.Empty(t, h.allow(a))
	require.Empty(t, h.allow(b))
	assert.Equal(t, limitedTable, h.allow(c), "no room, nothing idle")
	now = now.Add(time.Minute)
	assert.Empty(t, h.allow(c), "idle buckets swept")
}

// Connections counted before a reset release into their own epoch: the
// new epoch's counts never go below zero or carry the old ones.
func TestReleasesAfterAResetGoToTheirOwnEpoch(t *testing.T) {
	a := newAdmission(ConnectionCaps{Max: 10, ReservedForGateway: 2, PerSite: 1})
	west := Caller{Kind: Site, Site: "west"}
	old, outcome := a.admit(west, false, netip.MustParseAddr("127.0.0.1"))
	require.Equal(t, admitted, outcome)
	_, outcome = a.admit(west, false, netip.MustParseAddr("127.0.0.1"))
	require.Equal(t, overSiteCap, outcome)
	a.reset()
	fresh, outcome := a.admit(west, false, netip.MustParseAddr("127.0.0.1"))
	require.Equal(t, admitted, outcome, "the caps started over")
	a.release(old)
	a.release(old)
	_, outcome = a.admit(west, false, netip.MustParseAddr("127.0.0.1"))
	assert.Equal(t, overSiteCap, outcome, "releasing the old connection (twice) frees nothing in the new epoch")
	a.release(fresh)
	_, outcome = a.admit(west, false, netip.MustParseAddr("127.0.0.1"))
	assert.Equal(t, admitted, outcome)
}
