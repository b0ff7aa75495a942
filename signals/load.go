package signals

import (
	"math"
	"time"
)

// Normalised load series: a site adds them to each of its providers' load
// rows, from the series the provider's metricsConfig names (and its queue
// capacity), so that a peer judges the provider as its own site does: the
// provider's metric names and capacity are known only there. Values are
// 0-1.
const (
	MetricQueueDepth = "grid_provider_queue_depth_ratio"
	MetricKVCache    = "grid_provider_kv_cache_utilization_ratio"
)

// Ratio is the normalised series named out from the samples of metric:
// the largest of them (several series of a provider: its busiest),
// divided by capacity when capacity is positive, clamped to 0-1, observed
// when the newest of them was. ok is false when no finite sample exists.
func Ratio(samples []Sample, metric string, capacity float64, out string) (Sample, bool) {
	found := false
	var r Sample
	for _, smp := range samples {
		if smp.Metric != metric || metric == "" || math.IsNaN(smp.Value) || math.IsInf(smp.Value, 0) {
			continue
		}
		v := smp.Value
		if capacity > 0 {
			v /= capacity
		}
		v = min(max(v, 0), 1)
		if !found || v > r.Value {
			r.Value = v
		}
		if !found || smp.At.After(r.At) {
			r.At = smp.At
		}
		found = true
	}
	r.Metric = out
	return r, found
}

// Load returns the fresh normalised series metric of a site's provider,
// from its own load row or a peer's row.
func (s *Store) Load(site, provider, metric string) (value float64, at time.Time, ok bool) {
	now := s.now()
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, part := range []string{PartLoad, PartPeer} {
		r, has := s.rows[rowKey{site, provider, part}]
		if !has || !r.Expires.After(now) {
			continue
		}
		for _, smp := range r.Samples {
			if smp.Metric == metric {
				return smp.Value, smp.At, true
			}
		}
	}
	return 0, time.Time{}, false
}
