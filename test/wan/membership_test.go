// Package wan tests the site membership over the WAN lab (test/testwan):
// sites in network namespaces of their own, joined by links with delay,
// loss and partitions, reached through translated addresses.
package wan

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	membership "github.com/gridsync/gridsync/gossip"
	"github.com/gridsync/gridsync/gossip/sites"
	"github.com/gridsync/gridsync/gossip/swimkeys"
	"github.com/gridsync/gridsync/test/testwan"
	"github.com/gridsync/gridsync/trust/sitetrust"
)

func TestMain(m *testing.M) { testwan.Main(m) }

const network = "wan"

// grid is a test's sites: each a membership runtime whose sockets live in
// its lab site, with a site certificate from one grid CA.
type grid struct {
	t     *testing.T
	lab   *testwan.Lab
	key   []byte
	ca    *sitetrust.CA
	roots *x509.CertPool
	sites []*membership.Runtime
	stops []func()
}

// Fast timings, so that a test sees suspicion, death and reconnection in
// seconds; the links' delays are scaled with them.
func fastTimings(cfg membership.Config) membership.Config {
	cfg.ProbeInterval, cfg.ProbeTimeout, cfg.SuspectPeriods = 500*time.Millisecond, 250*time.Millisecond, 3
	cfg.GossipInterval = 50 * time.Millisecond
	cfg.ReconnectInterval = 500 * time.Millisecond
	cfg.ReconnectMaxBackoff = 2 * time.Second
	cfg.DeadMemory = 3 * time.Second
	return cfg
}

func newGrid(t *testing.T, lab *testwan.Lab) *grid {
	key := make([]byte, swimkeys.Size)
	_, err := rand.Read(key)
	require.NoError(t, err)
	caPEM, caKey, err := sitetrust.NewCA(time.Now(), time.Hour)
	require.NoError(t, err)
	ca, err := sitetrust.ParseCA(caPEM, caKey)
	require.NoError(t, err)
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	g := &grid{t: t, lab: lab, key: key, ca: ca, roots: roots}
	t.Cleanup(func() {
		for _, stop := range g.stops {
			stop()
		}
	})
	return g
}

// start runs lab site i's membership, advertised at advertise (its own
// address when empty), with one provider in the network.
func (g *grid) start(i int, advertise string, tune func(membership.Config) membership.Config) *membership.Runtime {
	t := g.t
	cfg := tune(membership.Config{
		Site:          fmt.Sprintf("site-%d", i),
		BindAddr:      netip.AddrPortFrom(g.lab.Addr(i), 7946).String(),
		AdvertiseAddr: advertise,
		EnvKey:        g.key, RequireKey: true,
		InNetwork: func(fn func() error) error { return g.lab.Do(i, fn) },
		Logger:    slog.New(slog.DiscardHandler),
	})
	rt, err := membership.New(context.Background(), cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = rt.Start(ctx) }()
	g.stops = append(g.stops, func() { cancel(); <-done })
	chain, key, err := g.ca.Issue(rt.Site(), time.Now(), time.Hour)
	require.NoError(t, err)
	pair, err := tls.X509KeyPair(chain, key)
	require.NoError(t, err)
	rt.SetIdentity(network, sites.Identity{Roots: g.roots, RootCerts: []*x509.Certificate{g.ca.Cert}, Signer: &pair})
	g.publish(rt, rt.Site()+"-llm")
	require.Eventually(t, func() bool { return rt.Status().Running }, 10*time.Second, 10*time.Millisecond)
	g.sites = append(g.sites, rt)
	return rt
}

func (g *grid) publish(rt *membership.Runtime, provider string) {
	chain := "" // the certificate was announced with the first record
	require.NoError(g.t, rt.Publish(network, chain, []sites.Provider{{Name: provider, Models: []string{"m"}, Cluster: "c", Phase: "Available"}}))
}

// join has every site after the first seed the first one at addr.
func (g *grid) join(addr string) {
	for _, rt := range g.sites[1:] {
		res := rt.AnnounceSeeds(network, []string{addr})
		require.Empty(g.t, res.Failed, "%s joining %s", rt.Site(), addr)
	}
}

// states is what rt holds of every other site.
func states(rt *membership.Runtime) map[string]sites.SiteState {
	out := map[string]sites.SiteState{}
	for _, m := range rt.Status().Members {
		out[m.Site] = m.State
	}
	return out
}

