#!/usr/bin/env bash
# `make observe`: the local control plane, kube-reloader (debug build) watching it, Prometheus
# scraping kube-reloader's /metrics with the alert rules of deployments/prometheus loaded, and
# Jaeger (all-in-one, in-memory) receiving kube-reloader's OTLP traces; all on loopback, on free
# ports. Applies deployments/examples/demo.yaml in namespace kube-reloader-observe, prints the
# URLs and a command that makes a reload, and returns; everything stays up until
# `make observe-down` (which leaves the control plane running: `make cluster-down` stops it).
#
# Prometheus and Jaeger are built from their Go modules (hack/observe-tools.sh) without their
# web UIs (npm projects): use their HTTP APIs, as printed.
#
# Usage: hack/observe.sh up | down | status
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE=${KUBE_RELOADER_CACHE:-$HOME/.cache/kube-reloader}
STATE=$CACHE/observe/run
NS=kube-reloader-observe

log() { printf '[observe] %s\n' "$*" >&2; }
die() { printf '[observe] ERROR: %s\n' "$*" >&2; exit 1; }
. "$ROOT/hack/lib/free-ports.sh"

# wait_http URL NAME PID: until URL answers 2xx; fails with the process' log if it exits.
wait_http() {
    local i
    for i in $(seq 1 300); do
        curl -fs "$1" >/dev/null 2>&1 && return 0
        kill -0 "$3" 2>/dev/null || { tail -n 30 "$STATE/$2.log" >&2; die "$2 exited (log: $STATE/$2.log)"; }
        sleep 0.2
    done
    tail -n 30 "$STATE/$2.log" >&2
    die "$2 did not answer $1 within 60 s (log: $STATE/$2.log)"
}

# start NAME CMD...: runs CMD in the background in $STATE, logging to $STATE/NAME.log.
start() {
    local name=$1
    shift
    (cd "$STATE" && exec setsid "$@" >"$STATE/$name.log" 2>&1 </dev/null) &
    echo $! >"$STATE/$name.pid"
}

down() {
    local name pid
    for name in kube-reloader prometheus jaeger; do
        [[ -f $STATE/$name.pid ]] || continue
        pid=$(cat "$STATE/$name.pid")
        if kill -0 "$pid" 2>/dev/null; then
            kill "$pid" && log "stopped $name (pid $pid)"
        fi
        rm -f "$STATE/$name.pid"
    done
    if [[ -f $STATE/kubeconfig-path ]]; then
        "$(bash "$ROOT/hack/toolchain.sh" --bin-dir)/kubectl" --kubeconfig "$(cat "$STATE/kubeconfig-path")" \
            delete namespace "$NS" --ignore-not-found --wait=false >/dev/null 2>&1 || true
    fi
    rm -rf "$STATE"
}

up() {
    [[ -f $STATE/kube-reloader.pid ]] && kill -0 "$(cat "$STATE/kube-reloader.pid")" 2>/dev/null &&
        die "already up (see $STATE/urls); make observe-down first"
    down 2>/dev/null
    mkdir -p "$STATE"
    local kubeconfig bin tools reloader
    kubeconfig=$(bash "$ROOT/hack/cluster.sh" kubeconfig | tail -n1)
    echo "$kubeconfig" >"$STATE/kubeconfig-path"
    bin=$(bash "$ROOT/hack/toolchain.sh" --bin-dir)
    tools=$(bash "$ROOT/hack/observe-tools.sh" | tail -n1)
    log "building kube-reloader (debug)"
    (cd "$ROOT" && cargo build --locked --bin kube-reloader >&2)
    reloader=${CARGO_TARGET_DIR:-$ROOT/target}/debug/kube-reloader

    local metrics otlp query query_grpc prom
    read -r metrics otlp query query_grpc prom < <(free_ports 5)

    JAEGER_OTLP_HTTP_PORT=$otlp JAEGER_QUERY_PORT=$query JAEGER_QUERY_GRPC_PORT=$query_grpc \
        start jaeger "$tools/jaeger" --config "$ROOT/hack/observe/jaeger.yaml"
    wait_http "http://127.0.0.1:$query/api/services" jaeger "$(cat "$STATE/jaeger.pid")"

    cat >"$STATE/prometheus.yml" <<EOF
global:
  scrape_interval: 5s
  evaluation_interval: 5s
rule_files:
  - $ROOT/deployments/prometheus/kube-reloader-rules.yaml
scrape_configs:
  - job_name: kube-reloader
    static_configs:
      - targets: ['127.0.0.1:$metrics']
EOF
    start prometheus "$tools/prometheus" --config.file=prometheus.yml --storage.tsdb.path=data \
        --web.listen-address="127.0.0.1:$prom"
    wait_http "http://127.0.0.1:$prom/-/ready" prometheus "$(cat "$STATE/prometheus.pid")"

    "$bin/kubectl" --kubeconfig "$kubeconfig" create namespace "$NS" >/dev/null 2>&1 || true
    "$bin/kubectl" --kubeconfig "$kubeconfig" -n "$NS" apply -f "$ROOT/deployments/examples/demo.yaml" >&2

    KUBECONFIG=$kubeconfig OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:$otlp" OTEL_BSP_SCHEDULE_DELAY=500 \
        start kube-reloader "$reloader" --namespaces="$NS" --metrics-addr="127.0.0.1:$metrics"
    wait_http "http://127.0.0.1:$metrics/ready" kube-reloader "$(cat "$STATE/kube-reloader.pid")"

    local q='sum by (success) (reloader_reload_executed_total)'
    tee "$STATE/urls" <<EOF

kube-reloader  http://127.0.0.1:$metrics/metrics   (log: $STATE/kube-reloader.log)
Prometheus     http://127.0.0.1:$prom   (HTTP API; scrapes every 5 s, alert rules loaded)
               curl -s 'http://127.0.0.1:$prom/api/v1/query' --data-urlencode 'query=$q'
               curl -s 'http://127.0.0.1:$prom/api/v1/alerts'
Jaeger         http://127.0.0.1:$query   (query API; OTLP/HTTP in on 127.0.0.1:$otlp)
               curl -s 'http://127.0.0.1:$query/api/traces?service=kube-reloader&limit=5'
               curl -s 'http://127.0.0.1:$query/api/traces/<trace id from the Reloaded Event>'

Make a reload:
  $bin/kubectl --kubeconfig $kubeconfig -n $NS patch configmap demo-config --type merge -p "{\"data\":{\"greeting\":\"\$(date +%s)\"}}"
Its Event (the message ends with the trace id):
  $bin/kubectl --kubeconfig $kubeconfig -n $NS get events --field-selector reason=Reloaded -o custom-columns=MESSAGE:.message

Stop: make observe-down
EOF
}

case ${1:-} in
up) up ;;
down) down ;;
status) cat "$STATE/urls" 2>/dev/null || echo "not up" ;;
*) die "usage: $0 up|down|status" ;;
esac
