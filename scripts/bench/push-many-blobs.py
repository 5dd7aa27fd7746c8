#!/usr/bin/env python3
"""Push COUNT different blobs of SIZE bytes each into a registry.

    scripts/bench/push-many-blobs.py HOST:PORT REPOSITORY COUNT SIZE

Blob i is SIZE - 8 random bytes shared by all blobs, then i as 8 bytes big
endian: every blob has its own digest, computed with hashlib (the shared
prefix hashed once, then copied). Each is uploaded with the OCI monolithic
upload (POST /v2/REPOSITORY/blobs/uploads/, then PUT ?digest=), streamed
from memory with a Content-Length. Prints one digest per line.
"""

import hashlib
import http.client
import os
import sys

CHUNK = 1 << 20


def push(addr, repo, body_parts, size, digest):
    host, port = addr.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=300)
    conn.request("POST", f"/v2/{repo}/blobs/uploads/")
    r = conn.getresponse()
    r.read()
    if r.status != 202:
        sys.exit(f"POST upload: HTTP {r.status}")
    loc = r.getheader("Location")
    sep = "&" if "?" in loc else "?"
    path = loc if loc.startswith("/") else "/" + loc.split("/", 3)[3]
    conn.request(
        "PUT",
        f"{path}{sep}digest={digest}",
        body=body_parts,
        headers={"Content-Length": str(size), "Content-Type": "application/octet-stream"},
    )
    r = conn.getresponse()
    r.read()
    if r.status != 201:
        sys.exit(f"PUT {digest}: HTTP {r.status}")
    conn.close()


def main():
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    addr, repo, count, size = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    prefix = memoryview(os.urandom(size - 8))
    base = hashlib.sha256(prefix)
    for i in range(count):
        tail = i.to_bytes(8, "big")
        h = base.copy()
        h.update(tail)
        digest = "sha256:" + h.hexdigest()
        parts = [prefix[o : o + CHUNK] for o in range(0, len(prefix), CHUNK)] + [tail]
        push(addr, repo, parts, size, digest)
        print(digest, flush=True)


if __name__ == "__main__":
    main()
