#!/usr/bin/env bash
# Runs the lint, every test of the module and every benchmark once at its
# smallest size, in five go commands at once, each into a pipe of its own
# that testreport (the first argument) reads and reports as one run:
#
#   node   the node tests, started first: the longest package (about five
#          minutes, most of it the delegated mounts' rolls and their quiet
#          minute). Among the other packages it would start last (go test
#          runs packages in order) and end the run alone.
#   controller
#          the controller package's tests, half in each of two commands
#          (its tests run one after another, each starting an agent that
#          watches every GridNetwork, and mostly wait: alone it was the
#          tests' critical path, five minutes), each process with a
#          control plane of its own;
#   tests  every other package's tests, TEST_P packages at a time
#          (default 2: three kept the cores busier but made more work of
#          the same tests, their servers and timers contending, and the
#          run took longer), the ones that mostly wait first so that none
#          starts last and ends the run alone, the ones that mostly
#          compute (the images) beside them.
#   bench  every benchmark, once, at its smallest size (test/measure), so
#          that one that can no longer run fails here rather than in make
#          bench. A command of its own because -bench makes go test run
#          its packages one after another: given to the tests' command it
#          held back every other package (make test took the sum of its
#          packages' times). It proves they run and measures nothing:
#          without the race detector (the tests run the same code under
#          it), built as the tests' binaries are (static, trimmed), which
#          the lint's vet has compiled already.
#
# The lint runs beside them, from the start; when it fails, everything
# stops and the run fails with its output alone.
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
mkfifo "$dir/node" "$dir/tests" "$dir/bench" "$dir/controller1" "$dir/controller2"

# The packages that take minutes, longest first (as the last runs
# printed them; the images' test after the ones that wait), then the
# rest in go list's order.
long="$(printf "${module}/%s\n" test/multisite test/soak test/attack hack/images listener shared/overlaysync gossip test/charts)"
mapfile -t others < <(
	echo "$long"
	"$GO" list ./... | grep -vx -e "${module}/test/node" -e "${module}/controller" | grep -vxF "$long"
)
# The controller package's top-level tests, every other one to each half:
# a test added, committed or not, lands in one of them.
mapfile -t controller_tests < <(grep -h -o '^func Test[A-Za-z0-9_]*' controller/*_test.go |
	sed 's/^func //' | grep -vx TestMain | sort)
if ((${#controller_tests[@]} == 0)); then
	# Two empty halves would run none of them and pass.
	echo "make test: no tests found in controller/*_test.go" >&2
	exit 1
fi
halves=("" "")
for i in "${!controller_tests[@]}"; do
	halves[i % 2]+="${halves[i % 2]:+|}${controller_tests[i]}"
done
mapfile -t benched < <(git grep -l '^func Benchmark' -- '*_test.go' | xargs -n1 dirname | sort -u | sed 's|^|./|')
flags=(-race -count=1 -json)
export GRIDSYNC_BENCH_SMOKE=1
# Job control: each command started in the background leads a process
# group of its own, which cleanup stops whole.
set -m

"$report" "$dir/node" "1/2=$dir/controller1" "2/2=$dir/controller2" "$dir/tests" "bench=$dir/bench" &
reporter=$!

# 20 minutes for each command: about four times what it takes on a
# loaded machine.
"$GO" test "${flags[@]}" -timeout 20m ./test/node >"$dir/node" 2>&1 &
pids+=($!)
"$GO" test "${flags[@]}" -timeout 20m -run "^(${halves[0]})\$" ./controller >"$dir/controller1" 2>&1 &
pids+=($!)
"$GO" test "${flags[@]}" -timeout 20m -run "^(${halves[1]})\$" ./controller >"$dir/controller2" 2>&1 &
pids+=($!)
"$GO" test "${flags[@]}" -timeout 20m -p "$P" "${others[@]}" >"$dir/tests" 2>&1 &
pids+=($!)
CGO_ENABLED=0 "$GO" test -trimpath -count=1 -json -timeout 20m -run '^$' -bench . -benchtime 1x "${benched[@]}" >"$dir/bench" 2>&1 &
pids+=($!)

if ! "$MAKE" --no-print-directory lint >"$dir/lint" 2>&1; then
	# The tests stop, and the report with them: the run fails on the
	# lint, whose output is all it prints.
	kill "$reporter" 2>/dev/null || true
	for pid in "${pids[@]}"; do kill -- "-$pid" 2>/dev/null || true; done
	wait "$reporter" 2>/dev/null || true
	cat "$dir/lint"
	echo "make test: the lint failed; the tests were stopped"
	exit 1
fi
lint_output="$(cat "$dir/lint")"

rc=0
wait "$reporter" || rc=$?
for pid in "${pids[@]}"; do
	wait "$pid" || rc=1
done
pids=()
echo "lint:"
echo "$lint_output"
exit "$rc"
