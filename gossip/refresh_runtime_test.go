package gossip

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gridsync/gridsync/gossip/record"
)

// Records are signed again at half the tombstone lifetime, and at a
// third of one too short to leave the other half to a skewed clock and a
// minute's delivery.
func TestRefreshAge(t *testing.T) {
	for _, c := range []struct{ ttl, want time.Duration }{
		{10 * time.Minute, 5 * time.Minute},
		{time.Hour, 30 * time.Minute},
		{7 * time.Minute, 3*time.Minute + 30*time.Second},
		{5 * time.Minute, 2 * time.Minute},
		{3 * time.Minute, time.Minute},
		{3 * time.Second, time.Second},
	} {
		require.Equal(t, c.want, Config{TombstoneTTL: c.ttl}.refreshAge(), "lifetime %s", c.ttl)
	}
}

// A site's records are signed again together, and go to each member in
// one message: one send per member and refresh, not one per record, and
// no gossip.
func TestARefreshSendsTheSitesRecordsInOneMessage(t *testing.T) {
	key := randomKey(t)
	shortLived := func(c *siteSetup) { c.TombstoneTTL = 3 * time.Second } // signed again every second
	a := startSite(t, "site-a", withKey(key), shortLived)
	a.waitRunning(t)
	b := startSite(t, "site-b", withKey(key))
	b.waitRunning(t)
	require.Empty(t, b.AnnounceSeeds("prod", []string{a.AdvertiseAddr()}).Failed)
	require.NoError(t, a.Publish("prod", "", providers("pa")))
	require.Eventually(t, func() bool { return slicesEqual(remoteNames(b.View("prod")), []string{"site-a/pa"}) }, 10*time.Second, 20*time.Millisecond)

	siteKey := record.Key{Network: "prod", Site: "site-a", Kind: record.KindSite}
	provKey := record.Key{Network: "prod", Site: "site-a", Kind: record.KindProviders}
	version := func(s *testSite, k record.Key) uint64 { rec, _ := s.store.Get(k); return rec.Version }
	// Counted from one refresh to a later one, once b holds what each
	// signed.
	waitRefresh := func() uint64 {
		before := version(a, siteKey)
		var v uint64
		require.Eventually(t, func() bool {
			v = version(a, siteKey)
			return v != before && version(b, siteKey) == v && version(b, provKey) == version(a, provKey)
		}, 10*time.Second, 5*time.Millisecond)
		return v
	}
	first := waitRefresh()
	sends := a.counter("grid_swim_state_sends_total", "reliable")
	gossiped := a.counter("grid_swim_state_sends_total", "gossip")
	const refreshes = 3
	for range refreshes {
		waitRefresh()
		// Signed together.
		require.InDelta(t, float64(version(a, siteKey)), float64(version(a, provKey)), float64(100*time.Millisecond))
	}
	require.Greater(t, version(a, siteKey), first)
	// One member: one send per refresh, where each record on its own
	// would make two. A suspicion's notice or a resend after a failed
	// send on a loaded machine adds one now and then: what is counted is
	// fewer than two a refresh.
	direct := a.counter("grid_swim_state_sends_total", "reliable") - sends
	require.GreaterOrEqual(t, direct, float64(refreshes))
	require.Less(t, direct, float64(2*refreshes))
	require.Equal(t, gossiped, a.counter("grid_swim_state_sends_total", "gossip"), "a refresh is not gossiped")
}
