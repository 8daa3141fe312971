#!/usr/bin/env bash
# What shadow mode costs (#41): the load test's `steady` scenario on the local control plane,
# twice, one run after the other:
#   1. stakater/Reloader reloading, and kube-reloader --shadow beside it as the controller under
#      test (its RSS, CPU and API requests are what the result measures; Reloader runs in its own
#      session (setsid), so it is not in the measured process tree, and uses the admin kubeconfig,
#      so neither the counting proxy nor the audit log counts its requests; the result's
#      correctness checks judge Reloader's writes);
#   2. kube-reloader reloading on its own, for comparison.
# Results: loadtest/results/steady-<scale>-shadow-beside-reloader-<ref>-<commit>.* and
# steady-<scale>-<commit>.* (RESULTS_DIR to put them elsewhere).
#
# Usage: loadtest/shadow-beside-reloader.sh   (SCALE=medium, RELOADER_REF=v1.4.21, RELOADER_SRC)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SCALE=${SCALE:-medium}
RELOADER_REF=${RELOADER_REF:-v1.4.21}
RESULTS_DIR=${RESULTS_DIR:-$ROOT/loadtest/results}
cd "$ROOT"
kubeconfig=$(make -s --no-print-directory kubeconfig | tail -n1)
reloader=$(bash hack/reloader-binary.sh "$RELOADER_REF" | tail -n1)
bin=$(make -s --no-print-directory binary | tail -n1)
cargo build --release --locked -p kube-reloader-loadtest >&2
loadtest=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')/release/kube-reloader-loadtest
commit=$(git rev-parse --short HEAD)
log=$(mktemp -t stakater-reloader.XXXXXX.log)
pidfile=$(mktemp -t stakater-reloader.XXXXXX.pid)
echo "stakater/Reloader's log: $log" >&2
# The load test runs `exec <command>`, so the command is one bash that starts Reloader in a session
# of its own (setsid) and then becomes kube-reloader. The load test stops the process group it
# started; Reloader left it, so it is stopped here.
stop_reloader() {
    if [[ -s $pidfile ]]; then kill "$(cat "$pidfile")" 2>/dev/null || true; fi
    rm -f "$pidfile"
}
trap stop_reloader EXIT
"$loadtest" --scenario steady --scale "$SCALE" --controller-bin "$bin" --results-dir "$RESULTS_DIR" \
    --controller-label "shadow-beside-reloader-$RELOADER_REF-$commit" \
    --controller-cmd "bash -c \"setsid -f sh -c 'echo \\\$\\\$ >$pidfile; exec env KUBECONFIG=$kubeconfig $reloader --namespace-selector={selector} >$log 2>&1'; exec {bin} --shadow --namespace-selector={selector} --metrics-addr={metrics_addr} {scenario_flags}\""
stop_reloader
"$loadtest" --scenario steady --scale "$SCALE" --controller-bin "$bin" --results-dir "$RESULTS_DIR"
