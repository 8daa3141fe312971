#!/usr/bin/env bash
# Builds stakater/Reloader's image locally, for side-by-side runs on kind (`make kind-test`), from
# a Reloader git repository the user supplies: nothing of Reloader is kept in this repository.
# The source at REF is exported (git archive) to $CACHE/reloader/src-REF, built there as its own
# Dockerfile builds it (CGO_ENABLED=0 go build -mod=mod, the same -X version flags) with Go's
# module cache under $CACHE/go, and packaged FROM scratch (its Dockerfile uses distroless/static,
# not reachable here: the binary is static, the image adds only a CA bundle and the user 65532).
#
#   localhost/stakater/reloader:REF   (printed as the last line; built once per REF)
#
# Usage: hack/reloader-image.sh [REF]   (default v1.4.21)
#   RELOADER_SRC  a clone of github.com/stakater/Reloader (default /work/.mirror/stakater+Reloader/repo)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
GO_BUILD_NAME=reloader-image
# shellcheck source=hack/lib/go-build.sh
. "$ROOT/hack/lib/go-build.sh"
REF=${1:-v1.4.21}
RELOADER_SRC=${RELOADER_SRC:-/work/.mirror/stakater+Reloader/repo}
IMAGE=localhost/stakater/reloader:$REF
if "$ROOT/hack/podman.sh" image exists "$IMAGE"; then
    echo "$IMAGE"
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
    touch "$src/.complete"
fi
ctx=$(mktemp -d "$CACHE/reloader/image.XXXXXX")
trap 'rm -rf "$ctx"' EXIT
mkdir -p "$ctx/root/etc/ssl/certs" "$ctx/root/tmp"
log "building stakater/Reloader $REF ($commit) in $src"
pkg=github.com/stakater/Reloader/pkg/common
(cd "$src" && GOFLAGS="$GOFLAGS -p=1" nice -n 19 go build -mod=mod -trimpath \
    -ldflags "-s -w -X $pkg.Version=${REF#v} -X $pkg.Commit=$commit -X $pkg.BuildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ) -X $pkg.Edition=oss" \
    -o "$ctx/root/manager" ./) || die "go build of stakater/Reloader $REF failed"
cp /etc/ssl/certs/ca-certificates.crt "$ctx/root/etc/ssl/certs/"
printf 'nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"$ctx/root/etc/passwd"
touch "$ctx/root/etc/hosts" "$ctx/root/etc/hostname" "$ctx/root/etc/resolv.conf"
cat >"$ctx/Containerfile" <<'CF'
FROM scratch
COPY root/ /
USER 65532:65532
EXPOSE 9090
ENTRYPOINT ["/manager"]
CF
nice -n 19 "$ROOT/hack/podman.sh" build --quiet -t "$IMAGE" -f "$ctx/Containerfile" "$ctx" >/dev/null ||
    die "podman build of $IMAGE failed"
log "built $IMAGE"
echo "$IMAGE"
