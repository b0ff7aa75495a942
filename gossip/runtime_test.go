package gossip

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gridsync/gridsync/gossip/internal/streamgate"
	"github.com/gridsync/gridsync/gossip/record"
	"github.com/gridsync/gridsync/gossip/sites"
	"github.com/gridsync/gridsync/gossip/swimkeys"
	"github.com/gridsync/gridsync/test/testproc"
)

// Fast timings for tests: the same protocol, a fifth of the reference's
// periods.
const (
	testProbe   = time.Second
	testTimeout = 600 * time.Millisecond
)

type testSite struct {
	*Runtime
	reg    *prometheus.Registry
	cancel context.CancelFunc
	done   chan struct{}
	logs   *testproc.Buffer
	// identities are those the site was started with, by network.
	identities map[string]sites.Identity
}

type siteOption func(*siteSetup)

// siteSetup is a test site's configuration and the networks it takes
// part in from the start (openly: no grid CA), prod unless told.
type siteSetup struct {
	Config
	networks   []string
	identities map[string]sites.Identity // replacing the open one
}

// inNetworks replaces the networks a test site takes part in.
func inNetworks(ns ...string) siteOption { return func(c *siteSetup) { c.networks = ns } }

func withKey(k []byte) siteOption             { return func(c *siteSetup) { c.EnvKey = k } }
func withRequireKey() siteOption              { return func(c *siteSetup) { c.RequireKey = true } }
func withStaleTTL(d time.Duration) siteOption { return func(c *siteSetup) { c.StaleTTL = d } }

// established: grid IDs never give way, as for grids formed long ago.
func established() siteOption { return func(c *siteSetup) { c.GridIDSettle = time.Nanosecond } }

// startSite starts a site's runtime on a loopback port, as its leader.
func startSite(t *testing.T, name string, opts ...siteOption) *testSite {
	t.Helper()
	reg := prometheus.NewRegistry()
	logs := &testproc.Buffer{}
	cfg := siteSetup{Config: Config{
		Site: name, BindAddr: "127.0.0.1:0",
		ProbeInterval: testProbe, ProbeTimeout: testTimeout, GossipInterval: 50 * time.Millisecond,
		PushPullInterval: 2 * time.Second, Registerer: reg,
		// Loopback joins take milliseconds; a loaded test machine may
		// take longer, and these tests read each join's outcome.
		JoinWait: 5 * time.Second,
		Logger:   slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}, networks: []string{"prod"}}
	for _, o := range opts {
		o(&cfg)
	}
	r, err := New(context.Background(), cfg.Config)
	require.NoError(t, err)
	for _, n := range cfg.networks {
		if _, signed := cfg.identities[n]; !signed {
			r.SetIdentity(n, sites.Identity{Open: true})
		}
	}
	for n, id := range cfg.identities {
		r.SetIdentity(n, id)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &testSite{Runtime: r, reg: reg, cancel: cancel, done: make(chan struct{}), logs: logs, identities: cfg.identities}
	go func() {
		defer close(s.done)
		if err := r.Start(ctx); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}()
	t.Cleanup(func() {
		s.stop()
		if t.Failed() {
			t.Logf("logs of %s:\n%s", name, tail(logs.String(), 40))
		}
	})
	return s
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// stop leaves and stops; kill stops without a word, as kill -9 does.
func (s *testSite) stop() {
	s.cancel()
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
	}
}

func (s *testSite) kill() {
	s.vanish.Store(true)
	s.stop()
}

func (s *testSite) waitRunning(t *testing.T) {
	t.Helper()
	require.Eventually(t, func() bool { return s.Status().Running }, 10*time.Second, 10*time.Millisecond, "%s never ran", s.Site())
}

func (s *testSite) counter(name, label string) float64 {
	mfs, _ := s.reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			matches := label == ""
			for _, l := range m.GetLabel() {
				matches = matches || l.GetValue() == label
			}
			if !matches {
				continue
			}
			if m.Counter != nil {
				return m.Counter.GetValue()
			}
			return m.Gauge.GetValue()
		}
	}
	return -1
}

func providers(names ...string) []sites.Provider {
	var out []sites.Provider
	for _, n := range names {
		out = append(out, sites.Provider{Name: n, Models: []string{"m-" + n}, Cluster: "c-" + n, Phase: "Available"})
	}
	return out
}

func remoteNames(v sites.NetworkView) []string {
	var out []string
	for _, p := range v.Providers {
		out = append(out, p.Site+"/"+p.Name)
	}
	return out
}

