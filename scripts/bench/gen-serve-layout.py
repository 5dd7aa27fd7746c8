#!/usr/bin/env python3
"""Generate the OCI image layout that scripts/bench-serve.sh serves.

    scripts/bench/gen-serve-layout.py OUTDIR

Writes OUTDIR/oci-layout, OUTDIR/index.json and OUTDIR/blobs/sha256/<hex>
with three images (ref names in index.json):

  small   one layer of exactly 4096 bytes
  big     one layer of exactly 64 MiB
  multi   five layers of 2, 3, 4, 5 and 6 MiB

Every layer is a valid gzip stream (media type
application/vnd.oci.image.layer.v1.tar+gzip) of a tar holding one file of
os.urandom bytes: incompressible, so the gzip uses stored deflate blocks
(level 0), and its header carries an FEXTRA field sized so that the blob is
exactly the size above. Compressed layers keep skopeo from recompressing them
on push or pull (it compresses uncompressed layers for docker:// and oci:
destinations), so manifests and digests stay byte-identical. The config's
rootfs.diff_ids are the sha256 of the uncompressed tars. Configs and manifests
are valid OCI image-spec JSON. Every digest is computed with hashlib over the
bytes written; none is typed by hand.

Prints one line per image to stdout:
  NAME MANIFEST_DIGEST MANIFEST_SIZE CONFIG_DIGEST LAYER_DIGEST:SIZE,...
"""

import hashlib
import os
import sys
import struct
import tarfile
import zlib

from ocilayout import LAYER_MT, PATH_ENV, new_layout, write_blob, write_image, write_index

KIB = 1024
MIB = 1024 * KIB
BLOCK = 512


IMAGES = [
    ("small", [4 * KIB]),
    ("big", [64 * MIB]),
    ("multi", [2 * MIB, 3 * MIB, 4 * MIB, 5 * MIB, 6 * MIB]),
]


def tar_bytes(total, name):
    """A ustar archive of exactly `total` bytes: one header, one file of random
    bytes, and the two zero end-of-archive blocks."""
    assert total % BLOCK == 0 and total >= 4 * BLOCK
    size = total - 3 * BLOCK
    info = tarfile.TarInfo(name)
    info.size = size
    info.mode = 0o644
    info.mtime = 0
    info.type = tarfile.REGTYPE
    header = info.tobuf(format=tarfile.USTAR_FORMAT)
    assert len(header) == BLOCK
    return header + os.urandom(size) + b"\0" * (2 * BLOCK)


def deflate_stored(data):
    c = zlib.compressobj(0, zlib.DEFLATED, -15)
    return c.compress(data) + c.flush()


def gzip_layer(target, name):
    """(gzip bytes of exactly `target` length, sha256 digest of the tar inside)."""
    # Stored deflate adds a fixed overhead per block: measure it once, then
    # make the tar as large as fits and pad the gzip header (FEXTRA) to target.
    fixed = 10 + 2 + 4 + 8  # header, XLEN, one subfield header, trailer
    probe = (target - fixed) // BLOCK * BLOCK
    overhead = len(deflate_stored(bytes(probe))) - probe
    tar_size = (target - fixed - overhead) // BLOCK * BLOCK
    while True:
        tar = tar_bytes(tar_size, name)
        raw = deflate_stored(tar)
        xlen = target - 10 - 2 - len(raw) - 8
        if 4 <= xlen <= 0xFFFF:
            break
        tar_size -= BLOCK
    header = b"\x1f\x8b\x08\x04" + struct.pack("<I", 0) + b"\x00\xff"
    extra = struct.pack("<H", xlen) + b"AB" + struct.pack("<H", xlen - 4) + bytes(xlen - 4)
    trailer = struct.pack("<II", zlib.crc32(tar) & 0xFFFFFFFF, len(tar) & 0xFFFFFFFF)
    gz = header + extra + raw + trailer
    assert len(gz) == target
    assert zlib.decompress(gz, 16 + 15) == tar
    return gz, "sha256:" + hashlib.sha256(tar).hexdigest()


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: gen-serve-layout.py OUTDIR")
    outdir = sys.argv[1]
    blobs_dir = new_layout(outdir)

    index_entries = []
    for name, sizes in IMAGES:
        layers = []
        diff_ids = []
        for i, s in enumerate(sizes):
            gz, diff_id = gzip_layer(s, "%s-%d.bin" % (name, i))
            d, n = write_blob(blobs_dir, [gz])
            assert n == s
            layers.append({"mediaType": LAYER_MT, "digest": d, "size": n})
            diff_ids.append(diff_id)
        config = {
            "created": "2026-01-01T00:00:00Z",
            "architecture": "amd64",
            "os": "linux",
            "config": {"Env": [PATH_ENV]},
            "rootfs": {"type": "layers", "diff_ids": diff_ids},
            "history": [
                {"created": "2026-01-01T00:00:00Z", "created_by": "airlock bench-serve %s layer %d" % (name, j)}
                for j in range(len(layers))
            ],
        }
        entry, cd = write_image(blobs_dir, name, layers, config)
        index_entries.append(entry)
        print(name, entry["digest"], entry["size"], cd, ",".join("%s:%d" % (l["digest"], l["size"]) for l in layers))

    write_index(outdir, index_entries)
    return 0


if __name__ == "__main__":
    sys.exit(main())
