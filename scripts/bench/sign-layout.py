#!/usr/bin/env python3
"""Signs images of an OCI layout as `cosign sign --key` would, into the same
layout: for each ref name given (default: every ref that is not itself a
signature), a simple-signing payload naming the manifest digest, signed by
the openssl EC key KEY (ECDSA P-256 over SHA-256, DER, base64 in the
`dev.cosignproject.cosign/signature` annotation), in a signature image the
layout names `sha256-<hex>.sig`, as `skopeo copy` of cosign's tag leaves it.

usage: sign-layout.py LAYOUT KEY [REF...]
"""
import base64
import hashlib
import json
import os
import subprocess
import sys

REF = "org.opencontainers.image.ref.name"


def put_blob(layout, data):
    d = hashlib.sha256(data).hexdigest()
    path = os.path.join(layout, "blobs", "sha256", d)
    with open(path, "wb") as f:
        f.write(data)
    return "sha256:" + d


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    layout, key, wanted = sys.argv[1], sys.argv[2], sys.argv[3:]
    index_path = os.path.join(layout, "index.json")
    with open(index_path) as f:
        index = json.load(f)
    added = []
    for m in index["manifests"]:
        ref = m.get("annotations", {}).get(REF, "")
        if ref.endswith(".sig") or (wanted and ref not in wanted):
            continue
        digest = m["digest"]
        payload = json.dumps({
            "critical": {"identity": {"docker-reference": "bench/" + ref},
                         "image": {"docker-manifest-digest": digest},
                         "type": "cosign container image signature"},
            "optional": None}).encode()
        sig = subprocess.run(["openssl", "dgst", "-sha256", "-sign", key],
                             input=payload, capture_output=True, check=True).stdout
        p = put_blob(layout, payload)
        config = json.dumps({"architecture": "", "os": "", "config": {},
                             "rootfs": {"type": "layers", "diff_ids": [p]}}).encode()
        c = put_blob(layout, config)
        manifest = json.dumps({
            "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                       "digest": c, "size": len(config)},
            "layers": [{"mediaType": "application/vnd.dev.cosign.simplesigning.v1+json",
                        "digest": p, "size": len(payload),
                        "annotations": {"dev.cosignproject.cosign/signature":
                                        base64.b64encode(sig).decode()}}]}).encode()
        md = put_blob(layout, manifest)
        added.append({"mediaType": "application/vnd.oci.image.manifest.v1+json",
                      "digest": md, "size": len(manifest),
                      "annotations": {REF: digest.replace(":", "-") + ".sig"}})
    index["manifests"].extend(added)
    with open(index_path, "w") as f:
        json.dump(index, f)
    print(len(added))


if __name__ == "__main__":
    main()
