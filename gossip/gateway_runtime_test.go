package gossip

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gridsync/gridsync/gossip/record"
	"github.com/gridsync/gridsync/gossip/sites"
)

// What a site advertises becomes its gateway endpoint only when it reads
// one way: an ambiguous or malformed address is noted on the site and
// never passed on as an address; a valid one comes in its one spelling,
// with the version of the record that carried it as its generation.
func TestAnAmbiguousAdvertisedGatewayIsNoEndpoint(t *testing.T) {
	a, b := joinedPair(t)
	require.Eventually(t, func() bool { return len(a.Status().Members) == 1 }, 5*time.Second, 10*time.Millisecond)
	b.mu.Lock()
	ml := b.ml
	b.mu.Unlock()
	nodes := b.aliveNodes("")
	require.Len(t, nodes, 1)
	advertise := func(addr string) uint64 {
		v := uint64(time.Now().UnixNano())
		msg, err := record.EncodeRecords([]Record{{Network: "prod", Site: "site-b", Kind: KindSite, Version: v, GatewayAddress: addr}})
		require.NoError(t, err)
		require.NoError(t, ml.SendReliable(nodes[0], msg))
		return v
	}
	siteB := func() (sites.Site, bool) {
		v := a.View("prod")
		if len(v.Sites) != 1 {
			return sites.Site{}, false
		}
		return v.Sites[0], true
	}

	for _, ambiguous := range []string{"[127.0.0.1]:8443", "127.0.0.1:08443", "https://gw.example:443", "10.1:8443"} {
		v := advertise(ambiguous)
		require.Eventually(t, func() bool { s, ok := siteB(); return ok && s.GatewayGeneration == v }, 10*time.Second, 10*time.Millisecond, ambiguous)
		s, _ := siteB()
		require.True(t, s.GatewayInvalid, ambiguous)
		require.Empty(t, s.GatewayAddress, "%s is no endpoint", ambiguous)
	}

	v := advertise("[2001:db8::1]:8443")
	require.Eventually(t, func() bool { s, ok := siteB(); return ok && s.GatewayGeneration == v }, 10*time.Second, 10*time.Millisecond)
	s, _ := siteB()
	require.False(t, s.GatewayInvalid)
	require.Equal(t, "[2001:db8::1]:8443", s.GatewayAddress)
}
