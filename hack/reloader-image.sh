#!/usr/bin/env bash
# Builds stakater/Reloader's image locally, for side-by-side runs on kind (`make kind-test`): its
# binary from hack/reloader-binary.sh (which says where the source comes from), packaged FROM
# scratch (its Dockerfile uses distroless/static, not reachable here: the binary is static, the
# image adds only a CA bundle and the user 65532).
#
#   localhost/stakater/reloader:REF   (printed as the last line; built once per REF)
#
# Usage: hack/reloader-image.sh [REF]   (default v1.4.21; RELOADER_SRC, OPENSHIFT_API_SRC as for
# hack/reloader-binary.sh)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
GO_BUILD_NAME=reloader-image
# shellcheck source=hack/lib/go-build.sh
. "$ROOT/hack/lib/go-build.sh"
REF=${1:-v1.4.21}
IMAGE=localhost/stakater/reloader:$REF
if "$ROOT/hack/podman.sh" image exists "$IMAGE"; then
    echo "$IMAGE"
    exit 0
fi
manager=$("$ROOT/hack/reloader-binary.sh" "$REF" | tail -n1) || die "stakater/Reloader $REF was not built"
ctx=$(mktemp -d "$CACHE/reloader/image.XXXXXX")
trap 'rm -rf "$ctx"' EXIT
mkdir -p "$ctx/root/etc/ssl/certs" "$ctx/root/tmp"
cp "$manager" "$ctx/root/manager"
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
