package gossip

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gridsync/gridsync/gossip/sites"
)

// The view can hold a site dead that memberlist holds alive: the view
// applies the reference's window to a suspicion memberlist refuted, and
// the site's alive notice was said where this site could not hear it (a
// cut), so no event will ever come. This site's ping, answered, takes the
// site back.
func TestAViewDeathMemberlistNeverSharedIsUndoneByThisSitesPing(t *testing.T) {
	key := randomKey(t)
	a := startSite(t, "site-a", withKey(key))
	a.waitRunning(t)
	b := startSite(t, "site-b", withKey(key))
	b.waitRunning(t)
	require.Empty(t, b.AnnounceSeeds("prod", []string{a.AdvertiseAddr()}).Failed)
	require.Eventually(t, func() bool { return len(a.aliveNodes("")) == 1 && len(b.aliveNodes("")) == 1 }, 10*time.Second, 20*time.Millisecond)

	// B's start-up metadata (each change an update event, which would
	// take it back) is settled.
	time.Sleep(time.Second)
	// The view's death, memberlist none the wiser.
	a.mu.Lock()
	m := a.members["site-b"]
	require.NotNil(t, m)
	m.state, m.since = sites.SiteDead, a.cfg.Now()
	a.mu.Unlock()
	require.Equal(t, "alive", a.MemberlistState("site-b"))

	require.Eventually(t, func() bool {
		for _, st := range a.Status().Members {
			if st.Site == "site-b" {
				return st.State == sites.SiteAlive
			}
		}
		return false
	}, 10*time.Second, 20*time.Millisecond, "the view holds site-b alive again")
	require.Positive(t, a.counter("grid_swim_sites_verified_alive_total", ""))
}

// A suspicion told by another site, whose end (the suspected site's alive
// notice) never reaches this one, is ended by this site's own ping of the
// site, which answers: the site is never taken for dead here.
func TestASuspicionWhoseEndNeverCameIsEndedByThisSitesPing(t *testing.T) {
	key := randomKey(t)
	a := startSite(t, "site-a", withKey(key))
	a.waitRunning(t)
	b := startSite(t, "site-b", withKey(key))
	b.waitRunning(t)
	require.Empty(t, b.AnnounceSeeds("prod", []string{a.AdvertiseAddr()}).Failed)
	require.Eventually(t, func() bool { return len(a.aliveNodes("")) == 1 && len(b.aliveNodes("")) == 1 }, 10*time.Second, 20*time.Millisecond)
	time.Sleep(time.Second) // b's start-up metadata updates are over

	// A suspicion as another site's notice brings it, applied here only:
	// b never hears of it, and says nothing back.
	a.mu.Lock()
	m := a.members["site-b"]
	require.NotNil(t, m)
	m.state, m.since = sites.SiteSuspect, a.cfg.Now()
	a.mu.Unlock()

	stateOfB := func() sites.SiteState {
		for _, st := range a.Status().Members {
			if st.Site == "site-b" {
				return st.State
			}
		}
		return ""
	}
	deadline := time.Now().Add(10 * time.Second)
	for stateOfB() != sites.SiteAlive {
		require.NotEqual(t, sites.SiteDead, stateOfB(), "the suspicion ran out")
		require.True(t, time.Now().Before(deadline), "site-b never alive again")
		time.Sleep(10 * time.Millisecond)
	}
	require.Positive(t, a.counter("grid_swim_sites_verified_alive_total", ""))
}
