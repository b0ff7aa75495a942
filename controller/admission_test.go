package controller_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/controller"
	"github.com/gridsync/gridsync/shared/envelope"
	"github.com/gridsync/gridsync/signals"
)

// queueServer is a provider's metrics endpoint whose waiting requests the
// test sets.
type queueServer struct {
	*httptest.Server
	waiting atomic.Int64
}

func startQueueServer(t *testing.T) *queueServer {
	q := &queueServer{}
	q.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{name=\"pool-a\"} %d\n", q.waiting.Load())
	}))
	t.Cleanup(q.Close)
	return q
}

// candidateRow is the gateway's overlay as "site=cell ...", in order.
func candidateRow(t *testing.T, cm *corev1.ConfigMap, cell func(candidate) string) string {
	var parts []string
	for _, c := range candidatesOf(t, cm) {
		parts = append(parts, c.Site+"="+cell(c))
	}
	return strings.Join(parts, " ")
}

// overlayRow waits until the gateway's overlay reads want as a
// candidateRow of cell.
func (e *env) overlayRow(network *v1alpha1.GridNetwork, gw v1alpha1.ConsumerGateway, what, want string, cell func(candidate) string) {
	e.t.Helper()
	e.eventually(what+" "+want, func() (bool, string) {
		cm, _ := e.overlayOf(network, gw, anyRevision)
		got := candidateRow(e.t, cm, cell)
		return got == want, got
	})
}

// orNone prints a number the candidate may not carry.
func orNone[N int64 | float64](v *N) string {
	if v == nil {
		return "none"
	}
	return fmt.Sprint(*v)
}

// admissions waits until the gateway's overlay lists the providers' sites
// in this order with these admission states ("site=state ...").
func (e *env) admissions(network *v1alpha1.GridNetwork, gw v1alpha1.ConsumerGateway, want string) {
	e.t.Helper()
	e.overlayRow(network, gw, "admission", want, func(c candidate) string { return c.Admission })
}

// A provider whose queue crosses the enter threshold stops taking new
// sessions in the overlays (existing_only, after the candidates that take
// them) once the pressure repeats, and takes them again after its
// recovery; a provider that measures nothing is never restricted by load;
// a drain restricts at once and the provider's status says so.
func TestPressureAndDrainReachTheOverlay(t *testing.T) {
	e := newEnv(t)
	store := signals.NewStore(nil)
	queue := startQueueServer(t)
	queue.waiting.Store(1)
	gw := e.gateway("edge", "east")
	network := e.network(gw)
	network.Spec.ScoringPolicy = &v1alpha1.ScoringPolicy{Strategy: v1alpha1.ScoringQueueDepth}
	network.Spec.AdmissionPolicy = &v1alpha1.AdmissionPolicy{Mode: v1alpha1.AdmissionStabilized, Pressure: &v1alpha1.PressurePolicy{
		EnterThreshold: 0.85, ExitThreshold: 0.5, FailureThreshold: 2, SuccessThreshold: 2,
		MinimumStateDuration: "1s", RecoveryHoldDown: "1s",
	}}
	e.create(network)
	capacity := int32(10)
	busy := e.provider("a-busy", network.Name, "m1")
	busy.Spec.MetricsConfig = &v1alpha1.MetricsConfig{MetricsEndpoint: queue.URL, Timeout: "300ms", PoolName: "pool-a",
		QueueCapacity: &capacity, SignalNames: v1alpha1.MetricSignalNames{QueueDepth: "vllm:num_requests_waiting"}}
	e.create(busy)
	steady := e.provider("b-steady", network.Name, "m1")
	e.create(steady)
	e.startAgent(withSignals(store), withLoopbackScrapes(64<<10))

	state := func(first *v1alpha1.InferenceProvider, a string, second *v1alpha1.InferenceProvider, b string) string {
		return first.Name + "=" + a + " " + second.Name + "=" + b
	}
	const admitted, existingOnly = "new_and_existing", "existing_only"
	e.admissions(network, gw, state(busy, admitted, steady, admitted))
	queue.waiting.Store(9) // 0.9 of its capacity
	e.admissions(network, gw, state(steady, admitted, busy, existingOnly))
	queue.waiting.Store(2)
	e.admissions(network, gw, state(busy, admitted, steady, admitted))

	e.patchProvider(steady, func(p *v1alpha1.InferenceProvider) {
		p.Spec.TrafficPolicy = &v1alpha1.TrafficPolicy{Drain: true}
	})
	e.admissions(network, gw, state(busy, admitted, steady, existingOnly))
	e.draining(steady, true)
	e.patchProvider(steady, func(p *v1alpha1.InferenceProvider) { p.Spec.TrafficPolicy = nil })
	e.admissions(network, gw, state(busy, admitted, steady, admitted))
	e.draining(steady, false)

	// The overlays on the way passed the gateway's contract (overlayOf
	// validates each).
	_, res := e.overlayOf(network, gw, anyRevision)
	assert.Equal(t, 2, res.CandidateCount)
}

