package overlay

import (
	"maps"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/gridsync/gridsync/controller/admission"
)

const (
	admitted     = admission.NewAndExisting
	existingOnly = admission.ExistingOnly
)

// states reads verdicts of states alone (scores 0).
func states(m map[string]admission.State) map[string]verdict {
	out := make(map[string]verdict, len(m))
	for k, s := range m {
		out[k] = verdict{state: s}
	}
	return out
}

// Changed load states reach the overlays together, at most once per
// interval; a provider that comes or goes does at once; a change undone
// within the interval makes no revision at all.
func TestAdmissionChangesAreCoalescedPerInterval(t *testing.T) {
	t0 := time.Unix(1.8e9, 0)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	na := &networkAdmission{memory: admission.NewMemory(), applied: map[string]verdict{}}
	const interval = 10 * time.Second
	steps := []struct {
		at      int
		desired map[string]admission.State
		applied map[string]admission.State
		wait    time.Duration
	}{
		{0, map[string]admission.State{"a": admitted, "b": admitted}, map[string]admission.State{"a": admitted, "b": admitted}, 0},
		{1, map[string]admission.State{"a": existingOnly}, map[string]admission.State{"a": existingOnly}, 0}, // the first change: at once
		{2, map[string]admission.State{"a": admitted}, map[string]admission.State{"a": existingOnly}, 9 * time.Second},
		{3, map[string]admission.State{"a": existingOnly}, map[string]admission.State{"a": existingOnly}, 0}, // undone: nothing to do
		{5, map[string]admission.State{"a": admitted, "c": existingOnly}, map[string]admission.State{"a": existingOnly, "c": existingOnly}, 6 * time.Second},
		{11, map[string]admission.State{"a": admitted, "c": admitted}, map[string]admission.State{"a": admitted, "c": admitted}, 0},
	}
	for _, s := range steps {
		wait := na.settle(states(s.desired), interval, at(s.at))
		assert.Equal(t, states(s.applied), na.applied, "at %ds", s.at)
		assert.Equal(t, s.wait, wait, "at %ds", s.at)
	}
}

// A state flipping every second for two minutes changes the overlays at
// most once per interval.
func TestAFlappingStateIsBoundedByTheInterval(t *testing.T) {
	t0 := time.Unix(1.8e9, 0)
	na := &networkAdmission{memory: admission.NewMemory(), applied: map[string]verdict{}}
	const interval = 10 * time.Second
	revisions := 0
	last := map[string]verdict{}
	for s := range 120 {
		state := admitted
		if s%2 == 1 {
			state = existingOnly
		}
		na.settle(states(map[string]admission.State{"a": state, "b": admission.Least(state, existingOnly)}), interval, t0.Add(time.Duration(s)*time.Second))
		if !maps.Equal(last, na.applied) {
			revisions++
			last = maps.Clone(na.applied)
		}
	}
	assert.LessOrEqual(t, revisions, 120/10+1)
	assert.Positive(t, revisions)
}

// A score that changes waits for the interval like a state, and goes
// together with the states changed meanwhile.
func TestScoreChangesAreCoalescedWithStates(t *testing.T) {
	t0 := time.Unix(1.8e9, 0)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	na := &networkAdmission{memory: admission.NewMemory(), applied: map[string]verdict{}}
	const interval = 10 * time.Second
	na.settle(map[string]verdict{"a": {admitted, 0.9}, "b": {admitted, 0.9}}, interval, at(0))
	na.settle(map[string]verdict{"a": {admitted, 0.5}, "b": {admitted, 0.9}}, interval, at(1))
	assert.Equal(t, map[string]verdict{"a": {admitted, 0.5}, "b": {admitted, 0.9}}, na.applied, "the first change goes at once")
	wait := na.settle(map[string]verdict{"a": {admitted, 0.4}, "b": {existingOnly, 0.9}}, interval, at(4))
	assert.Equal(t, 7*time.Second, wait)
	assert.Equal(t, map[string]verdict{"a": {admitted, 0.5}, "b": {admitted, 0.9}}, na.applied, "held back")
	na.settle(map[string]verdict{"a": {admitted, 0.4}, "b": {existingOnly, 0.9}}, interval, at(11))
	assert.Equal(t, map[string]verdict{"a": {admitted, 0.4}, "b": {existingOnly, 0.9}}, na.applied, "both, together")
}
