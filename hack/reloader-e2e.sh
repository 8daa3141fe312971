#!/usr/bin/env bash
# Runs stakater/Reloader's own end-to-end suite (its test/e2e, Ginkgo) against kube-reloader
# (`make reloader-e2e`, issue #40): the suite installs Reloader's Helm chart, from Reloader's
# source, with kube-reloader's image in place of Reloader's (its documented way to test another
# image: SKIP_BUILD=true RELOADER_IMAGE=<image> make e2e), on the kind cluster of
# hack/kind-cluster.sh (created, or reused).
#
# Nothing of Reloader is kept in this repository: the suite runs from the export of
# hack/reloader-binary.sh ($CACHE/reloader/src-REF, made from RELOADER_SRC when missing), with
# Go's module cache under $CACHE/go. The image is the one `make image-local` builds, from
# KUBE_RELOADER_IMAGE_BINARY (default: `make -s binary`), loaded into the nodes. The suite's
# workloads run `busybox:1.36` (its utils' DefaultImage) from Docker Hub, which these machines do
# not reach: a stand-in under that name is built FROM scratch around Debian's busybox-static
# (1.35, `apt-get download`, unpacked under $CACHE: nothing is installed) with every applet
# linked in /bin, and loaded into the nodes; the pods run `sh -c "sleep 3600"` and `echo`.
#
# Usage: hack/reloader-e2e.sh
#   RELOADER_REF=v1.4.21
#   LABEL_FILTER='!argo && !csi && !openshift'   Ginkgo label filter. The default leaves out the
#                 labels whose dependencies cannot be installed without a registry or GitHub: argo
#                 (the Argo Rollouts controller), csi (the Secrets Store CSI driver and Vault),
#                 openshift (DeploymentConfigs need an OpenShift API server).
#   FOCUS=        Ginkgo --focus regex (default: every spec the filter keeps)
#   GINKGO_PROCS=1  E2E_TIMEOUT=45m   as Reloader's Makefile
#   RESULTS_DIR=$CACHE/reloader-e2e   the log (e2e.log) and Ginkgo's JSON report (report.json)
# The last line: `reloader e2e (REF, filter): P passed, F failed, S skipped, N pending of T specs
# (Ns)` (skipped: left out by the filter; pending: marked pending upstream);
# exits 1 when a spec failed, 2 when the suite could not be run.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
HACK=$ROOT/hack
GO_BUILD_NAME=reloader-e2e
# shellcheck source=hack/lib/go-build.sh
. "$HACK/lib/go-build.sh"
REF=${RELOADER_REF:-v1.4.21}
LABEL_FILTER=${LABEL_FILTER:-'!argo && !csi && !openshift'}
FOCUS=${FOCUS:-}
GINKGO_PROCS=${GINKGO_PROCS:-1}
E2E_TIMEOUT=${E2E_TIMEOUT:-45m}
RESULTS_DIR=${RESULTS_DIR:-$CACHE/reloader-e2e}
IMAGE=localhost/kube-reloader/kube-reloader:reloader-e2e

fail() {
    printf '[%s] ERROR: %s\n' "$GO_BUILD_NAME" "$*" >&2
    exit 2
}

SECONDS=0
src=$CACHE/reloader/src-$REF
if [[ ! -f $src/.complete ]]; then
    log "exporting stakater/Reloader $REF (hack/reloader-binary.sh)"
    bash "$HACK/reloader-binary.sh" "$REF" >/dev/null || fail "hack/reloader-binary.sh $REF failed"
fi
[[ -d $src/test/e2e ]] || fail "$src has no test/e2e (Reloader $REF has no e2e suite)"
require_go "stakater/Reloader's e2e suite"

KUBECONFIG=$(bash "$HACK/kind-cluster.sh" up | tail -n1)
[[ -f $KUBECONFIG ]] || fail "no kubeconfig from hack/kind-cluster.sh up"
export KUBECONFIG
log "cluster ready after ${SECONDS}s"

bin=${KUBE_RELOADER_IMAGE_BINARY:-$(make -s -C "$ROOT" --no-print-directory binary | tail -n1)}
bash "$HACK/image-local.sh" "$bin" "$IMAGE" reloader-e2e >/dev/null || fail "make image-local failed"
tar=$(mktemp "$CACHE/reloader-e2e.XXXXXX.tar")
bash "$HACK/podman.sh" save --quiet --format docker-archive -o "$tar" "$IMAGE" >/dev/null ||
    fail "podman save $IMAGE failed"
bash "$HACK/kind-cluster.sh" load-archive "$tar" >&2 || fail "loading $IMAGE into the nodes failed"
rm -f "$tar"
log "$IMAGE (from $bin) loaded into the nodes"

