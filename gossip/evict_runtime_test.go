package gossip

import (
	"crypto/x509"
	"net/netip"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/stretchr/testify/require"

	"github.com/gridsync/gridsync/gossip/record"
	"github.com/gridsync/gridsync/test/testpki"
	"github.com/gridsync/gridsync/trust/bundle"
)

func withTrustBundles(b *bundle.Book) siteOption { return func(c *siteSetup) { c.Trust = b } }

// A site evicted from the network, on real gossip: A and B drop its
// records and refuse what it sends; it counts as no peer of theirs;
// nothing more is sent to it; and, restarted (a new member of its site),
// it cannot join them again, whatever SWIM key and certificate it holds.
// B never heard from the issuer: it takes the eviction from A's record.
func TestAnEvictedSiteIsNoMemberAnyMore(t *testing.T) {
	ca := testpki.NewGridCA(t)
	key := randomKey(t)
	books := map[string]*bundle.Book{}
	start := func(site string) *testSite {
		books[site] = bundle.NewBook()
		require.NoError(t, books[site].Load("prod", []*x509.Certificate{ca.Cert}, nil, nil))
		s := startSite(t, site, withKey(key), withIdentity("prod", identityOf(t, ca, site)), withTrustBundles(books[site]))
		s.waitRunning(t)
		return s
	}
	a, b := start("site-a"), start("site-b")
	for _, s := range []*testSite{a, b} {
		require.NoError(t, s.Publish("prod", "", nil))
	}
	c := startSite(t, "site-c", withKey(key), withIdentity("prod", identityOf(t, ca, "site-c")))
	c.waitRunning(t)
	for _, s := range []*testSite{b, c} {
		require.Empty(t, s.AnnounceSeeds("prod", []string{a.AdvertiseAddr()}).Failed)
	}
	require.NoError(t, c.Publish("prod", "", providers("pc")))
	for _, s := range []*testSite{a, b} {
		require.Eventually(t, func() bool { return len(s.View("prod").Providers) == 1 && s.View("prod").AlivePeers == 2 }, 30*time.Second, 20*time.Millisecond)
	}

	evicting, err := bundle.Next(nil, "prod", "site-a", []string{"site-c"}, time.Now())
	require.NoError(t, err)
	signed, err := bundle.Sign(evicting, ca.Key)
	require.NoError(t, err)
	kept, err := books["site-a"].Offer("prod", signed)
	require.NoError(t, err)
	require.True(t, kept)

	for _, s := range []*testSite{a, b} {
		require.Eventually(t, func() bool {
			v := s.View("prod")
			return len(v.Providers) == 0 && v.AlivePeers == 1
		}, 30*time.Second, 20*time.Millisecond, "%s still counts C", s.Site())
		require.Positive(t, s.counter("grid_swim_records_rejected_total", record.RejectEvicted))
	}
	require.NotNil(t, books["site-b"].Bundle("prod"), "B took the eviction from A's record")

	// C restarts: a new member of site-c, which A refuses.
	c.kill()
	c2 := startSite(t, "site-c", withKey(key), withIdentity("prod", identityOf(t, ca, "site-c")))
	c2.waitRunning(t)
	c2.AnnounceSeeds("prod", []string{a.AdvertiseAddr()})
	require.Eventually(t, func() bool { return a.counter("grid_swim_members_evicted_refused_total", "") > 0 }, 30*time.Second, 20*time.Millisecond,
		"A never refused the evicted site's join")
	// Joined nowhere, it sends its records straight to A and B, signed
	// with its still-valid certificate: each is refused as evicted.
	c2.mu.Lock()
	ml := c2.ml
	c2.mu.Unlock()
	rec := signedBy(t, c2.identityCert(t, "prod"), Record{Network: "prod", Site: "site-c", Kind: KindProviders, Version: uint64(time.Now().UnixNano()), Providers: providers("pc2")})
	msg, err := record.EncodeDirectRecords([]Record{rec})
	require.NoError(t, err)
	for _, s := range []*testSite{a, b} {
		before := s.counter("grid_swim_records_rejected_total", record.RejectEvicted)
		ap, err := netip.ParseAddrPort(s.AdvertiseAddr())
		require.NoError(t, err)
		require.NoError(t, ml.SendReliable(&memberlist.Node{Name: s.Site(), Addr: ap.Addr().AsSlice(), Port: ap.Port()}, msg))
		require.Eventually(t, func() bool { return s.counter("grid_swim_records_rejected_total", record.RejectEvicted) > before }, 30*time.Second, 20*time.Millisecond,
			"%s never refused the restarted evicted site's record", s.Site())
		v := s.View("prod")
		require.Empty(t, v.Providers, "%s took C's records after its restart", s.Site())
		require.Equal(t, 1, v.AlivePeers, "%s counts the restarted evicted site", s.Site())
	}
}