// draining waits for the provider's Draining condition to be there (True)
// or not.
func (e *env) draining(p *v1alpha1.InferenceProvider, want bool) {
	e.t.Helper()
	e.eventually(fmt.Sprintf("%s draining=%v", p.Name, want), func() (bool, string) {
		var got v1alpha1.InferenceProvider
		if err := e.admin.Get(e.ctx, client.ObjectKeyFromObject(p), &got); err != nil {
			return false, err.Error()
		}
		c := meta.FindStatusCondition(got.Status.Conditions, controller.ConditionDraining)
		if !want {
			return c == nil, fmt.Sprintf("%+v", c)
		}
		return c != nil && c.Status == metav1.ConditionTrue && c.Reason == controller.ReasonDrainRequested, fmt.Sprintf("%+v", c)
	})
}

// patchProvider reads the provider, applies change and patches it.
func (e *env) patchProvider(p *v1alpha1.InferenceProvider, change func(*v1alpha1.InferenceProvider)) {
	e.t.Helper()
	patchLive(e, p.DeepCopy(), change)
}

// patchNetwork reads the network, applies change and patches it.
func (e *env) patchNetwork(n *v1alpha1.GridNetwork, change func(*v1alpha1.GridNetwork)) {
	e.t.Helper()
	patchLive(e, n.DeepCopy(), change)
}

// patchLive reads obj's live state into obj, applies change and merge
// patches the difference.
func patchLive[T client.Object](e *env, obj T, change func(T)) {
	e.t.Helper()
	require.NoError(e.t, e.admin.Get(e.ctx, client.ObjectKeyFromObject(obj), obj))
	orig := obj.DeepCopyObject().(client.Object)
	change(obj)
	require.NoError(e.t, e.admin.Patch(e.ctx, obj, client.MergeFrom(orig)))
}

// An agent that collects no signals cannot judge load: a network asking
// for it says so in Ready, and its measured providers are not restricted
// as if their signal were missing.
func TestAdmissionByLoadWithoutSignalsSaysSoAndRestrictsNothing(t *testing.T) {
	e := newEnv(t)
	gw := e.gateway("edge", "east")
	network := e.network(gw)
	network.Spec.ScoringPolicy = &v1alpha1.ScoringPolicy{Strategy: v1alpha1.ScoringQueueDepth}
	network.Spec.AdmissionPolicy = &v1alpha1.AdmissionPolicy{MissingMetrics: v1alpha1.MissingMetricsExcluded}
	e.create(network)
	p := e.provider("measured", network.Name, "m1")
	p.Spec.MetricsConfig = &v1alpha1.MetricsConfig{MetricsEndpoint: "http://127.0.0.1:9/", SignalNames: v1alpha1.MetricSignalNames{QueueDepth: "q"}}
	e.create(p)
	e.startAgent() // no signals store
	e.admissions(network, gw, p.Name+"=new_and_existing")
	got := e.networkStatus(network, "Ready says why", func(n *v1alpha1.GridNetwork) (bool, string) {
		c := meta.FindStatusCondition(n.Status.Conditions, "Ready")
		return c != nil && c.Reason == controller.ReasonSignalsNotCollected, fmt.Sprintf("%+v", c)
	})
	assert.Contains(t, meta.FindStatusCondition(got.Status.Conditions, "Ready").Message, "--signals-addr")
}

// scores waits until the gateway's overlay lists the providers' sites in
// this order with these scores ("site=score ...").
func (e *env) scores(network *v1alpha1.GridNetwork, gw v1alpha1.ConsumerGateway, want string) {
	e.t.Helper()
	e.overlayRow(network, gw, "scores", want, func(c candidate) string { return orNone(c.Score) })
}

