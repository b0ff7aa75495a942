package probe

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
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
}

// errDenied is what a refused connection attempt fails with.
var errDenied = errors.New("destination not allowed for health probes")

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
	for _, p := range d.AllowCIDRs {
		if p.Contains(addr) {
			return nil
		}
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

func (d Destinations) hostAllowed(host string) bool {
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	for _, s := range d.AllowHostSuffixes {
		if host == s || strings.HasSuffix(host, "."+s) {
			return true
		}
	}
	return false
}
