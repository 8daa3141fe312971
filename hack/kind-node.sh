#!/usr/bin/env bash
# Builds, without any container registry, a kind node image for the Kubernetes version
# hack/toolchain.sh pins, into the podman storage of hack/podman.sh (`make kind-node-image`):
#
#   localhost/kube-reloader/kind-node:<k8s version>-<input hash>   (printed as the last line)
#
# Parts, and where each comes from (nothing is downloaded but Debian packages and Go modules):
#   - root file system: debootstrap (Debian $DEBIAN_SUITE, minbase) with systemd, runc, the CNI
#     plugins, iptables/nftables, conntrack ... (NODE_PACKAGES below), from Debian's mirror;
#   - kind's node layout: the files of kind's images/base (entrypoint, containerd config, kubelet
#     and containerd units, /kind/bin scripts) read from the sigs.k8s.io/kind module;
#   - binaries: hack/kind-node-bins.sh (kubelet, kubeadm, kubectl, containerd, ctr, crictl, ...)
#     and etcd from hack/toolchain.sh;
#   - the images kubeadm starts (kube-apiserver, kube-controller-manager, kube-scheduler,
#     kube-proxy, etcd, coredns, pause): built here from those binaries (FROM scratch; kube-proxy
#     on the Debian root, for iptables) and imported into the node's containerd content store at
#     build time (`ctr images import --no-unpack`, as kind's own `build node-image` does).
#
# How it differs from a kindest/node image (see loadtest/kind/README.md): Debian bookworm's
# systemd, runc 1.1 and CNI plugins 1.1 instead of kind's own builds; no kindnetd (its Go module
# is not on the module proxy; hack/kind-cluster.sh configures a bridge CNI instead); no
# local-path-provisioner (kind falls back to a StorageClass without a provisioner); etcd and
# coredns are the versions pinned here, not kubeadm's defaults, so a cluster config must name them
# (kubeadmConfigPatches: etcd.local.imageTag, dns.imageTag; hack/kind-cluster.sh writes them).
#
# Cached under $CACHE/kind-node (CACHE=${KUBE_RELOADER_CACHE:-~/.cache/kube-reloader}): the root
# file system by suite and package list, each component image by its binary's stamp, the node image
# by a hash of everything that goes into it. Nothing is rebuilt when nothing changed.
#
# Usage: hack/kind-node.sh             build what is missing, print the image name (last line)
#        hack/kind-node.sh --image     only print the name the image has (or would have)
#        hack/kind-node.sh --rootfs    only build the Debian root file system (network: Debian's mirror)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
HACK=$ROOT/hack
CACHE=${KUBE_RELOADER_CACHE:-$HOME/.cache/kube-reloader}
NODE_DIR=$CACHE/kind-node
PODMAN=("$HACK/podman.sh")

DEBIAN_SUITE=bookworm
DEBIAN_MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
# What kind's images/base installs, from Debian instead of source: runc and the CNI plugins too.
NODE_PACKAGES=(systemd systemd-sysv dbus conntrack iptables nftables iproute2 ethtool util-linux
    mount kmod libseccomp2 pigz e2fsprogs bash ca-certificates curl jq procps socat runc
    containernetworking-plugins)
KIND_VERSION=$(sed -n 's/^KIND_VERSION=//p' "$HACK/kind-node-bins.sh")
K8S_VERSION=$(sed -n 's/^K8S_VERSION=//p' "$HACK/toolchain.sh")
ETCD_VERSION=$(sed -n 's/^ETCD_VERSION=//p' "$HACK/toolchain.sh")
COREDNS_VERSION=$(sed -n 's/^COREDNS_VERSION=//p' "$HACK/kind-node-bins.sh")
REPO=localhost/kube-reloader

log() { printf '[kind-node] %s\n' "$*" >&2; }
die() {
    printf '[kind-node] ERROR: %s\n' "$*" >&2
    exit 1
}

sha() { sha256sum | cut -c1-12; }