# The workloads' image: the name the suite asks for, Debian's busybox inside.
workload_image=$(sed -n 's/^[[:space:]]*DefaultImage[[:space:]]*=[[:space:]]*"\(.*\)"/\1/p' "$src/test/e2e/utils/resources.go")
[[ -n $workload_image ]] || fail "no DefaultImage in $src/test/e2e/utils/resources.go"
[[ $workload_image == */* ]] || workload_image=docker.io/library/$workload_image
bb=$CACHE/reloader-e2e/busybox
if [[ ! -x $bb/bin/busybox ]]; then
    rm -rf "$bb" && mkdir -p "$bb/deb"
    (cd "$bb/deb" && apt-get download busybox-static >&2) || fail "apt-get download busybox-static failed"
    dpkg-deb -x "$bb"/deb/busybox-static_*.deb "$bb/x" || fail "unpacking busybox-static failed"
    mkdir -p "$bb/bin" && mv "$bb/x/bin/busybox" "$bb/bin/busybox" && rm -rf "$bb/x"
fi
if ! bash "$HACK/podman.sh" image exists "$workload_image"; then
    ctx=$(mktemp -d "$CACHE/reloader-e2e/busybox-image.XXXXXX")
    mkdir -p "$ctx/root/bin" "$ctx/root/tmp"
    cp "$bb/bin/busybox" "$ctx/root/bin/busybox"
    for applet in $("$bb/bin/busybox" --list); do
        [[ $applet == busybox ]] || ln -s busybox "$ctx/root/bin/$applet"
    done
    printf 'FROM scratch\nCOPY root/ /\nENV PATH=/bin\nCMD ["sh"]\n' >"$ctx/Containerfile"
    bash "$HACK/podman.sh" build --quiet -t "$workload_image" -f "$ctx/Containerfile" "$ctx" >/dev/null ||
        fail "podman build of $workload_image failed"
    rm -rf "$ctx"
fi
tar=$(mktemp "$CACHE/reloader-e2e.XXXXXX.tar")
bash "$HACK/podman.sh" save --quiet --format docker-archive -o "$tar" "$workload_image" >/dev/null ||
    fail "podman save $workload_image failed"
bash "$HACK/kind-cluster.sh" load-archive "$tar" >&2 || fail "loading $workload_image into the nodes failed"
rm -f "$tar"
log "$workload_image (a stand-in: Debian's busybox-static $("$bb/bin/busybox" | head -n1 | cut -d' ' -f2)) loaded into the nodes"

# The suite runs `helm` and `kubectl` from PATH.
PATH=$(bash "$HACK/kind-node-bins.sh" --bin-dir):$(bash "$HACK/helm.sh" | tail -n1):$PATH
export PATH
go_env
# hack/reloader-binary.sh may have added a replace line (a module the proxy does not serve), so
# go.sum may need entries the original does not have: -mod=mod lets Go add them in the export.
export GOFLAGS="$GOFLAGS -mod=mod"

mkdir -p "$RESULTS_DIR"
rm -f "$RESULTS_DIR/report.json"
args=(--keep-going -v --no-color --procs="$GINKGO_PROCS" --timeout="$E2E_TIMEOUT" --label-filter="$LABEL_FILTER"
    --json-report=report.json --output-dir="$RESULTS_DIR")
[[ -z $FOCUS ]] || args+=(--focus="$FOCUS")
log "Reloader $REF e2e, RELOADER_IMAGE=$IMAGE, --label-filter='$LABEL_FILTER' (log: $RESULTS_DIR/e2e.log)"
rc=0
(cd "$src" && RELOADER_IMAGE=$IMAGE SKIP_BUILD=true nice -n 10 go tool ginkgo "${args[@]}" ./test/e2e/...) \
    >"$RESULTS_DIR/e2e.log" 2>&1 || rc=$?
[[ -f $RESULTS_DIR/report.json ]] || {
    tail -n 30 "$RESULTS_DIR/e2e.log" >&2
    fail "Ginkgo wrote no report (exit $rc); see $RESULTS_DIR/e2e.log"
}

# Counts of the specs (It nodes; not the suite set-up), per suite and in all.
python3 - "$RESULTS_DIR/report.json" "$REF" "$LABEL_FILTER" "$SECONDS" <<'PY'
import json, sys
reports, ref, label_filter, secs = json.load(open(sys.argv[1])), sys.argv[2], sys.argv[3], sys.argv[4]
total = {"passed": 0, "failed": 0, "skipped": 0, "pending": 0, "other": 0}
for r in reports:
    n = {"passed": 0, "failed": 0, "skipped": 0, "pending": 0, "other": 0}
    failed = []
    for s in r.get("SpecReports") or []:
        state = s.get("State", "")
        if s.get("LeafNodeType") != "It":
            if state not in ("passed", "skipped"):
                failed.append(f"{s.get('LeafNodeType')}: {state}")
            continue
        key = state if state in n else ("failed" if state in ("panicked", "timedout", "interrupted", "aborted") else "other")
        n[key] += 1
        if key == "failed":
            failed.append(" ".join(s.get("ContainerHierarchyTexts") or []) + " " + s.get("LeafNodeText", ""))
    for k in total:
        total[k] += n[k]
    print(f"{r.get('SuiteDescription')}: {n['passed']} passed, {n['failed']} failed, {n['skipped']} skipped, "
          f"{n['pending']} pending" + (f", {n['other']} other" if n["other"] else ""))
    for f in failed:
        print(f"  FAILED {f}")
all_ = sum(total.values())
print(f"reloader e2e ({ref}, --label-filter='{label_filter}'): {total['passed']} passed, "
      f"{total['failed']} failed, {total['skipped']} skipped, {total['pending']} pending of {all_} specs ({secs}s)")
PY
((rc == 0)) || exit 1
