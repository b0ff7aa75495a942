// Package signals holds a site's provider signals: the health and load
// of its own providers (probed and scraped by the agent) and those its
// peers report, each row stamped with when it was observed and served
// only while fresh. A missing or stale signal is absent, never zero: a
// reader treats it as neutral.
//
// The wire format is the upstream operator's /v1/site/signals: Prometheus
// text exposition, each sample labelled grid_site and grid_provider and
// stamped in milliseconds, so that a gateway or a peer built for it reads
// ours.
package signals

import (
	"cmp"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Path is where a site's signals are served and polled.
const Path = "/v1/site/signals"

// Labels this site is authoritative for on every sample.
const (
	LabelSite     = "grid_site"
	LabelProvider = "grid_provider"
)

// Series of the provider's health, emitted for every probed provider.
const (
	// MetricReady is 1 while the provider can serve (Available or
	// Degraded), 0 when Unavailable; absent before its first probe.
	MetricReady = "grid_provider_ready"
	// MetricProbeLatency is the last health probe's latency.
	MetricProbeLatency = "grid_provider_probe_latency_seconds"
	// MetricPhase is 1 with the provider's phase as a label.
	MetricPhase = "grid_provider_phase"
)

// Label is one label of a sample.
type Label struct{ Name, Value string }

// Sample is one series' value.
type Sample struct {
	Metric string
	// Labels are sorted by name and include grid_site and grid_provider.
	Labels []Label
	Value  float64
	// At is when the value was observed, on this agent's clock.
	At time.Time
}

// Label returns a label's value.
func (s Sample) Label(name string) string {
	for _, l := range s.Labels {
		if l.Name == name {
			return l.Value
		}
	}
	return ""
}

// Parts of a provider's signals, held and expiring apart: its health
// (probes) and its load (metrics scrapes) are observed apart, and a
// peer's rows arrive whole.
const (
	PartHealth = "health"
	PartLoad   = "load"
	PartPeer   = "peer"
)

// Row is what is held for one part of one provider of one site.
type Row struct {
	Site, Provider, Part string
	Samples              []Sample
	// Expires is when the row stops being served.
	Expires time.Time
}

type rowKey struct{ site, provider, part string }

// Store holds rows. Safe for concurrent use.
type Store struct {
	now func() time.Time
	// invalid counts the samples dropped for their names.
	invalid atomic.Uint64

	mu   sync.RWMutex
	rows map[rowKey]Row
	// onReady is told when a provider's readiness (as a row says it)
	// changes, with the site and provider.
	onReady func(site, provider string)
}

// NewStore makes an empty store; now is the clock (time.Now when nil).
func NewStore(now func() time.Time) *Store {
	if now == nil {
		now = time.Now
	}
	return &Store{now: now, rows: map[rowKey]Row{}}
}

// OnReadyChange registers who is told that a provider's readiness changed.
func (s *Store) OnReadyChange(f func(site, provider string)) {
	s.mu.Lock()
	s.onReady = f
	s.mu.Unlock()
}

// Set replaces one part of a provider's signals. Labels of the samples
// are completed with grid_site and grid_provider (a sample's own are kept
// as exported_*).
//
// Only the classic metric and label name syntax is kept: a sample whose
// metric or any label name is anything else (a quoted UTF-8 name, which
// the exposition parser accepts) is dropped and counted, whoever sent it
// (a provider's scrape, a peer's poll, gossip). Such a name, written back
// into /v1/site/signals, could break the answer or forge another
// provider's line.
func (s *Store) Set(site, provider, part string, samples []Sample, expires time.Time) {
	attributed := make([]Sample, 0, len(samples))
	for _, smp := range samples {
		if !ValidSample(smp) {
			s.invalid.Add(1)
			continue
		}
		attributed = append(attributed, attribute(smp, site, provider))
	}
	k := rowKey{site, provider, part}
	s.mu.Lock()
	before, had := s.readyLocked(site, provider)
	s.rows[k] = Row{Site: site, Provider: provider, Part: part, Samples: attributed, Expires: expires}
	after, has := s.readyLocked(site, provider)
	f := s.onReady
	s.mu.Unlock()
	if f != nil && (had != has || before != after) {
		f(site, provider)
	}
}

// Drop removes parts of a provider's signals (every part when none is
// named).
func (s *Store) Drop(site, provider string, parts ...string) {
	s.mu.Lock()
	before, had := s.readyLocked(site, provider)
	for k := range s.rows {
		if k.site == site && k.provider == provider && (len(parts) == 0 || slices.Contains(parts, k.part)) {
			delete(s.rows, k)
		}
	}
	after, has := s.readyLocked(site, provider)
	f := s.onReady
	s.mu.Unlock()
	if f != nil && (had != has || before != after) {
		f(site, provider)
	}
}

// Retain drops a site's rows of one part whose provider keep does not
// name.
func (s *Store) Retain(site, part string, keep map[string]bool) {
	s.mu.RLock()
	var gone []string
	for k := range s.rows {
		if k.site == site && k.part == part && !keep[k.provider] {
			gone = append(gone, k.provider)
		}
	}
	s.mu.RUnlock()
	for _, p := range gone {
		s.Drop(site, p, part)
	}
}

// Rows returns the fresh rows that pass keep (nil keeps all), sorted by
// site then provider.
func (s *Store) Rows(keep func(site, provider string) bool) []Row {
	now := s.now()
	s.mu.RLock()
	out := make([]Row, 0, len(s.rows))
	for k, r := range s.rows {
		if !r.Expires.After(now) || keep != nil && !keep(k.site, k.provider) {
			continue
		}
		out = append(out, r)
	}
	s.mu.RUnlock()
	slices.SortFunc(out, func(a, b Row) int {
		return cmp.Or(cmp.Compare(a.Site, b.Site), cmp.Compare(a.Provider, b.Provider), cmp.Compare(a.Part, b.Part))
	})
	return out
}

// Ready says whether a site's provider reports ready; known is false when
// no fresh row says either way.
func (s *Store) Ready(site, provider string) (ready, known bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.readyLocked(site, provider)
}

func (s *Store) readyLocked(site, provider string) (ready, known bool) {
	now := s.now()
	for _, part := range []string{PartHealth, PartPeer} {
		r, ok := s.rows[rowKey{site, provider, part}]
		if !ok || !r.Expires.After(now) {
			continue
		}
		for _, smp := range r.Samples {
			if smp.Metric == MetricReady {
				return smp.Value > 0, true
			}
		}
	}
	return false, false
}

// Expire drops rows past their time and tells of readiness that went
// with them; run it now and then.
func (s *Store) Expire() {
	now := s.now()
	s.mu.Lock()
	var told []rowKey
	for k, r := range s.rows {
		if r.Expires.After(now) {
			continue
		}
		delete(s.rows, k)
		// Its readiness was unknown from the moment it expired; the
		// owner hears of it now.
		if slices.ContainsFunc(r.Samples, func(smp Sample) bool { return smp.Metric == MetricReady }) {
			told = append(told, k)
		}
	}
	f := s.onReady
	s.mu.Unlock()
	if f != nil {
		for _, k := range told {
			f(k.site, k.provider)
		}
	}
}

// attribute sets grid_site and grid_provider, keeping a sample's own
// values of them as exported_grid_site and exported_grid_provider.
func attribute(smp Sample, site, provider string) Sample {
	labels := make([]Label, 0, len(smp.Labels)+2)
	for _, l := range smp.Labels {
		switch l.Name {
		case LabelSite, LabelProvider:
			if (l.Name == LabelSite && l.Value == site) || (l.Name == LabelProvider && l.Value == provider) {
				continue // already ours
			}
			labels = append(labels, Label{"exported_" + l.Name, l.Value})
		default:
			labels = append(labels, l)
		}
	}
	labels = append(labels, Label{LabelSite, site}, Label{LabelProvider, provider})
	slices.SortFunc(labels, func(a, b Label) int { return cmp.Compare(a.Name, b.Name) })
	labels = slices.CompactFunc(labels, func(a, b Label) bool { return a.Name == b.Name })
	return Sample{Metric: smp.Metric, Labels: labels, Value: smp.Value, At: smp.At}
}

// ValidSample says whether a sample's metric name and label names are of
// the classic syntax: [a-zA-Z_:][a-zA-Z0-9_:]* for metrics,
// [a-zA-Z_][a-zA-Z0-9_]* for labels.
func ValidSample(smp Sample) bool {
	if !validName(smp.Metric, true) {
		return false
	}
	for _, l := range smp.Labels {
		if !validName(l.Name, false) {
			return false
		}
	}
	return true
}

func validName(s string, colon bool) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c == '_':
		case c == ':' && colon:
		case c >= '0' && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}

// Invalid is how many samples were dropped for their names.
func (s *Store) Invalid() uint64 { return s.invalid.Load() }
