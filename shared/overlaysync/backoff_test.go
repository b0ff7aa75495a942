package overlaysync

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestBackoffDoublesWithJitterWithinBounds(t *testing.T) {
	b := newBackoff(time.Second, 30*time.Second)
	b.jitter = func() float64 { return 0.999 }
	var got []time.Duration
	for range 8 {
		got = append(got, b.Next())
	}
	for i, d := range got {
		assert.GreaterOrEqual(t, d, time.Second, "step %d", i)
		assert.LessOrEqual(t, d, 30*time.Second, "step %d", i)
	}
	assert.InDelta(t, 1.5*float64(time.Second), float64(got[0]), float64(10*time.Millisecond))
	assert.InDelta(t, 3*float64(time.Second), float64(got[1]), float64(10*time.Millisecond))
	assert.Equal(t, 30*time.Second, got[7], "capped")

	b.jitter = func() float64 { return 0 }
	b.Reset()
	assert.Equal(t, time.Second, b.Next())
	assert.Equal(t, 2*time.Second, b.Next())
}
