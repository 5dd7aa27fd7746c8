#!/usr/bin/env python3
"""Metadata benchmark client (scripts/bench-metadata.sh).

Usage: metadata-push.py HOST PORT DATA_DIR PID TAGS REFERRERS CHECKPOINTS FILL

Against one registry at HOST:PORT (server process PID, storing under
DATA_DIR), or several (PORT, DATA_DIR and PID comma-separated lists of one
length: each measured request goes to each of them in turn, in an order
rotated per request, so they are measured under the same conditions, and
the output is a JSON list, one object per registry): pushes an empty config blob and one small OCI image manifest,
then PUTs it under TAGS tags (t0, t1, ...) one at a time over one
keep-alive connection, then REFERRERS artifact manifests whose `subject`
is that manifest (by digest). Prints one JSON object:

- tags[c]: for each checkpoint c (<= TAGS): p50/p99 latency in ms of the
  last min(1000, c) tag PUTs before c, metadata bytes per tag PUT (growth
  of the apparent size of every file under DATA_DIR over the last
  min(200, c) PUTs, divided by their count), and VmHWM (peak RSS, KiB).
- referrers: the same for the referrer PUTs (all of them), the number of
  referrers the referrers API lists (following `Link`; -1 when the server
  has no referrers API), and the final VmHWM.

With FILL > 0, the tags outside the measured windows (all but the last
1,000 before each checkpoint) are PUT untimed by FILL connections at once,
so a run to 100,000 tags takes minutes, not an hour; the measured PUTs are
still one at a time on one connection, on a repository of the same size.
FILL = 0 PUTs every tag one at a time.
"""

import hashlib
import http.client
import json
import os
import sys
import threading
import time


def sha256(b):
    return "sha256:" + hashlib.sha256(b).hexdigest()


def tree_bytes(path):
    total = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(root, f)).st_size
            except FileNotFoundError:
                pass
    return total


def hwm_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


def pct(values, p):
    s = sorted(values)
    return s[min(len(s) - 1, int(len(s) * p))] * 1000.0


class Client:
    def __init__(self, host, port):
        self.host, self.port = host, port
        self.conn = http.client.HTTPConnection(host, port, timeout=120)

    def request(self, method, path, body=None, headers=None):
        for attempt in range(3):
            try:
                self.conn.request(method, path, body=body, headers=headers or {})
                r = self.conn.getresponse()
                data = r.read()
                return r.status, r.getheader("Location"), r.getheader("Link"), data
            except (http.client.HTTPException, ConnectionError):
                self.conn.close()
                self.conn = http.client.HTTPConnection(self.host, self.port, timeout=120)
                if attempt == 2:
                    raise
        raise RuntimeError("unreachable")


def fill(host, port, repo, manifest, ct, first, end, conns):
    """PUTs tags t{first}..t{end-1} untimed over `conns` connections."""
    lock, nxt, errors = threading.Lock(), [first], []

    def worker():
        c = Client(host, port)
        while not errors:
            with lock:
                i = nxt[0]
                nxt[0] += 1
            if i >= end:
                return
            st, _, _, body = c.request("PUT", f"/v2/{repo}/manifests/t{i}", manifest, ct)
            if st != 201:
                errors.append((i, st, body))

    threads = [threading.Thread(target=worker) for _ in range(conns)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]


class Target:
    """One registry under test and what the client measured of it."""

    def __init__(self, host, port, data, pid):
        self.host, self.port, self.data, self.pid = host, port, data, pid
        self.c = Client(host, port)
        self.lat, self.rlat, self.size_at = [], [], {}
        self.out = {"tags": {}, "referrers": {}}


