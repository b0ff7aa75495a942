package probe

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The rule itself, as pure logic: nothing here is dialled. Addresses are
// from the documentation ranges (192.0.2.0/24, 198.51.100.0/24,
// 203.0.113.0/24), the denied ranges, and loopback.
func TestDestinationRule(t *testing.T) {
	open := Destinations{}
	restricted, err := ParseDestinations([]string{"198.51.100.0/24", "example.com", "*.models.internal", "169.254.10.0/24"})
	require.NoError(t, err)
	nat64, err := ParseDestinations([]string{"64:ff9b::/96", "169.254.10.0/24"})
	require.NoError(t, err)
	tests := []struct {
		dest    Destinations
		host    string
		addr    string
		allowed bool
	}{
		{open, "provider.example", "203.0.113.7", true},
		{open, "169.254.169.254", "169.254.169.254", false},          // cloud metadata
		{open, "metadata.google.internal", "169.254.169.254", false}, // by name
		{open, "x", "::ffff:169.254.169.254", false},                 // IPv4-mapped
		{open, "x", "fe80::1", false},
		{open, "x", "fd00:ec2::254", false},
		{open, "x", "100.100.100.200", false},
		{open, "x", "168.63.129.16", false},
		{open, "x", "127.0.0.53", false},
		{open, "x", "::1", false},
		{open, "x", "0.0.0.0", false},
		{open, "x", "224.0.0.1", false},
		{open, "x", "198.51.100.3", true}, // any other address, without a list
		// IPv6 forms that carry a denied IPv4 address.
		{open, "x", "64:ff9b::a9fe:a9fe", false},       // NAT64 to 169.254.169.254
		{open, "x", "64:ff9b::7f00:1", false},          // NAT64 to 127.0.0.1
		{open, "x", "64:ff9b:1:a9fe:a9:fe00::", false}, // local-use NAT64 (/48) to 169.254.169.254
		{open, "x", "2002:a9fe:a9fe::", false},         // 6to4 of 169.254.169.254
		{open, "x", "2002:7f00:1::1", false},           // 6to4 of 127.0.0.1
		{open, "x", "::127.0.0.1", false},              // IPv4-compatible
		{open, "x", "::a9fe:a9fe", false},              //
		{open, "x", "64:ff9b::c633:6403", true},        // NAT64 to 198.51.100.3: allowed as the IPv4 address is
		{open, "x", "2002:c633:6403::1", true},         // 6to4 of 198.51.100.3
		{restricted, "x", "64:ff9b::c633:6409", false}, // the IPv6 address itself is not listed
		{nat64, "x", "64:ff9b::c633:6409", true},       // a listed NAT64 prefix
		{nat64, "x", "64:ff9b::a9fe:a9fe", false},      // never to metadata through it
		{nat64, "x", "64:ff9b::a9fe:a05", true},        // unless the IPv4 CIDR is listed itself
		{restricted, "anything", "198.51.100.9", true},
		{restricted, "example.com", "203.0.113.7", true},
		{restricted, "api.example.com", "203.0.113.7", true},
		{restricted, "API.Example.COM.", "203.0.113.7", true},
		{restricted, "notexample.com", "203.0.113.7", false},
		{restricted, "gpu.models.internal", "192.0.2.1", true},
		{restricted, "example.com", "169.254.169.254", false}, // a suffix never unlocks metadata
		{restricted, "x", "169.254.10.5", true},               // a CIDR does, on purpose
		{restricted, "elsewhere.net", "192.0.2.1", false},
	}
	for _, tt := range tests {
		err := tt.dest.check(tt.host, netip.MustParseAddr(tt.addr))
		assert.Equal(t, tt.allowed, err == nil, "%s at %s (allow %+v)", tt.host, tt.addr, tt.dest)
	}
}

func TestParseDestinationsRefusesWhatIsNeitherACIDRNorASuffix(t *testing.T) {
	for _, bad := range []string{"192.0.2.0/33", "192.0.2.1", "[::1]", "*.", "fe80::1"} {
		_, err := ParseDestinations([]string{bad})
		assert.Error(t, err, bad)
	}
	d, err := ParseDestinations([]string{" 198.51.100.0/24 ", "", ".Example.com"})
	require.NoError(t, err)
	assert.Equal(t, []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24")}, d.AllowCIDRs)
	assert.Equal(t, []string{"example.com"}, d.AllowHostSuffixes)
}