# --- the Debian root file system ---------------------------------------------------
ROOTFS_KEY=$(printf '%s\n' "$DEBIAN_SUITE" "$DEBIAN_MIRROR" "${NODE_PACKAGES[@]}" | sha)
ROOTFS_TAR=$NODE_DIR/rootfs/debian-$DEBIAN_SUITE-$ROOTFS_KEY.tar
BASE_IMAGE=$REPO/kind-debian:$DEBIAN_SUITE-$ROOTFS_KEY

build_rootfs() {
    [[ -f $ROOTFS_TAR ]] && return 0
    command -v debootstrap >/dev/null 2>&1 ||
        die "debootstrap not found (apt-get install debootstrap; hack/packages.sh installs it)"
    (($(id -u) == 0)) || die "debootstrap needs root (it creates device nodes and chowns files)"
    mkdir -p "$NODE_DIR/rootfs"
    local dir
    dir=$(mktemp -d "$NODE_DIR/rootfs/.debootstrap.XXXXXX")
    log "debootstrap --variant=minbase $DEBIAN_SUITE from $DEBIAN_MIRROR with ${NODE_PACKAGES[*]}"
    local start=$SECONDS
    if ! nice -n 19 debootstrap --variant=minbase --include="$(
        IFS=,
        echo "${NODE_PACKAGES[*]}"
    )" "$DEBIAN_SUITE" "$dir/root" "$DEBIAN_MIRROR" >"$dir/debootstrap.log" 2>&1; then
        tail -n 20 "$dir/debootstrap.log" >&2
        die "debootstrap $DEBIAN_SUITE from $DEBIAN_MIRROR failed (log: $dir/debootstrap.log)"
    fi
    # What the image was built from, next to it: the exact Debian package versions.
    chroot "$dir/root" dpkg-query -W -f '${Package} ${Version}\n' >"${ROOTFS_TAR%.tar}.packages"
    rm -rf "$dir/root/var/cache/apt/archives/"*.deb "$dir/root/var/lib/apt/lists/"*
    tar --numeric-owner --xattrs -C "$dir/root" -cf "$ROOTFS_TAR.tmp" .
    mv -f "$ROOTFS_TAR.tmp" "$ROOTFS_TAR"
    rm -rf "$dir"
    log "root file system in $ROOTFS_TAR ($((SECONDS - start))s)"
}

image_exists() { "${PODMAN[@]}" image exists "$1"; }

base_image() {
    image_exists "$BASE_IMAGE" && return 0
    build_rootfs
    log "podman import $ROOTFS_TAR as $BASE_IMAGE"
    "${PODMAN[@]}" import --quiet "$ROOTFS_TAR" "$BASE_IMAGE" >/dev/null ||
        die "podman import $ROOTFS_TAR failed"
}

# --- component images ----------------------------------------------------------------
# component_image NAME:TAG BINARY [FROM]: BINARY as /usr/local/bin/<its name> (and /<name> for
# coredns and pause, whose images have it at the root) in FROM (default scratch). The tag is the
# component's version; the image is rebuilt when the binary's stamp (its version) changes, which
# the label records.
component_image() {
    local image=$1 bin=$2 from=${3:-scratch} name stamp ctx
    name=$(basename "$bin")
    stamp="$(cat "$(dirname "$bin")/.stamps/$name")|$from"
    if image_exists "$image" &&
        [[ $("${PODMAN[@]}" image inspect --format '{{index .Labels "kube-reloader.kind-node.input"}}' "$image") == "$stamp" ]]; then
        return 0
    fi
    log "building $image from $bin (FROM $from)"
    ctx=$(mktemp -d "$NODE_DIR/.image.XXXXXX")
    mkdir -p "$ctx/root/usr/local/bin" "$ctx/root/tmp" "$ctx/root/etc"
    chmod 1777 "$ctx/root/tmp"
    install -m 0755 "$bin" "$ctx/root/usr/local/bin/$name"
    local entry="/usr/local/bin/$name"
    case $name in
    coredns | pause)
        install -m 0755 "$bin" "$ctx/root/$name"
        entry=/$name
        ;;
    esac
    if [[ $from == scratch ]]; then
        printf 'root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n' >"$ctx/root/etc/passwd"
        printf 'root:x:0:\nnogroup:x:65534:\n' >"$ctx/root/etc/group"
        touch "$ctx/root/etc/hosts" "$ctx/root/etc/hostname" "$ctx/root/etc/resolv.conf"
        cp /etc/ssl/certs/ca-certificates.crt "$ctx/root/etc/ca-certificates.crt" 2>/dev/null || true
    else
        rm -rf "$ctx/root/etc" "$ctx/root/tmp"
    fi
    cat >"$ctx/Containerfile" <<EOF
