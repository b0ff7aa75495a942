package overlay

import (
	"context"
	"maps"
	"slices"
	"sync"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/controller/admission"
	"github.com/gridsync/gridsync/controller/internal/base"
	"github.com/gridsync/gridsync/controller/render"
	"github.com/gridsync/gridsync/controller/scoring"
	"github.com/gridsync/gridsync/signals"
)

// ReasonSignalsNotCollected: a network asks for admission by load from an
// agent that collects no signals.
const ReasonSignalsNotCollected = "SignalsNotCollected"

// defaultRevisionInterval is the least time between two revisions an
// overlay gets from load signals when the network's admission policy sets
// no minimumStateDuration (no policy at all): the CRD's default.
const defaultRevisionInterval = 10 * time.Second

// admissionBook keeps each network's admission between reconciles.
type admissionBook struct {
	mu       sync.Mutex
	networks map[string]*networkAdmission
}

// networkAdmission is one network's: what the load signals say of each
// provider (memory), and the verdicts its overlays carry (applied), which
// follow the memory at most once per revision interval.
type networkAdmission struct {
	memory    *admission.Memory
	applied   map[string]verdict
	changedAt time.Time
}

// verdict is what the load signals make of one provider: its admission
// and its published score (quantised: scoring.Settle).
type verdict struct {
	state admission.State
	score float64
}

func (b *admissionBook) of(network string) *networkAdmission {
	if b.networks == nil {
		b.networks = map[string]*networkAdmission{}
	}
	na, ok := b.networks[network]
	if !ok {
		na = &networkAdmission{memory: admission.NewMemory(), applied: map[string]verdict{}}
		b.networks[network] = na
	}
	return na
}

func (b *admissionBook) forget(network string) {
	b.mu.Lock()
	delete(b.networks, network)
	b.mu.Unlock()
}

// admissionPolicy reads a network's admission policy and its revision
// interval.
func admissionPolicy(n *v1alpha1.GridNetwork) (admission.Policy, time.Duration) {
	signal := admission.NoSignal
	if sp := n.Spec.ScoringPolicy; sp != nil {
		switch sp.Strategy {
		case v1alpha1.ScoringQueueDepth:
			signal = admission.QueueDepth
		case v1alpha1.ScoringKVCachePressure:
			signal = admission.KVCache
		}
	}
	ap := n.Spec.AdmissionPolicy
	if ap == nil {
		return admission.Legacy(signal), defaultRevisionInterval
	}
	pressure := v1alpha1.PressurePolicy{EnterThreshold: 0.85, ExitThreshold: 0.7, FailureThreshold: 2, SuccessThreshold: 3,
		MinimumStateDuration: "10s", RecoveryHoldDown: "30s"} // the CRD's default
	if ap.Pressure != nil {
		pressure = *ap.Pressure
	}
	p := admission.Policy{
		Mode: admission.Instantaneous, Signal: signal,
		Enter: pressure.EnterThreshold, Exit: pressure.ExitThreshold,
		Failures: int(pressure.FailureThreshold), Successes: int(pressure.SuccessThreshold),
		MinimumStateDuration: seconds(pressure.MinimumStateDuration, defaultRevisionInterval),
		RecoveryHoldDown:     seconds(pressure.RecoveryHoldDown, 30*time.Second),
		Missing:              admission.ExistingOnly,
	}
	if ap.Mode == v1alpha1.AdmissionStabilized {
		p.Mode = admission.Stabilized
	}
	if ap.MissingMetrics == v1alpha1.MissingMetricsExcluded {
		p.Missing = admission.None
	}
	return p, p.MinimumStateDuration
}

// seconds reads a whole-seconds duration the schema checked ("10s").
func seconds(s string, fallback time.Duration) time.Duration {
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return fallback
	}
	return d
}

// signalMetric is the normalised series a policy judges pressure by.
func signalMetric(s admission.Signal) string {
	switch s {
	case admission.QueueDepth:
		return signals.MetricQueueDepth
	case admission.KVCache:
		return signals.MetricKVCache
	}
	return ""
}

// loadDriven reports whether a network's overlays follow load signals.
func loadDriven(n *v1alpha1.GridNetwork) bool {
	p, _ := admissionPolicy(n)
	return p.Signal != admission.NoSignal
}

