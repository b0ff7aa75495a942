package fold

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	deliveryreport "github.com/gridsync/gridsync/delivery/report"
)

func reading(pod, encoding string, maxBytes int, forms ...string) deliveryreport.Report {
	r := report(pod, revA, "ready", "")
	r.Reads, r.Encoding, r.MaxBytes = forms, encoding, maxBytes
	return r
}

// What a gateway's pods read is counted per pod, and the network is told
// when it changes what the agent would choose: a first pod, a pod that
// reads only the plain form, one that asks for a form, a bound that moves
// or a pod forgotten; not another pod like the others, nor a heartbeat.
func TestReadersAreCountedAndTheirChangesTold(t *testing.T) {
	a, c := newTestAggregator(t)
	var mu sync.Mutex
	var told []string
	a.OnReadersChange(func(n string) { mu.Lock(); told = append(told, n); mu.Unlock() })
	toldCount := func() int { mu.Lock(); defer mu.Unlock(); return len(told) }

	assert.Equal(t, Readers{}, a.Readers("gw", "edge"), "nobody reports yet")
	require.NoError(t, a.Observe(reading("p1", "auto", 1<<20, "plain", "zstd")))
	assert.Equal(t, Readers{Pods: 1, MaxBytes: 1 << 20}, a.Readers("gw", "edge"))
	assert.Equal(t, 1, toldCount(), "the first pod is told")

	require.NoError(t, a.Observe(reading("p2", "auto", 1<<20, "plain", "zstd")))
	require.NoError(t, a.Observe(reading("p1", "auto", 1<<20, "plain", "zstd")))
	assert.Equal(t, 1, toldCount(), "a pod like the others and a heartbeat change nothing")

	require.NoError(t, a.Observe(report("p3", revA, "ready", ""))) // a sidecar that predates the compressed form
	assert.Equal(t, Readers{Pods: 3, PlainOnly: 1, MaxBytes: 1 << 20}, a.Readers("gw", "edge"))
	assert.Equal(t, 2, toldCount())

	require.NoError(t, a.Observe(reading("p2", "zstd", 4<<20, "plain", "zstd")))
	assert.Equal(t, Readers{Pods: 3, PlainOnly: 1, AskZstd: 1, MaxBytes: 1 << 20}, a.Readers("gw", "edge"), "the smallest bound")
	assert.Equal(t, 3, toldCount())
	require.NoError(t, a.Observe(reading("p1", "plain", 512<<10, "plain", "zstd")))
	assert.Equal(t, Readers{Pods: 3, PlainOnly: 1, AskPlain: 1, AskZstd: 1, MaxBytes: 512 << 10}, a.Readers("gw", "edge"))
	assert.Equal(t, 4, toldCount())

	// p3 falls silent past the forget age while the others keep reporting.
	c.add(40 * time.Second)
	require.NoError(t, a.Observe(reading("p1", "plain", 512<<10, "plain", "zstd")))
	require.NoError(t, a.Observe(reading("p2", "zstd", 4<<20, "plain", "zstd")))
	c.add(30 * time.Second)
	assert.Equal(t, Readers{Pods: 2, AskPlain: 1, AskZstd: 1, MaxBytes: 512 << 10}, a.Readers("gw", "edge"), "a forgotten pod is not counted")
	a.mu.Lock()
	changed := a.forgetLocked(c.Now())
	a.mu.Unlock()
	assert.Equal(t, []string{"net"}, changed, "forgetting the only plain-only pod changes the verdict")
	assert.Equal(t, Readers{}, a.Readers("gw", "nobody"))
}

// A pod back after a silence past the forget age (not yet dropped by the
// watch) counts again, and that is told like a new pod.
func TestAPodBackFromALongSilenceIsTold(t *testing.T) {
	a, c := newTestAggregator(t)
	var mu sync.Mutex
	told := 0
	a.OnReadersChange(func(string) { mu.Lock(); told++; mu.Unlock() })
	require.NoError(t, a.Observe(report("old", revA, "ready", "")))              // reads only the plain form
	require.NoError(t, a.Observe(reading("p1", "auto", 1<<20, "plain", "zstd"))) // the verdict: plain-only present
	c.add(2 * time.Minute)
	require.NoError(t, a.Observe(reading("p1", "zstd", 1<<20, "plain", "zstd"))) // old is past the forget age
	assert.Equal(t, Readers{Pods: 1, AskZstd: 1, MaxBytes: 1 << 20}, a.Readers("gw", "edge"))
	mu.Lock()
	before := told
	mu.Unlock()
	require.NoError(t, a.Observe(report("old", revA, "ready", ""))) // back, saying what it said before
	assert.Equal(t, Readers{Pods: 2, PlainOnly: 1, AskZstd: 1, MaxBytes: 1 << 20}, a.Readers("gw", "edge"))
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, before+1, told, "its return moves the verdict and is told")
}
