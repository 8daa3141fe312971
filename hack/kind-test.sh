#!/usr/bin/env bash
# End to end on real pods (`make kind-test`, issue #39), on the kind cluster of
# hack/kind-cluster.sh (created, or reused):
#
#   1. smoke: the tiny app (tests/kind/app) runs as a Deployment (3), a StatefulSet (2), a
#      DaemonSet (every node) and an unrelated "bystander" Deployment (tests/kind/app.yaml); a Job
#      resolves the Service name app.kind-test.svc.cluster.local and fetches from it.
#   2. for each controller in CONTROLLERS (kube-reloader: the chart, with the image `make
#      image-local` builds from this checkout; reloader: stakater/Reloader built from RELOADER_SRC
#      by hack/reloader-image.sh) and each strategy in STRATEGIES (env-vars, annotations): the
#      controller is installed, CHANGES changes are made (ConfigMap and Secret in turn) and
#      measured by tests/kind/reload_latency.py (every serving pod answers the new value within
#      30 s, old pods gone, each workload rolled exactly once, the bystander untouched), then the
#      controller is removed. One controller runs at a time.
#
# Results: $RESULTS_DIR (default $CACHE/kind-test) <controller>-<strategy>.json and summary.md.
# Settings: CONTROLLERS="kube-reloader reloader", STRATEGIES="env-vars annotations", CHANGES=10,
#   KUBE_RELOADER_IMAGE_BINARY (default: `make -s binary`), RELOADER_SRC, RELOADER_REF=v1.4.21,
#   SMOKE_ONLY=1 (step 1 only: what `make kind-cluster-test` runs).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
HACK=$ROOT/hack
CACHE=${KUBE_RELOADER_CACHE:-$HOME/.cache/kube-reloader}
CONTROLLERS=${CONTROLLERS:-kube-reloader reloader}
STRATEGIES=${STRATEGIES:-env-vars annotations}
CHANGES=${CHANGES:-10}
RELOADER_REF=${RELOADER_REF:-v1.4.21}
RESULTS_DIR=${RESULTS_DIR:-$CACHE/kind-test}
NS=kind-test
CTRL_NS=kind-test-controller
CHART=$ROOT/deployments/kubernetes/chart/kube-reloader

log() { printf '[kind-test] %s\n' "$*" >&2; }
die() {
    printf '[kind-test] ERROR: %s\n' "$*" >&2
    exit 1
}

SECONDS=0
KUBECONFIG_PATH=$(bash "$HACK/kind-cluster.sh" up | tail -n1)
[[ -f $KUBECONFIG_PATH ]] || die "no kubeconfig from hack/kind-cluster.sh up"
log "cluster ready after ${SECONDS}s"
BIN=$(bash "$HACK/kind-node-bins.sh" --bin-dir)
kctl() { "$BIN/kubectl" --kubeconfig "$KUBECONFIG_PATH" "$@"; }

# load IMAGE...: into every node's containerd (kind load image-archive of a podman save).
load() {
    local image tar
    for image in "$@"; do
        tar=$(mktemp "$CACHE/kind-load.XXXXXX.tar")
        bash "$HACK/podman.sh" save --quiet --format docker-archive -o "$tar" "$image" >/dev/null ||
            die "podman save $image failed"
        bash "$HACK/kind-cluster.sh" load-archive "$tar" >&2 || die "loading $image into the nodes failed"
        rm -f "$tar"
    done
}

