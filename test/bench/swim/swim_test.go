// Package swim measures the membership layer alone: N SWIM sites in one
// process on loopback with the reference's timings (probe 5 s, 3 s for a
// direct answer, suspect kept three probe periods), encrypted, each with a
// site certificate from one grid CA and two providers in one network,
// every record signed and verified. Run it with `make bench`; it prints
// two lines per grid size (dead_detect_ms is the median of five kills,
// each of which the second line gives):
//
//	swim sites=<N> converge_p50_ms=<> converge_p99_ms=<> dead_detect_ms=<> idle_bytes_per_site_per_s=<> rss_mib=<> records=signed
//	swim-deaths sites=<N> dead_detect_ms=<>,<>,<>,<>,<>
package swim

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	mathrand "math/rand/v2"
	"os"
	"strconv"
	"strings"
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

const network = "bench"

type site struct {
	rt     *membership.Runtime
	reg    *prometheus.Registry
	cancel context.CancelFunc
	done   chan struct{}

	mu        sync.Mutex
	seen      map[string]time.Time // provider name -> first seen
	measuring atomic.Bool          // observe only while changes are measured
}

func BenchmarkSWIM(b *testing.B) {
	for _, n := range sizes() {
		b.Run(fmt.Sprintf("sites=%d", n), func(b *testing.B) {
			for b.Loop() {
				runBench(b, n)
			}
		})
	}
}

