// Package attack is the standing attack suite: each attack of the
// hardening rounds run against the real binaries on loopback, printing one
// line
//
//	attack name=<name> <figure>=<value> ... held=true|false
//
// and failing when an attack is not held. `make attack` runs the full
// sizes (ATTACK_FULL=1); `make test` runs the short form. Every load loop
// is bounded in count and time, and every address dialled is loopback.
package attack

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/gridsync/gridsync/test/controlplane"
	"github.com/gridsync/gridsync/test/framework"
	"github.com/gridsync/gridsync/test/measure"
	"github.com/gridsync/gridsync/test/testbin"
	"github.com/gridsync/gridsync/test/testproc"
)

var cp *controlplane.ControlPlane

func TestMain(m *testing.M) {
	framework.Main(m, framework.ControlPlanes(&cp), framework.Binaries(testbin.Agent, testbin.Sidecar, testbin.Init))
}

// full says whether the attacks run at the sizes of the rounds that found
// them (make attack) or the short form (make test).
func full() bool { return os.Getenv("ATTACK_FULL") == "1" }

// size is the full or the short figure.
func size(fullSize, short int) int {
	if full() {
		return fullSize
	}
	return short
}

// figure is one name=value of an attack's line.
type figure struct {
	name  string
	value any
}

// report prints the attack's line and fails the test when not held.
func report(t *testing.T, name string, held bool, figures ...figure) {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "attack name=%s", name)
	for _, f := range figures {
		switch v := f.value.(type) {
		case float64:
			fmt.Fprintf(&b, " %s=%.1f", f.name, v)
		default:
			fmt.Fprintf(&b, " %s=%v", f.name, v)
		}
	}
	fmt.Fprintf(&b, " held=%t", held)
	fmt.Println(b.String())
	if !held {
		t.Errorf("not held: %s", b.String())
	}
}

// footprint is what a process holds: goroutines (from its /metrics) and
// open file descriptors.
type footprint struct{ goroutines, fds int }

func footprintOf(t *testing.T, pid int, metricsURL string) footprint {
	t.Helper()
	var f footprint
	if entries, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid)); err == nil {
		f.fds = len(entries)
	}
	_, body := testproc.Get(t, metricsURL)
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, "go_goroutines "); ok {
			_, _ = fmt.Sscan(v, &f.goroutines)
		}
	}
	return f
}

// settles waits up to 20 s for a process to come back to about its
// footprint before a flood: no goroutine or descriptor growth once the
// flood is over.
func settles(t *testing.T, pid int, metricsURL string, before footprint) (footprint, bool) {
	t.Helper()
	var after footprint
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
		after = footprintOf(t, pid, metricsURL)
		if after.goroutines <= before.goroutines+25 && after.fds <= before.fds+15 {
			return after, true
		}
	}
	return after, false
}

// runPolled runs cmd and returns its peak resident memory, its own
// high-water mark polled every millisecond while it runs (a child's
// rusage counts the test's memory it was forked from), how long it ran,
// and how it ended.
func runPolled(cmd *exec.Cmd) (peakMiB float64, took time.Duration, err error) {
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return 0, 0, err
	}
	polled := make(chan struct{})
	exited := make(chan struct{})
	go func() {
		defer close(polled)
		for {
			if v, err := measure.PeakRSSMiB(cmd.Process.Pid); err == nil {
				peakMiB = max(peakMiB, v)
			}
			select {
			case <-exited:
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	err = cmd.Wait()
	took = time.Since(start)
	close(exited)
	<-polled
	return peakMiB, took, err
}
