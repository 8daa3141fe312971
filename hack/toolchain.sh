#!/usr/bin/env bash
# Builds, once, the Kubernetes control-plane binaries that the integration
# tests run against, from the official Go modules (no prebuilt downloads: this
# machine only reaches the Go module proxy):
#
#   $CACHE/k8s-$K8S_VERSION/bin/{etcd,kube-apiserver,kube-controller-manager,kubectl,kwok}
#
# with CACHE=${KUBE_RELOADER_CACHE:-$HOME/.cache/kube-reloader}. Everything Go
# writes (module cache, build cache, wrapper modules) also lives under $CACHE,
# never in the checkout: `rm -rf $CACHE/go $CACHE/wrappers $CACHE/k8s-*` is a
# complete reset of the toolchain. (Don't wipe all of $CACHE blindly: the
# cluster state and possibly a cargo target dir live there too.)
#
# Re-running is a no-op: each binary has a stamp file holding the version it
# was built from, and is rebuilt only when the pinned version below changes.
#
# Measured on the 2-core / 24 GiB dev machine with an empty $CACHE (Go 1.26.8,
# sharing the CPUs with a concurrent cargo build):
#   cold build, downloads included: 7m12s wall (10m35s user)
#     etcd 40s, kube-apiserver + kube-controller-manager + kubectl 5m29s, kwok 1m03s
#   cached re-run (nothing to do): ~0.01s, Go not even invoked
#   rebuilding one binary after a version bump, warm Go cache: seconds
#   disk: binaries ~360 MiB, go/mod ~1.4 GiB, go/build ~4.5 GiB
#
# Usage: hack/toolchain.sh            build what is missing, print bin dir on stdout
#        hack/toolchain.sh --bin-dir  only print the bin dir (no build)
set -euo pipefail

# --- pinned versions (bump here; the stamps make the next run rebuild) -------
K8S_VERSION=v1.37.2
ETCD_VERSION=v3.6.16
KWOK_VERSION=v0.8.0

CACHE=${KUBE_RELOADER_CACHE:-$HOME/.cache/kube-reloader}
BIN=$CACHE/k8s-$K8S_VERSION/bin
STAMPS=$BIN/.stamps
WRAPPERS=$CACHE/wrappers

log() { printf '[toolchain] %s\n' "$*" >&2; }
die() { printf '[toolchain] ERROR: %s\n' "$*" >&2; exit 1; }

if [[ ${1:-} == --bin-dir ]]; then
    echo "$BIN"
    exit 0
fi

# stamp_ok NAME VERSION: binary exists and was built from VERSION.
stamp_ok() {
    [[ -x $BIN/$1 && -f $STAMPS/$1 && "$(cat "$STAMPS/$1")" == "$2" ]]
}
write_stamp() { mkdir -p "$STAMPS"; echo "$2" >"$STAMPS/$1"; }

need_etcd=1 need_k8s=1 need_kwok=1
stamp_ok etcd "$ETCD_VERSION" && need_etcd=0
stamp_ok kube-apiserver "$K8S_VERSION" &&
    stamp_ok kube-controller-manager "$K8S_VERSION" &&
    stamp_ok kubectl "$K8S_VERSION" && need_k8s=0
stamp_ok kwok "$KWOK_VERSION" && need_kwok=0

# Fast path: nothing to do, and Go is not even needed.
if ((need_etcd + need_k8s + need_kwok == 0)); then
    log "up to date: k8s $K8S_VERSION, etcd $ETCD_VERSION, kwok $KWOK_VERSION in $BIN"
    echo "$BIN"
    exit 0
fi

# --- something has to be built: set up Go ---------------------------------
command -v go >/dev/null 2>&1 ||
    die "Go is not installed (or not on PATH). Install Go >= 1.26 to build the control plane (k8s $K8S_VERSION needs it)."
go_version=$(go env GOVERSION) # e.g. go1.26.8
[[ $go_version =~ ^go1\.([0-9]+) ]] || die "cannot parse Go version '$go_version'"
((BASH_REMATCH[1] >= 26)) || die "Go $go_version is too old: k8s $K8S_VERSION, etcd $ETCD_VERSION and kwok $KWOK_VERSION need Go >= 1.26"

mkdir -p "$CACHE/go" "$BIN" "$WRAPPERS"

# Only one build at a time (parallel test runners may all call `cluster.sh up`).
# The second caller waits, then finds the stamps and does nothing.
exec 9>"$CACHE/.toolchain.lock"
if command -v flock >/dev/null 2>&1 && ! flock -n 9; then
    log "another toolchain build is running; waiting for $CACHE/.toolchain.lock"
    flock 9
fi