func runBench(b *testing.B, n int) {
	key := make([]byte, swimkeys.Size)
	if _, err := rand.Read(key); err != nil {
		b.Fatal(err)
	}
	// The grid CA as the agent generates it, and site certificates as it
	// issues them: records are signed with these.
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
	members := make([]*site, n)
	var wg sync.WaitGroup
	for i := range members {
		reg := prometheus.NewRegistry()
		// Every site here shares one source address, which a real grid's
		// sites never do: the per-source caps are raised to the site's own.
		gate := membership.DefaultGateLimits()
		gate.PushPullRate, gate.PushPullBurst = gate.SitePushPullRate, gate.SitePushPullBurst
		gate.MaxStreamsPerAddr, gate.BufferBytesPerAddr = gate.MaxStreams, gate.BufferBytes
		rt, err := membership.New(context.Background(), membership.Config{
			Site: fmt.Sprintf("site-%03d", i), BindAddr: "127.0.0.1:0", EnvKey: key, RequireKey: true,
			Registerer: reg, Logger: slog.New(slog.DiscardHandler), Gate: gate,
		})
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		s := &site{rt: rt, reg: reg, cancel: cancel, done: make(chan struct{}), seen: map[string]time.Time{}}
		rt.OnChange(func(string) { s.observe() })
		// Sites of a real grid start at different moments, so their probe
		// periods are out of phase; started in one burst, every site here
		// would probe at the same instants. Their starts are spread over
		// one probe period.
		time.Sleep(membership.DefaultProbeInterval / time.Duration(n))
		go func() { defer close(s.done); _ = rt.Start(ctx) }()
		members[i] = s
		chain, key, err := ca.Issue(rt.Site(), time.Now(), 24*time.Hour)
		if err != nil {
			b.Fatal(err)
		}
		pair, err := tls.X509KeyPair(chain, key)
		if err != nil {
			b.Fatal(err)
		}
		rt.SetIdentity(network, sites.Identity{Roots: roots, RootCerts: []*x509.Certificate{ca.Cert}, Signer: &pair})
		if err := rt.Publish(network, string(chain), []sites.Provider{
			{Name: rt.Site() + "-a", Models: []string{"llama-70b", "mixtral"}, Cluster: "c1", Phase: "Available"},
			{Name: rt.Site() + "-b", Models: []string{"gpt-oss"}, Cluster: "c2", Phase: "Available"},
		}); err != nil {
			b.Fatal(err)
		}
	}
	defer func() {
		for _, s := range members {
			s.cancel()
		}
		for _, s := range members {
			<-s.done
		}
	}()
	measure.Until(b, 30*time.Second, 20*time.Millisecond, "every site running", func() bool {
		for _, s := range members {
			if !s.rt.Status().Running {
				return false
			}
		}
		return true
	})
	// Each site seeds one earlier site: discovery is transitive.
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
	formed := time.Now()
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
	for _, s := range members {
		s.measuring.Store(true)
	}

	// The grid formed; its membership gossip (every site's arrival, the
	// grid ID adopted) is left to die down, as in a grid that has run for
	// a while.
	time.Sleep(measure.Size(15*time.Second, time.Second))

	// Convergence: one provider record changed at one site, until every
	// other site holds it.
	var converge []float64
	samples := measure.Size(20, 2)
	for k := range samples {
		origin := members[(k*7919)%n]
		name := fmt.Sprintf("%s-change-%d", origin.rt.Site(), k)
		start := time.Now()
		if err := origin.rt.Publish(network, "", []sites.Provider{{Name: name, Models: []string{"llama-70b"}, Cluster: "c1", Phase: "Available"}}); err != nil {
			b.Fatal(err)
		}
		var last time.Time
		measure.Until(b, 30*time.Second, 20*time.Millisecond, fmt.Sprintf("change %d at every site (%s)", k, name), func() bool {
			last = time.Time{}
			for _, s := range members {
				if s == origin {
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

	// Idle: nothing changes for a third of the tombstone lifetime, the
	// period at which each site signs its records again (so that they
	// never grow too old to be taken): every record is refreshed once in
	// the window, as in a grid that runs for days, and a few push/pull
	// periods pass (memberlist stretches the period above 32 sites).
	idle := measure.Size(membership.DefaultTombstoneTTL/3, 2*time.Second)
	before := sentBytes(members)
	time.Sleep(idle)
	idleRate := (sentBytes(members) - before) / float64(n) / idle.Seconds()

	// Departure: a site killed (no leave), until every other site holds
	// it dead. How soon a dead site is first probed is luck (each site
	// probes one other per period, in its own shuffled order), so five
	// sites are killed one after the other, each at a random moment, and
	// the median is printed.
	var deaths []float64
	gone := map[*site]bool{}
	victims := []*site{members[n/2], members[n/3], members[2*n/3], members[n/4], members[3*n/4]}
	for _, victim := range victims[:measure.Size(len(victims), 1)] {
		// A death comes at any moment of the probe period, not just
		// after the last one was found.
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

	fmt.Printf("swim sites=%d converge_p50_ms=%.0f converge_p99_ms=%.0f dead_detect_ms=%.0f idle_bytes_per_site_per_s=%.0f rss_mib=%.0f records=signed\n",
		n, measure.Percentile(converge, 50), measure.Percentile(converge, 99), measure.Percentile(deaths, 50), idleRate, measure.MustRSSMiB(b, os.Getpid()))
	each := make([]string, len(deaths))
	for i, d := range deaths {
		each[i] = fmt.Sprintf("%.0f", d)
	}
	fmt.Printf("swim-deaths sites=%d dead_detect_ms=%s\n", n, strings.Join(each, ","))
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

// sizes are the grid sizes measured; SWIM_BENCH_SITES picks one.
func sizes() []int {
	if v, err := strconv.Atoi(os.Getenv("SWIM_BENCH_SITES")); err == nil && v > 1 {
		return []int{v}
	}
	// Every site here shares the process, and each one's periodic work
	// (four sweeps a second over the records it holds, their
	// certificates checked again every five seconds) grows with the grid:
	// the process's work grows with the square of the size. 100 sites
	// is what two cores hold with every record signed and checked; at
	// 200 the probes' answers came late, memberlist stretched the probe
	// periods and the grid did not form in ten minutes. Larger grids
	// need sites that do not share a process (issue 54's network
	// harness).
	return measure.Size([]int{50, 100}, []int{3})
}
