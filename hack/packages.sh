#!/usr/bin/env bash
# Installs the Debian packages the tests use, when missing (CI runs as root on a fresh machine;
# elsewhere it prints what to install). Each entry: a file the package provides, then the package.
set -euo pipefail
NEEDED=(
    "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1 faketime" # clock-skew test (tests/sharding.rs)
    "/usr/bin/podman podman" # make image-local / image-test (hack/podman.sh)
    "/usr/sbin/runc runc"    # the OCI runtime hack/podman/containers.conf names
    "/usr/sbin/debootstrap debootstrap"                # the kind node image's root (hack/kind-node.sh)
    "/usr/lib/cni/bridge containernetworking-plugins" # podman's kind network (hack/kind-cluster.sh)
    "/usr/lib/x86_64-linux-gnu/libc.a libc6-dev"      # pause, linked statically (hack/kind-node-bins.sh)
    "/usr/bin/gcc gcc"
    "/usr/bin/flock util-linux"
    "/usr/sbin/ip iproute2"
)
missing=()
for entry in "${NEEDED[@]}"; do
    read -r file package <<<"$entry"
    [[ -e $file ]] || missing+=("$package")
done
((${#missing[@]})) || exit 0
if [[ $(id -u) -ne 0 ]]; then
    echo "[packages] missing Debian packages: ${missing[*]} (run: sudo apt-get install ${missing[*]})" >&2
    exit 1
fi
echo "[packages] installing ${missing[*]}" >&2
apt-get update -qq >&2
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