# One self-contained cache directory. GOTOOLCHAIN=local: never try to download
# another Go toolchain (the go.mod files below say `go 1.26.0`, which we meet).
# GOWORK=off and a clean GOFLAGS: ignore any workspace / flags of the caller.
# CGO_ENABLED=0: static binaries, no C toolchain needed.
export GOPATH=$CACHE/go GOMODCACHE=$CACHE/go/mod GOCACHE=$CACHE/go/build
export GOTOOLCHAIN=local GOWORK=off GOFLAGS=-buildvcs=false CGO_ENABLED=0
unset GOOS GOARCH # build for this host, whatever the caller cross-compiles for

# Re-check after taking the lock: another process may have built meanwhile.
stamp_ok etcd "$ETCD_VERSION" && need_etcd=0
stamp_ok kube-apiserver "$K8S_VERSION" &&
    stamp_ok kube-controller-manager "$K8S_VERSION" &&
    stamp_ok kubectl "$K8S_VERSION" && need_k8s=0
stamp_ok kwok "$KWOK_VERSION" && need_kwok=0

# gomod_file MODULE@VERSION: path of that module's go.mod in the module cache
# (downloads the module; the zip is needed for the build anyway).
gomod_file() {
    go mod download -json "$1" | python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])'
}

# go_directives GOMOD: the `go` line and the `godebug` line(s)/block of a
# go.mod, so the wrapper builds with the same language version and the same
# GODEBUG defaults the upstream project ships with.
go_directives() {
    awk '
        /^go [0-9]/              { print; next }
        /^godebug[ \t]*\(/       { inblock = 1 }
        inblock                  { print; if ($0 ~ /^\)/) inblock = 0; next }
        /^godebug[ \t]/          { print }
    ' "$1"
}

# build_into NAME... -- GO BUILD ARGS: `go build -o tmpdir/ ...`, then move the
# binaries into $BIN only once all of them linked, so a failed or interrupted
# build never leaves a half-written binary that looks valid.
install_from() {
    local tmp=$1
    shift
    local name
    for name in "$@"; do
        [[ -x $tmp/$name ]] || die "go build did not produce $name"
        mv -f "$tmp/$name" "$BIN/$name"
    done
}

SECONDS=0

# --- etcd --------------------------------------------------------------------
# go.etcd.io/etcd/server/v3 has relative replace directives (../api etc.), so
# it cannot be `go install`ed directly; a wrapper module that merely requires
# it lets MVS pick the published sibling modules at the same version instead.
if ((need_etcd)); then
    start=$SECONDS
    log "building etcd $ETCD_VERSION (wrapper module in $WRAPPERS/etcd-$ETCD_VERSION)"
    w=$WRAPPERS/etcd-$ETCD_VERSION
    rm -rf "$w" && mkdir -p "$w"
    upstream=$(gomod_file "go.etcd.io/etcd/server/v3@$ETCD_VERSION")
    {
        echo "module kube-reloader.local/etcd-wrapper"
        echo
        go_directives "$upstream"
        echo
        echo "require go.etcd.io/etcd/server/v3 $ETCD_VERSION"
        echo
        echo "tool go.etcd.io/etcd/server/v3"
    } >"$w/go.mod"
    (cd "$w" && go mod tidy) || die "go mod tidy failed for the etcd wrapper ($w/go.mod)"
    tmp=$(mktemp -d "$BIN/.build.XXXXXX")
    (cd "$w" && go build -trimpath -ldflags "-s -w" -o "$tmp/etcd" go.etcd.io/etcd/server/v3) ||
        die "building etcd $ETCD_VERSION failed"
    install_from "$tmp" etcd
    rm -rf "$tmp"
    write_stamp etcd "$ETCD_VERSION"
    log "etcd $ETCD_VERSION built in $((SECONDS - start))s"
fi

