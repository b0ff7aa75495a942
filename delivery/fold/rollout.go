// Package fold folds the delivery reports of gateway pods' sidecars
// into what each gateway's overlay status says: how many pods report,
// how many serve the rendered revision, which lag and why, and when the
// rendered revision reached them all. It is the serving evidence a
// rendered ConfigMap is not.
package fold

import (
	"errors"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gridsync/gridsync/api/v1alpha1"
	deliveryreport "github.com/gridsync/gridsync/delivery/report"
)

// Defaults of Options.
const (
	DefaultSilentAfter = 90 * time.Second
	DefaultForgetAfter = 10 * time.Minute
	DefaultMaxPods     = 20000
	// DefaultMaxPodsPerGateway: a gateway of a thousand replicas with
	// room for a rollout's surge.
	DefaultMaxPodsPerGateway = 2000
	// DefaultMinInterval is the least time between two status updates of
	// one network that reports cause.
	DefaultMinInterval = time.Second
	// maxLaggingListed bounds the pods named in a status.
	maxLaggingListed = 10
)

// Reasons a pod lags.
const (
	LagOlderRevision = "OlderRevision"
	LagRejecting     = "Rejecting"
	LagCold          = "Cold"
	LagSilent        = "Silent"
)

// Errors of Observe.
var (
	ErrUnknownGateway = errors.New("no such gateway in any network")
	ErrFull           = errors.New("too many pods reporting")
)

// Options configure an Aggregator.
type Options struct {
	// SilentAfter: a pod whose last report is older lags as Silent
	// (sidecars report at least every 30 s).
	SilentAfter time.Duration
	// ForgetAfter: a pod silent this long is no longer counted (deleted).
	ForgetAfter time.Duration
	// MaxPods bounds the pods held; MaxPodsPerGateway those of one
	// gateway, so that one gateway's reporters never starve another's.
	MaxPods           int
	MaxPodsPerGateway int
	// MinInterval is the least time between two status updates of one
	// network caused by reports.
	MinInterval time.Duration
	Registerer  prometheus.Registerer
	Now         func() time.Time
}

type pod struct {
	report     deliveryreport.Report
	receivedAt time.Time
	// revisionSince is when this pod first reported its revision.
	revisionSince time.Time
}

type gateway struct {
	network string
	pods    map[string]*pod
	// rendered is the revision the last status summary was against, and
	// completeFor the revision whose full delivery was already observed
	// in the histogram.
	rendered    string
	completeFor string
	// told is the readers' verdict last told (OnReadersChange).
	told verdict
}

// Aggregator holds the reports. Safe for concurrent use.
type Aggregator struct {
	opts Options

	mu       sync.Mutex
	gateways map[types.NamespacedName]*gateway
	podCount int
	// lastForget is when silent pods were last looked for.
	lastForget time.Time
	onChange   func(network string)
	onReaders  func(network string)
	lastPoke   map[string]time.Time
	pending    map[string]bool

	rolloutSeconds prometheus.Histogram
	reports        *prometheus.CounterVec
}

// New makes an Aggregator.
func New(opts Options) *Aggregator {
	if opts.SilentAfter <= 0 {
		opts.SilentAfter = DefaultSilentAfter
	}
	if opts.ForgetAfter <= opts.SilentAfter {
		opts.ForgetAfter = max(DefaultForgetAfter, 2*opts.SilentAfter)
	}
	if opts.MaxPods <= 0 {
		opts.MaxPods = DefaultMaxPods
	}
	if opts.MaxPodsPerGateway <= 0 {
		opts.MaxPodsPerGateway = DefaultMaxPodsPerGateway
	}
	if opts.MinInterval <= 0 {
		opts.MinInterval = DefaultMinInterval
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	a := &Aggregator{
		opts:     opts,
		gateways: map[types.NamespacedName]*gateway{},
		lastPoke: map[string]time.Time{},
		pending:  map[string]bool{},
		rolloutSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "gridsync_rollout_delivered_seconds",
			Help:    "From a revision's rendering to every reporting pod of its gateway reporting it.",
			Buckets: []float64{0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300},
		}),
		reports: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gridsync_rollout_reports_total",
			Help: "Delivery reports taken, by outcome (accepted, unknown_gateway, full).",
		}, []string{"outcome"}),
	}
	if opts.Registerer != nil {
		opts.Registerer.MustRegister(a.rolloutSeconds, a.reports, &podCollector{a: a})
	}
	return a
}

// OnChange registers the callback told (at most once per MinInterval per
// network) that a network's delivery summary may have changed.
func (a *Aggregator) OnChange(f func(network string)) {
	a.mu.Lock()
	a.onChange = f
	a.mu.Unlock()
}