// Under queueDepth scoring the candidates carry their scores (1 - queue
// fill, quantised) and the less loaded provider goes first, and the order
// follows the load as it changes; a provider measuring nothing scores
// neutral.
func TestScoresFollowLoadIntoTheOverlay(t *testing.T) {
	e := newEnv(t)
	store := signals.NewStore(nil)
	gw := e.gateway("edge", "east")
	network := e.network(gw)
	network.Spec.ScoringPolicy = &v1alpha1.ScoringPolicy{Strategy: v1alpha1.ScoringQueueDepth}
	network.Spec.RoutingPolicy = v1alpha1.RoutingScoreFirst
	network.Spec.AdmissionPolicy = &v1alpha1.AdmissionPolicy{Mode: v1alpha1.AdmissionInstantaneous, Pressure: &v1alpha1.PressurePolicy{
		EnterThreshold: 0.95, ExitThreshold: 0.9, FailureThreshold: 1, SuccessThreshold: 1,
		MinimumStateDuration: "1s", RecoveryHoldDown: "1s",
	}}
	e.create(network)
	capacity := int32(10)
	measured := func(name string, q *queueServer) *v1alpha1.InferenceProvider {
		p := e.provider(name, network.Name, "m1")
		p.Spec.MetricsConfig = &v1alpha1.MetricsConfig{MetricsEndpoint: q.URL, Timeout: "300ms", PoolName: "pool-a",
			QueueCapacity: &capacity, SignalNames: v1alpha1.MetricSignalNames{QueueDepth: "vllm:num_requests_waiting"}}
		return p
	}
	qa, qb := startQueueServer(t), startQueueServer(t)
	qa.waiting.Store(8)
	qb.waiting.Store(1)
	a, b, c := measured("a", qa), measured("b", qb), e.provider("c-unmeasured", network.Name, "m1")
	e.create(a)
	e.create(b)
	e.create(c)
	e.startAgent(withSignals(store), withLoopbackScrapes(64<<10))

	e.scores(network, gw, fmt.Sprintf("%s=0.9 %s=0.5 %s=0.2", b.Name, c.Name, a.Name))
	qa.waiting.Store(0)
	qb.waiting.Store(6)
	e.scores(network, gw, fmt.Sprintf("%s=1 %s=0.5 %s=0.4", a.Name, c.Name, b.Name))
}

// A network asking for weightedRandom gets overlays the gateway executes
// (random within a group) with each candidate's capacity weight beside
// it, and a Selection condition saying so while Ready holds; asking for
// another mode again takes the condition away.
func TestWeightedSelectionIsDeliveredAsRandomWithWeightsAndSaysSo(t *testing.T) {
	e := newEnv(t)
	gw := e.gateway("edge", "east")
	network := e.network(gw)
	network.Spec.SelectionPolicy = &v1alpha1.SelectionPolicy{Mode: v1alpha1.SelectionWeightedRandom}
	e.create(network)
	big := e.provider("big", network.Name, "m1")
	big.Spec.PlacementPolicy = &v1alpha1.PlacementPolicy{CapacityWeight: 4}
	e.create(big)
	small := e.provider("small", network.Name, "m1")
	e.create(small)
	e.startAgent()

	e.eventually("weights in the overlay", func() (bool, string) {
		cm, _ := e.overlayOf(network, gw, anyRevision)
		var doc struct {
			Overlay struct {
				SelectionPolicy struct{ Mode string } `json:"selection_policy"`
			} `json:"overlay"`
		}
		require.NoError(t, json.Unmarshal([]byte(cm.Data[envelope.DataKeyEnvelope]), &doc))
		got := candidateRow(t, cm, func(c candidate) string { return orNone(c.Weight) }) + " mode=" + doc.Overlay.SelectionPolicy.Mode
		return got == big.Name+"=4 "+small.Name+"=1 mode=random", got
	})
	got := e.networkStatus(network, "Selection says what is done", func(n *v1alpha1.GridNetwork) (bool, string) {
		c := meta.FindStatusCondition(n.Status.Conditions, controller.ConditionSelection)
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == controller.ReasonWeightsNotInContract, fmt.Sprintf("%+v", c)
	})
	assert.Equal(t, metav1.ConditionTrue, meta.FindStatusCondition(got.Status.Conditions, "Ready").Status)

	var live v1alpha1.GridNetwork
	require.NoError(t, e.admin.Get(e.ctx, client.ObjectKeyFromObject(network), &live))
	orig := live.DeepCopy()
	live.Spec.SelectionPolicy.Mode = "roundRobin"
	require.NoError(t, e.admin.Patch(e.ctx, &live, client.MergeFrom(orig)))
	e.networkStatus(network, "no Selection condition", func(n *v1alpha1.GridNetwork) (bool, string) {
		c := meta.FindStatusCondition(n.Status.Conditions, controller.ConditionSelection)
		return c == nil, fmt.Sprintf("%+v", c)
	})
}
