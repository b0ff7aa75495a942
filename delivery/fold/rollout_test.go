package fold

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/types"

	deliveryreport "github.com/gridsync/gridsync/delivery/report"
)

var (
	revA = strings.Repeat("a", 64)
	revB = strings.Repeat("b", 64)
)

type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func report(pod, revision, state, reason string) deliveryreport.Report {
	return deliveryreport.Report{Namespace: "gw", Gateway: "edge", Pod: pod, Revision: revision, ContentDigest: revision, State: state, LastRejectionReason: reason}
}

func newTestAggregator(t *testing.T) (*Aggregator, *clock) {
	t.Helper()
	c := &clock{now: time.Unix(1000, 0)}
	a := New(Options{SilentAfter: 10 * time.Second, ForgetAfter: time.Minute, MaxPods: 3, Now: c.Now, Registerer: prometheus.NewRegistry()})
	a.SetGateways("net", []types.NamespacedName{{Namespace: "gw", Name: "edge"}})
	return a, c
}

func TestSummaryNamesWhoLagsAndWhy(t *testing.T) {
	a, c := newTestAggregator(t)
	require.NoError(t, a.Observe(report("p1", revB, "ready", "")))
	require.NoError(t, a.Observe(report("p2", revA, "ready_degraded", "malformed_structure")))
	require.NoError(t, a.Observe(report("p3", revA, "ready", "")))
	d := a.Summary("gw", "edge", revB, c.Now())
	require.NotNil(t, d)
	assert.Equal(t, int32(3), d.ReportingPods)
	assert.Equal(t, int32(1), d.PodsOnRevision)
	assert.Equal(t, int32(2), d.LaggingPods)
	assert.Equal(t, LagRejecting, d.Lagging[0].Reason, "p2 rejects the rendered revision")
	assert.Equal(t, LagOlderRevision, d.Lagging[1].Reason, "p3 has not caught up")
	assert.Equal(t, "malformed_structure", d.CommonRejectionReason)
	assert.Nil(t, d.DeliveredAt)

	c.add(2 * time.Second)
	require.NoError(t, a.Observe(report("p2", revB, "ready", "malformed_structure")))
	require.NoError(t, a.Observe(report("p3", revB, "ready", "")))
	d = a.Summary("gw", "edge", revB, time.Unix(999, 0))
	assert.Equal(t, int32(3), d.PodsOnRevision)
	require.NotNil(t, d.DeliveredAt)
	assert.Equal(t, time.Unix(1002, 0), d.DeliveredAt.Time, "when the last pod got it")
	a.Summary("gw", "edge", revB, time.Unix(999, 0))
	assert.Equal(t, 1, testutil.CollectAndCount(a.rolloutSeconds), "one observation per revision, however often summarised")

	c.add(11 * time.Second)
	require.NoError(t, a.Observe(report("p1", revB, "ready", "")))
	d = a.Summary("gw", "edge", revB, time.Time{})
	assert.Equal(t, int32(2), d.LaggingPods, "p2 and p3 fell silent")
	assert.Equal(t, LagSilent, d.Lagging[0].Reason)

	c.add(time.Minute)
	require.NoError(t, a.Observe(report("p1", revB, "ready", "")))
	d = a.Summary("gw", "edge", revB, time.Time{})
	assert.Equal(t, int32(1), d.ReportingPods, "pods silent past the forget age are not counted")
}

func TestReportsAreTakenOnlyForKnownGatewaysAndBounded(t *testing.T) {
	a, c := newTestAggregator(t)
	r := report("p1", revA, "ready", "")
	r.Gateway = "other"
	assert.ErrorIs(t, a.Observe(r), ErrUnknownGateway)
	for _, p := range []string{"p1", "p2", "p3"} {
		require.NoError(t, a.Observe(report(p, revA, "ready", "")))
	}
	assert.ErrorIs(t, a.Observe(report("p4", revA, "ready", "")), ErrFull)
	c.add(2 * time.Minute)
	assert.NoError(t, a.Observe(report("p4", revA, "ready", "")), "forgotten pods make room")

	a.SetGateways("net", nil)
	assert.ErrorIs(t, a.Observe(report("p1", revA, "ready", "")), ErrUnknownGateway, "a removed gateway takes no reports")
	assert.Nil(t, a.Summary("gw", "edge", revA, time.Time{}))
}

