#!/usr/bin/env bash
# Start-up in each wire format (#42) on one population: `startup.sh` with the controller
# started with --wire-format=protobuf and =json in turn (ROUNDS each).
# Prints a Markdown table (save it as loadtest/results/wire-format-startup-<scale>-<commit>.md).
#
# Usage: loadtest/wire-format-startup.sh <run id> [ROUNDS=3] [BIN=<kube-reloader>]
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
run_id=${1:?usage: $0 <run id of a kept load-test population>}
cd "$ROOT"
BIN=${BIN:-$(make -s --no-print-directory binary | tail -n1)}
echo "controller: $BIN ($(git rev-parse --short HEAD))"
exec "$ROOT/loadtest/startup.sh" "$run_id" \
    "protobuf=$BIN:--wire-format=protobuf" "json=$BIN:--wire-format=json"
