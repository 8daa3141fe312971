#!/usr/bin/env bash
# Builds stakater/Reloader's binary from a Reloader git repository the user supplies, for the
# side-by-side runs (`make shadow-test`, and hack/reloader-image.sh for `make kind-test`): nothing
# of Reloader is kept in this repository. The source at REF is exported (git archive) to
# $CACHE/reloader/src-REF and built there as its own Dockerfile builds it (CGO_ENABLED=0 go build
# -mod=mod, the same -X version flags), with Go's module cache under $CACHE/go, once per REF:
#
#   $CACHE/reloader/bin-REF/manager   (printed as the last line)
#
# Usage: hack/reloader-binary.sh [REF]   (default v1.4.21)
#   RELOADER_SRC       a clone of github.com/stakater/Reloader (default /work/.mirror/stakater+Reloader/repo)
#   OPENSHIFT_API_SRC  a clone of github.com/openshift/api (default /work/.mirror/openshift+api/repo),
#                      used only when the module proxy does not serve the github.com/openshift/api
#                      pseudo-version Reloader's go.mod requires (v1.4.21's is not served: 403): that
#                      commit is exported next to the source and its go.mod gets a replace line.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
GO_BUILD_NAME=reloader-binary
# shellcheck source=hack/lib/go-build.sh
. "$ROOT/hack/lib/go-build.sh"
REF=${1:-v1.4.21}
RELOADER_SRC=${RELOADER_SRC:-/work/.mirror/stakater+Reloader/repo}
BIN=$CACHE/reloader/bin-$REF
if [[ -x $BIN/manager && -f $BIN/.complete ]]; then
    echo "$BIN/manager"
    exit 0
fi
git -C "$RELOADER_SRC" rev-parse --verify --quiet "$REF^{commit}" >/dev/null ||
    die "no ref $REF in $RELOADER_SRC (set RELOADER_SRC to a clone of github.com/stakater/Reloader)"
require_go "stakater/Reloader $REF"
go_env
commit=$(git -C "$RELOADER_SRC" rev-parse "$REF^{commit}")
mkdir -p "$CACHE/reloader"
src=$CACHE/reloader/src-$REF
if [[ ! -f $src/.complete ]]; then
    rm -rf "$src" && mkdir -p "$src"
    git -C "$RELOADER_SRC" archive "$commit" | tar -x -C "$src"
    # A pseudo-version the proxy does not serve: the same commit from a clone, by a replace line
    # in the exported copy's go.mod (never in the Reloader clone, never in this repository).
    api=$(cd "$src" && go mod edit -json | python3 -c '
import json, sys
print(next((r["Version"] for r in json.load(sys.stdin).get("Require") or [] if r["Path"] == "github.com/openshift/api"), ""))')
    if [[ -n $api ]] && ! (cd "$src" && go mod download github.com/openshift/api >/dev/null 2>&1); then
        api_commit=${api##*-}
        OPENSHIFT_API_SRC=${OPENSHIFT_API_SRC:-/work/.mirror/openshift+api/repo}
        git -C "$OPENSHIFT_API_SRC" rev-parse --verify --quiet "$api_commit^{commit}" >/dev/null ||
            die "the module proxy does not serve github.com/openshift/api@$api and $OPENSHIFT_API_SRC has no commit $api_commit (set OPENSHIFT_API_SRC to a clone of github.com/openshift/api)"
        log "github.com/openshift/api@$api is not on the module proxy: using commit $api_commit from $OPENSHIFT_API_SRC"
        mkdir -p "$CACHE/reloader/openshift-api-$api_commit"
        # A partial clone may lack some large blobs (generated OpenAPI code Reloader does not
        # import): those files are left out, and named; the build fails if one was needed.
        mapfile -t absent < <(git -C "$OPENSHIFT_API_SRC" ls-tree -r "$api_commit" |
            awk '$2 == "blob" { print $3 "\t" $4 }' |
            while IFS=$'\t' read -r blob path; do
                git -C "$OPENSHIFT_API_SRC" cat-file -e "$blob" 2>/dev/null || echo ":(exclude)$path"
            done)
        ((${#absent[@]} == 0)) || log "not in $OPENSHIFT_API_SRC, left out: ${absent[*]}"
        git -C "$OPENSHIFT_API_SRC" archive "$api_commit" -- . "${absent[@]}" |
            tar -x -C "$CACHE/reloader/openshift-api-$api_commit"
        (cd "$src" && go mod edit -replace "github.com/openshift/api=$CACHE/reloader/openshift-api-$api_commit")
    fi
    touch "$src/.complete"
fi
log "building stakater/Reloader $REF ($commit) in $src"
mkdir -p "$BIN"
pkg=github.com/stakater/Reloader/pkg/common
(cd "$src" && GOFLAGS="$GOFLAGS -p=1" nice -n 19 go build -mod=mod -trimpath \
    -ldflags "-s -w -X $pkg.Version=${REF#v} -X $pkg.Commit=$commit -X $pkg.BuildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ) -X $pkg.Edition=oss" \
    -o "$BIN/manager" ./) || die "go build of stakater/Reloader $REF failed"
touch "$BIN/.complete"
log "built $BIN/manager"
echo "$BIN/manager"