FROM $from
COPY root/ /
ENV PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin
LABEL kube-reloader.kind-node.input="$stamp"
ENTRYPOINT ["$entry"]
EOF
    nice -n 19 "${PODMAN[@]}" build --quiet -t "$image" -f "$ctx/Containerfile" "$ctx" >/dev/null ||
        die "podman build of $image failed"
    rm -rf "$ctx"
}

# --- main ------------------------------------------------------------------------------
want_image_only=0
[[ ${1:-} == --image ]] && want_image_only=1

K8S_BIN=$(bash "$HACK/toolchain.sh" --bin-dir)
NODE_BIN=$(bash "$HACK/kind-node-bins.sh" --bin-dir)
KIND_SRC=$CACHE/go/mod/sigs.k8s.io/kind@$KIND_VERSION
# kubeadm's own constants name the pause version the sandbox image must have.
PAUSE_VERSION=$(sed -n 's/^[[:space:]]*PauseVersion = "\(.*\)"/\1/p' \
    "$CACHE/go/mod/k8s.io/kubernetes@$K8S_VERSION/cmd/kubeadm/app/constants/constants.go" 2>/dev/null | head -n1)

# The node image's name: everything that goes into it, hashed (the stamps hold the versions).
node_key() {
    {
        echo "$ROOTFS_KEY $KIND_VERSION $PAUSE_VERSION"
        cat "$NODE_BIN/.stamps/"* "$K8S_BIN/.stamps/etcd" 2>/dev/null
        cat "${BASH_SOURCE[0]}" # the layout below is an input too
    } | sha
}

if [[ ${1:-} == --rootfs ]]; then
    build_rootfs
    echo "$ROOTFS_TAR"
    exit 0
fi
if ((want_image_only)); then
    echo "$REPO/kind-node:$K8S_VERSION-$(node_key)"
    exit 0
fi

SECONDS=0
mkdir -p "$NODE_DIR"
exec 8>"$NODE_DIR/.build.lock"
flock 8

bash "$HACK/toolchain.sh" >/dev/null || die "hack/toolchain.sh failed (etcd comes from there)"
bash "$HACK/kind-node-bins.sh" >/dev/null || die "hack/kind-node-bins.sh failed"
[[ -d $KIND_SRC/images/base/files ]] || die "kind's node files not found in $KIND_SRC/images/base/files (hack/kind-node-bins.sh downloads sigs.k8s.io/kind@$KIND_VERSION)"
[[ -n $PAUSE_VERSION ]] || die "cannot read PauseVersion from kubeadm's constants.go in the module cache"
for b in kubelet kubeadm kubectl kube-proxy kube-scheduler kube-apiserver kube-controller-manager containerd containerd-shim-runc-v2 ctr crictl coredns pause; do
    [[ -x $NODE_BIN/$b ]] || die "$NODE_BIN/$b is missing after hack/kind-node-bins.sh"
done
[[ -x $K8S_BIN/etcd ]] || die "$K8S_BIN/etcd is missing after hack/toolchain.sh"

NODE_IMAGE=$REPO/kind-node:$K8S_VERSION-$(node_key)
if image_exists "$NODE_IMAGE"; then
    log "up to date: $NODE_IMAGE"
    echo "$NODE_IMAGE"
    exit 0
fi

base_image

