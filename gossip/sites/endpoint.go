package sites

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Endpoint is a site's data-plane gateway as a structured value: a host
// (a lowercase DNS name or an IP literal, without brackets) and a port.
// It is what an advertised or configured address becomes once it passed
// ParseGatewayAddress; a string that did not never becomes one, so it is
// never dialled or routed to.
type Endpoint struct {
	Host string
	Port uint16
}

// Address is the endpoint as host:port, IPv6 in brackets: the one
// spelling every replica and every GridSite agrees on.
func (e Endpoint) Address() string {
	return net.JoinHostPort(e.Host, strconv.Itoa(int(e.Port)))
}

// MaxGatewayAddressBytes bounds an address: a DNS name (253), a colon and
// a port.
const MaxGatewayAddressBytes = 262

// ParseGatewayAddress reads host:port strictly. The reference's
// discovery contract accepts any non-empty string; a production endpoint
// does not, since a string that resolvers or dialers read differently
// could be dialled somewhere its writer did not mean. Refused:
//
//   - anything that is not exactly host:port (a scheme, a path, user
//     information, spaces, a missing port);
//   - a port that is not a decimal number from 1 to 65535 written without
//     leading zeros ("https" would be read from /etc/services);
//   - a host that is neither a lowercase DNS name nor a canonical IP
//     literal: numeric forms the C resolver reads as IPv4 ("10.1",
//     "010.0.0.1", "0x0a.0.0.1"), an IPv4 address in brackets, an
//     IPv4-mapped IPv6 address, an IPv6 zone, an IPv6 address without
//     brackets;
//   - an address no site can be reached at: unspecified, multicast,
//     link-local.
func ParseGatewayAddress(s string) (Endpoint, error) {
	if s == "" {
		return Endpoint{}, fmt.Errorf("the address is empty")
	}
	if len(s) > MaxGatewayAddressBytes {
		return Endpoint{}, fmt.Errorf("the address has %d bytes, more than %d", len(s), MaxGatewayAddressBytes)
	}
	for _, c := range s {
		if c <= ' ' || c >= 0x7f {
			return Endpoint{}, fmt.Errorf("the address holds a space, a control or a non-ASCII character")
		}
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return Endpoint{}, fmt.Errorf("the address is not host:port")
	}
	n, err := ParsePort(port)
	if err != nil {
		return Endpoint{}, err
	}
	bracketed := strings.HasPrefix(s, "[")
	if err := CheckGatewayHost(host); err != nil {
		return Endpoint{}, err
	}
	if ip, err := netip.ParseAddr(host); (err == nil && ip.Is6()) != bracketed {
		return Endpoint{}, fmt.Errorf("host %s: an IPv6 address is written in brackets, a name or an IPv4 address without", host)
	}
	return Endpoint{Host: host, Port: n}, nil
}

// ParsePort reads a port number: decimal, 1 to 65535, no leading zero.
func ParsePort(port string) (uint16, error) {
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil || n == 0 || strconv.FormatUint(n, 10) != port {
		return 0, fmt.Errorf("port %q is not a number from 1 to 65535 without leading zeros", port)
	}
	return uint16(n), nil
}

// CheckGatewayHost accepts a lowercase DNS name that cannot be read as an
// address, or a canonical IP literal (no brackets, no zone) of an address
// a site can be reached at.
func CheckGatewayHost(host string) error {
	if ip, err := netip.ParseAddr(host); err == nil {
		switch {
		case ip.Zone() != "":
			return fmt.Errorf("host %s: an IPv6 zone names an interface of this machine", host)
		case ip.Is4In6():
			return fmt.Errorf("host %s: an IPv4-mapped IPv6 address; write the IPv4 address", host)
		case ip.String() != host:
			return fmt.Errorf("host %s: write the address as %s", host, ip)
		case ScopeOf(ip) == "":
			return fmt.Errorf("host %s: an unspecified, multicast or link-local address reaches no site", host)
		}
		return nil
	}
	if errs := validation.IsDNS1123Subdomain(host); len(errs) > 0 {
		return fmt.Errorf("host %q is neither an IP address nor a lowercase DNS name", host)
	}
	// A name whose last label is a number is read as an IPv4 address by
	// the C resolver ("10.1", "0x0a.0.0.1"): no top-level domain is
	// numeric, so such a name is refused rather than guessed at.
	last := host[strings.LastIndexByte(host, '.')+1:]
	if strings.Trim(last, "0123456789") == "" {
		return fmt.Errorf("host %s: a name ending in a number is read as an IPv4 address; write the address canonically", host)
	}
	return nil
}

// Scope is where an address is reachable from: the reference's address
// scope of an endpoint.
type Scope string

const (
	// ScopePublic: a global unicast address outside the private ranges.
	ScopePublic Scope = "Public"
	// ScopePrivate: RFC 1918, shared (RFC 6598) and unique local IPv6.
	ScopePrivate Scope = "Private"
	// ScopeLoopback: this machine; for development and tests.
	ScopeLoopback Scope = "Loopback"
)

// sharedAddressSpace is RFC 6598's carrier-grade NAT range: private to
// whoever runs it, not routable on the internet.
var sharedAddressSpace = netip.MustParsePrefix("100.64.0.0/10")

// ScopeOf is the scope of an address; "" for one no site can be reached
// at (unspecified, multicast, link-local).
func ScopeOf(a netip.Addr) Scope {
	a = a.Unmap()
	switch {
	case a.IsLoopback():
		return ScopeLoopback
	case a.IsPrivate() || sharedAddressSpace.Contains(a):
		return ScopePrivate
	case a.IsGlobalUnicast():
		return ScopePublic
	}
	return ""
}
