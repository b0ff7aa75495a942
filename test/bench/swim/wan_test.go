package swim

import (
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	membership "github.com/gridsync/gridsync/gossip"
	"github.com/gridsync/gridsync/gossip/sites"
	"github.com/gridsync/gridsync/test/measure"
	"github.com/gridsync/gridsync/test/testwan"
)

// BenchmarkWAN is BenchmarkSWIM's grid over an emulated wide-area
// network (test/testwan): every site in a network namespace of its own,
// every path between two sites RTT_MS apart (jitter a tenth of the delay,
// so packets reorder) and losing LOSS % of its packets each way; one site
// in five behind a load balancer address it advertises and does not bind.
// The sites share this process (their sockets each in its namespace);
// what they send each other crosses the lab's router. Each phase prints
// its line as it ends (wan-phase), so a run cut short still says what it
// measured; then the summary:
//
//	wan sites=<N> rtt_ms=<> loss_pct=<> converge_p99_ms=<> false_dead=<> dead_detect_ms=<> heal_converge_ms=<> bytes_per_site_per_s=<> idle_s=<>
//
// false_dead counts, over the idle window (idle_s, ten minutes), the
// times a site saw another that was running as dead; bytes_per_site_per_s
// is what each site put on the wire in that window (IP packets, headers
// included). dead_detect_ms is the median of three kills; heal_converge_ms
// is from the end of a partition (the grid cut in two halves for
// WAN_BENCH_PARTITION, 60 s, with a site of each side signing a newer
// record meanwhile) until every site sees every other alive with the
// newest records.
//
// WAN_BENCH_SITES (50), WAN_BENCH_LOSS (5,10), WAN_BENCH_RTT_MS (100),
// WAN_BENCH_IDLE (10m) and WAN_BENCH_PARTITION (60s) change the run.
func BenchmarkWAN(b *testing.B) {
	n := measure.EnvInt("WAN_BENCH_SITES", measure.Size(50, 4))
	for _, loss := range measure.EnvPercentages("WAN_BENCH_LOSS", measure.Size([]float64{5, 10}, []float64{5})) {
		b.Run(fmt.Sprintf("sites=%d/loss=%g", n, loss), func(b *testing.B) {
			for b.Loop() {
				runWAN(b, n, loss)
			}
		})
	}
}

