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

GO_BUILD_NAME=toolchain
# shellcheck source=hack/lib/go-build.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/go-build.sh"
BIN=$CACHE/k8s-$K8S_VERSION/bin

# Sets what is left to build; true when nothing is.
up_to_date() {
    need_etcd=1 need_k8s=1 need_kwok=1
    stamp_ok etcd "$ETCD_VERSION" && need_etcd=0
    stamp_ok kube-apiserver "$K8S_VERSION" &&
        stamp_ok kube-controller-manager "$K8S_VERSION" &&
        stamp_ok kubectl "$K8S_VERSION" && need_k8s=0
    stamp_ok kwok "$KWOK_VERSION" && need_kwok=0
    ((need_etcd + need_k8s + need_kwok == 0))
}

# Parallel test runners may all call `cluster.sh up`: one builds, the others wait and find
# the stamps.
go_build_prepare "k8s $K8S_VERSION, etcd $ETCD_VERSION, kwok $KWOK_VERSION" "$@"

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
    git_commit=$(module_commit k8s.io/kubernetes "$K8S_VERSION")
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
    write_stamp kwok "$KWOK_VERSION"
    log "kwok $KWOK_VERSION built in $((SECONDS - start))s"
fi

log "toolchain ready in $BIN (took ${SECONDS}s)"
echo "$BIN"
