package gossip

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gridsync/gridsync/gossip/sites"
)

// aliveMembers are the sites s holds alive.
func aliveMembers(s *testSite) []string {
	var out []string
	for _, m := range s.Status().Members {
		if m.State == sites.SiteAlive {
			out = append(out, m.Site)
		}
	}
	return out
}

// Removing a seed disconnects nobody: the site it named stays a member,
// alive on both sides, as long as it answers probes.
func TestRemovingASeedDisconnectsNobody(t *testing.T) {
	a, b := joinedPair(t)
	require.Eventually(t, func() bool { return len(aliveMembers(b)) == 1 && len(aliveMembers(a)) == 1 }, 10*time.Second, 10*time.Millisecond)

	res := b.AnnounceSeeds("prod", nil)
	assert.Empty(t, res.Failed)
	// Several probe rounds: a site disconnected would be gone by now.
	time.Sleep(5 * testProbe)
	assert.Equal(t, []string{"site-a"}, aliveMembers(b), "the unlisted seed's site is still a member")
	assert.Equal(t, []string{"site-b"}, aliveMembers(a))
}

// A network whose non-empty seed list wholly failed keeps its last good
// set: RejoinSeeds joins it again (here, a site that came up at a seed's
// address after the one there went away). A network that never had one
// stays seedless: nothing is joined, and nothing fails.
func TestAWhollyFailedSeedListKeepsTheLastGoodSet(t *testing.T) {
	key := randomKey(t)
	// A fixed address, so that a site started there later is found by
	// the seed remembered.
	l, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	at := func(c *siteSetup) { c.BindAddr = addr }

	first := startSite(t, "site-a", withKey(key), at)
	first.waitRunning(t)
	b := startSite(t, "site-b", withKey(key))
	b.waitRunning(t)
	require.Empty(t, b.AnnounceSeeds("prod", []string{first.AdvertiseAddr()}).Failed)
	require.Eventually(t, func() bool { return len(aliveMembers(b)) == 1 }, 10*time.Second, 10*time.Millisecond)

	first.stop()
	require.Eventually(t, func() bool { return len(aliveMembers(b)) == 0 }, 30*time.Second, 20*time.Millisecond, "site-a left")
	second := startSite(t, "site-c", withKey(key), at)
	second.waitRunning(t)
	time.Sleep(2 * testProbe)
	require.Empty(t, aliveMembers(b), "nobody joins site-c by itself")

	// What the membership stage does when every configured seed failed
	// to resolve: the set last announced is joined again.
	res := b.RejoinSeeds("prod")
	require.Empty(t, res.Failed)
	require.Equal(t, []string{addr}, res.Seeds, "the set kept, for the network's status")
	require.Eventually(t, func() bool { return len(aliveMembers(b)) == 1 && aliveMembers(b)[0] == "site-c" }, 10*time.Second, 10*time.Millisecond,
		"the last good set, joined again")

	// Seedless: a network that never had a good set joins nothing.
	lone := startSite(t, "site-d", withKey(key))
	lone.waitRunning(t)
	res = lone.RejoinSeeds("prod")
	assert.Empty(t, res.Failed)
	assert.Empty(t, res.Seeds, "no set kept")
	assert.False(t, res.Conflict)
	time.Sleep(testProbe)
	assert.Empty(t, lone.Status().Members, "seedless")
}