// measuredLoad names the normalised load series a provider's scrapes
// give (signals.Ratio of the series its metricsConfig names).
func measuredLoad(p *v1alpha1.InferenceProvider) []string {
	mc := p.Spec.MetricsConfig
	if mc == nil {
		return nil
	}
	var out []string
	if mc.SignalNames.QueueDepth != "" {
		out = append(out, signals.MetricQueueDepth)
	}
	if mc.SignalNames.KVCacheUtilization != "" {
		out = append(out, signals.MetricKVCache)
	}
	return out
}

// admitProviders is the admission stage: each provider's Admission, from
// its load signal under the network's policy, then its drain. A change of
// what the load says reaches the overlays at most once per revision
// interval (minimumStateDuration), however many providers change and
// however often: the overlays' revisions go to every pod of a gateway,
// so signals that move every scrape must not make a revision every
// scrape. A drain, a provider come or gone, acts at once. It returns how
// soon to come back for a change held back, or 0.
func (r *Reconciler) admitProviders(network *v1alpha1.GridNetwork, items []v1alpha1.InferenceProvider,
	local []render.Provider, remote []render.Remote, now time.Time,
) time.Duration {
	policy, interval := admissionPolicy(network)
	metric := signalMetric(policy.Signal)
	observe := func(site, provider string, measured []string) admission.Observation {
		// Without a signals store nothing is ever measured here: that is
		// the agent's configuration (said in Ready), not a provider's
		// missing signal.
		if metric == "" || !slices.Contains(measured, metric) || r.Opts.Signals == nil {
			return admission.Observation{Unmeasured: true}
		}
		v, at, ok := r.Opts.Signals.Load(site, provider, metric)
		return admission.Observation{Pressure: v, Known: ok, At: at}
	}
	own := r.Opts.SiteName
	measures := map[string][]string{}
	for i := range items {
		measures[items[i].Name] = measuredLoad(&items[i])
	}
	r.admission.mu.Lock()
	defer r.admission.mu.Unlock()
	na := r.admission.of(network.Name)

	desired := make(map[string]verdict, len(local)+len(remote))
	judge := func(key string, o admission.Observation) {
		before, had := na.applied[key]
		desired[key] = verdict{
			state: na.memory.Observe(key, policy, o, now),
			score: scoring.Settle(before.score, had, scoring.Raw(policy.Signal, o)),
		}
	}
	for _, p := range local {
		judge(own+"/"+p.Name, observe(own, p.Name, measures[p.Name]))
	}
	for _, p := range remote {
		judge(p.Site+"/"+p.Name, observe(p.Site, p.Name, p.Load))
	}
	keep := make(map[string]bool, len(desired))
	for k := range desired {
		keep[k] = true
	}
	na.memory.Retain(keep)
	wait := na.settle(desired, interval, now)

	drains := map[string]bool{}
	for i := range items {
		drains[items[i].Name] = base.Drained(&items[i])
	}
	for i := range local {
		v := na.applied[own+"/"+local[i].Name]
		local[i].Admission, local[i].Score = v.state, v.score
		if drains[local[i].Name] {
			local[i].Admission = admission.Drain(local[i].Admission)
		}
	}
	for i := range remote {
		v := na.applied[remote[i].Site+"/"+remote[i].Name]
		remote[i].Admission, remote[i].Score = v.state, v.score
		if remote[i].Drained {
			remote[i].Admission = admission.Drain(remote[i].Admission)
		}
	}
	return wait
}

// settle takes the verdicts desired into those the overlays carry: a
// provider come or gone at once, changed states and scores all together
// at most once per interval. It returns how long a change waits, or 0.
func (na *networkAdmission) settle(desired map[string]verdict, interval time.Duration, now time.Time) time.Duration {
	changed := false
	for k, s := range desired {
		before, had := na.applied[k]
		switch {
		case !had:
			na.applied[k] = s
		case before != s:
			changed = true
		}
	}
	maps.DeleteFunc(na.applied, func(k string, _ verdict) bool {
		_, keep := desired[k]
		return !keep
	})
	if !changed {
		return 0
	}
	if since := now.Sub(na.changedAt); !na.changedAt.IsZero() && since < interval {
		return interval - since
	}
	maps.Copy(na.applied, desired)
	na.changedAt = now
	return 0
}

// LoadDrivenNetworks names the networks whose overlays follow load
// signals: the signals loop asks them to be looked at after each round.
func LoadDrivenNetworks(ctx context.Context, c client.Reader) []string {
	var list v1alpha1.GridNetworkList
	if c.List(ctx, &list) != nil {
		return nil
	}
	var out []string
	for i := range list.Items {
		if loadDriven(&list.Items[i]) {
			out = append(out, list.Items[i].Name)
		}
	}
	return out
}
