package probe

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"syscall"
	"time"
)

// Destinations is where health probes may connect. Whoever may create an
// InferenceProvider chooses its health endpoint; the agent runs inside the
// cluster's network, so without a rule it would probe internal services
// for them and report what they answered.
//
// The rule, checked on the resolved address of every connection attempt
// (so that a name that resolves elsewhere later, DNS rebinding, is caught):
//
//  1. an address inside an allowed CIDR may be dialled;
//  2. loopback, link-local (cloud metadata lives there), unspecified,
//     multicast and the known metadata and platform addresses may not;
//  3. when an allow-list is configured, only its CIDRs and the hosts under
//     its host suffixes may be dialled;
//  4. anything else may.
//
// A host suffix never unlocks the denied ranges: only a CIDR that contains
// the address does, since a name can be pointed anywhere.
type Destinations struct {
	AllowCIDRs        []netip.Prefix
	AllowHostSuffixes []string
}

// deniedPrefixes are never probed unless an allowed CIDR names them.
var deniedPrefixes = []netip.Prefix{
	netip.MustParsePrefix("127.0.0.0/8"),        // loopback: the agent itself
	netip.MustParsePrefix("::1/128"),            //
	netip.MustParsePrefix("169.254.0.0/16"),     // link-local: 169.254.169.254, cloud metadata
	netip.MustParsePrefix("fe80::/10"),          //
	netip.MustParsePrefix("fd00:ec2::/32"),      // AWS metadata over IPv6
	netip.MustParsePrefix("100.100.100.200/32"), // Alibaba Cloud metadata
	netip.MustParsePrefix("168.63.129.16/32"),   // Azure platform (wireserver)
	netip.MustParsePrefix("0.0.0.0/8"),          // "this host"
	netip.MustParsePrefix("::/128"),             //
	netip.MustParsePrefix("224.0.0.0/4"),        // multicast
	netip.MustParsePrefix("ff00::/8"),           //
	netip.MustParsePrefix("::/96"),              // IPv4-compatible (deprecated): ::127.0.0.1 is no IPv6 host
}

// IPv6 ranges that carry an IPv4 address: the rule is applied to that
// address too, so that 64:ff9b::a9fe:a9fe (NAT64) or 2002:a9fe:a9fe::
// (6to4) cannot reach 169.254.169.254.
var (
	nat64WellKnown = netip.MustParsePrefix("64:ff9b::/96")   // RFC 6052
	nat64Local     = netip.MustParsePrefix("64:ff9b:1::/48") // RFC 8215
	sixToFour      = netip.MustParsePrefix("2002::/16")      // RFC 3056
)

// embeddedIPv4 returns the IPv4 address an IPv6 address of a translation
// or tunnelling range carries.
func embeddedIPv4(a netip.Addr) (netip.Addr, bool) {
	if !a.Is6() || a.Is4In6() {
		return netip.Addr{}, false
	}
	b := a.As16()
	switch {
	case nat64WellKnown.Contains(a):
		return netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]}), true
	case nat64Local.Contains(a):
		// A /48 prefix: the IPv4 address at bits 48-63 and 72-87, the
		// octet between them (bits 64-71) reserved.
		return netip.AddrFrom4([4]byte{b[6], b[7], b[9], b[10]}), true
	case sixToFour.Contains(a):
		return netip.AddrFrom4([4]byte{b[2], b[3], b[4], b[5]}), true
	}
	return netip.Addr{}, false
}

// errDenied is what a refused connection attempt fails with.
var errDenied = deniedError{}

type deniedError struct{}

func (deniedError) Error() string { return "destination not allowed (--probe-allow-destinations)" }

// DestinationDenied marks the error for callers outside this package that
// name failures by kind.
func (deniedError) DestinationDenied() bool { return true }