# --- kube-apiserver, kube-controller-manager, kubectl ------------------------
# k8s.io/kubernetes requires its staging modules (k8s.io/api, client-go, ...)
# at v0.0.0 and replaces them with ./staging/src/... paths, which do not exist
# for a module dependency. The wrapper replaces each of them with the matching
# published v0.X.Y release. The list is generated from that release's own
# go.mod because it changes between Kubernetes versions.
if ((need_k8s)); then
    start=$SECONDS
    log "building kube-apiserver, kube-controller-manager, kubectl $K8S_VERSION"
    [[ $K8S_VERSION =~ ^v1\.([0-9]+)\.([0-9]+)(-.*)?$ ]] || die "unexpected K8S_VERSION '$K8S_VERSION'"
    k8s_minor=${BASH_REMATCH[1]}
    staging_version=v0.${K8S_VERSION#v1.} # v1.37.2 -> v0.37.2
    w=$WRAPPERS/k8s-$K8S_VERSION
    rm -rf "$w" && mkdir -p "$w"
    upstream=$(gomod_file "k8s.io/kubernetes@$K8S_VERSION")

    # Modules that k8s.io/kubernetes both requires and replaces with a local
    # ./staging path. (Replaced-but-not-required ones such as
    # k8s.io/sample-controller are left out: not needed, and not always published.)
    mapfile -t staging < <(python3 - "$upstream" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
# require entries, from both `require (...)` blocks and single-line requires
required = set(re.findall(r'^\s*(?:require\s+)?(\S+)\s+v\S+', text, re.M))
replaced = re.findall(r'^\s*(?:replace\s+)?(\S+)\s+=>\s+\./staging/', text, re.M)
for m in sorted(set(replaced)):
    if m in required:
        print(m)
PY
    )
    ((${#staging[@]} > 10)) || die "found only ${#staging[@]} staging modules in $upstream; the go.mod layout changed?"
    log "  replacing ${#staging[@]} staging modules with $staging_version"

    k8s_cmds=(kube-apiserver kube-controller-manager kubectl)
    {
        echo "// Generated by hack/toolchain.sh from k8s.io/kubernetes@$K8S_VERSION's go.mod. Do not edit."
        echo "module kube-reloader.local/k8s-wrapper"
        echo
        go_directives "$upstream"
        echo
        echo "require k8s.io/kubernetes $K8S_VERSION"
        echo
        echo "replace ("
        for m in "${staging[@]}"; do echo "	$m => $m $staging_version"; done
        echo ")"
        echo
        echo "tool ("
        for c in "${k8s_cmds[@]}"; do echo "	k8s.io/kubernetes/cmd/$c"; done
        echo ")"
    } >"$w/go.mod"
    (cd "$w" && go mod tidy) || die "go mod tidy failed for the Kubernetes wrapper ($w/go.mod)"

    # Version stamping, as Kubernetes' own hack/lib/version.sh does, so that
    # /version and `kubectl version` report $K8S_VERSION instead of v0.0.0.
    # (component-base serves /version; client-go is what kubectl reports.)
    git_commit=$(python3 -c '
import json, sys
info = json.load(open(sys.argv[1]))
print((info.get("Origin") or {}).get("Hash", ""))' \
        "$GOMODCACHE/cache/download/k8s.io/kubernetes/@v/$K8S_VERSION.info" 2>/dev/null || true)
    build_date=$(date -u +%Y-%m-%dT%H:%M:%SZ)
    ldflags="-s -w"
    for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
        ldflags+=" -X $pkg.gitVersion=$K8S_VERSION"
        ldflags+=" -X $pkg.gitMajor=1 -X $pkg.gitMinor=$k8s_minor"
        ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=$build_date"
        [[ -n $git_commit ]] && ldflags+=" -X $pkg.gitCommit=$git_commit"
    done

    # One `go build` for all three so the shared packages compile only once.
    tmp=$(mktemp -d "$BIN/.build.XXXXXX")
    pkgs=()
    for c in "${k8s_cmds[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$c"); done
    (cd "$w" && go build -trimpath -ldflags "$ldflags" -o "$tmp/" "${pkgs[@]}") ||
        die "building Kubernetes $K8S_VERSION failed (wrapper: $w/go.mod)"
    install_from "$tmp" "${k8s_cmds[@]}"
    rm -rf "$tmp"
    for c in "${k8s_cmds[@]}"; do write_stamp "$c" "$K8S_VERSION"; done
    log "Kubernetes $K8S_VERSION binaries built in $((SECONDS - start))s"
fi

# --- kwok ----------------------------------------------------------------------
# Built through a wrapper too, so a replace directive in kwok's go.mod (none in
# v0.8.0) can never break the build and the Go settings are the same as above.
if ((need_kwok)); then
    start=$SECONDS
    log "building kwok $KWOK_VERSION"
    w=$WRAPPERS/kwok-$KWOK_VERSION
    rm -rf "$w" && mkdir -p "$w"
    upstream=$(gomod_file "sigs.k8s.io/kwok@$KWOK_VERSION")
    {
        echo "module kube-reloader.local/kwok-wrapper"
        echo
        go_directives "$upstream"
        echo
        echo "require sigs.k8s.io/kwok $KWOK_VERSION"
        echo
        echo "tool sigs.k8s.io/kwok/cmd/kwok"
    } >"$w/go.mod"
    (cd "$w" && go mod tidy) || die "go mod tidy failed for the kwok wrapper ($w/go.mod)"
    tmp=$(mktemp -d "$BIN/.build.XXXXXX")
    # (kwok's own version string, pkg/consts.Version, is already right in the
    # published module, so no -X is needed.)
    (cd "$w" && go build -trimpath -ldflags "-s -w" -o "$tmp/kwok" sigs.k8s.io/kwok/cmd/kwok) ||
        die "building kwok $KWOK_VERSION failed"
    install_from "$tmp" kwok
    rm -rf "$tmp"
    write_stamp kwok "$KWOK_VERSION"
    log "kwok $KWOK_VERSION built in $((SECONDS - start))s"
fi

log "toolchain ready in $BIN (took ${SECONDS}s)"
echo "$BIN"
