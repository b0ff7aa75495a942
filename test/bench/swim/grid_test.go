package swim

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	mathrand "math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	membership "github.com/gridsync/gridsync/gossip"
	"github.com/gridsync/gridsync/gossip/sites"
	"github.com/gridsync/gridsync/gossip/swimkeys"
	"github.com/gridsync/gridsync/test/measure"
	"github.com/gridsync/gridsync/trust/sitetrust"
)

// The grid the benchmarks of this package build, alike on loopback and
// over the WAN lab: its sites, how they join, and what is measured of
// them.

const network = "bench"

// grid is what every site of a benchmark shares: the SWIM key, and the
// grid CA the site certificates are issued from (records are signed with
// them).
type grid struct {
	key   []byte
	ca    *sitetrust.CA
	roots *x509.CertPool
}

func newGrid(b *testing.B) *grid {
	key := make([]byte, swimkeys.Size)
	if _, err := rand.Read(key); err != nil {
		b.Fatal(err)
	}
	// The grid CA as the agent generates it, and site certificates as it
	// issues them.
	caPEM, caKey, err := sitetrust.NewCA(time.Now(), 24*time.Hour)
	if err != nil {
		b.Fatal(err)
	}
	ca, err := sitetrust.ParseCA(caPEM, caKey)
	if err != nil {
		b.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	return &grid{key: key, ca: ca, roots: roots}
}

type site struct {
	rt     *membership.Runtime
	reg    *prometheus.Registry
	cancel context.CancelFunc
	done   chan struct{}

	mu        sync.Mutex
	seen      map[string]time.Time // provider name -> first seen
	measuring atomic.Bool          // observe only while changes are measured
}

// start starts one of n sites with cfg (its name and addresses; the key,
// the registry and the logger are set here), with its identity and two
// providers in the network.
func (g *grid) start(b *testing.B, n int, cfg membership.Config) *site {
	reg := prometheus.NewRegistry()
	cfg.EnvKey, cfg.RequireKey, cfg.Registerer, cfg.Logger = g.key, true, reg, slog.New(slog.DiscardHandler)
	rt, err := membership.New(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &site{rt: rt, reg: reg, cancel: cancel, done: make(chan struct{}), seen: map[string]time.Time{}}
	rt.OnChange(func(string) { s.observe() })
	// Sites of a real grid start at different moments, so their probe
	// periods are out of phase; started in one burst, every site here
	// would probe at the same instants. Their starts are spread over one
	// probe period.
	time.Sleep(membership.DefaultProbeInterval / time.Duration(n))
	go func() { defer close(s.done); _ = rt.Start(ctx) }()
	chain, key, err := g.ca.Issue(rt.Site(), time.Now(), 24*time.Hour)
	if err != nil {
		b.Fatal(err)
	}
	pair, err := tls.X509KeyPair(chain, key)
	if err != nil {
		b.Fatal(err)
	}
	rt.SetIdentity(network, sites.Identity{Roots: g.roots, RootCerts: []*x509.Certificate{g.ca.Cert}, Signer: &pair})
	if err := rt.Publish(network, string(chain), []sites.Provider{
		{Name: rt.Site() + "-a", Models: []string{"llama-70b", "mixtral"}, Cluster: "c1", Phase: "Available"},
		{Name: rt.Site() + "-b", Models: []string{"gpt-oss"}, Cluster: "c2", Phase: "Available"},
	}); err != nil {
		b.Fatal(err)
	}
	return s
}

// stopAll stops every site still running and waits for each.
func stopAll(members []*site) {
	for _, s := range members {
		s.cancel()
	}
	for _, s := range members {
		<-s.done
	}
}

// formGrid joins the sites, each seeding one earlier site (discovery is
// transitive), and waits until every site sees every other with its
// records. It returns how long that took.
func formGrid(b *testing.B, members []*site) time.Duration {
	n := len(members)
	measure.Until(b, 30*time.Second, 20*time.Millisecond, "every site running", func() bool {
		for _, s := range members {
			if !s.rt.Status().Running {
				return false
			}
		}
		return true
	})
	formed := time.Now()
	var wg sync.WaitGroup
	for i := 1; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			seed := members[(i-1)/2].rt.AdvertiseAddr()
			if res := members[i].rt.AnnounceSeeds(network, []string{seed}); len(res.Failed) > 0 {
				b.Errorf("%s: %v", members[i].rt.Site(), res.Failed[0].Err)
			}
		}()
	}
	wg.Wait()
	// Checked once a second: the check itself reads every site's view,
	// and all the sites share this process's two cores.
	measure.Until(b, 10*time.Minute, time.Second, "every site sees every other with its records", func() bool {
		minConnected, minProviders := n, 2*n
		for _, s := range members {
			v := s.rt.View(network)
			minConnected, minProviders = min(minConnected, v.Connected()), min(minProviders, len(v.Providers))
		}
		if testing.Verbose() {
			fmt.Printf("forming for %s: every site sees at least %d sites, %d providers\n", time.Since(formed).Round(time.Second), minConnected, minProviders)
		}
		return minConnected == n-1 && minProviders == 2*(n-1)
	})
	return time.Since(formed)
}

