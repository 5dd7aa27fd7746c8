//! airlock's chunker and blob index against the real casync (Debian
//! package `casync`): for each file, `casync make --digest=sha256
//! --compression=zstd` writes a `.caibx` that must equal, byte for byte,
//! the index airlock computes of the same bytes, and a chunk store whose
//! `.cacnk` files are exactly airlock's chunk ids and decompress to their
//! id with airlock's verifying reader. Files: the edge sizes (empty,
//! smaller than min, exactly max, one byte over, long runs of zeros) and
//! a tar of a generated tree made by GNU tar.

use crate::common;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use airlock::chunks::{BlobIndex, ChunkId, ChunkSizes, cacnk};
use common::synth::{noise, text};
use common::{require_tool, run_ok};

/// `casync make` of `file` into `store`: the `.caibx` bytes.
fn casync_index(dir: &Path, file: &Path, store: &Path) -> Vec<u8> {
    let idx = dir.join(format!(
        "{}.caibx",
        file.file_name().unwrap().to_string_lossy()
    ));
    run_ok(
        Command::new("casync")
            .args(["make", "--digest=sha256", "--compression=zstd"])
            .arg(format!("--store={}", store.display()))
            .arg(&idx)
            .arg(file),
    );
    std::fs::read(idx).unwrap()
}

/// Every chunk id in a casync store (`<4 hex>/<id>.cacnk`).
fn store_ids(store: &Path) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let Ok(dirs) = std::fs::read_dir(store) else {
        return out;
    };
    for d in dirs.flatten() {
        if !d.file_type().unwrap().is_dir() {
            continue;
        }
        for f in std::fs::read_dir(d.path()).unwrap().flatten() {
            let name = f.file_name().to_string_lossy().into_owned();
            if let Some(id) = name.strip_suffix(".cacnk") {
                assert!(id.starts_with(&d.file_name().to_string_lossy().to_string()));
                out.insert(id.to_string());
            }
        }
    }
    out
}

fn check(dir: &Path, name: &str, data: &[u8]) {
    let file = dir.join(name);
    std::fs::write(&file, data).unwrap();
    let store = dir.join(format!("{name}.castr"));
    let theirs = casync_index(dir, &file, &store);
    let ours = BlobIndex::of(data, ChunkSizes::DEFAULT).unwrap();
    assert_eq!(
        BlobIndex::parse(&theirs).unwrap().chunks,
        ours.chunks,
        "{name}: chunk boundaries or ids differ from casync's"
    );
    assert_eq!(theirs, ours.to_bytes(), "{name}: .caibx bytes differ");
    let ids: BTreeSet<String> = ours.chunks.iter().map(|c| c.id.to_string()).collect();
    assert_eq!(
        store_ids(&store),
        ids,
        "{name}: casync's store holds other chunks"
    );
    for c in &ours.chunks {
        let z = std::fs::read(store.join(c.id.store_path())).unwrap();
        let plain = cacnk::decompress_verified(&z, &c.id, 256 * 1024).unwrap();
        assert_eq!(ChunkId::of(&plain), c.id);
    }
}

#[test]
fn chunker_and_index_equal_casyncs_on_edge_sizes() {
    require_tool("casync", "casync");
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    check(d, "empty", b"");
    check(d, "short", &noise(1, 100));
    check(d, "below-min", &noise(2, 16 * 1024 - 1));
    check(d, "exactly-max", &noise(3, 256 * 1024));
    check(d, "max-plus-one", &noise(4, 256 * 1024 + 1));
    check(d, "zeros", &vec![0u8; 3 << 20]);
    let mut mixed = vec![0u8; 700_000];
    mixed.extend(noise(5, 1 << 20));
    mixed.extend(vec![0u8; 300_001]);
    mixed.extend(text(6, 900_000));
    check(d, "zero-runs", &mixed);
    let ours = BlobIndex::of(&vec![0u8; 3 << 20], ChunkSizes::DEFAULT).unwrap();
    assert!(
        ours.chunks.len() == 12,
        "3 MiB of zeros: casync cuts at max, 12 chunks"
    );
}

#[test]
fn chunker_and_index_equal_casyncs_on_a_tar() {
    require_tool("casync", "casync");
    require_tool("tar", "tar");
    let dir = tempfile::tempdir().unwrap();
    let tree = dir.path().join("tree");
    for i in 0..160u64 {
        let sub = tree.join(format!("usr/lib/pkg-{:02}", i % 17));
        std::fs::create_dir_all(&sub).unwrap();
        let size = 1000 + (noise(i, 2)[0] as usize) * 700;
        let bytes = if i % 3 == 0 {
            noise(i, size)
        } else {
            text(i, size * 2)
        };
        std::fs::write(sub.join(format!("file-{i}.so")), bytes).unwrap();
    }
    let tar = dir.path().join("rootfs.tar");
    run_ok(
        Command::new("tar")
            .args(["--sort=name", "--mtime=@0", "--owner=0", "--group=0", "-cf"])
            .arg(&tar)
            .arg("-C")
            .arg(&tree)
            .arg("."),
    );
    let data = std::fs::read(&tar).unwrap();
    assert!(data.len() > 16 << 20, "tar of {} bytes", data.len());
    check(dir.path(), "rootfs.tar", &data);
}
