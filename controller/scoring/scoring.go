// Package scoring turns a provider's load signal into the score an
// overlay orders candidates by (upstream's scoringPolicy): one strategy's
// signal, never a blend, so that a candidate's place is easy to explain.
// Scores order candidates within a selection group; they never split a
// group and are not traffic weights.
//
// A score is published quantised, with hysteresis: a load that moves
// every scrape must not make a revision every scrape (each revision goes
// to every pod of a gateway), so a published score changes only when the
// signal has moved a whole step away from it. It is pure.
package scoring

import (
	"math"

	"github.com/gridsync/gridsync/controller/admission"
	"github.com/gridsync/gridsync/shared/envelope"
)

// Step is the resolution of a published score: twenty levels from 0 to 1.
const Step = 0.05

// Neutral is the score of a provider whose signal is unknown (it
// measures none, or its sample is missing or stale), as upstream keeps
// it: neither preferred to a measured provider under no load nor put
// behind one under full load. Admission, not the score, is what keeps
// new sessions off a provider whose signal is missing.
const Neutral = 0.5

// Raw is the unquantised score of one observation under a strategy's
// signal: 1 - pressure (less loaded scores higher), Neutral when the
// load is not known, and 0 for every provider under noMetrics.
func Raw(signal admission.Signal, o admission.Observation) float64 {
	switch {
	case signal == admission.NoSignal:
		return 0
	case o.Unmeasured || !o.Known || math.IsNaN(o.Pressure):
		return Neutral
	}
	return 1 - math.Min(1, math.Max(0, o.Pressure))
}

// Settle is the score to publish for raw, given the score published
// before (had: there was one). A new provider takes the nearest level;
// afterwards the published level moves only when raw is at least a whole
// step away from it, so a signal wavering around the boundary of two
// levels keeps the one it has.
func Settle(published float64, had bool, raw float64) float64 {
	if had && math.Abs(raw-published) < Step-1e-9 { // a float's error is not a step

		return published
	}
	return level(raw)
}

// level rounds to the nearest Step, exactly as written in decimal (0.35,
// not 0.35000000000000003).
func level(v float64) float64 {
	return math.Round(math.Round(v/Step)*Step*100) / 100
}

// Breakdown explains a score: the selected strategy's contribution and
// the total, every other contribution zero.
func Breakdown(signal admission.Signal, score float64) envelope.ScoreBreakdown {
	b := envelope.ScoreBreakdown{Total: score}
	switch signal {
	case admission.QueueDepth:
		b.QueueDepth = score
	case admission.KVCache:
		b.KVCache = score
	}
	return b
}
