package sites_test

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gridsync/gridsync/gossip/sites"
)

// An advertised or configured gateway address becomes an endpoint only
// when it reads one way: anything a resolver or dialer could read
// otherwise is refused.
func TestAmbiguousOrMalformedGatewayAddressesAreRefused(t *testing.T) {
	good := map[string]sites.Endpoint{
		"provider.example.com:8443": {Host: "provider.example.com", Port: 8443},
		"10.0.0.4:8080":             {Host: "10.0.0.4", Port: 8080},
		"[2001:db8::1]:443":         {Host: "2001:db8::1", Port: 443},
		"127.0.0.1:9443":            {Host: "127.0.0.1", Port: 9443},
		"gw-1.east:65535":           {Host: "gw-1.east", Port: 65535},
	}
	for in, want := range good {
		got, err := sites.ParseGatewayAddress(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
		assert.Equal(t, in, got.Address(), "the address reads back as written")
	}
	bad := map[string]string{
		"":                                 "empty",
		"provider.example.com":             "host:port",
		"https://provider.example.com:443": "host:port",
		"provider.example.com:443/v1":      "port",
		"user@provider.example.com:443":    "neither",
		"provider.example.com:https":       "port",
		"provider.example.com:0":           "port",
		"provider.example.com:65536":       "port",
		"provider.example.com:08443":       "leading zeros",
		"Provider.Example.com:8443":        "lowercase",
		"provider.example.com: 8443":       "space",
		"provider.example.com:8443\n":      "control",
		"::1:8443":                         "host:port",
		"[10.0.0.4]:8080":                  "brackets",
		"[provider.example.com]:8080":      "brackets",
		"[::ffff:10.0.0.4]:8080":           "IPv4-mapped",
		"[fe80::1%eth0]:8080":              "zone",
		"[2001:db8:0::1]:443":              "write the address as 2001:db8::1",
		"10.1:8080":                        "ending in a number",
		"010.0.0.1:8080":                   "ending in a number",
		"0x0a.0.0.1:8080":                  "ending in a number",
		"0.0.0.0:8080":                     "reaches no site",
		"169.254.169.254:80":               "reaches no site",
		"224.0.0.1:8080":                   "reaches no site",
		strings.Repeat("a", 260) + ":8443": "more than 262",
	}
	for in, why := range bad {
		_, err := sites.ParseGatewayAddress(in)
		require.Error(t, err, "%q", in)
		assert.Contains(t, err.Error(), why, "%q", in)
	}
}

func TestScopeOfAnAddress(t *testing.T) {
	for in, want := range map[string]sites.Scope{
		"127.0.0.1": sites.ScopeLoopback, "::1": sites.ScopeLoopback,
		"10.1.2.3": sites.ScopePrivate, "172.16.0.1": sites.ScopePrivate, "192.168.1.1": sites.ScopePrivate,
		"100.64.0.1": sites.ScopePrivate, "fd00::1": sites.ScopePrivate, "::ffff:10.0.0.1": sites.ScopePrivate,
		"8.8.8.8": sites.ScopePublic, "2001:4860::1": sites.ScopePublic,
		"0.0.0.0": "", "169.254.169.254": "", "fe80::1": "", "ff02::1": "",
	} {
		assert.Equal(t, want, sites.ScopeOf(netip.MustParseAddr(in)), in)
	}
}