func randomKey(t *testing.T) []byte {
	k := make([]byte, swimkeys.Size)
	_, err := rand.Read(k)
	require.NoError(t, err)
	return k
}

// The reference's three-node mesh: A has no seeds, B seeds A, C seeds B
// only. A learns C through B; a second network's records stay in it.
func TestThreeSiteMesh(t *testing.T) {
	key := randomKey(t)
	a := startSite(t, "site-a", withKey(key))
	a.waitRunning(t)
	b := startSite(t, "site-b", withKey(key), inNetworks("prod", "other"))
	b.waitRunning(t)
	c := startSite(t, "site-c", withKey(key), inNetworks("prod", "other"))
	c.waitRunning(t)

	require.NoError(t, a.Publish("prod", "", providers("pa")))
	require.NoError(t, b.Publish("prod", "", providers("pb")))
	require.NoError(t, c.Publish("prod", "", providers("pc")))
	require.NoError(t, c.Publish("other", "", providers("secret-model")))

	res := b.AnnounceSeeds("prod", []string{a.AdvertiseAddr(), b.AdvertiseAddr()})
	require.Empty(t, res.Failed)
	require.Equal(t, []string{a.AdvertiseAddr()}, res.Joined, "the site's own address is never joined")
	res = c.AnnounceSeeds("prod", []string{b.AdvertiseAddr()})
	require.Empty(t, res.Failed)

	for _, s := range []*testSite{a, b, c} {
		require.Eventually(t, func() bool {
			v := s.View("prod")
			return v.Connected() == 2 && len(v.Providers) == 2
		}, 10*time.Second, 20*time.Millisecond, "%s: %+v", s.Site(), s.View("prod"))
	}
	require.Equal(t, []string{"site-b/pb", "site-c/pc"}, remoteNames(a.View("prod")), "A learns C through B")
	require.Empty(t, remoteNames(a.View("other")), "a network A takes no part in: its records are refused")
	require.Equal(t, []string{"site-c/secret-model"}, remoteNames(b.View("other")), "B takes part in it")
	for _, p := range a.View("prod").Providers {
		require.NotEqual(t, "secret-model", p.Name, "a record of another network")
		require.False(t, p.Stale)
	}
	// One grid ID, negotiated.
	require.NotEmpty(t, a.GridID())
	require.Eventually(t, func() bool { return b.GridID() == a.GridID() && c.GridID() == a.GridID() }, 5*time.Second, 10*time.Millisecond)

	// Joining again is idempotent: alive sites are not joined twice.
	res = c.AnnounceSeeds("prod", []string{b.AdvertiseAddr(), a.AdvertiseAddr()})
	require.Empty(t, res.Joined)

	// A change at one site reaches every site, and a removed provider
	// disappears (a new version of the set).
	require.NoError(t, c.Publish("prod", "", providers("pc", "pc2")))
	require.NoError(t, b.Publish("prod", "", nil))
	for s, want := range map[*testSite][]string{
		a: {"site-c/pc", "site-c/pc2"},
		b: {"site-a/pa", "site-c/pc", "site-c/pc2"},
	} {
		require.Eventually(t, func() bool { return slicesEqual(remoteNames(s.View("prod")), want) }, 5*time.Second, 10*time.Millisecond,
			"%s: %v", s.Site(), remoteNames(s.View("prod")))
	}
}

func slicesEqual(a, b []string) bool { return strings.Join(a, ",") == strings.Join(b, ",") }

// joinedPair starts site-a and site-b with one key, site-b seeding
// site-a in network prod.
func joinedPair(t *testing.T) (a, b *testSite) {
	key := randomKey(t)
	a = startSite(t, "site-a", withKey(key))
	a.waitRunning(t)
	b = startSite(t, "site-b", withKey(key))
	b.waitRunning(t)
	require.Empty(t, b.AnnounceSeeds("prod", []string{a.AdvertiseAddr()}).Failed)
	return a, b
}