# name:tag as kubeadm (with the cluster config's imageTag patches) and containerd look them up.
declare -A IMAGES=(
    ["registry.k8s.io/kube-apiserver:$K8S_VERSION"]=$NODE_BIN/kube-apiserver
    ["registry.k8s.io/kube-controller-manager:$K8S_VERSION"]=$NODE_BIN/kube-controller-manager
    ["registry.k8s.io/kube-scheduler:$K8S_VERSION"]=$NODE_BIN/kube-scheduler
    ["registry.k8s.io/kube-proxy:$K8S_VERSION"]=$NODE_BIN/kube-proxy
    ["registry.k8s.io/etcd:$ETCD_VERSION"]=$K8S_BIN/etcd
    ["registry.k8s.io/coredns/coredns:$COREDNS_VERSION"]=$NODE_BIN/coredns
    ["registry.k8s.io/pause:$PAUSE_VERSION"]=$NODE_BIN/pause
)
for image in "${!IMAGES[@]}"; do
    from=scratch
    # kube-proxy runs iptables/nft binaries: on the Debian root, like upstream's distroless-iptables.
    [[ $image == */kube-proxy:* ]] && from=$BASE_IMAGE
    component_image "$image" "${IMAGES[$image]}" "$from"
done

log "assembling the node root file system"
work=$(mktemp -d "$NODE_DIR/.node.XXXXXX")
trap 'rm -rf "$work"' EXIT
r=$work/root
mkdir -p "$r"
tar --numeric-owner -xf "$ROOTFS_TAR" -C "$r"

# kind's images/base layout (its Dockerfile's COPY lines and RUN steps).
f=$KIND_SRC/images/base/files
install -m 0755 "$f/usr/local/bin/"* "$r/usr/local/bin/"
mkdir -p "$r/kind/bin" "$r/etc/containerd" "$r/etc/default" "$r/etc/sysctl.d" \
    "$r/etc/systemd/system/kubelet.service.d" "$r/etc/kubernetes/manifests" "$r/opt/cni/bin" "$r/kind/manifests"
install -m 0644 "$f/kind/README.txt" "$r/kind/"
install -m 0755 "$f/kind/bin/"* "$r/kind/bin/"
install -m 0644 "$f/etc/crictl.yaml" "$r/etc/"
install -m 0644 "$f/etc/default/"* "$r/etc/default/"
install -m 0644 "$f/etc/sysctl.d/"* "$r/etc/sysctl.d/"
install -m 0644 "$f/etc/systemd/system/"*.service "$f/etc/systemd/system/"*.slice "$r/etc/systemd/system/"
install -m 0644 "$f/etc/systemd/system/kubelet.service.d/"* "$r/etc/systemd/system/kubelet.service.d/"
# containerd: kind's config, with the sandbox image kubeadm expects, and oom_score_adj kept at or
# above containerd's own: these machines give root no CAP_SYS_RESOURCE, so runc cannot lower it
# (kind sets this for rootless, the same situation).
sed -e "s|sandbox_image = .*|sandbox_image = \"registry.k8s.io/pause:$PAUSE_VERSION\"|" \
    -e 's|restrict_oom_score_adj = false|restrict_oom_score_adj = true|' \
    "$f/etc/containerd/config.toml" >"$r/etc/containerd/config.toml"
grep -q "pause:$PAUSE_VERSION" "$r/etc/containerd/config.toml" || die "could not set sandbox_image in containerd's config"
# Without CAP_SYS_RESOURCE systemd cannot raise limits above the hard ones podman gives (see
# hack/podman/containers.conf) nor lower oom_score_adj: the units' infinity/-999 would fail.
mkdir -p "$r/etc/systemd/system/containerd.service.d" "$r/etc/systemd/system.conf.d"
cat >"$r/etc/systemd/system/containerd.service.d/20-no-sys-resource.conf" <<'EOF'
# kube-reloader: no CAP_SYS_RESOURCE in these node containers (see hack/kind-node.sh).
[Service]
LimitNOFILE=20000
LimitNPROC=32768
OOMScoreAdjust=0
EOF
cat >"$r/etc/systemd/system.conf.d/20-no-sys-resource.conf" <<'EOF'
# kube-reloader: no CAP_SYS_RESOURCE in these node containers (see hack/kind-node.sh).
[Manager]
DefaultLimitNOFILE=20000
DefaultLimitNPROC=32768
EOF

