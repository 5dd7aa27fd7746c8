#!/usr/bin/env python3
"""Generate a synthetic OCI image layout of incompressible blobs for benchmarks.

    scripts/bench/gen-import-layout.py OUTDIR SIZE_MIB [--seed N]

Writes OUTDIR/oci-layout, OUTDIR/index.json and OUTDIR/blobs/sha256/<hex>:
several images, each an OCI image manifest with one config and a number of
layers. Layer contents are os.urandom bytes (incompressible; media type says
tar+gzip but the bytes are not gzip -- airlock never looks inside layers).
Layer sizes total exactly SIZE_MIB MiB and follow a realistic spread:

  ~50 % of the bytes in a few large layers (256, 128, 64, 32, 16 MiB, at
        most a quarter of the total each),
  ~35 % in medium layers (1-32 MiB, log-uniform),
  ~15 % in many small layers (4 KiB-1 MiB, log-uniform).

Every digest is computed with hashlib while the blob is written. index.json
names each manifest with an org.opencontainers.image.ref.name annotation
(img-00, img-01, ...). Sizes and the layer-to-image assignment are
deterministic for a given --seed; the bytes are not.

Prints one line per image to stdout: "REF LAYERS BYTES".
"""

import argparse
import math
import os
import random
import sys

from ocilayout import LAYER_MT, PATH_ENV, new_layout, write_blob, write_image, write_index

KIB = 1024
MIB = 1024 * KIB
CHUNK = 4 * MIB



def log_uniform(rng, lo, hi):
    return int(math.exp(rng.uniform(math.log(lo), math.log(hi))))


def plan_sizes(total, rng):
    """Layer sizes (bytes) summing exactly to total."""
    sizes = []
    # Large: 256, 128, 64, 32, 16 MiB (each <= total/4), repeated, until ~50 %.
    large_budget = total // 2
    cap = min(256 * MIB, max(total // 4, MIB))
    size = cap
    used = 0
    while used < large_budget:
        s = min(size, large_budget - used)
        if s < MIB:
            break
        sizes.append(s)
        used += s
        size //= 2
        if size < min(16 * MIB, cap):
            size = cap
    # Medium: 1-32 MiB until ~85 % in total.
    medium_end = total * 85 // 100
    while used < medium_end:
        s = min(log_uniform(rng, MIB, 32 * MIB), medium_end - used)
        if s < 4 * KIB:
            break
        sizes.append(s)
        used += s
    # Small: 4 KiB-1 MiB for the rest; the last one takes the remainder.
    while used < total:
        left = total - used
        s = log_uniform(rng, 4 * KIB, MIB)
        if left - s < 4 * KIB:
            s = left
        sizes.append(s)
        used += s
    assert sum(sizes) == total
    return sizes


def random_chunks(size):
    left = size
    while left > 0:
        n = min(CHUNK, left)
        yield os.urandom(n)
        left -= n


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("outdir")
    ap.add_argument("size_mib", type=int)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    if args.size_mib < 1:
        ap.error("SIZE_MIB must be >= 1")

    rng = random.Random(args.seed)
    sizes = plan_sizes(args.size_mib * MIB, rng)
    rng.shuffle(sizes)
    # Several images: about one per 128 MiB, between 2 and 8; no image over
    # 120 layers (well under Docker's 127).
    n_images = max(2, min(8, args.size_mib // 128), math.ceil(len(sizes) / 120))
    groups = [[] for _ in range(n_images)]
    for i, s in enumerate(sizes):
        groups[i % n_images].append(s)

    blobs_dir = new_layout(args.outdir)

    index_entries = []
    for i, group in enumerate(groups):
        ref = "img-%02d" % i
        layers = []
        for s in group:
            d, n = write_blob(blobs_dir, random_chunks(s))
            layers.append({"mediaType": LAYER_MT, "digest": d, "size": n})
        config = {
            "architecture": "amd64",
            "os": "linux",
            "config": {"Env": [PATH_ENV]},
            "rootfs": {"type": "layers", "diff_ids": [l["digest"] for l in layers]},
            "history": [{"created_by": "airlock bench layer %d" % j} for j in range(len(layers))],
        }
        entry, _ = write_image(blobs_dir, ref, layers, config)
        index_entries.append(entry)
        print(ref, len(layers), sum(group))

    write_index(args.outdir, index_entries)
    return 0


if __name__ == "__main__":
    sys.exit(main())