// A site with the wrong key never joins; its packets are counted and
// dropped before membership sees them.
func TestWrongKeyNeverJoins(t *testing.T) {
	a, b := joinedPair(t)
	require.NoError(t, a.Publish("prod", "", providers("pa")))

	intruder := startSite(t, "site-x", withKey(randomKey(t)))
	intruder.waitRunning(t)
	require.NoError(t, intruder.Publish("prod", "", providers("evil")))
	res := intruder.AnnounceSeeds("prod", []string{a.AdvertiseAddr()})
	require.Len(t, res.Failed, 1, "the join of a site with a wrong key fails")
	require.Eventually(t, func() bool { return a.counter("grid_swim_packets_rejected_total", streamgate.RejectUnknownKey) > 0 }, 30*time.Second, 10*time.Millisecond)
	time.Sleep(4 * testProbe)
	for _, s := range []*testSite{a, b} {
		for _, m := range s.Status().Members {
			require.NotEqual(t, "site-x", m.Site)
		}
		require.NotContains(t, remoteNames(s.View("prod")), "site-x/evil")
	}
	require.Empty(t, intruder.Status().Members)

	// A site in the clear is refused as well.
	clear := startSite(t, "site-y")
	clear.SetNetworkKeys("prod", nil, false)
	clear.waitRunning(t)
	require.Len(t, clear.AnnounceSeeds("prod", []string{a.AdvertiseAddr()}).Failed, 1)
	require.Eventually(t, func() bool { return a.counter("grid_swim_packets_rejected_total", streamgate.RejectNotEncrypted) > 0 }, 30*time.Second, 10*time.Millisecond)
}

// Nothing is sent or received until a key loads; a network that declares
// none releases the hold to the clear, and a key loaded later ends the
// clear (a new generation); a declared key that does not load never lets
// the clear in.
func TestKeyHold(t *testing.T) {
	s := startSite(t, "site-a", withRequireKey())
	time.Sleep(200 * time.Millisecond)
	require.False(t, s.Status().Running)
	require.Equal(t, float64(1), s.counter("grid_swim_key_pending", ""))

	s.SetNetworkKeys("secured", nil, true) // declared, not loaded
	s.SetNetworkKeys("open", nil, false)
	time.Sleep(200 * time.Millisecond)
	require.False(t, s.Status().Running, "a declared key that failed keeps the hold")

	s.SetNetworkKeys("secured", nil, false)
	s.waitRunning(t)
	require.False(t, s.Status().Encrypted)
	require.Equal(t, float64(0), s.counter("grid_swim_key_pending", ""))
	gen := s.Status().Generation

	s.SetNetworkKeys("secured", &swimkeys.Set{Primary: randomKey(t)}, false)
	require.Eventually(t, func() bool { st := s.Status(); return st.Running && st.Encrypted && st.Generation > gen }, 10*time.Second, 10*time.Millisecond)

	// Removing every key never falls back to the clear.
	s.SetNetworkKeys("secured", nil, false)
	time.Sleep(200 * time.Millisecond)
	st := s.Status()
	require.True(t, st.Encrypted)
	require.Equal(t, 1, st.KeysInstalled)
}

