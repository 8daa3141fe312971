#!/usr/bin/env bash
# The load test (loadtest/) against a kind cluster instead of the local control plane of
# hack/cluster.sh. The cluster is hack/kind-cluster.sh's (kind under podman, with the node image
# hack/kind-node.sh builds offline); kwok runs on this machine. Needs podman, kubectl, helm and
# cargo (kind, kubectl and helm are built into the cache when missing). See loadtest/kind/README.md.
#
#   loadtest/kind/run.sh          create (or reuse) the cluster, install kwok and fake nodes,
#                                 build and install kube-reloader, run the load test
#   loadtest/kind/run.sh down     delete the cluster and its state
#   loadtest/kind/run.sh controller RUN_ID PORT [FLAGS...]
#                                 internal: what the load generator starts as "the controller" in
#                                 MODE=in-cluster (helm upgrade with the run's namespace selector,
#                                 then a port-forward to the new pod)
#
# Settings (environment):
#   SCENARIO=steady       steady|burst|fanout|noop|large|ratelimit|restart|annotations|all
#                         (restart needs MODE=binary; `all` in MODE=in-cluster runs the scenarios
#                         it supports one by one)
#   SCALE=small           small|medium|large (large: 100k Deployments, run by hand)
#   MODE=in-cluster       in-cluster: the image `make image-local` builds (FROM scratch + the
#                         release binary), installed with the Helm chart, is the controller under test. binary: the load generator starts
#                         the release binary on this machine against the kind cluster (like
#                         `make loadtest`), so memory, CPU and API requests are measured too.
#   CLUSTER_NAME=kube-reloader-loadtest
#   KEEP_CLUSTER=1        0: delete the cluster when the script ends (even one it reused)
#   KIND_WORKERS=2        real worker nodes besides the control plane (hack/kind-cluster.sh); with
#                         0 the control plane is the only real node (and runs the chart's pod)
#   RUNNING_SHARE=0.1     share of the Deployments that run one real pod on the workers (the load
#                         generator's --running-share: each reload of them is followed until the new
#                         pod is Ready and the old one gone); 0: every workload has replicas: 0.
#                         Needs KIND_WORKERS > 0.
#   RUNNING_IMAGE=        their image (default: the pause image the first worker reports having)
#   KWOK_NODES=3          fake nodes
#   IMAGE=                image name:tag built and loaded into the cluster (default: the chart's
#                         default image, values.yaml image.repository : Chart.yaml appVersion,
#                         as `make image` names it)
#   RESULTS_DIR=loadtest/results  (files: <scenario>-<scale>-kind-<mode>-<commit>.{json,md,svg})
#   LOADTEST_ARGS=        more flags for the load generator (e.g. '--changes 300 --rate 5')
#   KUBE_RELOADER_BIN=    MODE=binary: measure this binary (default: `make -s binary`)
#
# Exit code: the load generator's (0 all correct, 1 a correctness check failed, 2 the run could
# not be carried out); 2 as well when the set-up fails.
set -euo pipefail

KIND_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$KIND_DIR/../.." && pwd)
CACHE=${KUBE_RELOADER_CACHE:-$HOME/.cache/kube-reloader}
export KUBE_RELOADER_CACHE=$CACHE

SCENARIO=${SCENARIO:-steady}
SCALE=${SCALE:-small}
MODE=${MODE:-in-cluster}
CLUSTER_NAME=${CLUSTER_NAME:-kube-reloader-loadtest}
KEEP_CLUSTER=${KEEP_CLUSTER:-1}
KIND_WORKERS=${KIND_WORKERS:-2}
RUNNING_SHARE=${RUNNING_SHARE:-0.1}
RUNNING_IMAGE=${RUNNING_IMAGE:-}
KWOK_NODES=${KWOK_NODES:-3}
CHART=$ROOT/deployments/kubernetes/chart/kube-reloader
APP_VERSION=$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' "$CHART/Chart.yaml")
IMAGE=${IMAGE:-$(awk '/^image:/ { f = 1; next } f && /^  repository:/ { print $2; exit }' \
    "$CHART/values.yaml"):$APP_VERSION}
