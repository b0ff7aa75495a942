package base

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/gossip/sites"
)

// A GridSite's endpoint is read with the schema's rules, for objects
// stored before them: anything that does not name one endpoint is
// refused, and the scope is held on every resolved address.
func TestAGridSiteEndpointIsReadOneWayOrRefused(t *testing.T) {
	got, err := GatewayEndpointOf(&v1alpha1.GatewayEndpoint{Address: "provider.example.com:8443",
		TLS: &v1alpha1.GatewayTLS{Mode: "Mutual", ServerName: "provider.example.com"}})
	require.NoError(t, err, "the reference's manifest")
	assert.Equal(t, GatewayEndpoint{Endpoint: sites.Endpoint{Host: "provider.example.com", Port: 8443}, ServerName: "provider.example.com"}, got)

	got, err = GatewayEndpointOf(&v1alpha1.GatewayEndpoint{Host: "10.0.0.4", Port: 8443, Protocol: "HTTPS", AddressScope: "Private"})
	require.NoError(t, err)
	assert.Equal(t, "10.0.0.4:8443", got.Address())
	require.NoError(t, got.InScope(netip.MustParseAddr("10.0.0.4")))
	require.ErrorContains(t, got.InScope(netip.MustParseAddr("8.8.8.8")), "a Public address, outside addressScope Private")

	_, err = GatewayEndpointOf(&v1alpha1.GatewayEndpoint{})
	require.ErrorIs(t, err, ErrNoGatewayAddress)
	for name, ep := range map[string]v1alpha1.GatewayEndpoint{
		"ambiguous address":         {Address: "[10.0.0.4]:8443"},
		"address and host disagree": {Address: "10.0.0.4:8443", Host: "10.0.0.5", Port: 8443},
		"no port":                   {Host: "10.0.0.4"},
		"HTTP with Mutual":          {Address: "10.0.0.4:8443", Protocol: "HTTP"},
		"HTTPS with Plaintext":      {Address: "10.0.0.4:8443", Protocol: "HTTPS", TLS: &v1alpha1.GatewayTLS{Mode: "Plaintext"}},
		"scope of another address":  {Address: "127.0.0.1:8443", AddressScope: "Public"},
		"unknown scope":             {Address: "10.0.0.4:8443", AddressScope: "Galactic"},
	} {
		_, err := GatewayEndpointOf(&ep)
		require.Error(t, err, name)
		assert.NotErrorIs(t, err, ErrNoGatewayAddress, name)
	}
}
