#!/usr/bin/env bash
# `make demo`: builds everything, starts the local control plane, runs kube-reloader against
# it, applies a ConfigMap + Deployment, changes the ConfigMap and shows the Deployment rolled.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE=${KUBE_RELOADER_CACHE:-$HOME/.cache/kube-reloader}
NS=kube-reloader-demo
say() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }

say "Building the control plane (first run: ~7 min) and kube-reloader (release)"
export KUBECONFIG
KUBECONFIG=$(bash "$ROOT/hack/cluster.sh" kubeconfig | tail -n1)
BIN=$(bash "$ROOT/hack/toolchain.sh" --bin-dir)
RELOADER=$(make -s -C "$ROOT" binary | tail -n1)
k() { "$BIN/kubectl" "$@"; }

say "Applying a ConfigMap and a Deployment (reloader.stakater.com/auto: \"true\") in namespace $NS"
k delete namespace "$NS" --ignore-not-found --wait=true >/dev/null
k create namespace "$NS" >/dev/null
k -n "$NS" apply -f "$ROOT/deployments/examples/demo.yaml"

LOG=$CACHE/demo-kube-reloader.log
. "$ROOT/hack/lib/free-ports.sh"
PORT=$(free_ports 1)
say "Starting kube-reloader --namespaces=$NS (log: $LOG)"
"$RELOADER" --namespaces="$NS" --metrics-addr="127.0.0.1:$PORT" >"$LOG" 2>&1 &
PID=$!
trap 'kill $PID 2>/dev/null || true' EXIT
for _ in $(seq 1 100); do
  curl -fs "http://127.0.0.1:$PORT/ready" >/dev/null 2>&1 && break
  kill -0 $PID 2>/dev/null || { cat "$LOG"; echo "kube-reloader exited" >&2; exit 1; }
  sleep 0.2
done
curl -fs "http://127.0.0.1:$PORT/ready" >/dev/null || { cat "$LOG"; echo "kube-reloader never became ready" >&2; exit 1; }

env_of() { k -n "$NS" get deployment demo-app -o jsonpath='{.spec.template.spec.containers[0].env}'; }
echo "Deployment env before the change: '$(env_of)'"

say "Changing the ConfigMap: greeting=bonjour"
k -n "$NS" patch configmap demo-config --type merge -p '{"data":{"greeting":"bonjour"}}'

for _ in $(seq 1 100); do
  [ -n "$(env_of)" ] && break
  sleep 0.1
done
[ -n "$(env_of)" ] || { cat "$LOG"; echo "the Deployment was not rolled" >&2; exit 1; }

say "The Deployment was rolled: its pod template now carries Reloader's hash"
env_of; echo
k -n "$NS" get deployment demo-app -o jsonpath='{.metadata.generation}{"  <- generation\n"}'
say "Kubernetes Events on the Deployment"
k -n "$NS" get events --field-selector involvedObject.name=demo-app -o custom-columns=TYPE:.type,REASON:.reason,MESSAGE:.message
say "kube-reloader log"
grep -E "reloaded|ready" "$LOG" | tail -n 5
say "Metric"
curl -fs "http://127.0.0.1:$PORT/metrics" | grep '^reloader_reload_executed_total'
echo
echo "The control plane keeps running; 'make cluster-down' stops it."
