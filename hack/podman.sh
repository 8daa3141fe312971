#!/usr/bin/env bash
# podman with this repository's settings, for machines without a Docker engine (CI, dev boxes in
# containers): `hack/podman.sh ARGS...` runs `podman ARGS...` with
#   CONTAINERS_CONF=hack/podman/containers.conf  host network, cgroupfs, runc, ulimits that fit
#                                                without CAP_SYS_RESOURCE (see that file)
#   CONTAINERS_STORAGE_CONF=$CACHE/podman/storage.conf  images and containers under the cache
#                                                (CACHE=${KUBE_RELOADER_CACHE:-~/.cache/kube-reloader}),
#                                                never in the checkout
# PODMAN_STORAGE_DRIVER=vfs if the kernel or the file system refuses overlay (then
# `rm -rf $CACHE/podman` first: one storage holds one driver).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE=${KUBE_RELOADER_CACHE:-$HOME/.cache/kube-reloader}

missing=()
for tool in podman runc; do
    command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
if ((${#missing[@]})); then
    printf '[podman] ERROR: %s not installed: the image is built and run with podman + runc.\n' \
        "${missing[*]}" >&2
    printf '[podman] On Debian/Ubuntu: apt-get install -y podman runc (.ci/run does it in CI).\n' >&2
    exit 127
fi

store=$CACHE/podman
mkdir -p "$store"
conf=$store/storage.conf
want="[storage]
driver = \"${PODMAN_STORAGE_DRIVER:-overlay}\"
graphroot = \"$store/storage\"
runroot = \"$store/run\""
[[ -f $conf && "$(cat "$conf")" == "$want" ]] || printf '%s\n' "$want" >"$conf"
export CONTAINERS_CONF=$ROOT/hack/podman/containers.conf CONTAINERS_STORAGE_CONF=$conf
exec podman "$@"
