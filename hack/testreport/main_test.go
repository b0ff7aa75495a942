package main

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

func feed(t *testing.T, events ...event) (string, bool) {
	t.Helper()
	var out bytes.Buffer
	r := newReport(&out)
	for _, e := range events {
		b, err := json.Marshal(e)
		require.NoError(t, err)
		var back event
		require.NoError(t, json.Unmarshal(b, &back))
		r.handle(back, "")
	}
	ok := r.summary()
	return out.String(), ok
}

func TestAPassingPackageShowsItsSlowestTest(t *testing.T) {
	out, ok := feed(t,
		event{Action: "output", Package: "p", Test: "TestFast", Output: "=== RUN   TestFast\n"},
		event{Action: "output", Package: "p", Test: "TestFast", Output: "chatter a passing test printed\n"},
		event{Action: "pass", Package: "p", Test: "TestFast", Elapsed: 0.1},
		event{Action: "pass", Package: "p", Test: "TestSlow/case", Elapsed: 9},
		event{Action: "pass", Package: "p", Test: "TestSlow", Elapsed: 4.2},
		event{Action: "output", Package: "p", Output: "PASS\n"},
		event{Action: "output", Package: "p", Output: "ok  \tp\t4.5s\n"},
		event{Action: "pass", Package: "p", Elapsed: 4.5},
		event{Action: "output", Package: "q", Output: "?   \tq\t[no test files]\n"},
		event{Action: "skip", Package: "q"},
	)
	require.True(t, ok)
	require.Contains(t, out, "ok  \tp\t4.5s  (slowest TestSlow 4.2s)\n", "a subtest is not a package's slowest test: its parent is")
	require.Contains(t, out, "?   \tq\t[no test files]\n")
	require.NotContains(t, out, "chatter", "a passing test's output stays quiet, as in plain go test")
	require.Contains(t, out, "slowest packages:\n  p ")
}

func TestAFailedTestPrintsItsWholeOutput(t *testing.T) {
	out, ok := feed(t,
		event{Action: "output", Package: "p", Test: "TestBad", Output: "=== RUN   TestBad\n"},
		event{Action: "output", Package: "p", Test: "TestBad", Output: "what it printed\n"},
		event{Action: "output", Package: "p", Test: "TestBad/sub", Output: "    bad_test.go:5: boom\n"},
		event{Action: "fail", Package: "p", Test: "TestBad/sub"},
		event{Action: "output", Package: "p", Test: "TestBad", Output: "--- FAIL: TestBad (0.00s)\n"},
		event{Action: "fail", Package: "p", Test: "TestBad"},
		event{Action: "output", Package: "p", Output: "FAIL\tp\t0.3s\n"},
		event{Action: "fail", Package: "p", Elapsed: 0.3},
	)
	require.False(t, ok)
	require.Contains(t, out, "what it printed\n    bad_test.go:5: boom\n--- FAIL: TestBad (0.00s)\n")
	require.NotContains(t, out, "=== RUN")
	require.Contains(t, out, "FAIL\tp\t0.3s\n")
}

func TestBuildFailuresAndUnfinishedPackagesFail(t *testing.T) {
	out, ok := feed(t, event{Action: "build-output", Output: "p/x.go:1:1: syntax error\n"}, event{Action: "build-fail"})
	require.False(t, ok)
	require.Contains(t, out, "syntax error")

	out, ok = feed(t, event{Action: "run", Package: "p", Test: "TestHangs"})
	require.False(t, ok, "a stream that ends before its package did is a failed run")
	require.Contains(t, out, "p never finished")
}

// A test binary that times out (or panics) under a running test ends the
// package without ending the test: the test's output, the panic and its
// stack among it, is printed with the package's FAIL.
func TestATimedOutTestPrintsWhatItPrinted(t *testing.T) {
	out, ok := feed(t,
		event{Action: "run", Package: "p", Test: "TestDone"},
		event{Action: "pass", Package: "p", Test: "TestDone", Elapsed: 1},
		event{Action: "run", Package: "p", Test: "TestLong"},
		event{Action: "output", Package: "p", Test: "TestLong", Output: "=== RUN   TestLong\n"},
		event{Action: "output", Package: "p", Test: "TestLong", Output: "    long_test.go:9: waiting for the rotation\n"},
		event{Action: "output", Package: "p", Test: "TestLong", Output: "panic: test timed out after 10m0s\n"},
		event{Action: "output", Package: "p", Output: "FAIL\tp\t600.1s\n"},
		event{Action: "fail", Package: "p", Elapsed: 600.1},
	)
	require.False(t, ok)
	require.Contains(t, out, "    long_test.go:9: waiting for the rotation\npanic: test timed out after 10m0s\n")
	require.Contains(t, out, "FAIL\tp\t600.1s")
}

// make test runs a package's tests and its benchmarks in two go commands
// at once: the two runs of one package are two lines, each with its own
// result, and a failure in either fails the report.
func TestTwoStreamsKeepTheirRunsOfOnePackageApart(t *testing.T) {
	var out bytes.Buffer
	r := newReport(&out)
	r.handle(event{Action: "output", Package: "p", Output: "ok  \tp\t1.0s\n"}, "")
	r.handle(event{Action: "output", Package: "p", Test: "BenchmarkX", Output: "bench chatter\n"}, "bench")
	r.handle(event{Action: "pass", Package: "p", Elapsed: 1}, "")
	r.handle(event{Action: "fail", Package: "p", Test: "BenchmarkX", Elapsed: 2}, "bench")
	r.handle(event{Action: "output", Package: "p", Output: "FAIL\tp\t2.0s\n"}, "bench")
	r.handle(event{Action: "fail", Package: "p", Elapsed: 2}, "bench")
	ok := r.summary()
	require.False(t, ok, "the benchmarks' failure is lost behind the tests' pass")
	require.Contains(t, out.String(), "ok  \tp\t1.0s\n")
	require.Contains(t, out.String(), "bench chatter\n")
	require.Contains(t, out.String(), "FAIL\tp\t2.0s [bench]\n")
	require.Contains(t, out.String(), "  p [bench] ")
}
