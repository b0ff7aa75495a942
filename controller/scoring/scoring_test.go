package scoring_test

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/gridsync/gridsync/controller/admission"
	"github.com/gridsync/gridsync/controller/scoring"
	"github.com/gridsync/gridsync/shared/envelope"
)

func TestRawIsOneMinusPressureOfTheStrategysSignal(t *testing.T) {
	known := func(p float64) admission.Observation { return admission.Observation{Pressure: p, Known: true} }
	for _, c := range []struct {
		name   string
		signal admission.Signal
		o      admission.Observation
		want   float64
	}{
		{"noMetrics scores every provider 0", admission.NoSignal, known(0.2), 0},
		{"queue 20% full", admission.QueueDepth, known(0.2), 0.8},
		{"KV cache full", admission.KVCache, known(1), 0},
		{"pressure beyond 1 is clamped", admission.QueueDepth, known(3), 0},
		{"negative pressure is clamped", admission.QueueDepth, known(-1), 1},
		{"NaN is unknown", admission.QueueDepth, known(math.NaN()), scoring.Neutral},
		{"missing sample", admission.QueueDepth, admission.Observation{}, scoring.Neutral},
		{"measures nothing", admission.KVCache, admission.Observation{Unmeasured: true}, scoring.Neutral},
	} {
		assert.InDelta(t, c.want, scoring.Raw(c.signal, c.o), 1e-12, c.name)
	}
}

func TestSettleQuantisesWithHysteresis(t *testing.T) {
	assert.Equal(t, 0.35, scoring.Settle(0, false, 0.3512), "a new provider takes the nearest level, written exactly")
	assert.Equal(t, 1.0, scoring.Settle(0, false, 0.99))
	// Wavering around the boundary of two levels keeps the level.
	published := scoring.Settle(0, false, 0.374)
	assert.Equal(t, 0.35, published)
	for _, raw := range []float64{0.376, 0.374, 0.38, 0.36, 0.399} {
		published = scoring.Settle(published, true, raw)
		assert.Equal(t, 0.35, published, "raw %v", raw)
	}
	// A whole step away moves it.
	assert.Equal(t, 0.4, scoring.Settle(0.35, true, 0.4))
	assert.Equal(t, 0.3, scoring.Settle(0.35, true, 0.3))
	assert.Equal(t, 0.0, scoring.Settle(0.35, true, 0))
}

func TestBreakdownCarriesOnlyTheSelectedContribution(t *testing.T) {
	assert.Equal(t, envelope.ScoreBreakdown{QueueDepth: 0.6, Total: 0.6}, scoring.Breakdown(admission.QueueDepth, 0.6))
	assert.Equal(t, envelope.ScoreBreakdown{KVCache: 0.25, Total: 0.25}, scoring.Breakdown(admission.KVCache, 0.25))
	assert.Equal(t, envelope.ScoreBreakdown{}, scoring.Breakdown(admission.NoSignal, 0))
}