mkdir -p "$RESULTS_DIR" "$CACHE"
WORK=$(mktemp -d "$CACHE/kind-test-work.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
APP_IMAGE=$(bash "$HACK/kind-app.sh" | tail -n1)
load "$APP_IMAGE"

# --- 1. the app and the Service/DNS check ---------------------------------------------
log "deploying the app ($APP_IMAGE) in namespace $NS"
kctl create namespace "$NS" --dry-run=client -o yaml | kctl apply -f - >/dev/null
kctl -n "$NS" create --dry-run=client -o json -f "$ROOT/tests/kind/app.yaml" >"$WORK/app.json"
python3 - "$WORK/app.json" "$APP_IMAGE" <<'PY' | kctl -n "$NS" apply -f - >/dev/null
import json, sys
# `kubectl create --dry-run -o json` writes one JSON object per document, one after the other.
text, docs, dec, i = open(sys.argv[1]).read(), [], json.JSONDecoder(), 0
while i < len(text):
    if text[i].isspace():
        i += 1
        continue
    d, i = dec.raw_decode(text, i)
    docs.append(d)
spec = next(d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "app")["spec"]["template"]["spec"]
for d in docs:
    if d["kind"] in ("StatefulSet", "DaemonSet"):
        d["spec"]["template"]["spec"] = json.loads(json.dumps(spec))
    for c in (d.get("spec", {}).get("template", {}).get("spec", {}).get("containers") or []):
        c["image"] = sys.argv[2]
print(json.dumps({"apiVersion": "v1", "kind": "List", "items": docs}))
PY
for w in deployment/app statefulset/app daemonset/app deployment/bystander; do
    kctl -n "$NS" rollout status "$w" --timeout=180s >&2 || die "$w did not become ready (kubectl -n $NS get pods)"
done
kctl -n "$NS" get pods -o wide >&2
kctl -n "$NS" delete job dns-check --ignore-not-found >/dev/null
kctl -n "$NS" create job dns-check --image "$APP_IMAGE" -- /kind-app get http://app.kind-test.svc.cluster.local:8080/ >/dev/null
kctl -n "$NS" wait --for=condition=complete job/dns-check --timeout=120s >&2 ||
    { kctl -n "$NS" logs job/dns-check >&2 || true; die "the DNS + Service check failed"; }
answer=$(kctl -n "$NS" logs job/dns-check)
[[ $answer == env=initial* || $answer == env=* ]] || die "unexpected answer through the Service: $answer"
log "a pod resolved app.kind-test.svc.cluster.local and got: $answer"
if [[ ${SMOKE_ONLY:-0} == 1 ]]; then
    log "smoke test passed (${SECONDS}s)"
    exit 0
fi

# --- 2. the controllers ------------------------------------------------------------------
HELM=$(bash "$HACK/helm.sh" | tail -n1)/helm
[[ -x $HELM ]] || die "helm not found (hack/helm.sh)"
helm_() { "$HELM" --kubeconfig "$KUBECONFIG_PATH" "$@"; }
mkdir -p "$RESULTS_DIR"

controller_up() {
    local controller=$1 strategy=$2
    kctl create namespace "$CTRL_NS" --dry-run=client -o yaml | kctl apply -f - >/dev/null
    case $controller in
    kube-reloader)
        helm_ upgrade --install kube-reloader "$CHART" -n "$CTRL_NS" \
            --set image.repository="${KR_IMAGE%:*}" --set image.tag="${KR_IMAGE##*:}" \
            --set image.pullPolicy=Never --set reloader.reloadStrategy="$strategy" \
            --wait --timeout 180s >/dev/null || die "helm install of kube-reloader failed"
        ;;
    reloader)
        # A minimal install of our own (not Reloader's chart): its binary with the strategy flag,
        # bound to cluster-admin (a test cluster; its RBAC is not what is compared here).
        kctl -n "$CTRL_NS" apply -f - >/dev/null <<EOF
apiVersion: v1
kind: ServiceAccount
metadata: {name: stakater-reloader}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: kind-test-stakater-reloader}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}
subjects: [{kind: ServiceAccount, name: stakater-reloader, namespace: $CTRL_NS}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: stakater-reloader}
spec:
  replicas: 1
  selector: {matchLabels: {app: stakater-reloader}}
  template:
    metadata: {labels: {app: stakater-reloader}}
    spec:
      serviceAccountName: stakater-reloader
      containers:
        - name: reloader
          image: $RL_IMAGE
          imagePullPolicy: Never
          args: ["--reload-strategy=$strategy"]
          readinessProbe: {httpGet: {path: /live, port: 9090}, periodSeconds: 1}
