package framework

import (
	"testing"
	"time"
)

// Eventually polls cond every 100 ms for up to timeout and fails the test
// with what cond last said when it never holds: a wait across sites whose
// failure says where they stood.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	last := ""
	for time.Now().Before(deadline) {
		ok, why := cond()
		if ok {
			return
		}
		last = why
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s: %s", what, last)
}
