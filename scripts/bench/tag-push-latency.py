#!/usr/bin/env python3
"""Tag push latency with concurrent writers, spread over replicas.

    tag-push-latency.py RUN WRITERS PUSHES HOST:PORT [HOST:PORT ...]

WRITERS threads each PUT the same small OCI manifest to PUSHES new tags
of repository bench/tags-RUN, one after the other; writer i sends every
request to replica i mod (number of replicas), so with two replicas half
the writers commit through each (their root swaps race on one store).
Setup (not timed): the config blob is pushed once through every replica,
then each writer pushes WARMUP tags (environment, default 2: the replicas
load the state and meet each other's roots); then all writers start the
timed pushes together.
Prints one line: "pushes errors p50_ms p99_ms max_ms" over every timed PUT.
"""
import hashlib
import json
import os
import sys
import threading
import time
import urllib.request

CONFIG = b'{"architecture":"amd64","os":"linux","rootfs":{"type":"layers","diff_ids":[]}}'
MANIFEST = json.dumps({
    "schemaVersion": 2,
    "mediaType": "application/vnd.oci.image.manifest.v1+json",
    "config": {
        "mediaType": "application/vnd.oci.image.config.v1+json",
        "digest": "sha256:" + hashlib.sha256(CONFIG).hexdigest(),
        "size": len(CONFIG),
    },
    "layers": [],
}).encode()


def request(method, url, body=b"", headers=None):
    req = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    with urllib.request.urlopen(req, timeout=120) as r:
        return r.status


def main():
    run, writers, pushes, hosts = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
    repo = f"bench/tags-{run}"
    digest = "sha256:" + hashlib.sha256(CONFIG).hexdigest()
    for h in hosts:
        request("POST", f"http://{h}/v2/{repo}/blobs/uploads/?digest={digest}", CONFIG)
    warmup = int(os.environ.get("WARMUP", "2"))
    times, errors, lock = [], [0], threading.Lock()
    start = threading.Barrier(writers)

    def writer(i):
        host = hosts[i % len(hosts)]
        for n in range(warmup):
            request("PUT", f"http://{host}/v2/{repo}/manifests/warm-w{i}-{n}", MANIFEST,
                    {"Content-Type": "application/vnd.oci.image.manifest.v1+json"})
        start.wait()
        for n in range(pushes):
            url = f"http://{host}/v2/{repo}/manifests/w{i}-{n}"
            t0 = time.monotonic()
            try:
                ok = request("PUT", url, MANIFEST,
                             {"Content-Type": "application/vnd.oci.image.manifest.v1+json"}) == 201
            except Exception:  # noqa: BLE001 - counted, the run goes on
                ok = False
            dt = time.monotonic() - t0
            with lock:
                if ok:
                    times.append(dt)
                else:
                    errors[0] += 1

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    times.sort()
    if not times:
        print(f"0 {errors[0]} 0 0 0")
        return

    def pct(p):
        return times[min(len(times) - 1, int(p * len(times)))] * 1000

    print(f"{len(times)} {errors[0]} {pct(0.5):.1f} {pct(0.99):.1f} {times[-1] * 1000:.1f}")


if __name__ == "__main__":
    main()