// The three steps of a rotation, each on every site in turn, while
// records keep changing: no site is ever suspected, every change
// arrives, and a site with only the retired key is shut out at the end.
func TestKeyRotationWithoutRestart(t *testing.T) {
	oldKey, newKey := randomKey(t), randomKey(t)
	var members []*testSite
	for _, n := range []string{"site-a", "site-b", "site-c"} {
		s := startSite(t, n, withRequireKey())
		s.SetNetworkKeys("prod", &swimkeys.Set{Primary: oldKey}, false)
		s.waitRunning(t)
		members = append(members, s)
	}
	gens := map[string]uint64{}
	for _, s := range members[1:] {
		require.Empty(t, s.AnnounceSeeds("prod", []string{members[0].AdvertiseAddr()}).Failed)
	}
	for _, s := range members {
		gens[s.Site()] = s.Status().Generation
		require.Eventually(t, func() bool { return len(s.Status().Members) == 2 }, 5*time.Second, 10*time.Millisecond)
	}

	// Watch: any site ever seen not alive fails the test.
	stopWatch := make(chan struct{})
	var watchErr error
	var watchMu sync.Mutex
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stopWatch:
				return
			case <-time.After(20 * time.Millisecond):
			}
			for _, s := range members {
				for _, m := range s.Status().Members {
					if m.State != sites.SiteAlive {
						watchMu.Lock()
						if watchErr == nil {
							watchErr = fmt.Errorf("%s saw %s %s", s.Site(), m.Site, m.State)
						}
						watchMu.Unlock()
					}
				}
			}
		}
	}()
	round := 0
	change := func() {
		round++
		for _, s := range members {
			require.NoError(t, s.Publish("prod", "", providers(fmt.Sprintf("%s-r%d", s.Site(), round))))
		}
		for _, s := range members {
			require.Eventually(t, func() bool {
				v := s.View("prod")
				if len(v.Providers) != 2 {
					return false
				}
				for _, p := range v.Providers {
					if !strings.HasSuffix(p.Name, fmt.Sprintf("-r%d", round)) {
						return false
					}
				}
				return true
			}, 10*time.Second, 10*time.Millisecond, "round %d at %s: %v", round, s.Site(), remoteNames(s.View("prod")))
		}
	}
	steps := []*swimkeys.Set{
		{Primary: oldKey, Others: [][]byte{newKey}}, // 1. install the next key
		{Primary: newKey, Others: [][]byte{oldKey}}, // 2. send with it
		{Primary: newKey}, // 3. retire the old one
	}
	for i, ks := range steps {
		for _, s := range members {
			s.SetNetworkKeys("prod", ks, false)
			change()
		}
		want := 2
		if i == 2 {
			want = 1
		}
		for _, s := range members {
			require.Eventually(t, func() bool { return s.Status().KeysInstalled == want }, 5*time.Second, 10*time.Millisecond)
		}
	}
	time.Sleep(3 * testProbe)
	close(stopWatch)
	wg.Wait()
	require.NoError(t, watchErr)
	for _, s := range members {
		require.Equal(t, gens[s.Site()], s.Status().Generation, "no restart")
	}

	retired := startSite(t, "site-z", withKey(oldKey))
	retired.waitRunning(t)
	require.Len(t, retired.AnnounceSeeds("prod", []string{members[0].AdvertiseAddr()}).Failed, 1)
	require.Eventually(t, func() bool {
		return members[0].counter("grid_swim_packets_rejected_total", streamgate.RejectUnknownKey) > 0
	}, 30*time.Second, 10*time.Millisecond)
}

// A killed site is suspected, then dead after the suspicion window; its
// records turn stale, then go after the stale TTL; a new generation of
// the site supersedes it from a new address at once.
func TestDepartureAndSupersede(t *testing.T) {
	key := randomKey(t)
	a := startSite(t, "site-a", withKey(key), withStaleTTL(3*time.Second))
	a.waitRunning(t)
	b := startSite(t, "site-b", withKey(key))
	b.waitRunning(t)
	c := startSite(t, "site-c", withKey(key))
	c.waitRunning(t)
	for _, s := range []*testSite{b, c} {
		require.Empty(t, s.AnnounceSeeds("prod", []string{a.AdvertiseAddr()}).Failed)
	}
	require.NoError(t, c.Publish("prod", "", providers("pc")))
	require.NoError(t, b.Publish("prod", "", providers("pb")))
	require.Eventually(t, func() bool { return len(a.View("prod").Providers) == 2 }, 5*time.Second, 10*time.Millisecond)
	oldGen := c.Status().Generation

	killed := time.Now()
	c.kill()
	var suspectAt, deadAt time.Duration
	require.Eventually(t, func() bool {
		for _, s := range a.View("prod").Sites {
			if s.Name != "site-c" {
				continue
			}
			if s.State == sites.SiteSuspect && suspectAt == 0 {
				suspectAt = time.Since(killed)
			}
			if s.State == sites.SiteDead {
				deadAt = time.Since(killed)
				return true
			}
		}
		return false
	}, 20*time.Second, 10*time.Millisecond)
	require.NotZero(t, suspectAt, "suspect before dead")
	require.GreaterOrEqual(t, deadAt-suspectAt, time.Duration(DefaultSuspectPeriods)*testProbe-200*time.Millisecond, "kept suspect for the window")
	v := a.View("prod")
	require.Equal(t, 1, v.Connected())
	for _, p := range v.Providers {
		require.Equal(t, p.Site == "site-c", p.Stale, "%+v", p)
	}
	require.Eventually(t, func() bool { return slicesEqual(remoteNames(a.View("prod")), []string{"site-b/pb"}) }, 10*time.Second, 20*time.Millisecond,
		"dropped after the stale TTL")

	// A new agent of site-c, on a new port: a greater generation, alive
	// at once (no wait for the old identity to be reclaimed).
	c2 := startSite(t, "site-c", withKey(key))
	c2.waitRunning(t)
	require.Greater(t, c2.Status().Generation, oldGen)
	require.NoError(t, c2.Publish("prod", "", providers("pc-new")))
	require.Empty(t, c2.AnnounceSeeds("prod", []string{a.AdvertiseAddr()}).Failed)
	require.Eventually(t, func() bool {
		for _, m := range a.Status().Members {
			if m.Site == "site-c" && m.State == sites.SiteAlive && m.Generation == c2.Status().Generation {
				return true
			}
		}
		return false
	}, 3*time.Second, 10*time.Millisecond)
	require.Eventually(t, func() bool { return slicesEqual(remoteNames(a.View("prod")), []string{"site-b/pb", "site-c/pc-new"}) }, 5*time.Second, 10*time.Millisecond)
	count := 0
	for _, m := range a.Status().Members {
		if m.Site == "site-c" {
			count++
		}
	}
	require.Equal(t, 1, count, "one member per site")
}