// ParseDestinations reads an allow-list: each entry a CIDR (10.0.0.0/8,
// fd00::/8) or a host suffix (example.com allows example.com and every
// name under it). An empty list allows every address outside the denied
// ranges.
func ParseDestinations(entries []string) (Destinations, error) {
	var d Destinations
	for _, e := range entries {
		e = strings.ToLower(strings.TrimSpace(e))
		switch {
		case e == "":
			continue
		case strings.Contains(e, "/"):
			p, err := netip.ParsePrefix(e)
			if err != nil {
				return Destinations{}, fmt.Errorf("probe destination %q: %w", e, err)
			}
			d.AllowCIDRs = append(d.AllowCIDRs, p.Masked())
		default:
			suffix := strings.TrimPrefix(strings.TrimPrefix(e, "*"), ".")
			if suffix == "" || strings.ContainsAny(suffix, ":[]") {
				return Destinations{}, fmt.Errorf("probe destination %q is neither a CIDR nor a host suffix", e)
			}
			if _, err := netip.ParseAddr(suffix); err == nil {
				return Destinations{}, fmt.Errorf("probe destination %q is an address: write it as a CIDR (%s/32)", e, suffix)
			}
			d.AllowHostSuffixes = append(d.AllowHostSuffixes, suffix)
		}
	}
	return d, nil
}

// restricted says an allow-list is configured.
func (d Destinations) restricted() bool {
	return len(d.AllowCIDRs) > 0 || len(d.AllowHostSuffixes) > 0
}

// check applies the rule to one connection attempt to addr, made for the
// URL host host.
func (d Destinations) check(host string, addr netip.Addr) error {
	addr = addr.Unmap() // ::ffff:127.0.0.1 is 127.0.0.1
	if v4, ok := embeddedIPv4(addr); ok && !d.allowedCIDR(v4) {
		// What is reached is the IPv4 address: a denied one stays
		// denied, even under an allowed IPv6 prefix, unless a CIDR
		// allows the IPv4 address itself.
		for _, p := range deniedPrefixes {
			if p.Contains(v4) {
				return errDenied
			}
		}
	}
	return d.checkOne(host, addr)
}

// CheckPeer applies the rule's denied ranges to a peer's address (a SWIM
// member's, learnt from gossip): an allowed CIDR unlocks them, and an
// allow-list written for providers does not restrict peers.
func (d Destinations) CheckPeer(addr netip.Addr) error {
	return Destinations{AllowCIDRs: d.AllowCIDRs}.check("", addr)
}

func (d Destinations) checkOne(host string, addr netip.Addr) error {
	if d.allowedCIDR(addr) {
		return nil
	}
	for _, p := range deniedPrefixes {
		if p.Contains(addr) {
			return errDenied
		}
	}
	if !d.restricted() || d.hostAllowed(host) {
		return nil
	}
	return errDenied
}

func (d Destinations) allowedCIDR(addr netip.Addr) bool {
	for _, p := range d.AllowCIDRs {
		if p.Contains(addr) {
			return true
		}
	}
	return false
}

// Dialer returns a dial function that applies the rule to every address
// it connects to, at the moment of connecting: for every connection the
// agent makes to an address it did not take from its own configuration
// (providers' endpoints, peer sites' gateways and signals).
func (d Destinations) Dialer(timeout time.Duration) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return d.DialerAlso(timeout, nil)
}

// DialerAlso is Dialer with one more check of every address it connects
// to (a GridSite endpoint's address scope), made before connecting.
func (d Destinations) DialerAlso(timeout time.Duration, also func(netip.Addr) error) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		nd := net.Dialer{
			Timeout: timeout,
			Control: func(_, address string, _ syscall.RawConn) error {
				ap, err := netip.ParseAddrPort(address)
				if err != nil {
					return err
				}
				if err := d.check(host, ap.Addr()); err != nil {
					return err
				}
				if also != nil {
					return also(ap.Addr().Unmap())
				}
				return nil
			},
		}
		return nd.DialContext(ctx, network, addr)
	}
}

func (d Destinations) hostAllowed(host string) bool {
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	for _, s := range d.AllowHostSuffixes {
		if host == s || strings.HasSuffix(host, "."+s) {
			return true
		}
	}
	return false
}
