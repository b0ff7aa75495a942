#!/usr/bin/env bash
# Runs every test of the module, and every benchmark once at its smallest
# size, in three go commands at once, each into a pipe of its own that
# testreport (the first argument) reads and reports as one run:
#
#   node   the node tests, started first and alone: one of them waits
#          eleven minutes for the kubelet to rotate a projected token and
#          the API server to refuse the old one. Run among the others it
#          would start last (go test runs packages in order) and hold one
#          of the package slots while it sleeps.
#   tests  every other package's tests, -p packages at a time.
#   bench  every benchmark, once, at its smallest size (test/measure), so
#          that one that can no longer run fails here rather than in
#          make bench. Its own go command because -bench makes go test
#          run its packages one after another, and a package with
#          benchmarks would otherwise hold back every other package.
#
# TEST_P sets the tests' package parallelism (default 2: the node tests'
# command and the benchmarks' add one each).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
report="$1"
GO="${GO:-go}"
P="${TEST_P:-2}"
module="$("$GO" list -m)"

dir="$(mktemp -d)"
pids=()
cleanup() {
	# A failed or interrupted run leaves no go command behind.
	for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
	rm -rf "$dir"
}
trap cleanup EXIT
mkfifo "$dir/node" "$dir/tests" "$dir/bench"

mapfile -t others < <("$GO" list ./... | grep -vx "${module}/test/node")
mapfile -t benched < <(git grep -l '^func Benchmark' -- '*_test.go' | xargs -n1 dirname | sort -u | sed 's|^|./|')

flags=(-race -count=1 -json)
# 30 minutes for the node tests: the token test alone takes eleven and
# go test's default of ten would kill it.
GRIDSYNC_BENCH_SMOKE=1 "$GO" test "${flags[@]}" -timeout 30m ./test/node >"$dir/node" 2>&1 &
pids+=($!)
GRIDSYNC_BENCH_SMOKE=1 "$GO" test "${flags[@]}" -timeout 20m -p "$P" "${others[@]}" >"$dir/tests" 2>&1 &
pids+=($!)
GRIDSYNC_BENCH_SMOKE=1 "$GO" test "${flags[@]}" -timeout 20m -run '^$' -bench . -benchtime 1x "${benched[@]}" >"$dir/bench" 2>&1 &
pids+=($!)

rc=0
"$report" "$dir/node" "$dir/tests" "bench=$dir/bench" || rc=$?
for pid in "${pids[@]}"; do
	wait "$pid" || rc=1
done
pids=()
exit "$rc"
