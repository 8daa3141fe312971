#!/usr/bin/env python3
"""The measurement of `make kind-test` (hack/kind-test.sh): changes a ConfigMap or a Secret the
app's workloads use and waits until every serving pod answers the new value.

For each change (alternating ConfigMap / Secret):
  - t0: just before the write (a merge patch of `data.value`);
  - done: no pod of the workloads from before the change is left (not even terminating), the
    number of Ready pods is what the workloads want, and every Ready pod answers the new value
    over HTTP (through the API server's pod proxy): a ConfigMap change in `env=` (an env var,
    so only a new pod has it) and `projected=`; a Secret change in `secret=` (a mounted file);
  - latency = done - t0, failed when over --deadline (30 s);
  - then, after --settle seconds: every workload's metadata.generation went up by exactly 1
    (rolled once, not twice), and the unrelated workload's generation and pods did not change.

Writes one JSON file (--out) with every sample and p50/p99, prints a one-line summary; exits 1
when a check failed. Standard library only: --kubeconfig is the JSON of
`kubectl config view --raw --minify -o json` (client certificate, as kind's admin kubeconfig has).
"""
import argparse
import base64
import http.client
import json
import math
import os
import ssl
import statistics
import sys
import tempfile
import time
import urllib.parse


class Api:
    def __init__(self, kubeconfig):
        cfg = json.load(open(kubeconfig))
        ctx = next(c["context"] for c in cfg["contexts"] if c["name"] == cfg["current-context"])
        cluster = next(c["cluster"] for c in cfg["clusters"] if c["name"] == ctx["cluster"])
        user = next(u["user"] for u in cfg["users"] if u["name"] == ctx["user"])
        url = urllib.parse.urlparse(cluster["server"])
        self.host, self.port = url.hostname, url.port or 443
        self.dir = tempfile.mkdtemp(prefix="kind-test-")
        ca = os.path.join(self.dir, "ca.crt")
        crt = os.path.join(self.dir, "client.crt")
        key = os.path.join(self.dir, "client.key")
        for path, field in ((ca, cluster["certificate-authority-data"]),
                            (crt, user["client-certificate-data"]),
                            (key, user["client-key-data"])):
            with open(path, "wb") as f:
                f.write(base64.b64decode(field))
        self.ctx = ssl.create_default_context(cafile=ca)
        self.ctx.load_cert_chain(crt, key)
        self.conn = None

    def req(self, method, path, body=None, ctype="application/json", raw=False):
        for attempt in range(3):
            try:
                if self.conn is None:
                    self.conn = http.client.HTTPSConnection(self.host, self.port, context=self.ctx, timeout=10)
                headers = {"Accept": "application/json"}
                data = None
                if body is not None:
                    data = json.dumps(body).encode()
                    headers["Content-Type"] = ctype
                self.conn.request(method, path, body=data, headers=headers)
                resp = self.conn.getresponse()
                out = resp.read()
                if resp.status >= 400:
                    raise RuntimeError(f"{method} {path}: {resp.status} {out[:300]!r}")
                return out.decode() if raw else json.loads(out)
            except (http.client.HTTPException, OSError):
                self.conn = None
                if attempt == 2:
                    raise
        return None