// A graceful stop is a departure peers see at once. The seeds a network
// announced are remembered: rejoining them dials a departed seed again.
// unencryptedPair starts site-a and site-b on network "prod" without a key,
// b publishing a provider and joined to a, which sees it connected.
func unencryptedPair(t *testing.T) (a, b *testSite) {
	t.Helper()
	a = startSite(t, "site-a")
	a.SetNetworkKeys("prod", nil, false)
	a.waitRunning(t)
	b = startSite(t, "site-b")
	b.SetNetworkKeys("prod", nil, false)
	b.waitRunning(t)
	require.NoError(t, b.Publish("prod", "", providers("pb")))
	require.Empty(t, b.AnnounceSeeds("prod", []string{a.AdvertiseAddr()}).Failed)
	require.Eventually(t, func() bool { return a.View("prod").Connected() == 1 }, 5*time.Second, 10*time.Millisecond)
	return a, b
}

func TestLeaveIsSeenAtOnce(t *testing.T) {
	a, b := unencryptedPair(t)
	res := a.AnnounceSeeds("prod", []string{b.AdvertiseAddr()})
	require.Empty(t, res.Joined, "an alive site is not joined again")
	require.Empty(t, res.Failed)
	b.stop()
	require.Eventually(t, func() bool {
		v := a.View("prod")
		return len(v.Sites) == 1 && v.Sites[0].State == sites.SiteLeft
	}, testProbe, 10*time.Millisecond)
	res = a.RejoinSeeds("prod")
	require.Len(t, res.Failed, 1, "the remembered seed is dialled again")
	require.Equal(t, b.AdvertiseAddr(), res.Failed[0].Entry)
}

// A peer that learns of the leave before the leaving notice (both ride
// gossip, memberlist's own messages first) still sees the site Left.
func TestALeaveBeforeItsNoticeIsStillALeave(t *testing.T) {
	a, _ := unencryptedPair(t)

	a.mu.Lock()
	name := a.members["site-b"].name
	ml := a.ml
	a.mu.Unlock()
	var node *memberlist.Node
	for _, n := range ml.Members() {
		if n.Name == name {
			node = n
		}
	}
	require.NotNil(t, node)
	d := &delegate{r: a.Runtime}
	d.NotifyLeave(node) // the leave first: taken for a death
	require.Equal(t, sites.SiteDead, a.View("prod").Sites[0].State)
	a.applyNotice(record.Notice{Member: name, Leaving: true, At: 1})
	assert.Equal(t, sites.SiteLeft, a.View("prod").Sites[0].State, "gone and leaving is Left")
}

// twoGrids forms two grids apart: site-b joins site-a, site-y joins
// site-x; each pair agrees on its own grid ID.
func twoGrids(t *testing.T, opts ...siteOption) (a, b, x, y *testSite) {
	key := randomKey(t)
	opts = append(opts, withKey(key))
	a, b = startSite(t, "site-a", opts...), startSite(t, "site-b", opts...)
	x, y = startSite(t, "site-x", opts...), startSite(t, "site-y", opts...)
	for _, s := range []*testSite{a, b, x, y} {
		s.waitRunning(t)
	}
	require.Empty(t, b.AnnounceSeeds("one", []string{a.AdvertiseAddr()}).Failed)
	require.Empty(t, y.AnnounceSeeds("two", []string{x.AdvertiseAddr()}).Failed)
	require.Eventually(t, func() bool {
		return a.GridID() != "" && a.GridID() == b.GridID() && x.GridID() != "" && x.GridID() == y.GridID()
	}, 5*time.Second, 10*time.Millisecond)
	require.NotEqual(t, a.GridID(), x.GridID())
	return a, b, x, y
}

