package gossip

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gridsync/gridsync/gossip/sites"
)

// A network's spec.gridId pins the grid: the site adopts it at once, a
// peer holding no ID or a young one adopts it too, and a peer of an
// established other grid is refused. The site's region and zone travel in
// its signed site record, and what it offers says it serves inference.
func TestNetworkSettingsPinTheGridAndTravel(t *testing.T) {
	key := randomKey(t)
	a := startSite(t, "site-a", withKey(key))
	a.waitRunning(t)
	a.SetNetworkSettings("prod", sites.NetworkSettings{GridID: "grid-pinned", Region: "us-east-1", Zone: "us-east-1a"})
	require.NoError(t, a.Publish("prod", "", providers("vllm-a")))
	assert.Equal(t, "grid-pinned", a.GridID())

	b := startSite(t, "site-b", withKey(key))
	b.waitRunning(t)
	require.Empty(t, b.AnnounceSeeds("prod", []string{a.AdvertiseAddr()}).Failed)
	require.Eventually(t, func() bool {
		v := b.View("prod")
		return b.GridID() == "grid-pinned" && len(v.Sites) == 1 && v.Sites[0].Region == "us-east-1" && v.Sites[0].Inference
	}, 5*time.Second, 10*time.Millisecond)
	site := b.View("prod").Sites[0]
	assert.Equal(t, "us-east-1a", site.Zone)
	assert.Equal(t, "grid-pinned", b.View("prod").GridID)
	// a learns of b by b's join, which may reach it after b's view is
	// complete.
	require.Eventually(t, func() bool { return a.View("prod").AlivePeers == 1 }, 5*time.Second, 10*time.Millisecond,
		"a counts b alive")

	// A change of zone is announced again.
	a.SetNetworkSettings("prod", sites.NetworkSettings{GridID: "grid-pinned", Region: "us-east-1", Zone: "us-east-1b"})
	require.Eventually(t, func() bool { return b.View("prod").Sites[0].Zone == "us-east-1b" }, 5*time.Second, 10*time.Millisecond)

	// A young grid gives way to the pinned one.
	p, q := startSite(t, "site-p", withKey(key)), startSite(t, "site-q", withKey(key))
	p.waitRunning(t)
	q.waitRunning(t)
	require.Empty(t, q.AnnounceSeeds("prod", []string{p.AdvertiseAddr()}).Failed)
	require.Eventually(t, func() bool { return p.GridID() != "" && p.GridID() == q.GridID() }, 5*time.Second, 10*time.Millisecond)
	require.Empty(t, q.AnnounceSeeds("prod", []string{a.AdvertiseAddr()}).Failed)
	require.Eventually(t, func() bool { return p.GridID() == "grid-pinned" && q.GridID() == "grid-pinned" }, 10*time.Second, 10*time.Millisecond)

	// An established other grid is refused.
	x, y := startSite(t, "site-x", withKey(key), established()), startSite(t, "site-y", withKey(key), established())
	x.waitRunning(t)
	y.waitRunning(t)
	require.Empty(t, y.AnnounceSeeds("prod", []string{x.AdvertiseAddr()}).Failed)
	require.Eventually(t, func() bool { return x.GridID() != "" && x.GridID() == y.GridID() }, 5*time.Second, 10*time.Millisecond)
	res := y.AnnounceSeeds("prod", []string{a.AdvertiseAddr()})
	assert.True(t, res.Conflict, "%+v", res)
	assert.Equal(t, "grid-pinned", a.GridID())
}

// A network's spec.swim drives the node: the shortest probe interval, the
// longest suspicion and the widest gossip of the networks, the flags for
// what none sets; a change restarts the node with them.
func TestNetworkSwimTimingsDriveTheNode(t *testing.T) {
	a := startSite(t, "site-a")
	a.waitRunning(t)
	running := func() timings {
		a.mu.Lock()
		defer a.mu.Unlock()
		return a.running
	}
	assert.Equal(t, timings{probe: testProbe, probeTimeout: testTimeout, suspicion: 3 * testProbe, gossipNodes: DefaultGossipNodes}, running())
	gen := a.Status().Generation

	a.SetNetworkSettings("prod", sites.NetworkSettings{Swim: sites.SwimTimings{ProbeInterval: 500 * time.Millisecond, SuspicionTimeout: 4 * time.Second}})
	a.SetNetworkSettings("lab", sites.NetworkSettings{Swim: sites.SwimTimings{ProbeInterval: 800 * time.Millisecond, GossipNodes: 5}})
	want := timings{probe: 500 * time.Millisecond, probeTimeout: 300 * time.Millisecond, suspicion: 4 * time.Second, gossipNodes: 5}
	require.Eventually(t, func() bool { return running() == want && a.Status().Running && a.Status().Generation != gen },
		5*time.Second, 10*time.Millisecond, "running %+v", running())
	assert.Contains(t, a.logs.String(), "spec.swim changed the timings")
	// The node runs before it says so: the line of its start is waited
	// for before the starts are counted.
	require.Eventually(t, func() bool {
		return strings.Contains(a.logs.String(), `"probe_interval":"500ms","suspicion":"4s","gossip_nodes":5`)
	}, 5*time.Second, 10*time.Millisecond, "the restart with the networks' timings never said so")
	started := strings.Count(a.logs.String(), `"msg":"swim_started"`)

	// The same settings again restart nothing.
	a.SetNetworkSettings("prod", sites.NetworkSettings{Swim: sites.SwimTimings{ProbeInterval: 500 * time.Millisecond, SuspicionTimeout: 4 * time.Second}})
	time.Sleep(200 * time.Millisecond)
	assert.Equal(t, started, strings.Count(a.logs.String(), `"msg":"swim_started"`))

	// The networks gone, the flags' timings are back.
	a.Forget("prod")
	a.Forget("lab")
	require.Eventually(t, func() bool {
		return running() == timings{probe: testProbe, probeTimeout: testTimeout, suspicion: 3 * testProbe, gossipNodes: DefaultGossipNodes}
	},
		5*time.Second, 10*time.Millisecond, "running %+v", running())
}