def ready(pod):
    for c in pod.get("status", {}).get("conditions", []):
        if c["type"] == "Ready":
            return c["status"] == "True"
    return False


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kubeconfig", required=True)
    ap.add_argument("--namespace", default="kind-test")
    ap.add_argument("--changes", type=int, default=20)
    ap.add_argument("--deadline", type=float, default=30.0)
    ap.add_argument("--settle", type=float, default=3.0)
    ap.add_argument("--label", required=True, help="controller and strategy, for the output")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    api = Api(a.kubeconfig)
    ns = a.namespace
    workloads = [("apps/v1", "deployments", "app"), ("apps/v1", "statefulsets", "app"),
                 ("apps/v1", "daemonsets", "app")]
    bystander = ("apps/v1", "deployments", "bystander")

    def wl(kind):
        return api.req("GET", f"/apis/{kind[0]}/namespaces/{ns}/{kind[1]}/{kind[2]}")

    def want_pods():
        n = 0
        for k in workloads:
            o = wl(k)
            n += o["status"].get("desiredNumberScheduled", 0) if k[1] == "daemonsets" else o["spec"]["replicas"]
        return n

    def pods(selector):
        q = urllib.parse.urlencode({"labelSelector": selector})
        return api.req("GET", f"/api/v1/namespaces/{ns}/pods?{q}")["items"]

    def serve(pod):
        name = pod["metadata"]["name"]
        try:
            return api.req("GET", f"/api/v1/namespaces/{ns}/pods/{name}:8080/proxy/", raw=True).strip()
        except Exception as e:  # a pod that stops serving between the list and the request
            return f"<{e}>"

    samples, failures = [], []
    for i in range(a.changes):
        kind = "configmaps" if i % 2 == 0 else "secrets"
        name = "app-config" if kind == "configmaps" else "app-secret"
        value = f"{a.label}-{i}-{int(time.time() * 1000) % 1000000}"
        gen0 = {k: wl(k)["metadata"]["generation"] for k in workloads + [bystander]}
        old = {p["metadata"]["uid"] for p in pods("kind-test/role=app")}
        by_pods = sorted(p["metadata"]["uid"] for p in pods("kind-test/role=bystander"))
        want = want_pods()
        if kind == "configmaps":
            patch = {"data": {"value": value}}
            fields = ("env=", "projected=")
        else:
            patch = {"data": {"value": base64.b64encode(value.encode()).decode()}}
            fields = ("secret=",)
        t0 = time.monotonic()
        api.req("PATCH", f"/api/v1/namespaces/{ns}/{kind}/{name}", patch, "application/merge-patch+json")
        seen = {}  # uid -> answered the new value
        done = None
        while time.monotonic() - t0 < a.deadline + 30:
            items = pods("kind-test/role=app")
            left = [p for p in items if p["metadata"]["uid"] in old]
            serving = [p for p in items if ready(p) and not p["metadata"].get("deletionTimestamp")]
            for p in serving:
                uid = p["metadata"]["uid"]
                if not seen.get(uid):
                    body = serve(p)
                    seen[uid] = all(f"{f}{value}" in body.split() for f in fields)
            if not left and len(serving) == want and all(seen.get(p["metadata"]["uid"]) for p in serving):
                done = time.monotonic() - t0
                break
            time.sleep(0.1)
        time.sleep(a.settle)
        gen1 = {k: wl(k)["metadata"]["generation"] for k in workloads + [bystander]}
        rolls = {f"{k[1]}/{k[2]}": gen1[k] - gen0[k] for k in workloads}
        problems = []
        if done is None:
            problems.append(f"not every pod served the new value after {a.deadline + 30:.0f}s")
        elif done > a.deadline:
            problems.append(f"took {done:.1f}s > {a.deadline:.0f}s")
        for k, d in rolls.items():
            if d != 1:
                problems.append(f"{k} rolled {d} times")
        if gen1[bystander] != gen0[bystander] or sorted(p["metadata"]["uid"] for p in pods("kind-test/role=bystander")) != by_pods:
            problems.append("the unrelated workload changed")
        sample = {"change": i, "kind": kind, "latency_s": None if done is None else round(done, 3),
                  "pods": want, "rolls": rolls, "problems": problems}
        samples.append(sample)
        if problems:
            failures.append(sample)
        print(f"[kind-test] {a.label} change {i} ({kind}): "
              f"{'-' if done is None else f'{done:.2f}s'} {'; '.join(problems) or 'ok'}", file=sys.stderr)

    lat = sorted(s["latency_s"] for s in samples if s["latency_s"] is not None)

    def pct(p):  # nearest rank: the smallest sample with at least p % of the samples at or below it
        if not lat:
            return None
        return lat[max(0, math.ceil(p / 100 * len(lat)) - 1)]

    result = {"label": a.label, "changes": a.changes, "deadline_s": a.deadline,
              "p50_s": pct(50), "p99_s": pct(99), "max_s": lat[-1] if lat else None,
              "mean_s": round(statistics.mean(lat), 3) if lat else None,
              "failures": len(failures), "samples": samples}
    with open(a.out, "w") as f:
        json.dump(result, f, indent=2)
    print(f"[kind-test] {a.label}: {len(lat)}/{a.changes} changes served, p50 {result['p50_s']}s, "
          f"p99 {result['p99_s']}s, {len(failures)} failed", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
