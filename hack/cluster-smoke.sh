#!/usr/bin/env bash
# Smoke test of the local control plane (hack/cluster.sh): proves the apiserver
# reports the pinned version, RBAC is enforced, and the controller-manager's
# deployment, garbage-collector and namespace controllers all work.
# Starts the cluster if needed; leaves it running. Takes ~15 s.
set -euo pipefail

HACK_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
KUBECONFIG=$(bash "$HACK_DIR/cluster.sh" kubeconfig | tail -n1)
export KUBECONFIG
BIN=$(bash "$HACK_DIR/toolchain.sh" --bin-dir)
K8S_VERSION=$(sed -n 's/^K8S_VERSION=//p' "$HACK_DIR/toolchain.sh")
k() { "$BIN/kubectl" --request-timeout=10s "$@"; }
NS=smoke-$$

step() { printf '[smoke] %s\n' "$*" >&2; }
fail() { printf '[smoke] FAILED: %s\n' "$*" >&2; k delete namespace "$NS" --wait=false >/dev/null 2>&1 || true; exit 1; }

# until_ok SECONDS DESCRIPTION CMD...: retry CMD once a second.
until_ok() {
    local t=$1 what=$2
    shift 2
    for ((i = 0; i < t; i++)); do
        "$@" >/dev/null 2>&1 && return 0
        sleep 1
    done
    fail "timed out after ${t}s: $what"
}

server=$(k version -o json | python3 -c 'import json,sys; print(json.load(sys.stdin)["serverVersion"]["gitVersion"])')
[[ $server == "$K8S_VERSION" ]] || fail "server version is $server, expected $K8S_VERSION"
step "server version $server"

[[ $(k auth can-i list secrets --as=system:serviceaccount:default:default -A 2>/dev/null || true) == no ]] ||
    fail "RBAC not enforced: default SA may list secrets"
step "RBAC enforced"

k create namespace "$NS" >/dev/null
k -n "$NS" create configmap app-config --from-literal=key=value >/dev/null
k -n "$NS" create deployment web --image=registry.invalid/web:1 --replicas=2 >/dev/null
has_rs() { [[ -n $(k -n "$NS" get replicasets -l app=web -o name) ]]; }
until_ok 30 "deployment controller creating a ReplicaSet" has_rs
two_pods() { [[ $(k -n "$NS" get pods -l app=web -o name | wc -l) -eq 2 ]]; }
until_ok 30 "replicaset controller creating 2 pods" two_pods
step "deployment -> replicaset -> pods"

k -n "$NS" delete deployment web --wait=false >/dev/null
no_rs() { [[ -z $(k -n "$NS" get replicasets -o name) ]]; }
until_ok 30 "garbage collector deleting the ReplicaSet" no_rs
step "garbage collector"

k delete namespace "$NS" --wait=false >/dev/null
ns_gone() { ! k get namespace "$NS" >/dev/null 2>&1; }
until_ok 60 "namespace controller finalising $NS" ns_gone
step "namespace deleted"

echo "[smoke] all checks passed" >&2