// allAlive says whether every site holds every other alive.
func (g *grid) allAlive() bool {
	for _, rt := range g.sites {
		st := states(rt)
		for _, other := range g.sites {
			if other != rt && st[other.Site()] != sites.SiteAlive {
				return false
			}
		}
	}
	return true
}

// providers are the names of site's providers as rt holds them.
func providers(rt *membership.Runtime, site string) []string {
	var out []string
	for _, p := range rt.View(network).Providers {
		if p.Site == site {
			out = append(out, p.Name)
		}
	}
	slices.Sort(out)
	return out
}

// A partition long enough for memberlist to forget the other side heals
// by itself: no seed is announced again, no controller reconciles. Each
// side dials the sites it holds dead until one answers, and the newest
// record each side signed meanwhile wins on the other.
func TestAHealedPartitionRejoinsWithoutAnySeedAnnounced(t *testing.T) {
	lab := testwan.New(t, testwan.Options{Sites: 4, Link: testwan.Link{Delay: 10 * time.Millisecond, Jitter: time.Millisecond}})
	g := newGrid(t, lab)
	for i := range 4 {
		g.start(i, "", fastTimings)
	}
	g.join(g.sites[0].AdvertiseAddr())
	require.Eventually(t, g.allAlive, 30*time.Second, 50*time.Millisecond, "the grid forms")

	lab.Partition([]int{0, 1}, []int{2, 3})
	require.Eventually(t, func() bool {
		st := states(g.sites[0])
		return st["site-2"] == sites.SiteDead && st["site-3"] == sites.SiteDead
	}, 30*time.Second, 50*time.Millisecond, "each side holds the other dead")
	// Meanwhile a site of each side signs a newer record.
	g.publish(g.sites[1], "site-1-during-cut")
	g.publish(g.sites[3], "site-3-during-cut")
	// memberlist gossips to the dead for DeadMemory (3 s here, 30 s by
	// default), then forgets them: from then on only a dial across brings
	// the two sides together.
	time.Sleep(6 * time.Second)
	require.False(t, g.allAlive())

	lab.Heal()
	healed := time.Now()
	require.Eventually(t, func() bool {
		return g.allAlive() && slices.Equal(providers(g.sites[0], "site-3"), []string{"site-3-during-cut"}) &&
			slices.Equal(providers(g.sites[2], "site-1"), []string{"site-1-during-cut"})
	}, 30*time.Second, 50*time.Millisecond, "the healed grid is whole, with the newest records")
	t.Logf("whole %s after the heal", time.Since(healed).Round(time.Millisecond))
}

// A site behind a load balancer is joined and probed at the address it
// advertises, which it does not bind, and stays alive: nothing answers
// from an address its peers did not dial.
func TestASiteBehindALoadBalancerIsJoinedAndProbedAtItsAdvertisedAddress(t *testing.T) {
	lab := testwan.New(t, testwan.Options{Sites: 3, Link: testwan.Link{Delay: 20 * time.Millisecond, Jitter: 2 * time.Millisecond}})
	vip, err := lab.Expose(0)
	require.NoError(t, err)
	g := newGrid(t, lab)
	advertised := netip.AddrPortFrom(vip, 7946).String()
	first := g.start(0, advertised, fastTimings)
	require.Equal(t, advertised, first.AdvertiseAddr())
	g.start(1, "", fastTimings)
	g.start(2, "", fastTimings)
	g.join(advertised)
	require.Eventually(t, g.allAlive, 30*time.Second, 50*time.Millisecond, "the grid forms through the load balancer address")
	for _, rt := range g.sites[1:] {
		for _, m := range rt.Status().Members {
			if m.Site == "site-0" {
				require.Equal(t, advertised, m.Address, "%s holds site-0 at its advertised address", rt.Site())
			}
		}
		require.Equal(t, []string{"site-0-llm"}, providers(rt, "site-0"))
	}
	// Twenty probe periods: every probe of site-0 crosses the translation.
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		require.True(t, g.allAlive(), "no site suspected behind the translation")
		time.Sleep(100 * time.Millisecond)
	}
}

