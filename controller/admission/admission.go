// Package admission decides whether a provider takes new sessions from
// its load signals: new_and_existing, existing_only (pressured or
// drained: sessions already on it continue, no new ones) or none. It is
// pure: the caller supplies each observation and the clock, and keeps a
// Memory per network across observations, so that a stabilized policy
// can ask for several observations in a row and a minimum time in a state
// before it changes one (hysteresis). Hard failures (an unhealthy or
// unreachable provider, an untrusted site) withdraw candidates before
// admission is asked.
package admission

import (
	"time"
)

// State is a candidate's admission_state, as the overlay carries it.
type State string

const (
	NewAndExisting State = "new_and_existing"
	ExistingOnly   State = "existing_only"
	// None admits nothing: the candidate is left out.
	None State = "none"
)

// Signal is the load signal that measures pressure: the one the
// network's scoring strategy uses.
type Signal int

const (
	// NoSignal: the noMetrics strategy; load never restricts admission.
	NoSignal Signal = iota
	QueueDepth
	KVCache
)

// Mode is how an observation changes the state.
type Mode int

const (
	// Instantaneous: each observation decides alone.
	Instantaneous Mode = iota
	// Stabilized: a change needs several observations in a row and a
	// minimum time in the current state; recovery also a hold-down.
	Stabilized
)

// Policy is a network's admission policy, validated.
type Policy struct {
	Mode   Mode
	Signal Signal
	// Enter is the pressure (0-1) at or above which a provider is
	// pressured; Exit (below Enter) the pressure at or below which it
	// recovers.
	Enter, Exit float64
	// Failures and Successes are how many pressured, or recovered,
	// observations in a row change the state (stabilized).
	Failures, Successes int
	// MinimumStateDuration is how long a state is kept at least;
	// RecoveryHoldDown how long a recovery must last before new sessions
	// are admitted again (stabilized).
	MinimumStateDuration, RecoveryHoldDown time.Duration
	// Missing is the state of a provider whose signal is missing or
	// stale: ExistingOnly or None.
	Missing State
}

// Legacy is the policy of a network without admissionPolicy, as upstream
// keeps it: each observation decides, pressure from 0.85, and a provider
// whose signal is missing keeps taking new sessions (a network that never
// asked for admission must not lose providers to a failed scrape).
func Legacy(signal Signal) Policy {
	return Policy{Mode: Instantaneous, Signal: signal, Enter: 0.85, Exit: 0.70, Failures: 1, Successes: 1, Missing: NewAndExisting}
}

// Observation is what is known of one provider now.
type Observation struct {
	// Unmeasured: the provider declares no series of the policy's signal
	// (no metricsConfig, or no name for it), so its load is never known
	// and never restricts it. Otherwise an unknown load is missing.
	Unmeasured bool
	// Pressure is the policy's signal, normalised to 0-1; Known is false
	// when no fresh sample of it exists.
	Pressure float64
	Known    bool
	// At identifies the sample: the same sample observed twice (a render
	// between two scrapes) counts once.
	At time.Time
}

// entry is what a stabilized policy remembers of one provider.
type entry struct {
	state                State
	since                time.Time // when state began
	pressured, recovered int       // observations in a row
	recoveringSince      time.Time // the first of the recovered ones
	lastSample           time.Time
}

// Memory holds a network's providers' admission across observations. It
// is not safe for concurrent use.
type Memory struct {
	entries map[string]*entry
}

// NewMemory makes an empty memory.
func NewMemory() *Memory { return &Memory{entries: map[string]*entry{}} }

// Observe returns provider key's state after observation o at now.
func (m *Memory) Observe(key string, p Policy, o Observation, now time.Time) State {
	if p.Signal == NoSignal || o.Unmeasured {
		delete(m.entries, key)
		return NewAndExisting
	}
	if !o.Known {
		m.entries[key] = &entry{state: p.Missing, since: now}
		return p.Missing
	}
	pressured, recovered := o.Pressure >= p.Enter, o.Pressure <= p.Exit
	if p.Mode == Instantaneous {
		state := NewAndExisting
		if pressured {
			state = ExistingOnly
		}
		m.entries[key] = &entry{state: state, since: now, lastSample: o.At}
		return state
	}
	e, seen := m.entries[key]
	if !seen {
		// The first fresh observation: admitted until pressure shows
		// itself the required number of times.
		e = &entry{state: NewAndExisting, since: now}
		m.entries[key] = e
	}
	if !o.At.IsZero() && o.At.Equal(e.lastSample) {
		return e.state
	}
	e.lastSample = o.At
	inState := now.Sub(e.since)
	switch e.state {
	case NewAndExisting:
		e.recovered, e.recoveringSince = 0, time.Time{}
		if !pressured {
			e.pressured = 0
			return e.state
		}
		e.pressured++
		if e.pressured >= p.Failures && inState >= p.MinimumStateDuration {
			e.state, e.since, e.pressured = ExistingOnly, now, 0
		}
	default: // ExistingOnly, or None while the signal was missing
		e.pressured = 0
		if !recovered {
			e.recovered, e.recoveringSince = 0, time.Time{}
			if e.state == None {
				// Its signal is back and says pressured: no new sessions,
				// but no longer left out either.
				e.state, e.since = ExistingOnly, now
			}
			return e.state
		}
		if e.recovered == 0 {
			e.recoveringSince = now
		}
		e.recovered++
		if e.recovered >= p.Successes && now.Sub(e.recoveringSince) >= p.RecoveryHoldDown && inState >= p.MinimumStateDuration {
			e.state, e.since, e.recovered, e.recoveringSince = NewAndExisting, now, 0, time.Time{}
		}
	}
	return e.state
}

// Retain forgets the providers keep does not name.
func (m *Memory) Retain(keep map[string]bool) {
	for k := range m.entries {
		if !keep[k] {
			delete(m.entries, k)
		}
	}
}

// Drain is the state of a drained provider (trafficPolicy.drain) whose
// load gives s: no new sessions, whatever the load says, and left out
// when the load already leaves it out.
func Drain(s State) State {
	if s == None {
		return None
	}
	return ExistingOnly
}

// Least is the least restrictive of states: a candidate that stands for
// several providers (a remote site's, one model) takes new sessions when
// any of them does. None when there is none.
func Least(states ...State) State {
	least := None
	for _, s := range states {
		if Rank(s) < Rank(least) {
			least = s
		}
	}
	return least
}

// Rank orders states for the overlay: admitted candidates first.
func Rank(s State) int {
	switch s {
	case ExistingOnly:
		return 1
	case None:
		return 2
	}
	return 0
}
