#!/usr/bin/env python3
"""Generate an airlock data directory for the GC benchmark.

    scripts/bench/gen-gc-store.py DATA BLOBS MANIFESTS [--garbage PERCENT]

Writes DATA/blobs/sha256/<2>/<hex> for BLOBS tiny referenced blobs and
MANIFESTS OCI image manifests (each a config plus layers, BLOBS/MANIFESTS
blobs per manifest), spread over one repository per 100 manifests, the
repository documents, the repository table, one state document and
refs/root -- the layout airlock's state writes (src/state/docs.rs). Adds
PERCENT % more unreferenced blobs, aged two hours, for the sweep to remove.
Every digest is the sha256 of the bytes written.
"""

import argparse
import hashlib
import json
import os
import time


def put(data, raw):
    d = hashlib.sha256(raw).hexdigest()
    p = os.path.join(data, "blobs", "sha256", d[:2])
    os.makedirs(p, exist_ok=True)
    with open(os.path.join(p, d), "wb") as f:
        f.write(raw)
    return "sha256:" + d, len(raw)


def doc(data, obj):
    return put(data, json.dumps(obj, separators=(",", ":"), sort_keys=True).encode())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("data")
    ap.add_argument("blobs", type=int)
    ap.add_argument("manifests", type=int)
    ap.add_argument("--garbage", type=int, default=10)
    a = ap.parse_args()
    os.makedirs(os.path.join(a.data, "refs"), exist_ok=True)
    os.makedirs(os.path.join(a.data, "tmp"), exist_ok=True)
    per = max(1, a.blobs // a.manifests)
    table = {}
    n = 0
    for r in range(0, a.manifests, 100):
        repo = {"tags": {}, "manifests": {}, "blobs": {}}
        for m in range(r, min(r + 100, a.manifests)):
            descs = []
            for _ in range(per):
                d, size = put(a.data, b"blob %d" % n)
                n += 1
                descs.append({"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": d, "size": size})
                repo["blobs"][d] = size
            man = {
                "schemaVersion": 2,
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "config": dict(descs[0], mediaType="application/vnd.oci.image.config.v1+json"),
                "layers": descs[1:],
            }
            md, msize = doc(a.data, man)
            repo["manifests"][md] = {"mediaType": man["mediaType"], "size": msize}
            repo["tags"]["t%d" % m] = md
        rd, _ = doc(a.data, repo)
        table["bench/r%05d" % (r // 100)] = rd
    td, _ = doc(a.data, {"repositories": table})
    sd, _ = doc(a.data, {
        "kind": "airlock.state.v1", "generation": 1, "parent": None,
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "reason": "bench-gc generator", "who": "bench", "repositories": td,
    })
    old = time.time() - 7200
    for g in range(a.blobs * a.garbage // 100):
        d, _ = put(a.data, b"garbage %d" % g)
        p = os.path.join(a.data, "blobs", "sha256", d[7:9], d[7:])
        os.utime(p, (old, old))
    with open(os.path.join(a.data, "refs", "root"), "w") as f:
        f.write(sd + "\n")
    print(f"{n} referenced blobs, {a.manifests} manifests, {len(table)} repositories, "
          f"{a.blobs * a.garbage // 100} garbage blobs")


if __name__ == "__main__":
    main()
