package overlaysync

import (
	"math/rand/v2"
	"time"
)

// backoff doubles a delay from min up to max and adds up to 50% jitter, so
// that a fleet of sidecars does not hammer a recovering API server in step.
type backoff struct {
	min, max time.Duration
	next     time.Duration
	jitter   func() float64 // in [0, 1)
}

func newBackoff(minDelay, maxDelay time.Duration) *backoff {
	return &backoff{min: minDelay, max: maxDelay, next: minDelay, jitter: rand.Float64}
}

// Next returns the delay before the next attempt: within [d, 1.5d) for the
// current step d, never more than max.
func (b *backoff) Next() time.Duration {
	d := b.next
	b.next = min(2*b.next, b.max)
	return min(d+time.Duration(b.jitter()*float64(d)/2), b.max)
}

// Reset starts over from min after a success.
func (b *backoff) Reset() { b.next = b.min }
