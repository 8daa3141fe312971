#!/usr/bin/env bash
# Runs a command RUNS times while HOGS busy loops take the CPUs, and counts the runs that pass:
# a test that depends on timing (Lease expiry, a SIGSTOPped replica) must still pass when the
# machine is loaded.
#
#   hack/under-load.sh 20 2 cargo test --test sharding a_paused_replica_writes_nothing
#
# Each run's output goes to $LOGS (default /tmp/under-load), run-<n>.log; the last line says
# how many passed. Exits non-zero unless every run passed.
set -euo pipefail

[[ $# -ge 3 ]] || {
    echo "usage: $0 RUNS HOGS COMMAND..." >&2
    exit 2
}
runs=$1 hogs=$2
shift 2
logs=${LOGS:-/tmp/under-load}
mkdir -p "$logs"

pids=()
stop_hogs() { ((${#pids[@]})) && kill "${pids[@]}" 2>/dev/null || true; }
trap stop_hogs EXIT
for _ in $(seq "$hogs"); do
    bash -c 'while :; do :; done' &
    pids+=($!)
done

passed=0
for n in $(seq "$runs"); do
    start=$(date +%s)
    if "$@" >"$logs/run-$n.log" 2>&1; then
        passed=$((passed + 1))
        verdict=passed
    else
        verdict=FAILED
    fi
    echo "run $n: $verdict in $(($(date +%s) - start))s (load $(cut -d' ' -f1-3 /proc/loadavg))"
done
echo "$passed of $runs passed under $hogs CPU hogs ($logs)"
((passed == runs))