// One gateway's pods fill only its own budget: another gateway's sidecars
// still report (the first round: one token's 20,500 invented pods filled
// the whole table and locked every namespace out).
func TestOneGatewayNeverStarvesAnother(t *testing.T) {
	c := &clock{now: time.Unix(1000, 0)}
	a := New(Options{SilentAfter: 10 * time.Second, ForgetAfter: time.Minute, MaxPods: 100, MaxPodsPerGateway: 3, Now: c.Now, Registerer: prometheus.NewRegistry()})
	a.SetGateways("net", []types.NamespacedName{{Namespace: "gw", Name: "edge"}, {Namespace: "other", Name: "edge"}})
	for i := range 50 {
		err := a.Observe(report(fmt.Sprintf("p%d", i), revA, "ready", ""))
		if i < 3 {
			require.NoError(t, err)
		} else {
			require.ErrorIs(t, err, ErrFull)
		}
	}
	other := report("honest", revA, "ready", "")
	other.Namespace = "other"
	require.NoError(t, a.Observe(other), "another gateway's pod reports")
	require.NoError(t, a.Observe(report("p1", revB, "ready", "")), "a pod already held keeps reporting")
}

// Status updates are asked for at most once per interval per network,
// and a change inside the interval is not lost.
func TestChangesAreToldAtMostOncePerInterval(t *testing.T) {
	a := New(Options{MinInterval: 200 * time.Millisecond})
	a.SetGateways("net", []types.NamespacedName{{Namespace: "gw", Name: "edge"}})
	var mu sync.Mutex
	var told []time.Time
	a.OnChange(func(string) { mu.Lock(); told = append(told, time.Now()); mu.Unlock() })
	for i := range 20 {
		require.NoError(t, a.Observe(report("p"+string(rune('a'+i)), revA, "ready", "")))
	}
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(told) == 2 }, 2*time.Second, 10*time.Millisecond,
		"the first change at once, the rest at the end of the interval")
	time.Sleep(300 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, told, 2)
	assert.GreaterOrEqual(t, told[1].Sub(told[0]), 150*time.Millisecond)

	// A heartbeat of an unchanged state asks for nothing.
	before := len(told)
	mu.Unlock()
	require.NoError(t, a.Observe(report("pa", revA, "ready", "")))
	time.Sleep(300 * time.Millisecond)
	mu.Lock()
	assert.Len(t, told, before)
}

// gridsync_rollout_pods names the gateway, and a gateway's states are all
// exported, so that an alert on a lagging gateway has its name and a
// gateway whose pods all caught up reads 0, not nothing.
func TestPodsMetricIsPerGatewayWithEveryState(t *testing.T) {
	c := &clock{now: time.Unix(1000, 0)}
	reg := prometheus.NewRegistry()
	a := New(Options{SilentAfter: 10 * time.Second, ForgetAfter: time.Minute, MaxPods: 10, Now: c.Now, Registerer: reg})
	a.SetGateways("net", []types.NamespacedName{{Namespace: "gw", Name: "edge"}, {Namespace: "gw", Name: "quiet"}})
	require.NoError(t, a.Observe(report("p1", revB, "ready", "")))
	require.NoError(t, a.Observe(report("p2", revA, "ready_degraded", "malformed_structure")))
	require.NoError(t, a.Observe(report("p3", revA, "ready", "")))
	a.Summary("gw", "edge", revB, c.Now())

	const help = "# HELP gridsync_rollout_pods Reporting gateway pods by gateway and delivery state against the gateway's rendered revision (delivered, OlderRevision, Rejecting, Cold, Silent); every state of a known gateway is exported, 0 included.\n# TYPE gridsync_rollout_pods gauge\n"
	var want strings.Builder
	want.WriteString(help)
	for _, row := range []struct {
		gateway, state string
		n              int
	}{
		{"edge", LagCold, 0}, {"edge", LagOlderRevision, 1}, {"edge", LagRejecting, 1}, {"edge", LagSilent, 0}, {"edge", "delivered", 1},
		{"quiet", LagCold, 0}, {"quiet", LagOlderRevision, 0}, {"quiet", LagRejecting, 0}, {"quiet", LagSilent, 0}, {"quiet", "delivered", 0},
	} {
		fmt.Fprintf(&want, "gridsync_rollout_pods{gateway=%q,gateway_namespace=\"gw\",state=%q} %d\n", row.gateway, row.state, row.n)
	}
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want.String()), "gridsync_rollout_pods"))

	c.add(11 * time.Second)
	assert.Equal(t, 3.0, podsSeries(t, reg)["edge/"+LagSilent], "no report for longer than SilentAfter")
}

// podsSeries reads gridsync_rollout_pods by gateway/state.
func podsSeries(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	out := map[string]float64{}
	for _, f := range families {
		if f.GetName() != "gridsync_rollout_pods" {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			out[labels["gateway"]+"/"+labels["state"]] = m.GetGauge().GetValue()
		}
	}
	return out
}
