#!/usr/bin/env bash
# Builds, once, the `helm-unittest` binary hack/reloader-chart-tests.sh runs, from its Go module
# (github.com/helm-unittest/helm-unittest) through the Go module proxy, as hack/helm.sh builds
# helm:
#
#   $CACHE/helm-unittest-$HELM_UNITTEST_VERSION/bin/helm-unittest
#
# with CACHE=${KUBE_RELOADER_CACHE:-$HOME/.cache/kube-reloader}. The Go caches are $CACHE/go (as
# for helm); the module's source is copied to $CACHE/wrappers/helm-unittest-$VERSION and built
# there, because its go.mod has a replace directive (yaml-jsonpath), which `go install
# module@version` and a wrapper module would both ignore. `rm -rf $CACHE/helm-unittest-*
# $CACHE/wrappers/helm-unittest-*` is a complete reset.
#
# Re-running is a no-op: a stamp file holds the version the binary was built from.
#
# Usage: hack/helm-unittest.sh            build if missing, print the bin dir on stdout
#        hack/helm-unittest.sh --bin-dir  only print the bin dir (no build)
set -euo pipefail

# --- pinned version (bump here; the stamp makes the next run rebuild) --------
# Latest release on the Go module proxy (`go list -m -versions github.com/helm-unittest/helm-unittest`).
HELM_UNITTEST_VERSION=v1.1.2
MODULE=github.com/helm-unittest/helm-unittest

CACHE=${KUBE_RELOADER_CACHE:-$HOME/.cache/kube-reloader}
BIN=$CACHE/helm-unittest-$HELM_UNITTEST_VERSION/bin
STAMP=$BIN/.stamps/helm-unittest
WRAPPERS=$CACHE/wrappers

log() { printf '[helm-unittest] %s\n' "$*" >&2; }
die() { printf '[helm-unittest] ERROR: %s\n' "$*" >&2; exit 1; }

if [[ ${1:-} == --bin-dir ]]; then
    echo "$BIN"
    exit 0
fi

stamp_ok() { [[ -x $BIN/helm-unittest && -f $STAMP && "$(cat "$STAMP")" == "$HELM_UNITTEST_VERSION" ]]; }

if stamp_ok; then
    log "up to date: helm-unittest $HELM_UNITTEST_VERSION in $BIN"
    echo "$BIN"
    exit 0
fi

command -v go >/dev/null 2>&1 || die "Go is not installed (or not on PATH); Go >= 1.26 builds helm-unittest"

mkdir -p "$CACHE/go" "$BIN" "$WRAPPERS"
exec 9>"$CACHE/.helm-unittest.lock"
if command -v flock >/dev/null 2>&1 && ! flock -n 9; then
    log "another build is running; waiting for $CACHE/.helm-unittest.lock"
    flock 9
fi
if stamp_ok; then
    echo "$BIN"
    exit 0
fi

# Same Go settings as hack/helm.sh, except that GOMODCACHE / GOPROXY from the environment are
# kept (a shared module cache can be reused, e.g. GOPROXY=file://<cache>/mod/cache/download,...).
export GOPATH=$CACHE/go GOMODCACHE=${GOMODCACHE:-$CACHE/go/mod} GOCACHE=$CACHE/go/build
export GOTOOLCHAIN=local GOWORK=off GOFLAGS="-buildvcs=false -modcacherw" CGO_ENABLED=0
unset GOOS GOARCH

SECONDS=0
log "building helm-unittest $HELM_UNITTEST_VERSION"
src=$(go mod download -json "$MODULE@$HELM_UNITTEST_VERSION" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])') ||
    die "cannot download $MODULE@$HELM_UNITTEST_VERSION from the Go module proxy"
w=$WRAPPERS/helm-unittest-$HELM_UNITTEST_VERSION
rm -rf "$w" && mkdir -p "$w"
cp -r "$src/." "$w/"
chmod -R u+w "$w"

tmp=$(mktemp -d "$BIN/.build.XXXXXX")
# The version stamp as the module's Makefile sets it (plugin.yaml's version).
(cd "$w" && go build -trimpath \
    -ldflags "-s -w -X $MODULE/internal/build.version=${HELM_UNITTEST_VERSION#v}" \
    -o "$tmp/helm-unittest" ./cmd/helm-unittest) ||
    die "building helm-unittest failed (source: $w)"
mv -f "$tmp/helm-unittest" "$BIN/helm-unittest"
rm -rf "$tmp"
mkdir -p "$(dirname "$STAMP")"
echo "$HELM_UNITTEST_VERSION" >"$STAMP"
log "helm-unittest $HELM_UNITTEST_VERSION built in ${SECONDS}s"
echo "$BIN"
