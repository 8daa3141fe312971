#!/usr/bin/env bash
# Start-up in each wire format (#42) on one population, one start after the other: the
# controller is started with --wire-format=protobuf and =json in turn (ROUNDS each), against the
# namespaces a load-test run kept (`make loadtest ... LOADTEST_ARGS=--keep`; its run id is the
# value of the label kube-reloader-loadtest), and stopped once /ready answers. Each start:
# time to ready, CPU-seconds to ready (/proc/<pid>/stat), RSS peak (VmHWM) and the bytes
# received from the API server (the controller's own kube_reloader_api_received_bytes_total).
# Prints a Markdown table (save it as loadtest/results/wire-format-startup-<scale>-<commit>.md).
#
# Usage: loadtest/wire-format-startup.sh <run id> [ROUNDS=3] [BIN=<kube-reloader>]
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
run_id=${1:?usage: $0 <run id of a kept load-test population>}
ROUNDS=${ROUNDS:-3}
cd "$ROOT"
KUBECONFIG=$(make -s --no-print-directory kubeconfig | tail -n1)
export KUBECONFIG
BIN=${BIN:-$(make -s --no-print-directory binary | tail -n1)}
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

one_start() { # format -> "ready_s cpu_s hwm_mib received_mib"
    local metrics health pid start ready
    metrics=$(port) health=$(port)
    start=$(date +%s.%N)
    "$BIN" --namespace-selector="kube-reloader-loadtest=$run_id" --wire-format="$1" \
        --metrics-addr="127.0.0.1:$metrics" --health-addr="127.0.0.1:$health" >/dev/null 2>&1 &
    pid=$!
    until curl -sf "http://127.0.0.1:$metrics/ready" >/dev/null 2>&1; do
        kill -0 "$pid" 2>/dev/null || { echo "the controller exited before it was ready" >&2; exit 2; }
        sleep 0.05
    done
    ready=$(date +%s.%N)
    local ticks hwm received
    ticks=$(awk '{print $14 + $15}' "/proc/$pid/stat")
    hwm=$(awk '/VmHWM/ {print $2}' "/proc/$pid/status")
    received=$(curl -s "http://127.0.0.1:$metrics/metrics" |
        awk '/^kube_reloader_api_received_bytes_total/ {s += $2} END {print s}')
    kill "$pid"
    wait "$pid" 2>/dev/null || true
    python3 -c "import sys; r, s, t, h, b, hz = map(float, sys.argv[1:]); print(f'{r - s:.2f} {t / hz:.2f} {h / 1024:.1f} {b / 1048576:.1f}')" \
        "$ready" "$start" "$ticks" "$hwm" "$received" "$(getconf CLK_TCK)"
}

echo "| start | wire format | time to ready (s) | CPU-seconds to ready | RSS peak (MiB) | received to ready (MiB) |"
echo "|---|---|---|---|---|---|"
for round in $(seq "$ROUNDS"); do
    for format in protobuf json; do
        read -r ready cpu hwm received < <(one_start "$format")
        echo "| $round | $format | $ready | $cpu | $hwm | $received |"
    done
done
echo
echo "population: run $run_id; controller: $BIN ($(git rev-parse --short HEAD)); $(nproc) CPUs, load average at end $(cut -d' ' -f1-3 /proc/loadavg)"
