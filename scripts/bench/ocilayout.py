"""Writing OCI image layouts (image-spec "Image Layout") for the benchmark
generators: blobs hashed with hashlib while written, never typed by hand."""

import hashlib
import json
import os

LAYER_MT = "application/vnd.oci.image.layer.v1.tar+gzip"
CONFIG_MT = "application/vnd.oci.image.config.v1+json"
MANIFEST_MT = "application/vnd.oci.image.manifest.v1+json"
INDEX_MT = "application/vnd.oci.image.index.v1+json"
REF_NAME = "org.opencontainers.image.ref.name"
PATH_ENV = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def new_layout(outdir):
    """Creates OUTDIR (missing or empty) with its oci-layout file; returns the blobs dir."""
    if os.path.exists(outdir) and os.listdir(outdir):
        raise SystemExit("OUTDIR %s exists and is not empty" % outdir)
    blobs_dir = os.path.join(outdir, "blobs", "sha256")
    os.makedirs(blobs_dir, exist_ok=True)
    with open(os.path.join(outdir, "oci-layout"), "w") as f:
        json.dump({"imageLayoutVersion": "1.0.0"}, f)
    return blobs_dir


def write_blob(blobs_dir, chunks):
    """Streams chunks into a temp file while hashing; renames it to its digest.
    Returns (digest, size)."""
    tmp = os.path.join(blobs_dir, ".tmp-%d" % os.getpid())
    h = hashlib.sha256()
    n = 0
    with open(tmp, "wb") as f:
        for chunk in chunks:
            h.update(chunk)
            f.write(chunk)
            n += len(chunk)
    hexd = h.hexdigest()
    os.replace(tmp, os.path.join(blobs_dir, hexd))
    return "sha256:" + hexd, n


def write_json_blob(blobs_dir, obj):
    """A JSON document (compact, sorted keys) as a blob. Returns (digest, size)."""
    data = json.dumps(obj, separators=(",", ":"), sort_keys=True).encode()
    return write_blob(blobs_dir, [data])


def write_image(blobs_dir, ref, layers, config):
    """Writes an image's config and OCI manifest over `layers` (descriptors).
    Returns (index entry naming it `ref`, config digest)."""
    cd, cn = write_json_blob(blobs_dir, config)
    manifest = {
        "schemaVersion": 2,
        "mediaType": MANIFEST_MT,
        "config": {"mediaType": CONFIG_MT, "digest": cd, "size": cn},
        "layers": layers,
    }
    md, mn = write_json_blob(blobs_dir, manifest)
    return {"mediaType": MANIFEST_MT, "digest": md, "size": mn, "annotations": {REF_NAME: ref}}, cd


def write_index(outdir, entries):
    """OUTDIR/index.json listing `entries`."""
    index = {"schemaVersion": 2, "mediaType": INDEX_MT, "manifests": entries}
    with open(os.path.join(outdir, "index.json"), "w") as f:
        json.dump(index, f, indent=2)
