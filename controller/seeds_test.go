package controller_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/controller"
	membership "github.com/gridsync/gridsync/gossip"
	"github.com/gridsync/gridsync/gossip/sites"
	"github.com/gridsync/gridsync/shared/envelope"
)

// membershipSays waits until the network's Membership condition, written
// for its current generation, has the reason and satisfies ok.
func (e *env) membershipSays(network *v1alpha1.GridNetwork, reason string, ok func(*v1alpha1.GridNetwork) bool) *v1alpha1.GridNetwork {
	e.t.Helper()
	return e.networkStatus(network, reason, func(n *v1alpha1.GridNetwork) (bool, string) {
		c := condition(n, controller.ConditionMembership)
		return c.Reason == reason && c.ObservedGeneration == n.Generation && ok(n), phaseAndCounts(n)
	})
}

// aliveMember reports whether the runtime sees site as an alive member.
func aliveMember(s *swimSite, site string) bool {
	return slices.ContainsFunc(s.Status().Members, func(m membership.MemberStatus) bool {
		return m.Site == site && m.State == sites.SiteAlive
	})
}

// A network none of whose seeds ever resolved runs SWIM without seeds:
// the site is up, alone, its network's overlays published; the
// Membership condition says SeedsUnresolvable and names each entry, and
// the agent warns of each entry and of running seedless, once.
func TestSeedsThatNeverResolvedRunSwimSeedless(t *testing.T) {
	e := newEnv(t)
	gw := e.gateway("edge", "site-a")
	network := e.network(gw)
	network.Spec.Seeds = []string{"nowhere-1.grid.test:7946", "nowhere-2.grid.test:7946"}
	e.create(network)
	e.create(e.provider("local", network.Name, "model-a"))
	site := startSwimSite(t, "site-a", membership.Config{})
	e.startAgent(withMembership(site, seedNames{}))

	got := e.membershipSays(network, controller.ReasonSeedsUnresolvable, func(*v1alpha1.GridNetwork) bool { return true })
	c := condition(got, controller.ConditionMembership)
	assert.Equal(t, metav1.ConditionFalse, c.Status)
	assert.Contains(t, c.Message, "nowhere-1.grid.test:7946")
	assert.Contains(t, c.Message, "nowhere-2.grid.test:7946")
	assert.Contains(t, c.Message, "SWIM runs without seeds")
	assert.Equal(t, v1alpha1.NetworkInitializing, got.Status.Phase, "no remote site known")
	st := site.Status()
	assert.True(t, st.Running, "SWIM runs, seedless")
	assert.Empty(t, st.Members)
	e.overlayOf(network, gw, func(r envelope.Result) bool { return r.CandidateCount == 1 })

	// Later reconciles (the resync is 2 s) say nothing again.
	time.Sleep(3 * time.Second)
	logs := e.logs.String()
	assert.Equal(t, 2, strings.Count(logs, `"swim_seed_skipped"`), "each entry once")
	assert.Contains(t, logs, `"entry":"nowhere-1.grid.test:7946"`)
	assert.Equal(t, 1, strings.Count(logs, `"swim_seedless"`), "the degradation once")
}