RESULTS_DIR=${RESULTS_DIR:-$ROOT/loadtest/results}
LOADTEST_ARGS=${LOADTEST_ARGS:-}
# kwok: the binary hack/toolchain.sh builds, run on this machine against the kind API server
# (its in-cluster manifests and image are on GitHub and a registry, which these machines do not reach).
KWOK_VERSION=${KWOK_VERSION:-$(sed -n 's/^KWOK_VERSION=//p' "$ROOT/hack/toolchain.sh" | head -n1)}

RELEASE=kube-reloader
RELEASE_NS=kube-reloader
# Pod label carrying the load test's run id (reloader.deployment.labels), to find this run's pod.
RUN_POD_LABEL=kube-reloader-loadtest-run
STATE=$CACHE/kind-$CLUSTER_NAME
KUBECONFIG_PATH=$STATE/kubeconfig
BASE_VALUES=$STATE/values-base.yaml

log() { printf '[kind-loadtest] %s\n' "$*" >&2; }
die() {
    printf '[kind-loadtest] ERROR: %s\n' "$*" >&2
    exit 2
}

# --- tools ---------------------------------------------------------------------

# tool NAME [DIR...]: NAME on PATH, else DIR/NAME; nothing when neither exists.
tool() {
    local name=$1 d
    shift
    if command -v "$name" >/dev/null 2>&1; then
        command -v "$name"
        return 0
    fi
    for d in "$@"; do
        if [[ -x $d/$name ]]; then
            echo "$d/$name"
            return 0
        fi
    done
    return 0
}

