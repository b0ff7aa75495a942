package base

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/gossip/sites"
)

// GatewayEndpoint is a GridSite's spec.gatewayEndpoint as the probe dials
// it: one host and port, the TLS mode and server name, and the address
// scope every resolved address must lie in.
type GatewayEndpoint struct {
	sites.Endpoint
	// Scope is spec.gatewayEndpoint.addressScope; "" checks none.
	Scope sites.Scope
	// Plaintext is tls.mode Plaintext (protocol HTTP).
	Plaintext bool
	// ServerName is tls.serverName: the SNI and the DNS SAN.
	ServerName string
}

// ErrNoGatewayAddress: the endpoint names no address yet.
var ErrNoGatewayAddress = errors.New("no gateway address")

// GatewayEndpointOf reads a GridSite's gateway endpoint with the rules
// the schema holds new objects to, for the objects stored before them and
// for what the schema cannot say (that address and host agree when only
// one is written differently, a malformed address). ErrNoGatewayAddress
// when there is no address at all.
func GatewayEndpointOf(ep *v1alpha1.GatewayEndpoint) (GatewayEndpoint, error) {
	if ep == nil || ep.Address == "" && ep.Host == "" {
		return GatewayEndpoint{}, ErrNoGatewayAddress
	}
	var out GatewayEndpoint
	if ep.TLS != nil {
		out.Plaintext = ep.TLS.Mode == "Plaintext"
		out.ServerName = ep.TLS.ServerName
	}
	switch ep.Protocol {
	case "":
	case "HTTPS", "HTTP":
		if (ep.Protocol == "HTTP") != out.Plaintext {
			return GatewayEndpoint{}, fmt.Errorf("protocol %s does not go with tls.mode %s", ep.Protocol, modeOf(out.Plaintext))
		}
	default:
		return GatewayEndpoint{}, fmt.Errorf("protocol %q is neither HTTPS nor HTTP", ep.Protocol)
	}
	if ep.Host != "" {
		if err := sites.CheckGatewayHost(ep.Host); err != nil {
			return GatewayEndpoint{}, fmt.Errorf("spec.gatewayEndpoint.host: %w", err)
		}
		if ep.Port < 1 || ep.Port > 65535 {
			return GatewayEndpoint{}, fmt.Errorf("spec.gatewayEndpoint.port %d is not from 1 to 65535", ep.Port)
		}
		out.Endpoint = sites.Endpoint{Host: ep.Host, Port: uint16(ep.Port)}
		if ep.Address != "" && ep.Address != out.Address() {
			return GatewayEndpoint{}, fmt.Errorf("spec.gatewayEndpoint.address %q and host:port %s disagree", ep.Address, out.Address())
		}
	} else {
		e, err := sites.ParseGatewayAddress(ep.Address)
		if err != nil {
			return GatewayEndpoint{}, fmt.Errorf("spec.gatewayEndpoint.address: %w", err)
		}
		out.Endpoint = e
	}
	switch s := sites.Scope(ep.AddressScope); s {
	case "", sites.ScopePublic, sites.ScopePrivate, sites.ScopeLoopback:
		out.Scope = s
	default:
		return GatewayEndpoint{}, fmt.Errorf("addressScope %q is none of Public, Private, Loopback", s)
	}
	if ip, err := netip.ParseAddr(out.Host); err == nil && out.Scope != "" && sites.ScopeOf(ip) != out.Scope {
		return GatewayEndpoint{}, fmt.Errorf("host %s is a %s address, not %s (spec.gatewayEndpoint.addressScope)", out.Host, sites.ScopeOf(ip), out.Scope)
	}
	return out, nil
}

func article(scope string) string {
	if scope == string(sites.ScopePublic) || scope == string(sites.ScopePrivate) {
		return "a " + scope
	}
	return scope
}

func modeOf(plaintext bool) string {
	if plaintext {
		return "Plaintext"
	}
	return "Mutual"
}

// InScope refuses a resolved address outside the endpoint's scope: a name
// may resolve anywhere, so its scope is checked where it is dialled.
func (e GatewayEndpoint) InScope(a netip.Addr) error {
	if e.Scope == "" {
		return nil
	}
	if got := sites.ScopeOf(a); got != e.Scope {
		return ScopeError{Want: e.Scope, Got: got}
	}
	return nil
}

// ScopeError is a connection refused because the address resolved
// outside the endpoint's scope.
type ScopeError struct{ Want, Got sites.Scope }

func (e ScopeError) Error() string {
	got := string(e.Got)
	if got == "" {
		got = "an unroutable"
	}
	return fmt.Sprintf("the address resolves to %s address, outside addressScope %s", article(got), e.Want)
}

// AddressScope names the failure for the probe's outcome, which never
// quotes a dial error it does not know.
func (e ScopeError) AddressScope() string { return e.Error() }