// A network whose seeds resolved and joined another site, then all
// changed to entries that do not resolve, keeps the set last resolved:
// the site stays a member, the status names the skipped entries and the
// addresses kept, and when this site's node starts again (a change of
// spec.swim restarts it) it joins the kept seed again. A seed that
// resolves again is used.
func TestUnresolvableSeedsKeepTheLastResolvedSet(t *testing.T) {
	e := newEnv(t)
	gw := e.gateway("edge", "site-a")
	network := e.network(gw)
	remote := startSwimSite(t, "site-b", membership.Config{}).running(t)
	remote.SetIdentity(network.Name, sites.Identity{Open: true})
	require.NoError(t, remote.Publish(network.Name, "", []sites.Provider{{Name: "remote-1", Models: []string{"m1"}, Cluster: "b", Phase: "Available"}}))
	third := startSwimSite(t, "site-c", membership.Config{}).running(t)
	third.SetIdentity(network.Name, sites.Identity{Open: true})
	require.NoError(t, third.Publish(network.Name, "", []sites.Provider{{Name: "remote-2", Models: []string{"m2"}, Cluster: "c", Phase: "Available"}}))
	network.Spec.Seeds = []string{"site-b.grid.test:" + portOf(remote.AdvertiseAddr())}
	e.create(network)
	site := startSwimSite(t, "site-a", membership.Config{})
	e.startAgent(withMembership(site, seedNames{"site-b.grid.test": "127.0.0.1", "site-c.grid.test": "127.0.0.1"}))
	e.membershipSays(network, controller.ReasonMembershipRunning, func(n *v1alpha1.GridNetwork) bool {
		return n.Status.Phase == v1alpha1.NetworkActive && n.Status.ConnectedSites == 1
	})

	// Every seed now fails to resolve.
	update(e, network, func(n *v1alpha1.GridNetwork) {
		n.Spec.Seeds = []string{"gone-1.grid.test:7946", "gone-2.grid.test:" + portOf(remote.AdvertiseAddr())}
	})
	got := e.membershipSays(network, controller.ReasonSeedsUnresolvable, func(*v1alpha1.GridNetwork) bool { return true })
	c := condition(got, controller.ConditionMembership)
	assert.Equal(t, metav1.ConditionFalse, c.Status)
	assert.Contains(t, c.Message, "spec.seeds skipped")
	assert.Contains(t, c.Message, "gone-1.grid.test:7946")
	assert.Contains(t, c.Message, "kept: "+remote.AdvertiseAddr(), "the addresses kept are named")
	assert.NotContains(t, c.Message, "without seeds")
	assert.Equal(t, int32(1), got.Status.ConnectedSites, "the joined site stays a member")
	assert.NotContains(t, e.logs.String(), `"swim_seedless"`)

	// This site's node starts again, on another port: only the seed kept
	// brings site-b back (site-b knows no seed of its own).
	before := site.Status().Generation
	update(e, network, func(n *v1alpha1.GridNetwork) { n.Spec.Swim = &v1alpha1.SwimTimings{ProbeInterval: "800ms"} })
	e.eventually("site-a's node started again and joined site-b", func() (bool, string) {
		st := site.Status()
		return st.Running && st.Generation != before && aliveMember(site, "site-b"), fmt.Sprintf("generation %d, members %+v", st.Generation, st.Members)
	})
	assert.Contains(t, site.logs.String(), `"swim_restarting"`)
	e.eventually("site-b sees the new node", func() (bool, string) {
		return aliveMember(remote, "site-a"), fmt.Sprintf("%+v", remote.Status().Members)
	})
	e.membershipSays(network, controller.ReasonSeedsUnresolvable, func(n *v1alpha1.GridNetwork) bool {
		return n.Status.Phase == v1alpha1.NetworkActive && n.Status.ConnectedSites == 1
	})
	assert.False(t, aliveMember(site, "site-c"), "site-c is no seed yet")

	// A seed resolves again: it is used (site-c is joined), the entry
	// still failing named, the condition true again.
	update(e, network, func(n *v1alpha1.GridNetwork) {
		n.Spec.Seeds = []string{"gone-1.grid.test:7946", "site-c.grid.test:" + portOf(third.AdvertiseAddr())}
	})
	got = e.membershipSays(network, controller.ReasonMembershipRunning, func(n *v1alpha1.GridNetwork) bool {
		return n.Status.ConnectedSites == 2 && n.Status.RemoteProviderCount == 2
	})
	c = condition(got, controller.ConditionMembership)
	assert.Equal(t, metav1.ConditionTrue, c.Status)
	assert.Contains(t, c.Message, "gone-1.grid.test:7946")
	assert.NotContains(t, c.Message, "kept")
	assert.True(t, aliveMember(site, "site-c"))
}
