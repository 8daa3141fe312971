#!/usr/bin/env bash
# Captures benches/fixtures/wire/: the same Deployment, ConfigMap and Secret as the local control
# plane (hack/cluster.sh) serves them in JSON and in protobuf, for benches/decode.rs and the
# decoding tests of src/protobuf/. The objects are made of the existing fixture
# (benches/fixtures/deployment.json, a load-test Deployment) and of 10 keys of 1 KiB each for the
# configs; the server adds its own metadata and status. `references` is a Deployment using configs
# in every way the index reads (env, envFrom, volumes, projected, CSI, init containers), and
# `watch-configmaps.pb` a streaming list of the ConfigMap as a protobuf watch sends it.
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
ref = lambda name, key=None: dict({"name": name}, **({"key": key} if key else {}))
items = [{"key": "a", "path": "a.txt"}]
container = {"name": "app", "image": "app:1",
    "env": [{"name": "PLAIN", "value": "v"},
            {"name": "STAKATER_CM_VOL_CONFIGMAP", "value": "0123abcd"},
            {"name": "FROM_CM", "valueFrom": {"configMapKeyRef": ref("cm-key", "k1")}},
            {"name": "FROM_SECRET", "valueFrom": {"secretKeyRef": dict(ref("sec-key", "k2"), optional=True)}},
            {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
    "envFrom": [{"configMapRef": ref("cm-env")}, {"prefix": "S_", "secretRef": ref("sec-env")}],
    "volumeMounts": [{"name": v, "mountPath": f"/{v}"} for v in ("cm-vol", "sec-vol", "proj", "csi")]
                    + [{"name": "sub", "mountPath": "/sub/x", "subPath": "x", "readOnly": True}],
    "resources": {"limits": {"cpu": "1"}}, "readinessProbe": {"exec": {"command": ["true"]}}}
init = {"name": "init", "image": "init:1", "env": [{"name": "I", "valueFrom": {"secretKeyRef": ref("sec-init", "k")}}]}
references = {"apiVersion": "apps/v1", "kind": "Deployment",
    "metadata": {"name": "references", "namespace": ns, "labels": {"kube-reloader.io/canary": "true"},
                 "annotations": {"reloader.stakater.com/auto": "true", "configmap.reloader.stakater.com/reload": "cm-extra"}},
    "spec": {"replicas": 0, "paused": True, "selector": {"matchLabels": {"app": "references"}},
        "template": {"metadata": {"labels": {"app": "references"},
                                  "annotations": {"reloader.stakater.com/last-reloaded-from": "{}"}},
            "spec": {"containers": [container], "initContainers": [init], "volumes": [
                {"name": "cm-vol", "configMap": {"name": "cm-vol", "items": items, "defaultMode": 420}},
                {"name": "sec-vol", "secret": {"secretName": "sec-vol", "optional": True}},
                {"name": "proj", "projected": {"sources": [{"configMap": {"name": "cm-proj", "items": items}},
                    {"secret": {"name": "sec-proj"}}, {"downwardAPI": {"items": [{"path": "l", "fieldRef": {"fieldPath": "metadata.labels"}}]}}]}},
                {"name": "csi", "csi": {"driver": "secrets-store.csi.k8s.io", "readOnly": True,
                                        "volumeAttributes": {"secretProviderClass": "vault"}}},
                {"name": "sub", "configMap": {"name": "cm-sub"}},
                {"name": "unmounted", "secret": {"secretName": "sec-unmounted"}}]}}}}
json.dump(references, open(f"{work}/references.json", "w"))
PY
call POST "/apis/apps/v1/namespaces/$ns/deployments" application/json "$work/deployment.json" >/dev/null
call POST "/api/v1/namespaces/$ns/configmaps" application/json "$work/configmap.json" >/dev/null
call POST "/api/v1/namespaces/$ns/secrets" application/json "$work/secret.json" >/dev/null
call POST "/apis/apps/v1/namespaces/$ns/deployments" application/json "$work/references.json" >/dev/null
sleep 2 # the Deployment controller writes its status
mkdir -p "$OUT"
for object in "apis/apps/v1/namespaces/$ns/deployments/web deployment" \
    "apis/apps/v1/namespaces/$ns/deployments/references references" \
    "api/v1/namespaces/$ns/configmaps/app configmap" "api/v1/namespaces/$ns/secrets/app secret"; do
    set -- $object
    # One read in each format of the same resourceVersion (nothing writes in between).
    call GET "/$1" application/json >"$OUT/$2.json"
    call GET "/$1" application/vnd.kubernetes.protobuf >"$OUT/$2.pb"
done
# A streaming list as a protobuf watch sends it: the ConfigMap, then the bookmark ending it.
call GET "/api/v1/namespaces/$ns/configmaps?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=1&fieldSelector=metadata.name%3Dapp" \
    application/vnd.kubernetes.protobuf >"$OUT/watch-configmaps.pb"
ls -l "$OUT"
