package signals

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A row is served until it expires and then is absent: never a zero.
func TestRowsAreAbsentOnceStale(t *testing.T) {
	now := time.Unix(1000, 0)
	s := NewStore(func() time.Time { return now })
	s.Set("west", "llm", PartPeer, []Sample{{Metric: MetricReady, Value: 0, At: now}}, now.Add(10*time.Second))
	ready, known := s.Ready("west", "llm")
	assert.True(t, known)
	assert.False(t, ready)
	now = now.Add(11 * time.Second)
	_, known = s.Ready("west", "llm")
	assert.False(t, known, "stale is unknown, not unready")
	assert.Empty(t, s.Rows(nil))
}

// A sample's own grid_site and grid_provider labels cannot pose as
// another site's: they are kept as exported_*.
func TestTheStoreAttributesEverySample(t *testing.T) {
	now := time.Unix(1000, 0)
	s := NewStore(func() time.Time { return now })
	s.Set("east", "llm", PartLoad, []Sample{{Metric: "q", Value: 3, At: now, Labels: []Label{{LabelSite, "west"}, {"name", "pool"}}}}, now.Add(time.Minute))
	rows := s.Rows(nil)
	require.Len(t, rows, 1)
	assert.Equal(t, []Label{{"exported_grid_site", "west"}, {LabelProvider, "llm"}, {LabelSite, "east"}, {"name", "pool"}}, rows[0].Samples[0].Labels)
}

// Readiness changes are told, once per change.
func TestReadinessChangesAreTold(t *testing.T) {
	now := time.Unix(1000, 0)
	s := NewStore(func() time.Time { return now })
	var told []string
	s.OnReadyChange(func(site, provider string) { told = append(told, site+"/"+provider) })
	set := func(v float64) {
		s.Set("west", "llm", PartPeer, []Sample{{Metric: MetricReady, Value: v, At: now}}, now.Add(10*time.Second))
	}
	set(1)
	set(1)
	set(0)
	now = now.Add(time.Minute)
	s.Expire()
	assert.Equal(t, []string{"west/llm", "west/llm", "west/llm"}, told, "known, unready, gone")
}

// The exposition is what a Prometheus parser reads back: names with
// colons, escaped label values, millisecond stamps; Age is the oldest.
func TestExpositionRoundTrips(t *testing.T) {
	now := time.Unix(1000, 0)
	rows := []Row{{Site: "east", Provider: "llm", Samples: []Sample{
		{Metric: "vllm:num_requests_waiting", Labels: []Label{{LabelProvider, "llm"}, {LabelSite, "east"}, {"name", `a "quoted"\ pool` + "\n"}}, Value: 7, At: now.Add(-3 * time.Second)},
		{Metric: MetricReady, Labels: []Label{{LabelProvider, "llm"}, {LabelSite, "east"}}, Value: 1, At: now},
	}}}
	var b bytes.Buffer
	oldest, n, err := Render(&b, rows, nil, now)
	require.NoError(t, err)
	assert.Equal(t, 2, n)
	assert.Equal(t, 3*time.Second, oldest)
	parsed, err := Parse(b.Bytes(), nil)
	require.NoError(t, err, b.String())
	require.Len(t, parsed, 2)
	assert.Equal(t, MetricReady, parsed[0].Metric)
	assert.Equal(t, now.UnixMilli(), parsed[0].StampMillis)
	assert.Equal(t, `a "quoted"\ pool`+"\n", parsed[1].Label("name"))
	assert.Equal(t, 7.0, parsed[1].Value)

	_, err = Parse([]byte("<html>not metrics</html>"), nil)
	assert.ErrorIs(t, err, ErrNotExposition)
	b.Reset()
	_, n, _ = Render(&b, rows, []string{MetricReady}, now)
	assert.Equal(t, 1, n)
	assert.False(t, strings.Contains(b.String(), "vllm"))
}
