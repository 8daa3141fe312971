# shellcheck shell=bash
# What hack/toolchain.sh, hack/helm.sh and hack/observe-tools.sh share: building pinned Go
# binaries once into a cache outside the checkout, with a stamp per binary holding the version it
# was built from. Sourced, after the script set GO_BUILD_NAME (its log prefix and lock name):
#
#   GO_BUILD_NAME=helm
#   . "$(dirname "${BASH_SOURCE[0]}")/lib/go-build.sh"   # sets CACHE, WRAPPERS, log, die
#   BIN=$CACHE/helm-$HELM_VERSION/bin
#   up_to_date() { stamp_ok helm "$HELM_VERSION"; }      # may also set the script's need_* flags
#   go_build_prepare "helm $HELM_VERSION" "$@"           # exits unless something must be built
#
# The warm path (every stamp current) reads a few files and never runs Go, so the scripts can be
# called before every test run.

CACHE=${KUBE_RELOADER_CACHE:-$HOME/.cache/kube-reloader}
WRAPPERS=$CACHE/wrappers
# The oldest Go 1.x minor the pinned versions build with.
GO_MIN_MINOR=26

log() { printf '[%s] %s\n' "$GO_BUILD_NAME" "$*" >&2; }
die() {
    printf '[%s] ERROR: %s\n' "$GO_BUILD_NAME" "$*" >&2
    exit 1
}

# stamp_ok NAME VERSION: $BIN/NAME exists and was built from VERSION.
stamp_ok() {
    [[ -x $BIN/$1 && -f $BIN/.stamps/$1 && "$(cat "$BIN/.stamps/$1")" == "$2" ]]
}
write_stamp() { mkdir -p "$BIN/.stamps"; echo "$2" >"$BIN/.stamps/$1"; }

# go_build_prepare WHAT [ARGS...]: `--bin-dir` only prints $BIN; with everything up to date
# (the script's up_to_date), says so, prints $BIN and exits. Otherwise checks Go, waits for
# any other build of the same script, and sets up Go's environment; it still exits if that
# other build left nothing to do.
go_build_prepare() {
    local what=$1
    shift
    if [[ ${1:-} == --bin-dir ]]; then
        echo "$BIN"
        exit 0
    fi
    if up_to_date; then
        log "up to date: $what in $BIN"
        echo "$BIN"
        exit 0
    fi
    require_go "$what"
    mkdir -p "$CACHE/go" "$BIN" "$WRAPPERS"
    wait_for_other_builds
    if up_to_date; then
        log "built meanwhile by another process: $what in $BIN"
        echo "$BIN"
        exit 0
    fi
    go_env
}

require_go() {
    command -v go >/dev/null 2>&1 ||
        die "Go is not installed (or not on PATH). Install Go >= 1.$GO_MIN_MINOR to build $1."
    local version
    version=$(go env GOVERSION) # e.g. go1.26.8
    [[ $version =~ ^go1\.([0-9]+) ]] || die "cannot parse Go version '$version'"
    ((BASH_REMATCH[1] >= GO_MIN_MINOR)) || die "Go $version is too old: $1 needs Go >= 1.$GO_MIN_MINOR"
}

# One build at a time per script: parallel test binaries may all ask for the same tools. The
# lock is held on fd 9 until the script exits.
wait_for_other_builds() {
    local lock=$CACHE/.$GO_BUILD_NAME.lock
    exec 9>"$lock"
    if command -v flock >/dev/null 2>&1 && ! flock -n 9; then
        log "another $GO_BUILD_NAME build is running; waiting for $lock"
        flock 9
    fi
}

# One self-contained cache directory. GOTOOLCHAIN=local: never download another Go toolchain
# (the wrappers' go.mod files name a version we meet). GOWORK=off and a clean GOFLAGS: ignore the
# caller's workspace and flags. CGO_ENABLED=0: static binaries, no C toolchain needed.
go_env() {
    export GOPATH=$CACHE/go GOMODCACHE=$CACHE/go/mod GOCACHE=$CACHE/go/build
    export GOTOOLCHAIN=local GOWORK=off GOFLAGS=-buildvcs=false CGO_ENABLED=0
    unset GOOS GOARCH # build for this host, whatever the caller cross-compiles for
}

# gomod_file MODULE@VERSION: path of that module's go.mod in the module cache (downloads the
# module; its zip is needed for the build anyway).
gomod_file() {
    go mod download -json "$1" | python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])' ||
        die "cannot download $1 from the Go module proxy"
}

# go_directives GOMOD: the `go` line and the `godebug` line(s)/block of a go.mod, so a wrapper
# builds with the language version and the GODEBUG defaults upstream ships with.
go_directives() {
    awk '
        /^go [0-9]/              { print; next }
        /^godebug[ \t]*\(/       { inblock = 1 }
        inblock                  { print; if ($0 ~ /^\)/) inblock = 0; next }
        /^godebug[ \t]/          { print }
    ' "$1"
}

# module_commit MODULE VERSION: the commit the module proxy recorded for that version ("" if
# none), for the binaries' version stamping.
module_commit() {
    python3 -c '
import json, sys
print((json.load(open(sys.argv[1])).get("Origin") or {}).get("Hash", ""))' \
        "$GOMODCACHE/cache/download/$1/@v/$2.info" 2>/dev/null || true
}

# install_from TMPDIR NAME...: moves binaries `go build -o TMPDIR/` produced into $BIN, only
# once all of them linked, so a failed or interrupted build never leaves a half-written binary
# that looks valid.
install_from() {
    local tmp=$1
    shift
    local name
    for name in "$@"; do
        [[ -x $tmp/$name ]] || die "go build did not produce $name"
        mv -f "$tmp/$name" "$BIN/$name"
    done
    rm -rf "$tmp"
}
