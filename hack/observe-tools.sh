#!/usr/bin/env bash
# Builds, once, the observability tools that tests/observability.rs, the
# `promtool test rules` unit tests (make rules-test) and `make observe` run,
# from their official Go modules (no prebuilt downloads: this machine only
# reaches the Go module proxy; Grafana and Tempo are AGPL and not used):
#
#   $CACHE/observe/bin/{prometheus,promtool}  github.com/prometheus/prometheus
#   $CACHE/observe/bin/jaeger                 github.com/jaegertracing/jaeger
#                                             (cmd/jaeger: the all-in-one binary)
#
# with CACHE=${KUBE_RELOADER_CACHE:-$HOME/.cache/kube-reloader}. The Go module
# and build caches are hack/toolchain.sh's ($CACHE/go), the wrapper modules live
# in $CACHE/wrappers: `rm -rf $CACHE/observe $CACHE/wrappers/{prometheus,jaeger}-*`
# is a complete reset of these tools.
#
# Neither web UI is built (both are npm projects, not part of the Go modules):
# Prometheus serves its HTTP API (/api/v1/...) and Jaeger its query API
# (/api/traces...); their browser UIs answer with a placeholder page.
#
# Re-running is a no-op: each binary has a stamp file holding the version it
# was built from, and is rebuilt only when the pinned version below changes.
#
# Measured on the 2-core dev machine (Go 1.26.8) from an EMPTY cache, downloads included,
#   `KUBE_RELOADER_CACHE=$(mktemp -d) /usr/bin/time -v bash hack/observe-tools.sh`,
# while four other developers built Rust and Kubernetes on the same 2 cores (load average 15-18,
# so the wall times are inflated by waiting for a core; the CPU time is the better guide):
#   total: 56m28s wall, 20m33s user + 2m09s sys CPU, 3.0 GiB peak RSS
#     prometheus + promtool: 30m08s wall (built first: the standard library too)
#     jaeger:                26m20s wall (after Prometheus: shares the standard library,
#                            not much else: otel-collector and its contrib modules are new)
#   cached re-run (nothing to do): ~0.01s, Go not even invoked
#   disk: binaries 265 MiB (prometheus 100, promtool 84, jaeger 81); module cache 3.6 GiB,
#     build cache 3.5 GiB (`go mod tidy` of the wrappers fetches the test dependencies too)
#
# Usage: hack/observe-tools.sh            build what is missing, print the bin dir on stdout
#        hack/observe-tools.sh --bin-dir  only print the bin dir (no build)
set -euo pipefail

# --- pinned versions (bump here; the stamps make the next run rebuild) -------
PROMETHEUS_VERSION=v0.316.0 # the Go module's version of Prometheus 3.16.0
JAEGER_VERSION=v1.76.0      # module github.com/jaegertracing/jaeger; cmd/jaeger is Jaeger v2

CACHE=${KUBE_RELOADER_CACHE:-$HOME/.cache/kube-reloader}
BIN=$CACHE/observe/bin
STAMPS=$BIN/.stamps
WRAPPERS=$CACHE/wrappers

log() { printf '[observe-tools] %s\n' "$*" >&2; }
die() { printf '[observe-tools] ERROR: %s\n' "$*" >&2; exit 1; }

if [[ ${1:-} == --bin-dir ]]; then
    echo "$BIN"
    exit 0
fi

stamp_ok() {
    [[ -x $BIN/$1 && -f $STAMPS/$1 && "$(cat "$STAMPS/$1")" == "$2" ]]
}
write_stamp() { mkdir -p "$STAMPS"; echo "$2" >"$STAMPS/$1"; }
needs() {
    need_prom=1 need_jaeger=1
    stamp_ok prometheus "$PROMETHEUS_VERSION" && stamp_ok promtool "$PROMETHEUS_VERSION" && need_prom=0
    stamp_ok jaeger "$JAEGER_VERSION" && need_jaeger=0
    return 0
}

# Fast path: nothing to do, and Go is not even needed.
needs
if ((need_prom + need_jaeger == 0)); then
    log "up to date: prometheus $PROMETHEUS_VERSION, jaeger $JAEGER_VERSION in $BIN"
    echo "$BIN"
    exit 0
fi

command -v go >/dev/null 2>&1 ||
    die "Go is not installed (or not on PATH). Install Go >= 1.26 to build Prometheus $PROMETHEUS_VERSION and Jaeger $JAEGER_VERSION."
go_version=$(go env GOVERSION)
[[ $go_version =~ ^go1\.([0-9]+) ]] || die "cannot parse Go version '$go_version'"
((BASH_REMATCH[1] >= 26)) || die "Go $go_version is too old: Prometheus $PROMETHEUS_VERSION needs Go >= 1.26"

mkdir -p "$CACHE/go" "$BIN" "$WRAPPERS"

# One build at a time (parallel test binaries may all ask for the tools).
exec 9>"$CACHE/.observe-tools.lock"
if command -v flock >/dev/null 2>&1 && ! flock -n 9; then
    log "another build of the observability tools is running; waiting for $CACHE/.observe-tools.lock"
    flock 9
fi
needs # re-check: built meanwhile by the lock holder?

# Same Go settings as hack/toolchain.sh: self-contained caches, no toolchain
# download, no workspace, static binaries for this host.
export GOPATH=$CACHE/go GOMODCACHE=$CACHE/go/mod GOCACHE=$CACHE/go/build
export GOTOOLCHAIN=local GOWORK=off GOFLAGS=-buildvcs=false CGO_ENABLED=0
unset GOOS GOARCH

gomod_file() {
    go mod download -json "$1" | python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])' ||
        die "cannot download $1 from the Go module proxy"
}

