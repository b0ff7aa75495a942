#!/usr/bin/env bash
# Runs every benchmark of `make bench`, step by step. A step that fails
# does not stop the others: each is run, and at the end the steps that
# failed are named and the script exits non-zero.
#
# GRIDSYNC_BENCH_SMOKE=1 runs each at its smallest size (what `make test`
# does, in one go test run, to prove they still run).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
GO="${GO:-go}"

failed=()
started=$(date +%s)

# step NAME ARGS...: go test -run '^$' ARGS..., named in the summary.
step() {
	local name="$1" from rc
	shift
	from=$(date +%s)
	echo "bench: ${name}: go test -run '^\$' $*"
	"$GO" test -count=1 -run '^$' "$@"
	rc=$?
	echo "bench: ${name}: exit ${rc} after $(( $(date +%s) - from ))s"
	(( rc == 0 )) || failed+=("$name")
}

step validation-and-publication -bench . -benchmem -benchtime 2s ./shared/...
# Delivery first, on a control plane of its own: the controller case
# leaves a thousand objects behind for the API server to keep busy with.
step delivery -bench Delivery -benchtime 1x -timeout 30m ./test/bench
step controller -bench Controller -benchtime 1x -timeout 30m ./test/bench
step praxisconfig -bench PraxisConfig -benchtime 1x -timeout 30m ./test/bench
step praxisconfig-render -bench Render -benchmem -benchtime 2s ./controller/praxisconfig
# A thousand sidecars on one API server, and its restart under them.
step fleet -bench Fleet -benchtime 1x -timeout 60m ./test/bench/fleet
# The membership layer alone: a record's check, then 50 and 100 sites in one process.
step swim-verify -bench VerifyRecord -benchtime 2s ./gossip/record
step swim -bench SWIM -benchtime 1x -timeout 60m ./test/bench/swim
# The same grid over an emulated WAN: 50 sites 100 ms apart, 5 % and 10 % of
# packets lost, one in five behind a load balancer address; ten idle minutes
# each (test/testwan).
step wan -bench WAN -benchtime 1x -timeout 90m ./test/bench/swim
step wan-links -bench WANLinks -benchtime 1x -timeout 30m ./test/bench/wanlinks
# Site trust: 50 remote gateways probed over mutual TLS, and ten sites enrolling.
step trust -bench 'Trust|Enrol' -benchtime 1x -timeout 30m ./test/bench/trust
# The trust lifecycle: an eviction and a grid CA rotation across ten sites, each on its own control plane.
step lifecycle -bench . -benchtime 1x -timeout 30m ./test/bench/lifecycle
# Scrapes of 200 providers, plaintext and behind mutual TLS.
step scrape -bench Scrape -benchtime 1x -timeout 30m ./test/bench/scrape
# Admission: 200 providers' load reaching 20 gateways' sidecars, and the write budget.
step admission -bench Admission -benchtime 1x -timeout 30m ./test/bench/admission
# Rollout evidence: 1,000 sidecars reporting over QUIC; the listener under a flood.
step rollout -bench Rollout -benchtime 1x -timeout 30m ./test/bench/rollout
# A real node: twenty gateway pods from apply to Ready, and an update to
# every pod's file; delegated mounts: one credential reference to a Ready
# rollout of ten replicas.
step node -bench 'Node|Mounts' -benchtime 1x -timeout 30m ./test/bench/node
# Alerts of both charts fired by a real Prometheus from the scrapes of a two-site grid.
step monitoring -bench Alerts -benchtime 1x -timeout 30m ./test/monitoring

echo "bench: $(( $(date +%s) - started ))s in all"
if (( ${#failed[@]} > 0 )); then
	echo "bench: FAILED: ${failed[*]}"
	exit 1
fi
echo "bench: every step passed"
