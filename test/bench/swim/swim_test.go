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
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	membership "github.com/gridsync/gridsync/gossip"
	"github.com/gridsync/gridsync/test/measure"
)

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
	g := newGrid(b)
	members := make([]*site, n)
	for i := range members {
		// Every site here shares one source address, which a real grid's
		// sites never do: the per-source caps are raised to the site's own.
		gate := membership.DefaultGateLimits()
		gate.PushPullRate, gate.PushPullBurst = gate.SitePushPullRate, gate.SitePushPullBurst
		gate.MaxStreamsPerAddr, gate.BufferBytesPerAddr = gate.MaxStreams, gate.BufferBytes
		members[i] = g.start(b, n, membership.Config{Site: fmt.Sprintf("site-%03d", i), BindAddr: "127.0.0.1:0", Gate: gate})
	}
	defer stopAll(members)
	formGrid(b, members)
	for _, s := range members {
		s.measuring.Store(true)
	}

	// The grid formed; its membership gossip (every site's arrival, the
	// grid ID adopted) is left to die down, as in a grid that has run for
	// a while.
	time.Sleep(measure.Size(15*time.Second, time.Second))

	// Convergence: one provider record changed at one site, until every
	// other site holds it.
	converge := measureConvergence(b, members, measure.Size(20, 2), nil)

	// Idle: nothing changes for half the tombstone lifetime, the period
	// at which each site signs its records again (so that they
	// never grow too old to be taken): every record is refreshed once in
	// the window, as in a grid that runs for days, and a few push/pull
	// periods pass (memberlist stretches the period above 32 sites).
	idle := measure.Size(membership.DefaultTombstoneTTL/2, 2*time.Second)
	before := sentBytes(members)
	time.Sleep(idle)
	idleRate := (sentBytes(members) - before) / float64(n) / idle.Seconds()

	// Departure: a site killed (no leave), until every other site holds
	// it dead. How soon a dead site is first probed is luck (each site
	// probes one other per period, in its own shuffled order), so five
	// sites are killed one after the other, each at a random moment, and
	// the median is printed.
	gone := map[*site]bool{}
	victims := []*site{members[n/2], members[n/3], members[2*n/3], members[n/4], members[3*n/4]}
	deaths := measureDeaths(b, members, victims[:measure.Size(len(victims), 1)], gone)

	fmt.Printf("swim sites=%d converge_p50_ms=%.0f converge_p99_ms=%.0f dead_detect_ms=%.0f idle_bytes_per_site_per_s=%.0f rss_mib=%.0f records=signed\n",
		n, measure.Percentile(converge, 50), measure.Percentile(converge, 99), measure.Percentile(deaths, 50), idleRate, measure.MustRSSMiB(b, os.Getpid()))
	each := make([]string, len(deaths))
	for i, d := range deaths {
		each[i] = fmt.Sprintf("%.0f", d)
	}
	fmt.Printf("swim-deaths sites=%d dead_detect_ms=%s\n", n, strings.Join(each, ","))
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