# write_wrapper DIR MODULE VERSION UPSTREAM_GOMOD PKG...: a module that only
# requires MODULE and names PKGs as tools. It carries upstream's `go`/`godebug`
# directives (same language version and GODEBUG defaults) and its replace
# directives that point at another module version (a dependency's replaces are
# ignored by Go, so without them MVS would pick other versions than upstream
# tests with: jaeger v1.76.0 pins github.com/Shopify/sarama that way). Replaces
# to local paths cannot apply outside upstream's repository and are left out.
write_wrapper() {
    local dir=$1 module=$2 version=$3 upstream=$4
    shift 4
    rm -rf "$dir" && mkdir -p "$dir"
    {
        echo "// Generated by hack/observe-tools.sh from $module@$version's go.mod. Do not edit."
        echo "module kube-reloader.local/$(basename "$dir")-wrapper"
        echo
        awk '
            /^go [0-9]/              { print; next }
            /^godebug[ \t]*\(/       { inblock = 1 }
            inblock                  { print; if ($0 ~ /^\)/) inblock = 0; next }
            /^godebug[ \t]/          { print }
        ' "$upstream"
        echo
        echo "require $module $version"
        echo
        python3 - "$upstream" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
block = re.findall(r'^replace\s*\((.*?)^\)', text, re.M | re.S)
lines = [l.strip() for b in block for l in b.splitlines()]
lines += re.findall(r'^replace\s+([^(\s].*)$', text, re.M)
for line in lines:
    m = re.match(r'(\S+(?:\s+v\S+)?)\s+=>\s+(\S+)\s+(v\S+)$', line)
    if m:  # a module-version target, not a ./local path
        print(f"replace {m.group(1)} => {m.group(2)} {m.group(3)}")
PY
        echo
        echo "tool ("
        local p
        for p in "$@"; do echo "	$p"; done
        echo ")"
    } >"$dir/go.mod"
    (cd "$dir" && go mod tidy) || die "go mod tidy failed for the wrapper $dir/go.mod"
}

# build NAME... -- GO BUILD ARGS: into a temp dir, then into $BIN only once
# every binary linked, so an interrupted build never leaves a half binary.
build() {
    local dir=$1
    shift
    local names=()
    while [[ $1 != -- ]]; do names+=("$1"); shift; done
    shift
    local tmp name
    tmp=$(mktemp -d "$BIN/.build.XXXXXX")
    (cd "$dir" && go build -trimpath -o "$tmp/" "$@") || die "building ${names[*]} failed (wrapper: $dir/go.mod)"
    for name in "${names[@]}"; do
        [[ -x $tmp/$name ]] || die "go build did not produce $name"
        mv -f "$tmp/$name" "$BIN/$name"
    done
    rm -rf "$tmp"
}

# module_commit MODULE VERSION: the commit the proxy recorded for that version.
module_commit() {
    python3 -c '
import json, sys
print((json.load(open(sys.argv[1])).get("Origin") or {}).get("Hash", ""))' \
        "$GOMODCACHE/cache/download/$1/@v/$2.info" 2>/dev/null || true
}

SECONDS=0

# --- prometheus, promtool ----------------------------------------------------
# Tags as upstream's .promu.yml minus `builtinassets` (the UI assets are built
# by npm and are not in the module). Version stamping as promu does, so
# /api/v1/status/buildinfo and `promtool --version` say 3.x, not "".
if ((need_prom)); then
    start=$SECONDS
    log "building prometheus, promtool $PROMETHEUS_VERSION"
    w=$WRAPPERS/prometheus-$PROMETHEUS_VERSION
    mod=github.com/prometheus/prometheus
    write_wrapper "$w" "$mod" "$PROMETHEUS_VERSION" "$(gomod_file "$mod@$PROMETHEUS_VERSION")" \
        "$mod/cmd/prometheus" "$mod/cmd/promtool"
    release=$(cat "$GOMODCACHE/$mod@$PROMETHEUS_VERSION/VERSION" 2>/dev/null || echo "$PROMETHEUS_VERSION")
    v=github.com/prometheus/common/version
    ldflags="-s -w -X $v.Version=$release -X $v.Revision=$(module_commit "$mod" "$PROMETHEUS_VERSION")"
    ldflags+=" -X $v.Branch=HEAD -X $v.BuildUser=kube-reloader -X $v.BuildDate=$(date -u +%Y%m%d-%H:%M:%S)"
    build "$w" prometheus promtool -- -tags netgo -ldflags "$ldflags" "$mod/cmd/prometheus" "$mod/cmd/promtool"
    write_stamp prometheus "$PROMETHEUS_VERSION"
    write_stamp promtool "$PROMETHEUS_VERSION"
    log "prometheus, promtool $PROMETHEUS_VERSION built in $((SECONDS - start))s"
fi

# --- jaeger (all-in-one) -------------------------------------------------------
if ((need_jaeger)); then
    start=$SECONDS
    log "building jaeger $JAEGER_VERSION (cmd/jaeger, all-in-one)"
    w=$WRAPPERS/jaeger-$JAEGER_VERSION
    mod=github.com/jaegertracing/jaeger
    write_wrapper "$w" "$mod" "$JAEGER_VERSION" "$(gomod_file "$mod@$JAEGER_VERSION")" "$mod/cmd/jaeger"
    v=$mod/internal/version
    ldflags="-s -w -X $v.latestVersion=$JAEGER_VERSION -X $v.commitSHA=$(module_commit "$mod" "$JAEGER_VERSION")"
    build "$w" jaeger -- -ldflags "$ldflags" "$mod/cmd/jaeger"
    write_stamp jaeger "$JAEGER_VERSION"
    log "jaeger $JAEGER_VERSION built in $((SECONDS - start))s"
fi

log "observability tools ready in $BIN (took ${SECONDS}s)"
echo "$BIN"