// Two grids formed apart never merge.
func TestGridIDConflictRefused(t *testing.T) {
	a, _, _, y := twoGrids(t, established())
	res := y.AnnounceSeeds("one", []string{a.AdvertiseAddr()})
	require.True(t, res.Conflict, "%+v", res)
	require.Len(t, res.Failed, 1)
	time.Sleep(4 * testProbe)
	for _, m := range a.Status().Members {
		require.Equal(t, "site-b", m.Site)
	}
	require.Positive(t, a.counter("grid_swim_grid_id_conflicts_total", "")+y.counter("grid_swim_grid_id_conflicts_total", ""))
}

// Grids started together (each pair generating its own ID) converge on
// one ID instead of refusing each other.
func TestGridsStartedTogetherConverge(t *testing.T) {
	a, b, x, y := twoGrids(t)
	res := y.AnnounceSeeds("one", []string{a.AdvertiseAddr()})
	require.Empty(t, res.Failed)
	require.Eventually(t, func() bool {
		id := a.GridID()
		return b.GridID() == id && x.GridID() == id && y.GridID() == id && len(x.Status().Members) == 3
	}, 10*time.Second, 10*time.Millisecond)
}

// Malformed and oversized messages are dropped and counted; a PEM with a
// private key is never stored nor passed on; one without a certificate
// is marked invalid.
func TestBadGossipDropped(t *testing.T) {
	a, b := joinedPair(t)
	require.Eventually(t, func() bool { return len(a.Status().Members) == 1 }, 5*time.Second, 10*time.Millisecond)

	b.mu.Lock()
	ml := b.ml
	b.mu.Unlock()
	nodes := b.aliveNodes("")
	require.Len(t, nodes, 1)
	target := nodes[0]
	send := func(msg []byte) { require.NoError(t, ml.SendReliable(target, msg)) }

	send([]byte{record.MsgRecords, '{', 'x'})
	send([]byte{99, '{', '}'})
	huge := append([]byte{record.MsgRecords}, bytes.Repeat([]byte(" "), record.MaxMessageBytes)...)
	send(huge)
	long, _ := record.EncodeRecords([]Record{{Network: "prod", Site: "site-b", Kind: KindSite, CertPEM: strings.Repeat("A", 16<<10+1)}}) // a byte over the PEM bound
	send(long)
	require.Eventually(t, func() bool {
		return a.counter("grid_swim_messages_dropped_total", record.DropMalformed) == 1 &&
			a.counter("grid_swim_messages_dropped_total", record.DropUnknownType) == 1 &&
			a.counter("grid_swim_messages_dropped_total", record.DropOversized) == 2
	}, 30*time.Second, 10*time.Millisecond)

	const keyPEM = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIBsecret\n-----END EC PRIVATE KEY-----\n"
	withKeyPEM, _ := record.EncodeRecords([]Record{{Network: "prod", Site: "site-b", Kind: KindSite, Version: uint64(time.Now().UnixNano()), GatewayAddress: "127.0.0.1:8443", CertPEM: keyPEM}})
	send(withKeyPEM)
	require.Eventually(t, func() bool { return a.counter("grid_swim_messages_dropped_total", record.DropPrivateKey) == 1 }, 30*time.Second, 10*time.Millisecond)
	// Under load the 8 MiB stream above can hold b's acks long enough for
	// a to take b for gone a moment; b refutes it and is back.
	var v sites.NetworkView
	require.Eventually(t, func() bool { v = a.View("prod"); return len(v.Sites) == 1 }, 10*time.Second, 10*time.Millisecond)
	require.Equal(t, "127.0.0.1:8443", v.Sites[0].GatewayAddress, "the record is kept without its PEM")
	require.Empty(t, v.Sites[0].CertPEM)
	for _, r := range a.store.All() {
		require.NotContains(t, r.CertPEM, "PRIVATE KEY")
	}
	require.Contains(t, a.logs.String(), "swim_private_key_discarded")
	require.NotContains(t, a.logs.String(), "MHcCAQEEIBsecret")

	notACert, _ := record.EncodeRecords([]Record{{Network: "prod", Site: "site-b", Kind: KindSite, Version: uint64(time.Now().UnixNano()), CertPEM: "hello"}})
	send(notACert)
	require.Eventually(t, func() bool { v := a.View("prod"); return len(v.Sites) == 1 && v.Sites[0].CertInvalid }, 5*time.Second, 10*time.Millisecond)

	// This site refuses to gossip a key itself.
	require.Error(t, b.Publish("prod", keyPEM, nil))
}