// SetGateways says which gateways a network has: reports are taken only
// for known gateways, and a removed gateway's pods are dropped.
func (a *Aggregator) SetGateways(network string, gws []types.NamespacedName) {
	a.mu.Lock()
	defer a.mu.Unlock()
	keep := map[types.NamespacedName]bool{}
	for _, k := range gws {
		keep[k] = true
		g := a.gateways[k]
		if g == nil {
			a.gateways[k] = &gateway{network: network, pods: map[string]*pod{}}
			continue
		}
		g.network = network
	}
	for k, g := range a.gateways {
		if g.network == network && !keep[k] {
			a.podCount -= len(g.pods)
			delete(a.gateways, k)
		}
	}
}

// Observe takes one report (already authenticated and validated).
func (a *Aggregator) Observe(r deliveryreport.Report) error {
	now := a.opts.Now()
	a.mu.Lock()
	g := a.gateways[types.NamespacedName{Namespace: r.Namespace, Name: r.Gateway}]
	if g == nil {
		a.mu.Unlock()
		a.reports.WithLabelValues("unknown_gateway").Inc()
		return ErrUnknownGateway
	}
	p := g.pods[r.Pod]
	changed := true
	// A pod back after a silence long enough to be left out of the
	// readers counts again: as much a change as a new one.
	reading := p == nil || !sameReading(p.report, r) || now.Sub(p.receivedAt) > a.opts.ForgetAfter
	var forgotten []string // networks whose readers changed as silent pods made room
	if p == nil {
		full := func() bool { return len(g.pods) >= a.opts.MaxPodsPerGateway || a.podCount >= a.opts.MaxPods }
		if full() && now.Sub(a.lastForget) >= time.Second {
			// Pods long silent make room; at most once a second, so that
			// a full table costs no scan per refused report.
			a.lastForget = now
			forgotten = a.forgetLocked(now)
		}
		if full() {
			tellReaders := a.onReaders
			a.mu.Unlock()
			a.reports.WithLabelValues("full").Inc()
			a.tellReaders(tellReaders, forgotten)
			return ErrFull
		}
		p = &pod{report: r, revisionSince: now}
		g.pods[r.Pod] = p
		a.podCount++
	} else {
		if p.report.Revision != r.Revision {
			p.revisionSince = now
		}
		// A heartbeat of the same state changes nothing, unless it ends
		// a silence.
		changed = !sameReport(p.report, r) || now.Sub(p.receivedAt) > a.opts.SilentAfter
		p.report = r
	}
	p.receivedAt = now
	network := g.network
	readers := reading && a.readersChangedLocked(g, now)
	tellReaders := a.onReaders
	a.mu.Unlock()
	a.reports.WithLabelValues("accepted").Inc()
	if changed {
		a.poke(network)
	}
	if readers {
		forgotten = append(forgotten, network)
	}
	a.tellReaders(tellReaders, forgotten)
	return nil
}

// tellReaders calls f, when set, for each network.
func (a *Aggregator) tellReaders(f func(string), networks []string) {
	if f == nil {
		return
	}
	for _, n := range networks {
		f(n)
	}
}

func sameReport(a, b deliveryreport.Report) bool {
	return a.Revision == b.Revision && a.State == b.State && a.LastRejectionReason == b.LastRejectionReason
}

// forgetLocked drops pods silent past ForgetAfter; it returns the
// networks whose gateways' readers changed by it.
func (a *Aggregator) forgetLocked(now time.Time) []string {
	var readersChanged []string
	for _, g := range a.gateways {
		forgot := false
		for name, p := range g.pods {
			if now.Sub(p.receivedAt) > a.opts.ForgetAfter {
				delete(g.pods, name)
				a.podCount--
				forgot = true
			}
		}
		if forgot && a.readersChangedLocked(g, now) {
			readersChanged = append(readersChanged, g.network)
		}
	}
	return readersChanged
}

// poke tells the owner a network changed, at most once per MinInterval:
// a change inside the interval is told at its end.
func (a *Aggregator) poke(network string) {
	a.mu.Lock()
	f := a.onChange
	if f == nil || a.pending[network] {
		a.mu.Unlock()
		return
	}
	now := a.opts.Now()
	wait := a.lastPoke[network].Add(a.opts.MinInterval).Sub(now)
	if wait > 0 {
		a.pending[network] = true
		a.mu.Unlock()
		time.AfterFunc(wait, func() {
			a.mu.Lock()
			a.pending[network] = false
			a.lastPoke[network] = a.opts.Now()
			a.mu.Unlock()
			f(network)
		})
		return
	}
	a.lastPoke[network] = now
	a.mu.Unlock()
	f(network)
}

// Watch pokes the networks whose pods turn silent (a silence is a change
// no report announces); it returns when stop is closed.
func (a *Aggregator) Watch(stop <-chan struct{}) {
	t := time.NewTicker(a.opts.SilentAfter / 3)
	defer t.Stop()
	silentBefore := map[types.NamespacedName]int{}
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		now := a.opts.Now()
		var changed []string
		a.mu.Lock()
		for k, g := range a.gateways {
			silent := 0
			for _, p := range g.pods {
				if now.Sub(p.receivedAt) > a.opts.SilentAfter {
					silent++
				}
			}
			if silent != silentBefore[k] {
				changed = append(changed, g.network)
			}
			silentBefore[k] = silent
		}
		readersChanged := a.forgetLocked(now)
		tellReaders := a.onReaders
		a.mu.Unlock()
		for _, n := range changed {
			a.poke(n)
		}
		a.tellReaders(tellReaders, readersChanged)
	}
}