func runWAN(b *testing.B, n int, lossPct float64) {
	rtt := time.Duration(measure.EnvInt("WAN_BENCH_RTT_MS", 100)) * time.Millisecond
	idle := measure.EnvDuration("WAN_BENCH_IDLE", measure.Size(10*time.Minute, 3*time.Second))
	partition := measure.EnvDuration("WAN_BENCH_PARTITION", measure.Size(time.Minute, 5*time.Second))
	lab := testwan.New(b, testwan.Options{Sites: n,
		Link: testwan.Link{Delay: rtt / 2, Jitter: rtt / 20, Loss: lossPct / 100}})
	phase := func(name, format string, args ...any) {
		fmt.Printf("wan-phase sites=%d rtt_ms=%d loss_pct=%g phase=%s %s\n", n, rtt.Milliseconds(), lossPct, name, fmt.Sprintf(format, args...))
	}

	g := newGrid(b)
	wire, err := captureWire(lab, g.key)
	if err != nil {
		b.Fatal(err)
	}
	defer wire.close()
	members := make([]*site, n)
	for i := range members {
		cfg := membership.Config{
			Site:      fmt.Sprintf("site-%03d", i),
			BindAddr:  netip.AddrPortFrom(lab.Addr(i), 7946).String(),
			InNetwork: func(fn func() error) error { return lab.Do(i, fn) },
			// The reference's timings; the smoke (which proves the
			// benchmark runs) finds its kill sooner.
			ProbeInterval: measure.Size(time.Duration(0), time.Second),
			ProbeTimeout:  measure.Size(time.Duration(0), 500*time.Millisecond),
		}
		if i%5 == 4 {
			vip, err := lab.Expose(i)
			if err != nil {
				b.Fatal(err)
			}
			cfg.AdvertiseAddr = netip.AddrPortFrom(vip, 7946).String()
		}
		members[i] = g.start(b, n, cfg)
	}
	defer stopAll(members)
	formed := formGrid(b, members)
	phase("formed", "formed_ms=%d", formed.Milliseconds())
	for _, s := range members {
		s.measuring.Store(true)
	}
	time.Sleep(measure.Size(15*time.Second, time.Second)) // the joins' gossip dies down

	converge := measureConvergence(b, members, measure.Size(20, 2), nil)
	phase("converge", "changes=%d converge_p50_ms=%.0f converge_p99_ms=%.0f",
		len(converge), measure.Percentile(converge, 50), measure.Percentile(converge, 99))

	// Idle: every site running, nothing changing. A site that sees
	// another dead now is wrong.
	gone := map[*site]bool{}
	w := watchStates(members, gone)
	wireBefore, payloadBefore := wireBytes(lab), sentBytes(members)
	kindsBefore, bcastBefore := wire.snapshot()
	time.Sleep(idle)
	kindsAfter, bcastAfter := wire.snapshot()
	labIdle := wireBytes(lab) - wireBefore
	wireRate := labIdle / float64(n) / idle.Seconds()
	logWire(b.Logf, kindsBefore, kindsAfter, bcastBefore, bcastAfter, n, idle, labIdle)
	payloadRate := (sentBytes(members) - payloadBefore) / float64(n) / idle.Seconds()
	falseDead, suspects := w.stop()
	phase("idle", "idle_s=%.0f false_dead=%d suspect_events=%d bytes_per_site_per_s=%.0f swim_payload_bytes_per_site_per_s=%.0f",
		idle.Seconds(), falseDead, suspects, wireRate, payloadRate)

	victims := []*site{members[n/2], members[n/3], members[2*n/3]}
	deaths := measureDeaths(b, members, victims[:measure.Size(len(victims), 1)], gone)
	phase("dead", "dead_detect_ms=%s", joinMillis(deaths))

	heal := measurePartition(b, lab, members, gone, partition, phase)
	phase("heal", "heal_converge_ms=%d", heal.Milliseconds())

	fmt.Printf("wan sites=%d rtt_ms=%d loss_pct=%g converge_p99_ms=%.0f false_dead=%d dead_detect_ms=%.0f heal_converge_ms=%d bytes_per_site_per_s=%.0f idle_s=%.0f rss_mib=%.0f\n",
		n, rtt.Milliseconds(), lossPct, measure.Percentile(converge, 99), falseDead, measure.Percentile(deaths, 50),
		heal.Milliseconds(), wireRate, idle.Seconds(), measure.MustRSSMiB(b, os.Getpid()))
}

