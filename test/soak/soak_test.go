// Package soak runs the real gridsync-sidecar binary against a real
// kube-apiserver under a seeded random schedule of faults, with a reader
// that plays the gateway and checks invariants the whole time. Without
// settings it runs a short form (fixed seeds and one random seed); `make
// soak` runs one long seed. Replay a seed with SOAK_SEED and
// SOAK_DURATION.
package soak

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/require"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/gridsync/gridsync/test/controlplane"
	"github.com/gridsync/gridsync/test/framework"
	"github.com/gridsync/gridsync/test/testbin"
)

var cp *controlplane.ControlPlane

func TestMain(m *testing.M) {
	ctrllog.SetLogger(logr.Discard()) // the harness's Grid client logs nothing
	framework.Main(m, framework.ControlPlanes(&cp), framework.Binaries(testbin.Sidecar, testbin.Agent))
}

// TestSoak runs the seeds of SOAK_SEED (comma-separated) for
// SOAK_DURATION each; without them, the short form: two fixed seeds and
// one random one, 35 s each.
func TestSoak(t *testing.T) {
	seeds, duration := []uint64{1, 2, rand.Uint64()}, 35*time.Second
	if s := os.Getenv("SOAK_SEED"); s != "" {
		seeds = nil
		for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' }) {
			n, err := strconv.ParseUint(f, 10, 64)
			require.NoError(t, err, "SOAK_SEED")
			seeds = append(seeds, n)
		}
	}
	if d := os.Getenv("SOAK_DURATION"); d != "" {
		var err error
		duration, err = time.ParseDuration(d)
		require.NoError(t, err, "SOAK_DURATION")
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Logf("replay with: make soak SEED=%d DURATION=%s", seed, duration)
			s := newSoak(t, seed, duration)
			summary := s.run()
			fmt.Println(summary.line())
			fmt.Print(summary.table())
			if len(s.violations) > 0 {
				t.Fatalf("seed %d: %d violations:\n%s\nevents up to the first:\n%s\nlast events:\n%s", seed, len(s.violations),
					strings.Join(s.violations[:min(10, len(s.violations))], "\n"), s.firstEvents, s.events.tail(60))
			}
		})
	}
}
