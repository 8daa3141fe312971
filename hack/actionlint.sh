#!/usr/bin/env bash
# Builds, once, actionlint (the linter of GitHub Actions workflow files; `make lint` runs it on
# .github/workflows) from its Go module through the Go module proxy, like hack/helm.sh builds
# helm:
#
#   $CACHE/actionlint-$ACTIONLINT_VERSION/bin/actionlint
#
# with CACHE=${KUBE_RELOADER_CACHE:-$HOME/.cache/kube-reloader} and the Go caches of
# hack/toolchain.sh ($CACHE/go). Re-running is a no-op (a stamp holds the version built).
#
# Usage: hack/actionlint.sh            build if missing, print the bin dir on stdout
#        hack/actionlint.sh --bin-dir  only print the bin dir
set -euo pipefail

# Latest release on the Go module proxy (`go list -m -versions github.com/rhysd/actionlint`).
ACTIONLINT_VERSION=v1.7.12

CACHE=${KUBE_RELOADER_CACHE:-$HOME/.cache/kube-reloader}
BIN=$CACHE/actionlint-$ACTIONLINT_VERSION/bin
STAMP=$BIN/.stamp

log() { printf '[actionlint] %s\n' "$*" >&2; }
die() { printf '[actionlint] ERROR: %s\n' "$*" >&2; exit 1; }

if [[ ${1:-} == --bin-dir ]]; then
    echo "$BIN"
    exit 0
fi
if [[ -x $BIN/actionlint && "$(cat "$STAMP" 2>/dev/null)" == "$ACTIONLINT_VERSION" ]]; then
    echo "$BIN"
    exit 0
fi

command -v go >/dev/null 2>&1 ||
    die "Go is not installed (or not on PATH): it builds actionlint $ACTIONLINT_VERSION"
mkdir -p "$CACHE/go" "$BIN"
exec 9>"$CACHE/.actionlint.lock"
flock 9
if [[ -x $BIN/actionlint && "$(cat "$STAMP" 2>/dev/null)" == "$ACTIONLINT_VERSION" ]]; then
    echo "$BIN"
    exit 0
fi

# Same Go settings as hack/toolchain.sh: self-contained caches, no toolchain download, static.
export GOPATH=$CACHE/go GOMODCACHE=$CACHE/go/mod GOCACHE=$CACHE/go/build
export GOTOOLCHAIN=local GOWORK=off GOFLAGS=-buildvcs=false CGO_ENABLED=0 GOBIN=$BIN
unset GOOS GOARCH
SECONDS=0
go install -trimpath -ldflags "-s -w -X main.version=$ACTIONLINT_VERSION" \
    "github.com/rhysd/actionlint/cmd/actionlint@$ACTIONLINT_VERSION" ||
    die "building actionlint $ACTIONLINT_VERSION failed"
echo "$ACTIONLINT_VERSION" >"$STAMP"
log "actionlint $ACTIONLINT_VERSION built in ${SECONDS}s"
echo "$BIN"