// Summary is a gateway's delivery against its rendered revision, nil
// when none of its pods reports. renderedAt feeds the histogram of
// rendered to delivered everywhere, once per revision.
func (a *Aggregator) Summary(namespace, name, rendered string, renderedAt time.Time) *v1alpha1.GatewayDelivery {
	now := a.opts.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	g := a.gateways[types.NamespacedName{Namespace: namespace, Name: name}]
	if g == nil {
		return nil
	}
	g.rendered = rendered
	d := &v1alpha1.GatewayDelivery{}
	reasons := map[string]int{}
	var lagging []v1alpha1.LaggingPod
	var deliveredAt time.Time
	for podName, p := range g.pods {
		if now.Sub(p.receivedAt) > a.opts.ForgetAfter {
			continue
		}
		d.ReportingPods++
		if r := p.report.LastRejectionReason; r != "" {
			reasons[r]++
		}
		lag := a.lagOf(p, rendered, now)
		if lag == "" {
			d.PodsOnRevision++
			if p.revisionSince.After(deliveredAt) {
				deliveredAt = p.revisionSince
			}
			continue
		}
		d.LaggingPods++
		lagging = append(lagging, v1alpha1.LaggingPod{Pod: podName, Reason: lag, Revision: p.report.Revision})
	}
	if d.ReportingPods == 0 {
		return nil
	}
	sort.Slice(lagging, func(i, j int) bool { return lagging[i].Pod < lagging[j].Pod })
	if len(lagging) > maxLaggingListed {
		lagging = lagging[:maxLaggingListed]
	}
	d.Lagging = lagging
	d.CommonRejectionReason = mostCommon(reasons)
	if d.LaggingPods == 0 && rendered != "" {
		t := metav1.NewTime(deliveredAt.Truncate(time.Second))
		d.DeliveredAt = &t
		if g.completeFor != rendered {
			g.completeFor = rendered
			if !renderedAt.IsZero() && !deliveredAt.Before(renderedAt) {
				a.rolloutSeconds.Observe(deliveredAt.Sub(renderedAt).Seconds())
			}
		}
	}
	return d
}

func (a *Aggregator) lagOf(p *pod, rendered string, now time.Time) string {
	switch {
	case now.Sub(p.receivedAt) > a.opts.SilentAfter:
		return LagSilent
	case p.report.State == deliveryreport.StateCold || p.report.Revision == "":
		return LagCold
	case p.report.Revision == rendered:
		return ""
	case p.report.LastRejectionReason != "" && p.report.State == deliveryreport.StateReadyDegraded:
		return LagRejecting
	default:
		return LagOlderRevision
	}
}

// mostCommon is the most frequent reason, the first by name on a tie.
func mostCommon(counts map[string]int) string {
	best, n := "", 0
	for r, c := range counts {
		if c > n || c == n && r < best {
			best, n = r, c
		}
	}
	return best
}

// podCollector exports the pods by delivery state against each gateway's
// last summarised revision, computed at scrape time.
type podCollector struct{ a *Aggregator }

var podsDesc = prometheus.NewDesc("gridsync_rollout_pods",
	"Reporting gateway pods by gateway and delivery state against the gateway's rendered revision (delivered, OlderRevision, Rejecting, Cold, Silent); every state of a known gateway is exported, 0 included.",
	[]string{"gateway_namespace", "gateway", "state"}, nil)

func (c *podCollector) Describe(ch chan<- *prometheus.Desc) { ch <- podsDesc }

// Collect exports one series per gateway and state: a gateway whose pods
// all lag shows 0 delivered rather than no series, so that an alert can
// tell a lagging gateway from one nobody reports for. The label count is
// bounded by the gateways the networks name.
func (c *podCollector) Collect(ch chan<- prometheus.Metric) {
	a := c.a
	now := a.opts.Now()
	a.mu.Lock()
	counts := make(map[types.NamespacedName]map[string]int, len(a.gateways))
	for key, g := range a.gateways {
		n := map[string]int{"delivered": 0, LagOlderRevision: 0, LagRejecting: 0, LagCold: 0, LagSilent: 0}
		for _, p := range g.pods {
			if now.Sub(p.receivedAt) > a.opts.ForgetAfter {
				continue
			}
			lag := a.lagOf(p, g.rendered, now)
			if lag == "" {
				lag = "delivered"
			}
			n[lag]++
		}
		counts[key] = n
	}
	a.mu.Unlock()
	for key, n := range counts {
		for state, v := range n {
			ch <- prometheus.MustNewConstMetric(podsDesc, prometheus.GaugeValue, float64(v), key.Namespace, key.Name, state)
		}
	}
}