def main():
    host = sys.argv[1]
    ports, datas, pids = (sys.argv[k].split(",") for k in (2, 3, 4))
    assert len(ports) == len(datas) == len(pids), "PORT, DATA_DIR and PID lists differ in length"
    targets = [Target(host, int(p), d, int(q)) for p, d, q in zip(ports, datas, pids)]
    tags, referrers = int(sys.argv[5]), int(sys.argv[6])
    checkpoints = [int(c) for c in sys.argv[7].split(",") if int(c) <= tags]
    conns = int(sys.argv[8])
    repo = "bench/meta"
    config = b"{}"
    for t in targets:
        st, loc, _, body = t.c.request("POST", f"/v2/{repo}/blobs/uploads/?digest={sha256(config)}", config,
                                       {"Content-Type": "application/octet-stream"})
        if st == 202:  # no monolithic POST: PUT to the session
            sep = "&" if "?" in loc else "?"
            st, _, _, body = t.c.request("PUT", f"{loc}{sep}digest={sha256(config)}", config,
                                         {"Content-Type": "application/octet-stream"})
        assert st == 201, (st, body)
    manifest = json.dumps({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": sha256(config), "size": len(config)},
        "layers": [],
    }, separators=(",", ":")).encode()
    mdigest = sha256(manifest)
    ct = {"Content-Type": "application/vnd.oci.image.manifest.v1+json"}

    def in_turn(i):
        """The targets in the order of request i: rotated, so that none is
        always first after the client's own pause."""
        k = i % len(targets)
        return targets[k:] + targets[:k]

    windows = {cp: max(0, cp - min(200, cp)) for cp in checkpoints}
    timed = {cp - min(1000, cp) for cp in checkpoints}
    i = 0
    while i < tags:
        if conns > 0 and not any(cp - min(1000, cp) <= i < cp for cp in checkpoints):
            end = min([s for s in timed if s > i] + [tags])
            for t in targets:
                fill(t.host, t.port, repo, manifest, ct, i, end, conns)
                t.lat.extend([0.0] * (end - i))
            i = end
            continue
        for t in in_turn(i):
            for cp, start in windows.items():
                if i == start:
                    t.size_at[cp] = tree_bytes(t.data)
            t0 = time.perf_counter()
            st, _, _, body = t.c.request("PUT", f"/v2/{repo}/manifests/t{i}", manifest, ct)
            t.lat.append(time.perf_counter() - t0)
            assert st == 201, (t.port, i, st, body)
            n = i + 1
            if n in windows:
                grown = tree_bytes(t.data) - t.size_at[n]
                window = t.lat[-min(1000, n):]
                r = t.out["tags"][n] = {
                    "p50_ms": pct(window, 0.50),
                    "p99_ms": pct(window, 0.99),
                    "bytes_per_put": grown / min(200, n),
                    "hwm_kib": hwm_kib(t.pid),
                }
                print(f"  :{t.port} {n} tags: p50 {r['p50_ms']:.2f} ms, p99 {r['p99_ms']:.2f} ms, "
                      f"{r['bytes_per_put']:.0f} B/put, VmHWM {r['hwm_kib']} KiB",
                      file=sys.stderr, flush=True)
        i += 1

    before = {t.port: tree_bytes(t.data) for t in targets}
    for i in range(referrers):
        art = json.dumps({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "artifactType": "application/vnd.example.sig",
            "config": {"mediaType": "application/vnd.oci.empty.v1+json",
                       "digest": sha256(config), "size": len(config)},
            "layers": [],
            "subject": {"mediaType": "application/vnd.oci.image.manifest.v1+json",
                        "digest": mdigest, "size": len(manifest)},
            "annotations": {"n": str(i)},
        }, separators=(",", ":")).encode()
        for t in in_turn(i):
            t0 = time.perf_counter()
            st, _, _, body = t.c.request("PUT", f"/v2/{repo}/manifests/{sha256(art)}", art, ct)
            t.rlat.append(time.perf_counter() - t0)
            assert st == 201, (t.port, i, st, body)
    for t in targets:
        grown = tree_bytes(t.data) - before[t.port]
        listed, path, t0 = 0, f"/v2/{repo}/referrers/{mdigest}", time.perf_counter()
        while path:
            st, _, link, body = t.c.request("GET", path)
            if st != 200:
                listed = -1
                break
            listed += len(json.loads(body)["manifests"])
            path = link[1:link.index(">")] if link else None
        if referrers:
            t.out["referrers"] = {
                "count": referrers,
                "p50_ms": pct(t.rlat, 0.50),
                "p99_ms": pct(t.rlat, 0.99),
                "bytes_per_put": grown / referrers,
                "listed": listed,
                "list_ms": (time.perf_counter() - t0) * 1000.0,
            }
        t.out["hwm_kib"] = hwm_kib(t.pid)
    print(json.dumps(targets[0].out if len(targets) == 1 else [t.out for t in targets]))


if __name__ == "__main__":
    main()
