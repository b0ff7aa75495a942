#!/usr/bin/env bash
# Runs the lint, every test of the module and every benchmark once at its
# smallest size, in four go commands at once, each into a pipe of its own
# that testreport (the first argument) reads and reports as one run:
#
#   node   the node tests, started first: the longest package (about four
#          minutes, most of it the delegated mounts' rolls and their quiet
#          minute). Among the other packages it would start last (go test
#          runs packages in order) and end the run alone. Beside it, one
#          after the other in the second slot while the node tests hold
#          the first, the other suites on real nodes (the grid of two
#          across the WAN lab, the monitoring on such a grid, the release
#          installed from a registry), cert-manager's two sites, and the
#          attack suite: mostly waiting on their servers, some six minutes
#          in all, which fill the lane to about the length of the others.
#          Among the other packages each lengthened the run's longest path
#          by about half its time.
#   long   after the lint, multisite and the soak side by side: four and
#          a half and two and a half minutes, mostly waiting (their sites
#          converge, the soak's faults play out over fixed seconds). One
#          after the other they were the run's longest path; last in go
#          list's order, they ended the run side by side on cores a third
#          idle.
#   tests  the lint (make lint, while the node starts), then every other
#          package's tests, TEST_P packages at a time (default 2).
#   bench  every benchmark, once, at its smallest size (test/measure), so
#          that one that can no longer run fails here rather than in make
#          bench. A command of its own because -bench makes go test run
#          its packages one after another: given to the tests' command it
#          held back every other package (make test took the sum of its
#          packages' times).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
report="$1"
GO="${GO:-go}"
MAKE="${MAKE:-make}"
P="${TEST_P:-2}"
module="$("$GO" list -m)"

dir="$(mktemp -d)"
pids=()
cleanup() {
	# A failed or interrupted run leaves no go command behind, nor what
	# its tests started.
	for pid in "${pids[@]}"; do kill -- "-$pid" 2>/dev/null || true; done
	rm -rf "$dir"
}
trap cleanup EXIT
mkfifo "$dir/node" "$dir/long" "$dir/tests" "$dir/bench"

long=("${module}/test/multisite" "${module}/test/soak")
nodes=("${module}/test/node" "${module}/test/grid" "${module}/test/monitoring" "${module}/test/publish" "${module}/test/certmanager" "${module}/test/attack")
mapfile -t others < <("$GO" list ./... | grep -vxF -f <(printf '%s\n' "${nodes[@]}" "${long[@]}"))
# test/monitoring's benchmark and its test run one function, the test with
# the assertions: its smoke would start the same two-site grid again for a
# minute and prove nothing the test does not.
mapfile -t benched < <(git grep -l '^func Benchmark' -- '*_test.go' | xargs -n1 dirname | sort -u | grep -vxF test/monitoring | sed 's|^|./|')
flags=(-race -count=1 -json)
# The race detector's runtime sleeps a second as each test binary exits,
# for goroutines still running to report a race: the tests stop theirs
# before they end, and the sleep cost a second of a package slot for each
# of some ninety packages.
export GORACE="${GORACE:-atexit_sleep_ms=0}"
export GRIDSYNC_BENCH_SMOKE=1
# Job control: each command started in the background leads a process
# group of its own, which cleanup stops whole.
set -m

"$report" "$dir/node" "$dir/long" "$dir/tests" "bench=$dir/bench" &
reporter=$!

# 20 minutes for the node tests, as for the others: about four times what
# they take on a loaded machine.
"$GO" test "${flags[@]}" -timeout 20m -p 2 "${nodes[@]}" >"$dir/node" 2>&1 &
pids+=($!)

if ! "$MAKE" --no-print-directory lint; then
	echo "make test: the lint failed; no tests run"
	# The node tests stopped, and the report with them: it has nothing
	# to say of a run that did not happen.
	kill "$reporter" 2>/dev/null || true
	wait "$reporter" 2>/dev/null || true
	exit 1
fi

"$GO" test "${flags[@]}" -timeout 20m -p 2 "${long[@]}" >"$dir/long" 2>&1 &
pids+=($!)
"$GO" test "${flags[@]}" -timeout 20m -p "$P" "${others[@]}" >"$dir/tests" 2>&1 &
pids+=($!)
# The smoke proves the benchmarks run and measures nothing: without the
# race detector (the tests run the same code under it), built as the
# tests' binaries are (static, trimmed), which the lint's vet compiled.
CGO_ENABLED=0 "$GO" test -trimpath -count=1 -json -timeout 20m -run '^$' -bench . -benchtime 1x "${benched[@]}" >"$dir/bench" 2>&1 &
pids+=($!)

rc=0
wait "$reporter" || rc=$?
for pid in "${pids[@]}"; do
	wait "$pid" || rc=1
done
pids=()
exit "$rc"