// measureConvergence changes one provider record at one site after
// another, samples times, and returns how long each change took to reach
// every other site (those of gone excluded), in milliseconds.
func measureConvergence(b *testing.B, members []*site, samples int, gone map[*site]bool) []float64 {
	n := len(members)
	var converge []float64
	for k := range samples {
		origin := members[(k*7919)%n]
		for gone[origin] {
			origin = members[(k*7919+1)%n]
		}
		name := fmt.Sprintf("%s-change-%d", origin.rt.Site(), k)
		start := time.Now()
		if err := origin.rt.Publish(network, "", []sites.Provider{{Name: name, Models: []string{"llama-70b"}, Cluster: "c1", Phase: "Available"}}); err != nil {
			b.Fatal(err)
		}
		var last time.Time
		measure.Until(b, 30*time.Second, 20*time.Millisecond, fmt.Sprintf("change %d at every site (%s)", k, name), func() bool {
			last = time.Time{}
			for _, s := range members {
				if s == origin || gone[s] {
					continue
				}
				at, ok := s.firstSeen(name)
				if !ok {
					return false
				}
				if at.After(last) {
					last = at
				}
			}
			return true
		})
		converge = append(converge, float64(last.Sub(start).Microseconds())/1000)
		if testing.Verbose() {
			fmt.Printf("change %d from %s: %.0f ms\n", k, origin.rt.Site(), converge[len(converge)-1])
		}
	}
	return converge
}

// measureDeaths kills each victim (no leave) one after the other and
// returns, in milliseconds, how long until every other site held it
// dead. How soon a dead site is first probed is luck (each site probes
// one other per period, in its own shuffled order), and a death comes at
// any moment of the probe period: each kill waits a random part of one.
// The victims are added to gone.
func measureDeaths(b *testing.B, members, victims []*site, gone map[*site]bool) []float64 {
	var deaths []float64
	for _, victim := range victims {
		time.Sleep(mathrand.N(membership.DefaultProbeInterval))
		victimName := victim.rt.Site()
		killed := time.Now()
		victim.killAbruptly()
		gone[victim] = true
		var deadAt time.Duration
		measure.Until(b, 2*time.Minute, 100*time.Millisecond, victimName+" dead everywhere", func() bool {
			for _, s := range members {
				if gone[s] {
					continue
				}
				m, ok := member(s.rt, victimName)
				if !ok || m.State != sites.SiteDead {
					return false
				}
			}
			deadAt = time.Since(killed)
			return true
		})
		deaths = append(deaths, float64(deadAt.Milliseconds()))
	}
	return deaths
}

// member is what a site's membership says of another.
func member(rt *membership.Runtime, name string) (membership.MemberStatus, bool) {
	for _, m := range rt.Status().Members {
		if m.Site == name {
			return m, true
		}
	}
	return membership.MemberStatus{}, false
}

func (s *site) observe() {
	if !s.measuring.Load() {
		return
	}
	v := s.rt.View(network)
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range v.Providers {
		if _, ok := s.seen[p.Name]; !ok {
			s.seen[p.Name] = now
		}
	}
}

func (s *site) firstSeen(name string) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	at, ok := s.seen[name]
	return at, ok
}

// killAbruptly stops the site without leaving, as kill -9 does: the
// membership stops answering, its peers must find out by probing.
func (s *site) killAbruptly() {
	s.rt.Vanish()
	s.cancel()
	<-s.done
}

func sentBytes(sites []*site) float64 {
	total := 0.0
	for _, s := range sites {
		mfs, _ := s.reg.Gather()
		for _, mf := range mfs {
			if mf.GetName() == "grid_swim_bytes_sent_total" {
				for _, m := range mf.GetMetric() {
					total += counterValue(m)
				}
			}
		}
	}
	return total
}

func counterValue(m *dto.Metric) float64 {
	if m.Counter != nil {
		return m.Counter.GetValue()
	}
	return 0
}