// measurePartition cuts the running sites into two halves for d, has a
// site of each half sign a newer record meanwhile, heals the cut and
// returns how long until every running site sees every other alive and
// holds both newer records (the newest record of each site wins).
func measurePartition(b *testing.B, lab *testwan.Lab, members []*site, gone map[*site]bool, d time.Duration,
	phase func(name, format string, args ...any),
) time.Duration {
	var live []int
	for i, s := range members {
		if !gone[s] {
			live = append(live, i)
		}
	}
	left, right := live[:len(live)/2], live[len(live)/2:]
	lab.Partition(left, right)
	changed := map[string]string{} // site -> the provider it announced during the cut
	for _, i := range []int{left[0], right[0]} {
		s := members[i]
		name := s.rt.Site() + "-during-cut"
		if err := s.rt.Publish(network, "", []sites.Provider{{Name: name, Models: []string{"llama-70b"}, Cluster: "c1", Phase: "Available"}}); err != nil {
			b.Fatal(err)
		}
		changed[s.rt.Site()] = name
	}
	time.Sleep(d)
	running := map[string]bool{}
	for _, i := range live {
		running[members[i].rt.Site()] = true
	}
	apart := 0
	for _, i := range live {
		for _, m := range members[i].rt.Status().Members {
			if m.State == sites.SiteDead && running[m.Site] {
				apart++
				break
			}
		}
	}
	phase("partitioned", "partition_s=%.0f sites_seeing_dead=%d of %d", d.Seconds(), apart, len(live))
	lab.Heal()
	healed := time.Now()
	// What is still missing, for the failure message and the progress
	// lines of a verbose run.
	missing := func() string {
		for _, i := range live {
			s := members[i]
			st := map[string]sites.SiteState{}
			for _, m := range s.rt.Status().Members {
				st[m.Site] = m.State
			}
			for _, j := range live {
				if other := members[j].rt.Site(); j != i && st[other] != sites.SiteAlive {
					return fmt.Sprintf("%s holds %s %q, its memberlist %q, and %s holds it %q (its dials of dead sites: %.0f joined, %.0f failed)",
						s.rt.Site(), other, st[other], s.rt.MemberlistState(other), other, members[j].rt.MemberlistState(s.rt.Site()),
						reconnects(s, "joined"), reconnects(s, "failed"))
				}
			}
			v := s.rt.View(network)
			for site, name := range changed {
				if site == s.rt.Site() {
					continue
				}
				var names []string
				for _, p := range v.Providers {
					if p.Site == site {
						names = append(names, p.Name)
					}
				}
				if !slices.Equal(names, []string{name}) {
					return fmt.Sprintf("%s holds %s's providers %v, not [%s]", s.rt.Site(), site, names, name)
				}
			}
		}
		return ""
	}
	deadline := healed.Add(5 * time.Minute)
	lastSaid := time.Now()
	for {
		m := missing()
		if m == "" {
			return time.Since(healed)
		}
		if time.Now().After(deadline) {
			b.Fatalf("the healed grid was not whole after 5 minutes: %s", m)
		}
		if testing.Verbose() && time.Since(lastSaid) > 5*time.Second {
			fmt.Printf("healing for %s: %s\n", time.Since(healed).Round(time.Second), m)
			lastSaid = time.Now()
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// stateWatch counts, among running sites, each time one comes to see
// another running site dead, or suspect.
type stateWatch struct {
	stopc           chan struct{}
	done            chan struct{}
	mu              sync.Mutex
	dead, suspected int
}

// watchStates samples every site's view of the others four times a
// second until stop; sites in gone (killed) are neither observers nor
// observed.
func watchStates(members []*site, gone map[*site]bool) *stateWatch {
	w := &stateWatch{stopc: make(chan struct{}), done: make(chan struct{})}
	running := map[string]bool{}
	for _, s := range members {
		if !gone[s] {
			running[s.rt.Site()] = true
		}
	}
	prev := map[[2]string]sites.SiteState{}
	go func() {
		defer close(w.done)
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-w.stopc:
				return
			case <-tick.C:
			}
			for _, s := range members {
				if gone[s] {
					continue
				}
				for _, m := range s.rt.Status().Members {
					if !running[m.Site] {
						continue
					}
					key := [2]string{s.rt.Site(), m.Site}
					before := prev[key]
					prev[key] = m.State
					w.mu.Lock()
					switch {
					case m.State == sites.SiteDead && before != sites.SiteDead:
						w.dead++
					case m.State == sites.SiteSuspect && before != sites.SiteSuspect:
						w.suspected++
					}
					w.mu.Unlock()
				}
			}
		}
	}()
	return w
}

func (w *stateWatch) stop() (dead, suspected int) {
	close(w.stopc)
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.dead, w.suspected
}

// wireBytes is what every site of the lab sent, in IP bytes.
func wireBytes(lab *testwan.Lab) float64 {
	var total int64
	for i := range lab.Sites() {
		total += lab.SentBytes(i)
	}
	return float64(total)
}

func joinMillis(values []float64) string {
	out := make([]string, len(values))
	for i, v := range values {
		out[i] = strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strings.Join(out, ",")
}

// reconnects is how many of a site's dials of dead sites had outcome.
func reconnects(s *site, outcome string) float64 {
	mfs, _ := s.reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() != "grid_swim_reconnects_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "outcome" && l.GetValue() == outcome {
					return counterValue(m)
				}
			}
		}
	}
	return 0
}
