#!/usr/bin/env python3
"""Console benchmark helper (scripts/bench-ui.sh).

Usage:
  ui-site.py fill HOST PORT TAGS      # a repository with TAGS tags + two stack images
  ui-site.py cells HOST PORT STACK N  # N cells resolve STACK and report
  ui-site.py measure HOST PORT ROUNDS # times every console page, prints JSON

`fill` pushes (monolithic blob POSTs, manifest PUTs) one small OCI image
and tags it `t000000` ... in `bench/tags` over 8 keep-alive connections,
then two flattenable images (`bench/stack:1` and `:2`, real gzipped tar
layers) for `airlock stack promote`.

`cells` makes N cells (`diego-cell/NNNNN`) ask GET /stacks/v1/STACK?cell=ID
and PUT what they were told as their report, over one connection.

`measure` GETs each page ROUNDS times over one keep-alive connection
(keeping the console's session cookie), after one first request (timed
apart: it fills the console's caches), and prints per page: the first
request's ms, p50/p99 ms (client side, loopback), the page's bytes,
and the bytes of the page with every asset it names (stylesheet, icon);
plus the same timing for the registry's `/v2/bench/tags/tags/list?n=50`
as a reference point.
"""

import gzip
import hashlib
import http.client
import io
import json
import re
import sys
import tarfile
import threading
import time

MT = "application/vnd.oci.image.manifest.v1+json"


def sha256(b):
    return "sha256:" + hashlib.sha256(b).hexdigest()


def conn(host, port):
    return http.client.HTTPConnection(host, int(port), timeout=60)


def call(c, method, path, body=None, headers=None):
    c.request(method, path, body=body, headers=headers or {})
    r = c.getresponse()
    data = r.read()
    return r.status, r, data


def push_blob(c, repo, data):
    d = sha256(data)
    st, _, body = call(
        c, "POST", f"/v2/{repo}/blobs/uploads/?digest={d}", data,
        {"Content-Type": "application/octet-stream"},
    )
    if st != 201:
        sys.exit(f"blob push {repo}: {st} {body[:200]!r}")
    return d


def push_image(c, repo, tag, layers):
    """Pushes a config and `layers` (bytes, gzipped tars) as repo:tag."""
    config = json.dumps({
        "architecture": "amd64", "os": "linux",
        "rootfs": {"type": "layers", "diff_ids": [sha256(gzip.decompress(l)) for l in layers]},
    }).encode()
    cd = push_blob(c, repo, config)
    ls = [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
           "digest": push_blob(c, repo, l), "size": len(l)} for l in layers]
    m = json.dumps({
        "schemaVersion": 2, "mediaType": MT,
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": cd, "size": len(config)},
        "layers": ls,
    }).encode()
    st, _, body = call(c, "PUT", f"/v2/{repo}/manifests/{tag}", m, {"Content-Type": MT})
    if st != 201:
        sys.exit(f"manifest push {repo}:{tag}: {st} {body[:200]!r}")
    return m


def layer(files):
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as t:
        for name, content in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(content)
            info.mtime = 0
            t.addfile(info, io.BytesIO(content))
    return gzip.compress(raw.getvalue(), mtime=0)


def fill(host, port, tags):
    c = conn(host, port)
    m = push_image(c, "bench/tags", "t000000", [layer({"etc/hello": b"hello\n"})])
    todo = [f"t{i:06d}" for i in range(1, tags)]

    def worker(part):
        w = conn(host, port)
        for t in part:
            st, _, body = call(w, "PUT", f"/v2/bench/tags/manifests/{t}", m, {"Content-Type": MT})
            if st != 201:
                sys.exit(f"tag {t}: {st} {body[:200]!r}")

    threads = [threading.Thread(target=worker, args=(todo[i::8],)) for i in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    # A fresh connection: the first one idled past the server's idle timeout.
    c = conn(host, port)
    base = {"etc/os-release": b"ID=bench\n", "bin/sh": b"#!/bin/true\n" * 64}
    push_image(c, "bench/stack", "1", [layer(base)])
    push_image(c, "bench/stack", "2", [layer(base), layer({"etc/stack-version": b"2\n"})])


def cells(host, port, stack, n):
    c = conn(host, port)
    counts = {}
    for i in range(n):
        cell = f"diego-cell%2F{i:05d}"
        st, _, body = call(c, "GET", f"/stacks/v1/{stack}?cell={cell}")
        if st != 200:
            sys.exit(f"resolve: {st} {body[:200]!r}")
        d = json.loads(body)["digest"]
        st, _, body = call(c, "PUT", f"/stacks/v1/{stack}/cells/{cell}", json.dumps({"digest": d}).encode(),
                           {"Content-Type": "application/json"})
        if st != 204:
            sys.exit(f"report: {st} {body[:200]!r}")
        counts[d] = counts.get(d, 0) + 1
    print(json.dumps(counts))


PAGES = [
    ("overview", "/ui/"),
    ("history", "/ui/imports?all=1"),
    ("imports (1 in 100,000 gens)", "/ui/imports"),
    ("repositories", "/ui/repositories"),
    ("repositories search", "/ui/repositories?q=bench%2F"),
    ("tags, first page", "/ui/repositories/bench/tags"),
    ("tags, page at 50,000", "/ui/repositories/bench/tags?after=t050000"),
    ("tag detail", "/ui/repositories/bench/tags?tag=t000000"),
    ("stacks", "/ui/stacks"),
    ("stack, 10k cells", "/ui/stacks/bench"),
    ("stack, lagging page 2", "/ui/stacks/bench?lagging_after=diego-cell%2F05000"),
    ("torcx", "/ui/torcx"),
    ("operations", "/ui/operations"),
    ("api: stack", "/api/v1/stacks/bench"),
    ("api: tags", "/api/v1/repositories/bench/tags"),
    ("api: overview", "/api/v1/overview"),
    ("reference: /v2 tags/list?n=50", "/v2/bench/tags/tags/list?n=50"),
]


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def measure(host, port, rounds):
    c = conn(host, port)
    cookie = None
    out = []
    assets = {}
    for name, path in PAGES:
        times = []
        first = 0.0
        body = b""
        for i in range(rounds + 1):
            headers = {"Cookie": cookie} if cookie else {}
            t0 = time.perf_counter()
            st, r, body = call(c, "GET", path, headers=headers)
            dt = (time.perf_counter() - t0) * 1000
            if st != 200:
                sys.exit(f"{path}: {st} {body[:300]!r}")
            sc = r.getheader("Set-Cookie")
            if sc:
                cookie = sc.split(";")[0]
            if i > 0:
                times.append(dt)
            else:
                first = dt
        weight = len(body)
        for ref in sorted(set(re.findall(rb'(?:href|src)="(/ui/assets/[^"]+)"', body))):
            ref = ref.decode()
            if ref not in assets:
                _, _, a = call(c, "GET", ref)
                assets[ref] = len(a)
            weight += assets[ref]
        out.append({
            "page": name, "path": path, "first_ms": round(first, 2), "p50_ms": round(pct(times, 50), 2),
            "p99_ms": round(pct(times, 99), 2), "max_ms": round(max(times), 2),
            "bytes": len(body), "with_assets": weight,
        })
    print(json.dumps(out))


def main():
    cmd, host, port, *rest = sys.argv[1:]
    if cmd == "fill":
        fill(host, port, int(rest[0]))
    elif cmd == "cells":
        cells(host, port, rest[0], int(rest[1]))
    elif cmd == "measure":
        measure(host, port, int(rest[0]))
    else:
        sys.exit(f"unknown command {cmd}")


if __name__ == "__main__":
    main()