EOF
        kctl -n "$CTRL_NS" rollout status deployment/stakater-reloader --timeout=180s >&2 ||
            die "stakater/Reloader did not become ready"
        ;;
    esac
    # Let it list and settle before the first change.
    sleep 5
}

controller_down() {
    kctl delete namespace "$CTRL_NS" --wait=true --timeout=120s >/dev/null 2>&1 || true
    kctl delete clusterrolebinding kind-test-stakater-reloader --ignore-not-found >/dev/null
    # The chart's cluster-scoped objects go with the release.
    helm_ uninstall kube-reloader -n "$CTRL_NS" >/dev/null 2>&1 || true
}

KR_IMAGE=localhost/kube-reloader/kube-reloader:kind-test
RL_IMAGE=""
for c in $CONTROLLERS; do
    case $c in
    kube-reloader)
        bin=${KUBE_RELOADER_IMAGE_BINARY:-$(make -s -C "$ROOT" --no-print-directory binary | tail -n1)}
        bash "$HACK/image-local.sh" "$bin" "$KR_IMAGE" kind-test >/dev/null || die "make image-local failed"
        load "$KR_IMAGE"
        ;;
    reloader)
        RL_IMAGE=$(bash "$HACK/reloader-image.sh" "$RELOADER_REF" | tail -n1) ||
            die "building stakater/Reloader $RELOADER_REF failed (RELOADER_SRC=<clone of github.com/stakater/Reloader>)"
        load "$RL_IMAGE"
        ;;
    *) die "unknown controller '$c' (kube-reloader, reloader)" ;;
    esac
done

rc=0
(umask 077 && kctl config view --raw --minify -o json >"$WORK/kubeconfig.json")
controller_down
for c in $CONTROLLERS; do
    for s in $STRATEGIES; do
        label=$c-$s
        [[ $c == reloader ]] && label=reloader-$RELOADER_REF-$s
        log "$label: installing, then $CHANGES changes"
        controller_up "$c" "$s"
        python3 "$ROOT/tests/kind/reload_latency.py" --kubeconfig "$WORK/kubeconfig.json" --namespace "$NS" \
            --changes "$CHANGES" --label "$label" --out "$RESULTS_DIR/$label.json" || rc=1
        controller_down
    done
done

python3 - "$RESULTS_DIR" $CONTROLLERS <<'PY' >"$RESULTS_DIR/summary.md"
import glob, json, math, os, sys
rows = [json.load(open(f)) for f in sorted(glob.glob(os.path.join(sys.argv[1], "*.json")))]
def pct(lat, p):  # nearest rank, as tests/kind/reload_latency.py
    lat = sorted(lat)
    return lat[max(0, math.ceil(p / 100 * len(lat)) - 1)] if lat else None
print("| run | changes | p50 | p99 | max | failed |")
print("|---|---|---|---|---|---|")
for r in rows:
    print(f"| {r['label']} | {r['changes']} | {r['p50_s']} s | {r['p99_s']} s | {r['max_s']} s | {r['failures']} |")
# Per controller, both strategies and both kinds of change together.
for c in sys.argv[2:]:
    mine = [r for r in rows if r["label"].startswith(c + "-")]
    lat = [s["latency_s"] for r in mine for s in r["samples"] if s["latency_s"] is not None]
    if mine:
        n = sum(r["changes"] for r in mine)
        print(f"| **{c}, all** | {n} | {pct(lat, 50)} s | {pct(lat, 99)} s | {max(lat) if lat else None} s | {sum(r['failures'] for r in mine)} |")
PY
cat "$RESULTS_DIR/summary.md" >&2
log "done in ${SECONDS}s (results: $RESULTS_DIR)"
exit "$rc"