// Over links that lose one packet in ten each way, with a round trip of
// a tenth of the probe timeout, no site is ever declared dead: the
// indirect probes, the stream fallback and Lifeguard's awareness make up
// for the lost ones.
func TestALossyGridDeclaresNoSiteDead(t *testing.T) {
	const n = 5
	lab := testwan.New(t, testwan.Options{Sites: n, Link: testwan.Link{Delay: 12 * time.Millisecond, Jitter: 2 * time.Millisecond, Loss: 0.10}})
	g := newGrid(t, lab)
	for i := range n {
		g.start(i, "", fastTimings)
	}
	g.join(g.sites[0].AdvertiseAddr())
	require.Eventually(t, g.allAlive, 60*time.Second, 50*time.Millisecond, "the grid forms over the lossy links")
	// Forty probe periods of every site.
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		for _, rt := range g.sites {
			for site, st := range states(rt) {
				require.NotEqual(t, sites.SiteDead, st, "%s declared %s dead over a lossy link", rt.Site(), site)
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	require.Positive(t, lab.Stats().Lost, "the links lost packets")
}

// A partition shorter than memberlist's own suspicion but longer than the
// view's window: the view declared the other side dead while memberlist
// still only suspected it, so the heal brings no join event. The site
// refutes, and says so in the view's terms as well: it is alive again
// everywhere within a few probe periods.
func TestASitePresumedDeadWhileMemberlistOnlySuspectedItComesBack(t *testing.T) {
	lab := testwan.New(t, testwan.Options{Sites: 2, Link: testwan.Link{Delay: 10 * time.Millisecond}})
	g := newGrid(t, lab)
	// Two sites: a suspicion has nobody to confirm it, so memberlist
	// waits its longest (six times the view's window) before a death.
	g.start(0, "", fastTimings)
	g.start(1, "", fastTimings)
	g.join(g.sites[0].AdvertiseAddr())
	require.Eventually(t, g.allAlive, 30*time.Second, 50*time.Millisecond, "the grid forms")

	lab.Partition([]int{0}, []int{1})
	require.Eventually(t, func() bool {
		return states(g.sites[0])["site-1"] == sites.SiteDead && states(g.sites[1])["site-0"] == sites.SiteDead
	}, 10*time.Second, 20*time.Millisecond, "each holds the other dead")
	lab.Heal()
	require.Eventually(t, g.allAlive, 5*time.Second, 20*time.Millisecond, "both alive again soon after the heal")
}

// A change whose direct copy a one-way cut kept from one site, while
// every site stayed alive (the indirect probes crossed the third site),
// reaches that site soon after the cut heals: the copy is owed and sent
// again, not left to a push/pull (a minute away here). Its record is too
// large to be gossiped, as a site's records with several providers are.
func TestADirectCopyAOneWayCutKeptIsSentAgainWhenItHeals(t *testing.T) {
	lab := testwan.New(t, testwan.Options{Sites: 3, Link: testwan.Link{Delay: 10 * time.Millisecond, Jitter: time.Millisecond}})
	g := newGrid(t, lab)
	slowPushPull := func(cfg membership.Config) membership.Config {
		cfg = fastTimings(cfg)
		cfg.PushPullInterval = time.Minute
		return cfg
	}
	for i := range 3 {
		g.start(i, "", slowPushPull)
	}
	g.join(g.sites[0].AdvertiseAddr())
	require.Eventually(t, g.allAlive, 30*time.Second, 50*time.Millisecond, "the grid forms")

	lab.CutOneWay([]int{0}, []int{1})
	var many []sites.Provider
	for i := range 24 {
		many = append(many, sites.Provider{Name: fmt.Sprintf("site-0-provider-%02d-with-a-long-name", i), Models: []string{"model-a", "model-b"}, Cluster: "c", Phase: "Available"})
	}
	require.NoError(t, g.sites[0].Publish(network, "", many))
	require.Eventually(t, func() bool { return len(providers(g.sites[2], "site-0")) == len(many) }, 10*time.Second, 20*time.Millisecond,
		"site-2 gets the change")
	// memberlist gives a stream 10 s: the copy to site-1 fails past it.
	time.Sleep(12 * time.Second)
	require.Equal(t, []string{"site-0-llm"}, providers(g.sites[1], "site-0"), "the cut kept the change from site-1")
	// Nobody dead: the cut is one way and the probes go around it. (A
	// suspicion on loaded cores may come and go, and would send the
	// records too; none lasts to a death.)
	for _, rt := range g.sites {
		for site, st := range states(rt) {
			require.NotEqual(t, sites.SiteDead, st, "%s holds %s dead", rt.Site(), site)
		}
	}

	lab.Heal()
	healed := time.Now()
	require.Eventually(t, func() bool { return len(providers(g.sites[1], "site-0")) == len(many) }, 8*time.Second, 20*time.Millisecond,
		"site-1 gets the change soon after the heal")
	t.Logf("site-1 had the change %s after the heal", time.Since(healed).Round(time.Millisecond))
}
