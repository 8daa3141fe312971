#!/usr/bin/env bash
# Captures benches/fixtures/wire/: the same Deployment, ConfigMap and Secret as the local control
# plane (hack/cluster.sh) serves them in JSON and in protobuf, for benches/decode.rs. The objects
# are made of the existing fixture (benches/fixtures/deployment.json, a load-test Deployment)
# and of 10 keys of 1 KiB each for the configs; the server adds its own metadata and status.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CACHE=${CACHE:-$HOME/.cache/kube-reloader}
STATE=$CACHE/cluster
OUT=$ROOT/benches/fixtures/wire
server=$(awk '/server:/ {print $2; exit}' "$STATE/kubeconfig")
call() { # method path [accept] [body-file]
    curl -sS --fail-with-body --cacert "$STATE/certs/ca.crt" --cert "$STATE/certs/admin.crt" \
        --key "$STATE/certs/admin.key" -X "$1" -H "Accept: ${3:-application/json}" \
        ${4:+-H "Content-Type: application/json" --data-binary "@$4"} "$server$2"
}
ns=wire-fixtures
work=$(mktemp -d)
trap 'rm -rf "$work"; call DELETE /api/v1/namespaces/$ns >/dev/null 2>&1 || true' EXIT
echo "{\"apiVersion\":\"v1\",\"kind\":\"Namespace\",\"metadata\":{\"name\":\"$ns\"}}" >"$work/ns.json"
call POST /api/v1/namespaces application/json "$work/ns.json" >/dev/null
python3 - "$ROOT/benches/fixtures/deployment.json" "$work" "$ns" <<'PY'
import json, sys, hashlib
src, work, ns = sys.argv[1:]
d = json.load(open(src))
meta = d["metadata"]
d["metadata"] = {"name": "web", "namespace": ns, "annotations": meta.get("annotations", {}),
                 "labels": meta.get("labels", {})}
d.pop("status", None)
json.dump(d, open(f"{work}/deployment.json", "w"))
# 10 keys of 1 KiB: deterministic text, so the fixture is the same at every capture.
data = {f"key-{i}": hashlib.sha256(str(i).encode()).hexdigest() * 16 for i in range(10)}
cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "app", "namespace": ns,
      "annotations": {"reloader.stakater.com/match": "true"}}, "data": data}
json.dump(cm, open(f"{work}/configmap.json", "w"))
import base64
secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "app", "namespace": ns},
          "type": "Opaque", "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}}
json.dump(secret, open(f"{work}/secret.json", "w"))
PY
call POST "/apis/apps/v1/namespaces/$ns/deployments" application/json "$work/deployment.json" >/dev/null
call POST "/api/v1/namespaces/$ns/configmaps" application/json "$work/configmap.json" >/dev/null
call POST "/api/v1/namespaces/$ns/secrets" application/json "$work/secret.json" >/dev/null
sleep 2 # the Deployment controller writes its status
mkdir -p "$OUT"
for object in "apis/apps/v1/namespaces/$ns/deployments/web deployment" \
    "api/v1/namespaces/$ns/configmaps/app configmap" "api/v1/namespaces/$ns/secrets/app secret"; do
    set -- $object
    # One read in each format of the same resourceVersion (nothing writes in between).
    call GET "/$1" application/json >"$OUT/$2.json"
    call GET "/$1" application/vnd.kubernetes.protobuf >"$OUT/$2.pb"
done
ls -l "$OUT"
