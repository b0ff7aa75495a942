package gossip

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gridsync/gridsync/gossip/sites"
)

// viewState is what a holds of site in its view ("" when unknown).
func viewState(a *testSite, site string) sites.SiteState {
	for _, st := range a.Status().Members {
		if st.Site == site {
			return st.State
		}
	}
	return ""
}

// awayInTheViewOnly has site-a's view hold site-b in state while both
// memberlists hold each other alive, as when the alive notice that ended
// a suspicion never reached site-a, and checks that site-a's ping takes
// site-b back: the view never goes through death on the way
// (stayedAlive), and the ping, not some other event, did it. An update
// event of b's start (its metadata settling, say) also takes b back; then
// the view is set away again, until the ping is what ended it.
func awayInTheViewOnly(t *testing.T, state sites.SiteState) {
	key := randomKey(t)
	a := startSite(t, "site-a", withKey(key))
	a.waitRunning(t)
	b := startSite(t, "site-b", withKey(key))
	b.waitRunning(t)
	require.Empty(t, b.AnnounceSeeds("prod", []string{a.AdvertiseAddr()}).Failed)
	require.Eventually(t, func() bool { return len(a.aliveNodes("")) == 1 && len(b.aliveNodes("")) == 1 }, 10*time.Second, 20*time.Millisecond)

	for attempt := 1; a.counter("grid_swim_sites_verified_alive_total", "") == 0; attempt++ {
		require.LessOrEqual(t, attempt, 5, "site-b was always taken back by something other than the ping")
		a.mu.Lock()
		m := a.members["site-b"]
		require.NotNil(t, m)
		m.state, m.since = state, a.cfg.Now()
		a.mu.Unlock()
		require.Equal(t, "alive", a.MemberlistState("site-b"), "memberlist none the wiser")

		deadline := time.Now().Add(10 * time.Second)
		for viewState(a, "site-b") != sites.SiteAlive {
			if state == sites.SiteSuspect {
				require.NotEqual(t, sites.SiteDead, viewState(a, "site-b"), "the suspicion ran out")
			}
			require.True(t, time.Now().Before(deadline), "site-b never alive again in the view")
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// The view can hold a site dead that memberlist holds alive: the view
// applies the reference's window to a suspicion memberlist refuted, and
// the site's alive notice was said where this site could not hear it (a
// cut), so no event will ever come. This site's ping, answered, takes the
// site back.
func TestAViewDeathMemberlistNeverSharedIsUndoneByThisSitesPing(t *testing.T) {
	awayInTheViewOnly(t, sites.SiteDead)
}

// A suspicion told by another site, whose end (the suspected site's alive
// notice) never reaches this one, is ended by this site's own ping of the
// site, which answers: the site is never taken for dead here.
func TestASuspicionWhoseEndNeverCameIsEndedByThisSitesPing(t *testing.T) {
	awayInTheViewOnly(t, sites.SiteSuspect)
}
