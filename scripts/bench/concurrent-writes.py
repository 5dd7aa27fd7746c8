#!/usr/bin/env python3
"""Concurrent registry writes, timed with curl --parallel (loopback only).

    concurrent-writes.py HOST:PORT MODE N RUN

MODE:
  tags   N manifest PUTs of one manifest to N new tags of one repository
  repos  N manifest PUTs to N different repositories (one tag each)
  blobs  N blob-upload finishes (PUT <session>?digest=) of N distinct 4 KiB
         blobs, to sessions opened before the clock starts
RUN names the repositories (so each run writes fresh ones).

Setup (not timed): the config blob is pushed to every repository the
manifests need (POST + PUT), the upload sessions are opened.
Timed: one `curl --parallel --parallel-immediate --parallel-max N` with all N
requests. Prints one line: "ok errors seconds" (ok = 201 answers).
"""
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request

CONFIG = b'{"architecture":"amd64","os":"linux","rootfs":{"type":"layers","diff_ids":[]}}'
CONFIG_MT = "application/vnd.oci.image.config.v1+json"
MANIFEST_MT = "application/vnd.oci.image.manifest.v1+json"


def sha256(b):
    return "sha256:" + hashlib.sha256(b).hexdigest()


def request(method, url, body=b"", headers=None):
    req = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    with urllib.request.urlopen(req, timeout=60) as r:
        return r.status, r.headers


def session(base, repo):
    """Opens an upload session; its absolute URL."""
    status, headers = request("POST", f"{base}/v2/{repo}/blobs/uploads/")
    assert status == 202, f"session in {repo}: {status}"
    loc = headers["Location"]
    return base + loc if loc.startswith("/") else loc


def push_config(base, repo):
    """POST then PUT (docker-registry 2.8 has no monolithic POST)."""
    loc = session(base, repo)
    sep = "&" if "?" in loc else "?"
    status, _ = request(
        "PUT",
        f"{loc}{sep}digest={sha256(CONFIG)}",
        CONFIG,
        {"Content-Type": "application/octet-stream"},
    )
    assert status == 201, f"config push to {repo}: {status}"


def main():
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    host, mode, n, run = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    base = f"http://{host}"
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": MANIFEST_MT,
            "config": {"mediaType": CONFIG_MT, "digest": sha256(CONFIG), "size": len(CONFIG)},
            "layers": [],
        }
    ).encode()
    with tempfile.TemporaryDirectory() as tmp:
        mfile = os.path.join(tmp, "m.json")
        with open(mfile, "wb") as f:
            f.write(manifest)
        lines = []
        if mode == "tags":
            repo = f"race{run}/app"
            push_config(base, repo)
            for i in range(n):
                lines += [
                    f'url = "{base}/v2/{repo}/manifests/t{i}"',
                    "request = PUT",
                    f'upload-file = "{mfile}"',
                    f'header = "Content-Type: {MANIFEST_MT}"',
                ]
        elif mode == "repos":
            for i in range(n):
                repo = f"race{run}/app{i}"
                push_config(base, repo)
                lines += [
                    f'url = "{base}/v2/{repo}/manifests/t1"',
                    "request = PUT",
                    f'upload-file = "{mfile}"',
                    f'header = "Content-Type: {MANIFEST_MT}"',
                ]
        elif mode == "blobs":
            repo = f"race{run}/blobs"
            for i in range(n):
                blob = f"{run}/{i}/".encode() + os.urandom(4096 - 16)
                bfile = os.path.join(tmp, f"b{i}")
                with open(bfile, "wb") as f:
                    f.write(blob)
                loc = session(base, repo)
                sep = "&" if "?" in loc else "?"
                lines += [
                    f'url = "{loc}{sep}digest={sha256(blob)}"',
                    "request = PUT",
                    f'upload-file = "{bfile}"',
                    'header = "Content-Type: application/octet-stream"',
                ]
        else:
            sys.exit(f"unknown mode {mode!r}")
        # Options in a curl config file are global until `next`, which starts
        # the next transfer's own set (--parallel stays global).
        groups, group = [], []
        for line in lines:
            if line.startswith("url = ") and group:
                groups.append(group)
                group = []
            group.append(line)
        groups.append(group)
        per = ['output = "/dev/null"', 'write-out = "%{http_code}\\n"', "silent"]
        cfg = os.path.join(tmp, "curl.cfg")
        with open(cfg, "w") as f:
            f.write("\nnext\n".join("\n".join(g + per) for g in groups) + "\n")
        t0 = time.monotonic()
        out = subprocess.run(
            [
                "curl", "--parallel", "--parallel-immediate",
                "--parallel-max", str(n), "-K", cfg,
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        seconds = time.monotonic() - t0
    if os.environ.get("DEBUG"):
        print(out.stdout[:300], out.stderr[:300], file=sys.stderr)
    codes = out.stdout.split()
    ok = sum(1 for c in codes if c == "201")
    print(f"{ok} {n - ok} {seconds:.4f}")


if __name__ == "__main__":
    main()