# Binaries (kind's base: /usr/local/bin and /usr/bin for the Kubernetes ones; runc from Debian).
for b in containerd containerd-shim-runc-v2 ctr crictl; do install -m 0755 "$NODE_BIN/$b" "$r/usr/local/bin/"; done
for b in kubelet kubeadm kubectl; do install -m 0755 "$NODE_BIN/$b" "$r/usr/bin/"; done
[[ -x $r/usr/sbin/runc ]] || die "runc missing from the Debian root (package runc)"
# kindnetd's CNI config expects the plugins in /opt/cni/bin, Debian installs them in /usr/lib/cni.
for p in "$r"/usr/lib/cni/*; do ln -sf "/usr/lib/cni/$(basename "$p")" "$r/opt/cni/bin/"; done

# The OCI spec template containerd's runtime uses, as kind's Dockerfile makes it (`ctr oci spec`,
# plus the product-uuid hook, minus rlimits).
"$NODE_BIN/ctr" oci spec | python3 -c '
import json, sys
s = json.load(sys.stdin)
s.setdefault("hooks", {}).setdefault("createContainer", []).append({"path": "/kind/bin/mount-product-files.sh"})
s["process"].pop("rlimits", None)
json.dump(s, sys.stdout, indent=2)' >"$r/etc/containerd/cri-base.json"

# kind's Dockerfile RUN steps: services enabled, those that make no sense in a container removed.
find "$r/lib/systemd/system/sysinit.target.wants/" -name "systemd-tmpfiles-setup.service" -delete
rm -f "$r/lib/systemd/system/multi-user.target.wants/"* "$r/etc/systemd/system/"*.wants/* \
    "$r/lib/systemd/system/local-fs.target.wants/"* "$r/lib/systemd/system/sockets.target.wants/"*udev* \
    "$r/lib/systemd/system/sockets.target.wants/"*initctl* "$r/lib/systemd/system/basic.target.wants/"*
echo "ReadKMsg=no" >>"$r/etc/systemd/journald.conf"
ln -sf /usr/lib/systemd/systemd "$r/sbin/init"
chroot "$r" systemctl enable kubelet.service containerd.service undo-mount-hacks.service >/dev/null 2>&1 ||
    die "systemctl enable in the node root failed"
chroot "$r" systemctl mask systemd-binfmt.service >/dev/null 2>&1 || true

# Kernel settings the kubelet writes when they differ (vm.overcommit_memory, kernel.panic, ...):
# /proc/sys is the host's in a privileged container, and this project never changes the host's
# sysctls. The entrypoint wrapper shows the kubelet the values it wants (bind-mounted files, in
# the node's own mount namespace) so it has nothing to write; the host's values stay as they are.
cat >"$r/usr/local/bin/kube-reloader-entrypoint" <<'EOF'
#!/bin/bash
# kube-reloader (hack/kind-node.sh): runs before kind's entrypoint.
set -euo pipefail
mkdir -p /kind/sysctl
for kv in vm/overcommit_memory=1 vm/panic_on_oom=0 kernel/panic=10 kernel/panic_on_oops=1 \
    kernel/keys/root_maxkeys=1000000 kernel/keys/root_maxbytes=25000000; do
    key=${kv%%=*} want=${kv#*=}
    [[ -e /proc/sys/$key ]] || continue
    if [[ $(cat "/proc/sys/$key") != "$want" ]]; then
        f=/kind/sysctl/${key//\//.}
        echo "$want" >"$f"
        mount --bind "$f" "/proc/sys/$key"
        mount -o remount,bind,ro "/proc/sys/$key"
        echo "kube-reloader: /proc/sys/$key shown as $want to this node (host value unchanged)"
    fi
done
exec /usr/local/bin/entrypoint "$@"
EOF
chmod 0755 "$r/usr/local/bin/kube-reloader-entrypoint"

# What kind reads from a node image.
echo "$K8S_VERSION" >"$r/kind/version"
# No default-cni.yaml: hack/kind-cluster.sh sets disableDefaultCNI and configures the bridge
# plugin on each node (kindnetd cannot be built here). No default-storage.yaml: kind then applies
# its built-in StorageClass.
rmdir "$r/kind/manifests"

# The component images, imported into the node's containerd content store now, so that kubeadm
# and the kubelet find them at boot without a registry (kind's build does the same, in a node
# container). containerd runs here only for the import: its own socket and state under $work,
# the CRI plugin disabled, so it starts nothing and touches nothing outside those directories.
log "importing ${#IMAGES[@]} images into the node's containerd"
mkdir -p "$work/state" "$work/images"
cat >"$work/containerd.toml" <<EOF
version = 3
root = "$r/var/lib/containerd"
state = "$work/state"
disabled_plugins = ["io.containerd.grpc.v1.cri", "io.containerd.cri.v1.images", "io.containerd.cri.v1.runtime", "io.containerd.podsandbox.controller.v1.podsandbox", "io.containerd.sandbox.controller.v1.shim", "io.containerd.nri.v1.nri", "io.containerd.internal.v1.tracing", "io.containerd.monitor.task.v1.cgroups", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.erofs", "io.containerd.snapshotter.v1.blockfile"]
[grpc]
  address = "$work/containerd.sock"
[ttrpc]
  address = "$work/containerd.sock.ttrpc"
[debug]
  address = ""
EOF
"$NODE_BIN/containerd" --config "$work/containerd.toml" >"$work/containerd.log" 2>&1 &
ctrd=$!
trap 'kill "$ctrd" 2>/dev/null || true; wait "$ctrd" 2>/dev/null || true; rm -rf "$work"' EXIT
for ((i = 0; i < 50; i++)); do
    [[ -S $work/containerd.sock ]] && "$NODE_BIN/ctr" -a "$work/containerd.sock" version >/dev/null 2>&1 && break
    kill -0 "$ctrd" 2>/dev/null || { tail -n 20 "$work/containerd.log" >&2; die "containerd (for the image import) exited"; }
    sleep 0.2
done
for image in "${!IMAGES[@]}"; do
    "${PODMAN[@]}" save --quiet --format docker-archive -o "$work/images/img.tar" "$image" >/dev/null ||
        die "podman save $image failed"
    "$NODE_BIN/ctr" -a "$work/containerd.sock" -n k8s.io images import --no-unpack --digests \
        --label=io.cri-containerd.pinned=pinned "$work/images/img.tar" >/dev/null ||
        { tail -n 20 "$work/containerd.log" >&2; die "ctr images import $image failed"; }
    rm -f "$work/images/img.tar"
done
imported=$("$NODE_BIN/ctr" -a "$work/containerd.sock" -n k8s.io images ls -q | grep -v '^sha256:' | sort)
kill "$ctrd" && wait "$ctrd" 2>/dev/null || true
for image in "${!IMAGES[@]}"; do
    grep -qx "$image" <<<"$imported" || die "$image is not in the node's containerd after the import (imported: $imported)"
done
rm -rf "$r/var/lib/containerd/io.containerd.snapshotter.v1."* "$r/tmp/"*

log "podman import of the node root as $NODE_IMAGE"
tar --numeric-owner --xattrs -C "$r" -c . | nice -n 19 "${PODMAN[@]}" import --quiet \
    --change 'ENV container=docker' \
    --change 'STOPSIGNAL SIGRTMIN+3' \
    --change 'ENTRYPOINT ["/usr/local/bin/kube-reloader-entrypoint", "/sbin/init"]' \
    --change "LABEL kube-reloader.kind-node.kubernetes=$K8S_VERSION" \
    - "$NODE_IMAGE" >/dev/null || die "podman import of the node image failed"
size=$("${PODMAN[@]}" image inspect --format '{{.Size}}' "$NODE_IMAGE")
log "built $NODE_IMAGE ($((size / 1048576)) MiB) in ${SECONDS}s"
echo "$NODE_IMAGE"
