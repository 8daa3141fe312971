#!/usr/bin/env bash
# Builds the tiny app of `make kind-test` (tests/kind/app: a Go program, standard library only)
# as a static binary (CGO_ENABLED=0) and a FROM scratch image in hack/podman.sh's storage:
#
#   localhost/kube-reloader/kind-app:<hash of the source>   (printed as the last line)
#
# Rebuilt only when the source changes (the tag is its hash).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
GO_BUILD_NAME=kind-app
# shellcheck source=hack/lib/go-build.sh
. "$ROOT/hack/lib/go-build.sh"
SRC=$ROOT/tests/kind/app
key=$(cat "$SRC/go.mod" "$SRC/main.go" | sha256sum | cut -c1-12)
IMAGE=localhost/kube-reloader/kind-app:$key
if "$ROOT/hack/podman.sh" image exists "$IMAGE"; then
    echo "$IMAGE"
    exit 0
fi
require_go "the kind test app"
go_env
ctx=$(mktemp -d "$CACHE/kind-app.XXXXXX")
trap 'rm -rf "$ctx"' EXIT
mkdir -p "$ctx/root/tmp" "$ctx/root/etc"
(cd "$SRC" && nice -n 19 go build -trimpath -ldflags "-s -w" -o "$ctx/root/kind-app" .) ||
    die "go build of $SRC failed"
printf 'nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n' >"$ctx/root/etc/passwd"
touch "$ctx/root/etc/hosts" "$ctx/root/etc/hostname" "$ctx/root/etc/resolv.conf"
cat >"$ctx/Containerfile" <<'CF'
FROM scratch
COPY root/ /
USER 65534:65534
EXPOSE 8080
ENTRYPOINT ["/kind-app"]
CMD ["serve"]
CF
nice -n 19 "$ROOT/hack/podman.sh" build --quiet -t "$IMAGE" -f "$ctx/Containerfile" "$ctx" >/dev/null ||
    die "podman build of $IMAGE failed"
log "built $IMAGE"
echo "$IMAGE"
