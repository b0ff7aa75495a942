package signals

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRatioNormalisesTheBusiestSeries(t *testing.T) {
	t0 := time.Unix(1.8e9, 0)
	samples := []Sample{
		{Metric: "vllm:num_requests_waiting", Value: 12, At: t0},
		{Metric: "vllm:num_requests_waiting", Value: 30, At: t0.Add(time.Second)},
		{Metric: "vllm:num_requests_waiting", Value: math.NaN(), At: t0.Add(2 * time.Second)},
		{Metric: "vllm:gpu_cache_usage_perc", Value: 1.7, At: t0},
	}
	q, ok := Ratio(samples, "vllm:num_requests_waiting", 40, MetricQueueDepth)
	require.True(t, ok)
	assert.Equal(t, Sample{Metric: MetricQueueDepth, Value: 0.75, At: t0.Add(time.Second)}, q)
	kv, ok := Ratio(samples, "vllm:gpu_cache_usage_perc", 0, MetricKVCache)
	require.True(t, ok)
	assert.InDelta(t, 1.0, kv.Value, 0, "clamped")
	_, ok = Ratio(samples, "missing", 0, MetricKVCache)
	assert.False(t, ok)
	_, ok = Ratio(samples, "", 0, MetricKVCache)
	assert.False(t, ok, "no metric named: none")
}

func TestLoadReadsOwnAndPeerRowsWhileFresh(t *testing.T) {
	now := time.Unix(1.8e9, 0)
	s := NewStore(func() time.Time { return now })
	s.Set("east", "p1", PartLoad, []Sample{{Metric: MetricQueueDepth, Value: 0.4, At: now}}, now.Add(time.Minute))
	s.Set("west", "p2", PartPeer, []Sample{{Metric: MetricKVCache, Value: 0.9, At: now}}, now.Add(time.Second))
	v, at, ok := s.Load("east", "p1", MetricQueueDepth)
	require.True(t, ok)
	assert.InDelta(t, 0.4, v, 0)
	assert.Equal(t, now, at)
	_, _, ok = s.Load("west", "p2", MetricKVCache)
	assert.True(t, ok)
	now = now.Add(2 * time.Second)
	_, _, ok = s.Load("west", "p2", MetricKVCache)
	assert.False(t, ok, "a stale row is no signal")
	_, _, ok = s.Load("east", "p1", MetricKVCache)
	assert.False(t, ok)
}
