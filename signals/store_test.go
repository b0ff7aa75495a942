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

// scrapeAndServe is what the agent does with a provider's metrics answer:
// parse it, hold it as the provider's load, and serve it on
// /v1/site/signals.
func scrapeAndServe(t testing.TB, body []byte, now time.Time) (*Store, []Parsed, error) {
	parsed, err := Parse(body, nil)
	if err != nil {
		return nil, nil, err
	}
	s := NewStore(func() time.Time { return now })
	samples := make([]Sample, 0, len(parsed))
	for _, p := range parsed {
		p.At = now
		samples = append(samples, p.Sample)
	}
	s.Set("east", "p1", PartLoad, samples, now.Add(time.Minute))
	var b bytes.Buffer
	_, _, err = Render(&b, s.Rows(nil), nil, now)
	require.NoError(t, err)
	served, err := Parse(b.Bytes(), nil)
	if err != nil {
		t.Fatalf("what was rendered does not parse: %v\n%s", err, b.String())
	}
	return s, served, nil
}

// The first round's forgery: a provider answered a quoted UTF-8 label name
// holding an escaped newline, and the gateway read a queue depth of 1e9
// for another provider. Such a sample is dropped and counted; what is
// served names only the source.
func TestAForgedLabelNameNeverReachesTheFeed(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	forged := []byte("vllm:num_requests_waiting{\"x\\\"} 0\\ngrid_queue{grid_provider=\\\"victim\\\",grid_site=\\\"east\\\"} 1e9\\nz{a\"=\"v\"} 3\n" +
		"vllm:num_requests_waiting{model=\"m\"} 2\n")
	s, served, err := scrapeAndServe(t, forged, now)
	require.NoError(t, err)
	require.Len(t, served, 1, "only the well-named sample")
	assert.Equal(t, "p1", served[0].Label(LabelProvider))
	assert.Equal(t, 2.0, served[0].Value)
	assert.EqualValues(t, 1, s.Invalid())
	for _, name := range []string{"ok", "ok:ns", "_x9", "a_b:c"} {
		assert.True(t, ValidSample(Sample{Metric: name}), name)
	}
	for _, name := range []string{"", "9a", "a-b", "a b", "a\nb", "é"} {
		assert.False(t, ValidSample(Sample{Metric: name}), name)
		assert.False(t, ValidSample(Sample{Metric: "m", Labels: []Label{{name, "v"}}}), name)
	}
	assert.False(t, ValidSample(Sample{Metric: "m", Labels: []Label{{"a:b", "v"}}}), "no colon in a label name")
}

// Whatever a provider answers, what the agent serves for it names only
// that provider and this site, and parses.
func FuzzScrapeIsServedForItsSourceOnly(f *testing.F) {
	f.Add([]byte("vllm:num_requests_waiting{model=\"m\"} 2\n"))
	f.Add([]byte("q{\"x\\\"} 0\\ngrid_q{grid_provider=\\\"victim\\\"} 1e9\\nz{a\"=\"v\"} 3\n"))
	f.Add([]byte("# TYPE g gauge\ng{grid_provider=\"victim\",grid_site=\"west\"} 1 123\n"))
	f.Add([]byte("{\"weird name\",l=\"a\\nb\"} 1\n"))
	now := time.Unix(1_800_000_000, 0)
	f.Fuzz(func(t *testing.T, body []byte) {
		s, served, err := scrapeAndServe(t, body, now)
		if err != nil {
			return // not exposition: nothing is held
		}
		held := 0
		for _, r := range s.Rows(nil) {
			held += len(r.Samples)
		}
		if len(served) != held {
			t.Fatalf("served %d samples of the %d held", len(served), held)
		}
		for _, p := range served {
			if p.Label(LabelProvider) != "p1" || p.Label(LabelSite) != "east" {
				t.Fatalf("a sample served for %q of %q", p.Label(LabelProvider), p.Label(LabelSite))
			}
		}
	})
}
