package admission

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// stabilized is upstream's default pressure policy on queue depth.
func stabilized() Policy {
	return Policy{Mode: Stabilized, Signal: QueueDepth, Enter: 0.85, Exit: 0.70, Failures: 2, Successes: 3,
		MinimumStateDuration: 10 * time.Second, RecoveryHoldDown: 30 * time.Second, Missing: ExistingOnly}
}

var t0 = time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC)

// step is one observation, at seconds after t0, and the state expected.
type step struct {
	at       int
	pressure float64 // < 0: no fresh sample
	want     State
}

func run(t *testing.T, p Policy, steps []step) {
	t.Helper()
	m := NewMemory()
	for i, s := range steps {
		now := t0.Add(time.Duration(s.at) * time.Second)
		o := Observation{Pressure: s.pressure, Known: s.pressure >= 0, At: now}
		assert.Equal(t, s.want, m.Observe("p", p, o, now), "step %d at %ds, pressure %v", i, s.at, s.pressure)
	}
}

func TestWithoutASignalLoadNeverRestricts(t *testing.T) {
	run(t, Legacy(NoSignal), []step{{0, 1, NewAndExisting}, {5, -1, NewAndExisting}})
	p := stabilized()
	p.Signal = NoSignal
	run(t, p, []step{{0, 1, NewAndExisting}, {5, -1, NewAndExisting}})
}

func TestAnUnmeasuredProviderIsNeverRestrictedByLoad(t *testing.T) {
	m := NewMemory()
	for i := range 5 {
		now := t0.Add(time.Duration(i) * 10 * time.Second)
		assert.Equal(t, NewAndExisting, m.Observe("p", stabilized(), Observation{Unmeasured: true}, now))
	}
	assert.Empty(t, m.entries)
}

func TestLegacyDecidesEachObservationAlone(t *testing.T) {
	run(t, Legacy(KVCache), []step{
		{0, 0.5, NewAndExisting},
		{5, 0.85, ExistingOnly},
		{10, 0.84, NewAndExisting},
		{15, -1, NewAndExisting}, // a network that never asked for admission keeps its providers
		{20, 0.99, ExistingOnly},
	})
}

func TestStabilizedEntersAfterFailuresAndTheMinimumDuration(t *testing.T) {
	run(t, stabilized(), []step{
		{0, 0.9, NewAndExisting},  // first sample: admitted until pressure repeats
		{5, 0.9, NewAndExisting},  // two in a row, but 5 s in the state
		{10, 0.9, ExistingOnly},   // 10 s in the state
		{15, 0.75, ExistingOnly},  // between the thresholds: stays
		{20, 0.5, ExistingOnly},   // recovering: 1
		{25, 0.5, ExistingOnly},   // 2
		{30, 0.5, ExistingOnly},   // 3, but held down 10 s of 30
		{50, 0.5, NewAndExisting}, // 30 s of recovery
	})
}

func TestAPressureBetweenRecoveriesRestartsTheHoldDown(t *testing.T) {
	run(t, stabilized(), []step{
		{0, 0.9, NewAndExisting},
		{10, 0.9, ExistingOnly},
		{20, 0.5, ExistingOnly},
		{30, 0.8, ExistingOnly}, // above exit: recovery starts again
		{40, 0.5, ExistingOnly},
		{50, 0.5, ExistingOnly},
		{60, 0.5, ExistingOnly}, // 3 in a row, 20 s of recovery
		{70, 0.5, NewAndExisting},
	})
}

// A signal crossing the threshold on every scrape never flaps the state.
func TestASignalOscillatingEveryScrapeDoesNotFlap(t *testing.T) {
	steps := []step{}
	for i := range 24 {
		pressure := 0.9
		if i%2 == 1 {
			pressure = 0.5
		}
		steps = append(steps, step{i * 5, pressure, NewAndExisting})
	}
	run(t, stabilized(), steps)
}

func TestTheSameSampleCountsOnce(t *testing.T) {
	m, p := NewMemory(), stabilized()
	sample := Observation{Pressure: 0.9, Known: true, At: t0}
	for i := range 5 {
		assert.Equal(t, NewAndExisting, m.Observe("p", p, sample, t0.Add(time.Duration(i)*10*time.Second)))
	}
	sample.At = t0.Add(50 * time.Second)
	assert.Equal(t, ExistingOnly, m.Observe("p", p, sample, t0.Add(50*time.Second)), "a second sample, 50 s into the state")
}

func TestMissingSignalsFollowThePolicy(t *testing.T) {
	run(t, stabilized(), []step{
		{0, 0.1, NewAndExisting},
		{5, -1, ExistingOnly},     // missing: existingOnly at once
		{10, 0.1, ExistingOnly},   // back: recovery as from pressure
		{15, 0.1, ExistingOnly},   //
		{20, 0.1, ExistingOnly},   // 3 in a row, 10 s of recovery
		{40, 0.1, NewAndExisting}, // 30 s
	})
	excluded := stabilized()
	excluded.Missing = None
	run(t, excluded, []step{
		{0, -1, None},
		{5, 0.9, ExistingOnly}, // back and pressured: no longer left out
		{10, 0.1, ExistingOnly},
	})
}

func TestDrainAndLeastCombineStates(t *testing.T) {
	assert.Equal(t, ExistingOnly, Drain(NewAndExisting))
	assert.Equal(t, ExistingOnly, Drain(ExistingOnly))
	assert.Equal(t, None, Drain(None), "a drained provider left out by its load stays out")
	assert.Equal(t, NewAndExisting, Least(None, ExistingOnly, NewAndExisting))
	assert.Equal(t, ExistingOnly, Least(None, ExistingOnly))
	assert.Equal(t, None, Least())
}

func TestRetainForgets(t *testing.T) {
	m, p := NewMemory(), stabilized()
	m.Observe("a", p, Observation{Pressure: 0.9, Known: true, At: t0}, t0)
	m.Observe("b", p, Observation{Pressure: 0.9, Known: true, At: t0}, t0)
	m.Retain(map[string]bool{"a": true})
	assert.Len(t, m.entries, 1)
	assert.Contains(t, m.entries, "a")
}

func TestRankPutsAdmittedFirst(t *testing.T) {
	assert.Less(t, Rank(NewAndExisting), Rank(ExistingOnly))
	assert.Less(t, Rank(ExistingOnly), Rank(None))
}
