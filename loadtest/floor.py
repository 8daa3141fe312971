#!/usr/bin/env python3
"""The floor under a controller's time to ready: how long a bare client takes to receive the
streaming initial lists (sendInitialEvents) of Deployments, ConfigMaps and Secrets, concurrently,
from the local control plane, reading lines until each initial-events-end bookmark without
parsing the objects. Compare with the controller's time to ready on the same population
(docs/performance.md, Targets).

    python3 loadtest/floor.py [deployments] [configmaps] [secrets]

Uses the load test controller's identity (hack/cluster.sh writes its kubeconfig).
"""
import ssl, sys, time, threading, base64, http.client, tempfile, os
# hack/cluster.sh writes one key per line: no YAML parser needed.
cache = os.environ.get("KUBE_RELOADER_CACHE", os.path.expanduser("~/.cache/kube-reloader"))
kc = {}
for line in open(f"{cache}/cluster/loadtest-controller.kubeconfig"):
    key, _, value = line.strip().partition(": ")
    kc.setdefault(key, value)
host, port = kc["server"].replace("https://", "").split(":")
d = tempfile.mkdtemp()
for k, f in [("client-certificate-data", "c.crt"), ("client-key-data", "c.key"),
             ("certificate-authority-data", "ca.crt")]:
    open(f"{d}/{f}", "wb").write(base64.b64decode(kc[k]))
ctx = ssl.create_default_context(cafile=f"{d}/ca.crt")
ctx.load_cert_chain(f"{d}/c.crt", f"{d}/c.key")
paths = {
    "deployments": "/apis/apps/v1/deployments",
    "configmaps": "/api/v1/configmaps",
    "secrets": "/api/v1/secrets",
}
which = sys.argv[1:] or list(paths)
res = {}
def run(name):
    t0 = time.time()
    c = http.client.HTTPSConnection(host, int(port), context=ctx, timeout=600)
    c.request("GET", paths[name] + "?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true",
              headers={"User-Agent": "floor-probe"})
    r = c.getresponse()
    n = 0; nbytes = 0
    while True:
        line = r.readline()
        if not line: break
        nbytes += len(line)
        if b'"BOOKMARK"' in line and b"initial-events-end" in line:
            break
        n += 1
    res[name] = (time.time() - t0, n, nbytes)
    c.close()
t0 = time.time()
ts = [threading.Thread(target=run, args=(w,)) for w in which]
[t.start() for t in ts]; [t.join() for t in ts]
for k, (s, n, b) in res.items():
    print(f"{k}: {n} objects, {b/2**20:.0f} MiB in {s:.1f} s")
print(f"all: {time.time()-t0:.1f} s")