# find_tools: sets KIND, KUBECTL, HELM, KWOK (HELM only where the mode needs it). kind and kubectl
# are hack/kind-node-bins.sh's, kwok hack/toolchain.sh's, helm hack/helm.sh's (built when missing).
find_tools() {
    local missing=() bins
    command -v podman >/dev/null 2>&1 || missing+=("podman (kind's nodes run as podman containers; hack/packages.sh)")
    if ! command -v cargo >/dev/null 2>&1; then
        missing+=("cargo (the load generator is built from loadtest/)")
    fi
    if ((${#missing[@]})); then
        printf '[kind-loadtest] ERROR: missing: %s\n' "${missing[@]}" >&2
        exit 2
    fi
    bins=$(bash "$ROOT/hack/kind-node-bins.sh" | tail -n1) || die "hack/kind-node-bins.sh failed"
    KIND=$bins/kind
    KUBECTL=$bins/kubectl
    KWOK=$(bash "$ROOT/hack/toolchain.sh" | tail -n1)/kwok
    [[ -x $KWOK ]] || die "kwok not found after hack/toolchain.sh"
    HELM=""
    if [[ $MODE == in-cluster ]]; then
        HELM=$(bash "$ROOT/hack/helm.sh" | tail -n1)/helm
        [[ -x $HELM ]] || die "helm not found after hack/helm.sh"
    fi
}

kctl() { "$KUBECTL" --kubeconfig="$KUBECONFIG_PATH" "$@"; }
helm_() { "$HELM" --kubeconfig "$KUBECONFIG_PATH" "$@"; }

kind_cluster() { CLUSTER_NAME=$CLUSTER_NAME KIND_WORKERS=$KIND_WORKERS bash "$ROOT/hack/kind-cluster.sh" "$@"; }

# --- cluster, kwok ---------------------------------------------------------------

cluster_up() {
    mkdir -p "$STATE"
    log "creating (or reusing) kind cluster '$CLUSTER_NAME' (hack/kind-cluster.sh, $KIND_WORKERS workers," \
        "the tuning of $KIND_DIR/kubeadm-patches.yaml)"
    local kc
    kc=$(KIND_PATCHES_FILE=$KIND_DIR/kubeadm-patches.yaml kind_cluster up | tail -n1) ||
        die "hack/kind-cluster.sh up failed"
    [[ $kc == "$KUBECONFIG_PATH" ]] || die "hack/kind-cluster.sh wrote its kubeconfig to $kc, expected $KUBECONFIG_PATH"
    log "cluster ready; kubeconfig: $KUBECONFIG_PATH"
}

kwok_up() {
    log "starting kwok $KWOK_VERSION on this machine for $KWOK_NODES fake nodes"
    if [[ -f $STATE/kwok.pid ]] && kill -0 "$(cat "$STATE/kwok.pid")" 2>/dev/null; then
        log "kwok already runs (pid $(cat "$STATE/kwok.pid"))"
    else
        # The stages of kwok's release manifest stage-fast.yaml (kustomize/stage/fast: node/fast,
        # node/heartbeat-with-lease, pod/fast), read from the kwok module hack/toolchain.sh built.
        local stages=$CACHE/go/mod/sigs.k8s.io/kwok@$KWOK_VERSION/kustomize/stage f configs=()
        for f in "$stages"/node/fast/*.yaml "$stages"/node/heartbeat-with-lease/*.yaml "$stages"/pod/fast/*.yaml; do
            [[ $(basename "$f") == kustomization.yaml ]] || configs+=("--config=$f")
        done
        ((${#configs[@]} >= 3)) || die "kwok's stage files not found in $stages (hack/toolchain.sh downloads sigs.k8s.io/kwok@$KWOK_VERSION)"
        # Only the nodes annotated kwok.x-k8s.io/node=fake; the real kind nodes are the kubelets'.
        nohup "$KWOK" --kubeconfig="$KUBECONFIG_PATH" --manage-all-nodes=false "${configs[@]}" \
            --manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake \
            --server-address=127.0.0.1:0 >"$STATE/kwok.log" 2>&1 &
        echo $! >"$STATE/kwok.pid"
    fi
    local i
    for ((i = 0; i < KWOK_NODES; i++)); do
        # The annotation makes kwok manage the node; the taint keeps real pods (the chart's
        # kube-reloader) off it.
        kctl apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Node
metadata:
  name: kwok-node-$i
  annotations:
    kwok.x-k8s.io/node: fake
    node.alpha.kubernetes.io/ttl: "0"
  labels:
    type: kwok
    kubernetes.io/hostname: kwok-node-$i
    kubernetes.io/os: linux
    kubernetes.io/arch: amd64
    kubernetes.io/role: agent
    node-role.kubernetes.io/agent: ""
spec:
  taints:
    - key: kwok.x-k8s.io/node
      value: fake
      effect: NoSchedule
status:
  allocatable: {cpu: "32", memory: 256Gi, pods: "110"}
  capacity: {cpu: "32", memory: 256Gi, pods: "110"}
EOF
    done
    if ((KWOK_NODES > 0)); then
        kctl wait --for=condition=Ready node -l type=kwok --timeout=120s >/dev/null ||
            die "the kwok nodes did not become Ready (kubectl get nodes; $STATE/kwok.log)"
    fi
}

# running_image: RUNNING_IMAGE, else the pause image the first worker's kubelet reports (kubeadm's
# sandbox image, preloaded in the node image: nothing is pulled).
running_image() {
    if [[ -n $RUNNING_IMAGE ]]; then
        echo "$RUNNING_IMAGE"
        return 0
    fi
    local image
    image=$(kctl get node "$CLUSTER_NAME-worker" \
        -o jsonpath='{range .status.images[*]}{range .names[*]}{@}{"\n"}{end}{end}' |
        grep -m1 '^registry\.k8s\.io/pause:' || true)
    [[ -n $image ]] || die "no registry.k8s.io/pause image on node $CLUSTER_NAME-worker (set RUNNING_IMAGE)"
    echo "$image"
}

# --- image and chart (MODE=in-cluster) --------------------------------------------

image_up() {
    [[ $IMAGE == *:* && ${IMAGE##*:} != */* ]] || die "IMAGE must be name:tag (got '$IMAGE')"
    local bin tar
    bin=${KUBE_RELOADER_BIN:-$(make -s -C "$ROOT" --no-print-directory binary | tail -n1)}
    log "building $IMAGE from $bin (hack/image-local.sh, as make image-local)"
    bash "$ROOT/hack/image-local.sh" "$bin" "$IMAGE" "$APP_VERSION" >/dev/null || die "hack/image-local.sh failed"
    log "loading $IMAGE into the kind cluster"
    tar=$(mktemp "$STATE/image.XXXXXX.tar")
    bash "$ROOT/hack/podman.sh" save --quiet --format docker-archive -o "$tar" "$IMAGE" >/dev/null || die "podman save $IMAGE failed"
    kind_cluster load-archive "$tar" >&2 || die "loading $IMAGE into the nodes failed"
    rm -f "$tar"
}

write_base_values() {
    # The image exists only in the node's containerd (kind load), so it is never pulled.
    cat >"$BASE_VALUES" <<EOF
image:
  repository: "${IMAGE%:*}"
  tag: "${IMAGE##*:}"
  pullPolicy: Never
EOF
}

chart_up() {
    write_base_values
    # Until a run sets its own selector (kube-reloader-loadtest=<run id>, see cmd_controller), the
    # release selects no namespace; installing it here checks that the chart and the image start.
    log "installing the chart ($CHART) as release $RELEASE in namespace $RELEASE_NS"
    local idle_values=$STATE/values-idle.yaml
    printf 'reloader:\n  namespaceSelector: "kube-reloader-loadtest=none"\n' >"$idle_values"
    helm_ upgrade --install "$RELEASE" "$CHART" -n "$RELEASE_NS" --create-namespace \
        -f "$BASE_VALUES" -f "$idle_values" --wait --timeout 180s >/dev/null ||
        die "helm upgrade --install failed (kubectl -n $RELEASE_NS get pods; kubectl -n $RELEASE_NS logs deploy/$RELEASE)"
}

# An in-cluster release left by an earlier MODE=in-cluster run would compete for the CPUs with the
# binary under test; remove it.
chart_down_if_present() {
    if kctl get namespace "$RELEASE_NS" >/dev/null 2>&1; then
        if [[ -n $HELM ]] && helm_ status "$RELEASE" -n "$RELEASE_NS" >/dev/null 2>&1; then
            log "MODE=binary: uninstalling the in-cluster release left by an earlier run"
            helm_ uninstall "$RELEASE" -n "$RELEASE_NS" --wait >/dev/null || true
        else
            log "WARNING: namespace $RELEASE_NS exists; make sure no other kube-reloader runs in the cluster"
        fi
    fi
}

# --- the controller command of MODE=in-cluster --------------------------------------

# cmd_controller RUN_ID PORT [FLAGS...]: started by the load generator as the controller under test
# (`bash -c "exec <cmd>"`, stdout/stderr to <results>/<name>.controller.log). Points the release at
# this run's namespaces and the scenario's flags (helm upgrade, which rolls a new pod), waits until
# the new pod serves /live, then becomes `kubectl port-forward 127.0.0.1:PORT -> pod:9090`, so the
# load generator's /ready and /metrics URLs reach the pod. Stopping this process stops only the
# port-forward, never the pod.
cmd_controller() {
    (($# >= 2)) || die "usage: $0 controller RUN_ID PORT [FLAGS...]"
    local run_id=$1 port=$2 flag
    shift 2
    [[ $run_id =~ ^[0-9a-z]+$ ]] || die "unexpected run id '$run_id'"
    KUBECTL=$(tool kubectl "$(bash "$ROOT/hack/toolchain.sh" --bin-dir)")
    HELM=$(tool helm "$(bash "$ROOT/hack/helm.sh" --bin-dir)")
    [[ -n $KUBECTL && -n $HELM ]] || die "kubectl or helm not found"
    [[ -f $BASE_VALUES ]] || die "$BASE_VALUES is missing: start runs with '$0', not by hand"

    # The scenario's controller flags, as chart values.
    local rate="" burst="" strategy=""
    for flag in "$@"; do
        case $flag in
        --max-patches-per-second=*) rate=${flag#*=} ;;
        --patch-burst=*) burst=${flag#*=} ;;
        --reload-strategy=*) strategy=${flag#*=} ;;
        *) die "controller flag '$flag' has no chart value here; run this scenario with MODE=binary" ;;
        esac
    done
    local run_values=$STATE/values-run.yaml
    {
        echo "reloader:"
        echo "  namespaceSelector: \"kube-reloader-loadtest=$run_id\""
        echo "  deployment:"
        echo "    labels:"
        echo "      $RUN_POD_LABEL: \"$run_id\""
        if [[ -n $strategy ]]; then
            echo "  reloadStrategy: \"$strategy\""
        fi
        if [[ -n $rate || -n $burst ]]; then
            echo "  rateLimit:"
            if [[ -n $rate ]]; then echo "    maxPatchesPerSecond: $rate"; fi
            if [[ -n $burst ]]; then echo "    patchBurst: $burst"; fi
        fi
    } >"$run_values"

    log "helm upgrade: namespace selector kube-reloader-loadtest=$run_id${*:+, flags: $*}"
    helm_ upgrade --install "$RELEASE" "$CHART" -n "$RELEASE_NS" --create-namespace \
        -f "$BASE_VALUES" -f "$run_values" >/dev/null || die "helm upgrade failed"

    # This run's pod (the label is new in this revision), once it runs and its HTTP server answers.
    local pod="" i
    for ((i = 0; i < 600; i++)); do
        pod=$(kctl -n "$RELEASE_NS" get pods -l "$RUN_POD_LABEL=$run_id" \
            --field-selector=status.phase=Running -o jsonpath='{.items[0].metadata.name}' 2>/dev/null || true)
        [[ -n $pod ]] && break
        sleep 0.5
    done
    [[ -n $pod ]] || die "no Running pod with $RUN_POD_LABEL=$run_id after 300s (kubectl -n $RELEASE_NS get pods)"
    for ((i = 0; i < 600; i++)); do
        kctl get --raw "/api/v1/namespaces/$RELEASE_NS/pods/$pod:9090/proxy/live" >/dev/null 2>&1 && break
        sleep 0.2
    done
    log "pod $pod is up; port-forward 127.0.0.1:$port -> $pod:9090"
    exec "$KUBECTL" --kubeconfig="$KUBECONFIG_PATH" -n "$RELEASE_NS" port-forward \
        --address 127.0.0.1 "pod/$pod" "$port:9090"
}

# pod_snapshot NAME: after a MODE=in-cluster run, the kubelet's figures of the pod that served it
# (the load generator's RSS/CPU are those of the port-forward) and its log.
pod_snapshot() {
    local name=$1 pod node
    pod=$(kctl -n "$RELEASE_NS" get pods -l "app.kubernetes.io/instance=$RELEASE" \
        --sort-by=.metadata.creationTimestamp -o name 2>/dev/null | tail -n1)
    pod=${pod#pod/}
    [[ -n $pod ]] || return 0
    kctl -n "$RELEASE_NS" logs "$pod" >"$RESULTS_DIR/$name.pod.controller.log" 2>&1 || true
    node=$(kctl -n "$RELEASE_NS" get pod "$pod" -o jsonpath='{.spec.nodeName}' 2>/dev/null || true)
    [[ -n $node ]] && command -v python3 >/dev/null 2>&1 || return 0
    kctl get --raw "/api/v1/nodes/$node/proxy/stats/summary" 2>/dev/null |
        python3 -c '
import json, sys
pod, ns = sys.argv[1], sys.argv[2]
for p in json.load(sys.stdin).get("pods", []):
    if p["podRef"]["name"] == pod and p["podRef"]["namespace"] == ns:
        c = (p.get("containers") or [{}])[0]
        mib = lambda b: round(b / 1048576, 1) if b is not None else None
        mem, cpu = c.get("memory", {}), c.get("cpu", {})
        out = {
            "pod": pod,
            "source": "kubelet /stats/summary at the end of the run (cgroup figures, not a peak)",
            "rss_mib": mib(mem.get("rssBytes")),
            "working_set_mib": mib(mem.get("workingSetBytes")),
            "cpu_s_total": round(cpu.get("usageCoreNanoSeconds", 0) / 1e9, 2),
            "container_start": c.get("startTime"),
        }
        print(json.dumps(out, indent=2))
' "$pod" "$RELEASE_NS" >"$RESULTS_DIR/$name.pod-stats.json.tmp" 2>/dev/null &&
        [[ -s $RESULTS_DIR/$name.pod-stats.json.tmp ]] &&
        mv -f "$RESULTS_DIR/$name.pod-stats.json.tmp" "$RESULTS_DIR/$name.pod-stats.json"
    rm -f "$RESULTS_DIR/$name.pod-stats.json.tmp"
    if [[ -f $RESULTS_DIR/$name.pod-stats.json ]]; then
        log "pod figures: $RESULTS_DIR/$name.pod-stats.json"
    fi
}

# --- main ------------------------------------------------------------------------

kwok_down() {
    if [[ -f $STATE/kwok.pid ]]; then
        kill "$(cat "$STATE/kwok.pid")" 2>/dev/null || true
        rm -f "$STATE/kwok.pid"
    fi
}

cmd_down() {
    kwok_down
    kind_cluster down
    rm -rf "$STATE"
}

cmd_run() {
    case $MODE in in-cluster | binary) ;; *) die "MODE must be in-cluster or binary (got '$MODE')" ;; esac
    local scenarios=("$SCENARIO")
    if [[ $MODE == in-cluster ]]; then
        case $SCENARIO in
        restart | sharded)
            die "SCENARIO=$SCENARIO needs the load generator to kill or start controller processes; run it with MODE=binary"
            ;;
        all)
            scenarios=(steady burst fanout noop large ratelimit annotations)
            log "MODE=in-cluster: SCENARIO=all runs ${scenarios[*]} (restart needs MODE=binary)"
            ;;
        esac
    fi
    if [[ $RUNNING_SHARE != 0 && $KIND_WORKERS == 0 ]]; then
        die "RUNNING_SHARE=$RUNNING_SHARE needs real workers (KIND_WORKERS > 0); or RUNNING_SHARE=0"
    fi
    find_tools
    if [[ $KEEP_CLUSTER == 0 ]]; then
        trap 'log "KEEP_CLUSTER=0: deleting the cluster"; cmd_down || true' EXIT
    fi
    cluster_up
    kwok_up
    if [[ $MODE == in-cluster ]]; then
        image_up
        chart_up
    else
        chart_down_if_present
    fi

    log "building the load generator (cargo build --release -p kube-reloader-loadtest)"
    export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$CACHE/target}
    (cd "$ROOT" && cargo build --release --locked -p kube-reloader-loadtest >&2) ||
        die "building the load generator failed"
    local loadgen=$CARGO_TARGET_DIR/release/kube-reloader-loadtest
    mkdir -p "$RESULTS_DIR"

    # Named like the other results (scenario, scale, commit), with the mode: kind-in-cluster-<commit>.
    local label
    label=kind-$MODE-$(git -C "$ROOT" rev-parse --short=7 HEAD)
    local args=(--scale "$SCALE" --kubeconfig "$KUBECONFIG_PATH" --results-dir "$RESULTS_DIR"
        --controller-label "$label")
    if [[ $MODE == in-cluster ]]; then
        # The controller talks to the API server from its pod, not through the counting proxy.
        args+=(--direct --controller-cmd "$(printf '%q' "$KIND_DIR/run.sh") controller {run_id} {metrics_port} {scenario_flags}")
        export CLUSTER_NAME KUBE_RELOADER_CACHE # the controller command finds the same state
    fi
    if [[ $RUNNING_SHARE != 0 ]]; then
        local image
        image=$(running_image)
        log "running share: $RUNNING_SHARE of the Deployments run one pod of $image on the workers"
        args+=(--running-share "$RUNNING_SHARE" --running-image "$image")
    fi
    local extra=()
    # shellcheck disable=SC2206 # LOADTEST_ARGS is split on purpose, like the Makefile does
    if [[ -n $LOADTEST_ARGS ]]; then extra=($LOADTEST_ARGS); fi

    local s rc=0 r
    for s in "${scenarios[@]}"; do
        log "load test: scenario $s, scale $SCALE, mode $MODE"
        r=0
        "$loadgen" --scenario "$s" "${args[@]}" ${extra[@]+"${extra[@]}"} || r=$?
        if ((r > rc)); then rc=$r; fi
        if [[ $MODE == in-cluster ]]; then
            pod_snapshot "$s-$SCALE-$label"
        fi
    done
    log "results in $RESULTS_DIR (exit code $rc)"
    return "$rc"
}

case ${1:-run} in
run) cmd_run ;;
down) cmd_down ;;
controller)
    shift
    cmd_controller "$@"
    ;;
-h | --help | help) sed -n '2,38p' "${BASH_SOURCE[0]}" ;;
*) die "unknown command '$1' (run, down, controller, help)" ;;
esac
