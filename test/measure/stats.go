package measure

import (
	"math"
	"slices"
	"testing"
	"time"
)

// Percentile is the nearest-rank p-th percentile of values (p in 0..100):
// the smallest value that at least p% of the values do not exceed. 0 for
// no values.
func Percentile(values []float64, p float64) float64 {
	if len(values) == 0 {
		return 0
	}
	sorted := slices.Clone(values)
	slices.Sort(sorted)
	i := int(math.Ceil(p/100*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// Mean is the arithmetic mean of values; 0 for none.
func Mean(values []float64) float64 {
	if len(values) == 0 {
		return 0
	}
	sum := 0.0
	for _, v := range values {
		sum += v
	}
	return sum / float64(len(values))
}

// Millis is d in milliseconds, with microseconds kept.
func Millis(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// Must fails the test or benchmark on an error.
func Must(tb testing.TB, err error) {
	tb.Helper()
	if err != nil {
		tb.Fatal(err)
	}
}

// Until polls ok every interval until it holds, and fails the test or
// benchmark naming what it waited for when timeout passes first.
func Until(tb testing.TB, timeout, every time.Duration, what string, ok func() bool) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for !ok() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(every)
	}
}
