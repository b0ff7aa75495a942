package measure

import "os"

// SmokeEnv, set to 1, runs every benchmark at its smallest size: `make
// test` runs them all that way, in one process per package, so that a
// benchmark that can no longer run (or no longer run beside another)
// fails CI. A smoke run measures nothing and holds no goal; the lines it
// prints are not figures.
const SmokeEnv = "GRIDSYNC_BENCH_SMOKE"

// Smoke says whether this is a smoke run.
func Smoke() bool { return os.Getenv(SmokeEnv) == "1" }

// Size is full in a measuring run and smoke in a smoke run.
func Size[T any](full, smoke T) T {
	if Smoke() {
		return smoke
	}
	return full
}
