#!/usr/bin/env bash
# Start-up on one kept population (`make loadtest ... LOADTEST_ARGS=--keep`; its run id is the
# value of the label kube-reloader-loadtest), one start after the other, alternating between
# variants: each is a build and its extra flags. Each start: time to ready, CPU-seconds to ready
# (/proc/<pid>/stat), RSS peak (VmHWM) and the bytes received from the API server (the
# controller's own kube_reloader_api_received_bytes_total); the controller is stopped once
# /ready answers. Prints a Markdown table (save it as
# loadtest/results/<what>-startup-<scenario>-<scale>-<commit>.md).
#
# Usage: loadtest/startup.sh <run id> <label>=<binary>[:<flags>] ... [ROUNDS=3]
#   e.g. loadtest/startup.sh 64b426 before=/tmp/old/kube-reloader after=target/release/kube-reloader
#   or   loadtest/startup.sh 64b426 protobuf=$BIN:--wire-format=protobuf json=$BIN:--wire-format=json
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
run_id=${1:?usage: $0 <run id> <label>=<binary>[:<flags>] ...}
shift
[ $# -ge 1 ] || { echo "usage: $0 <run id> <label>=<binary>[:<flags>] ..." >&2; exit 2; }
ROUNDS=${ROUNDS:-3}
cd "$ROOT"
KUBECONFIG=$(make -s --no-print-directory kubeconfig | tail -n1)
export KUBECONFIG
. "$ROOT/hack/lib/free-ports.sh"

one_start() { # binary flags -> "ready_s cpu_s hwm_mib received_mib"
    local bin=$1 flags=$2 metrics health pid start ready
    read -r metrics health < <(free_ports 2)
    start=$(date +%s.%N)
    # shellcheck disable=SC2086 # the variant's flags are split on purpose
    "$bin" --namespace-selector="kube-reloader-loadtest=$run_id" $flags \
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

echo "| start | variant | time to ready (s) | CPU-seconds to ready | RSS peak (MiB) | received to ready (MiB) |"
echo "|---|---|---|---|---|---|"
for round in $(seq "$ROUNDS"); do
    for variant in "$@"; do
        label=${variant%%=*} spec=${variant#*=}
        bin=${spec%%:*} flags=""
        [ "$spec" != "$bin" ] && flags=${spec#*:}
        read -r ready cpu hwm received < <(one_start "$bin" "$flags")
        echo "| $round | $label | $ready | $cpu | $hwm | $received |"
    done
done
echo
echo "population: run $run_id; variants: $*; $(nproc) CPUs, load average at end $(cut -d' ' -f1-3 /proc/loadavg)"
