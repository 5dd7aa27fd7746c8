//! Flattening an image's layers into one root file system tar (what `docker
//! export` gives and what garden's `persistent_image_list` and rep's
//! `preloaded_rootfses` expect), kept as a blob.
//!
//! Owns: applying layers in manifest order per the OCI image-spec "Applying
//! Changesets": `.wh.NAME` deletes NAME (and below) from lower layers,
//! `.wh..wh..opq` hides every lower child of its directory, a directory over
//! a directory only changes its attributes, anything else replaces; hard
//! links keep pointing at the file they named when their layer was applied.
//! Modes, owners (numeric and names), mtimes, device numbers and xattrs
//! (PAX `SCHILY.xattr.*`) are kept. Never extracts anything to disk.
//!
//! How: pass 1 reads the headers of the upper layers (all but the first)
//! and records what each does to each path; pass 2 streams every layer once,
//! bottom to top, and writes each entry that survives. Every layer is
//! decompressed (gzip through flate2, zstd through the `zstd` crate)
//! once in pass 2 and, except the first, once in pass 1, so the large base
//! layer of a stack image is read only once. Directories are written once,
//! where they first appear, with their final attributes, so a parent always
//! precedes its children. A hard link whose target a later layer replaced
//! becomes a regular file under its own name. In the rare case that a link
//! *in the first layer* outlives its target, pass 1 is re-run over the
//! first layer too.
//!
//! The output is deterministic (sorted by nothing but layer order, no
//! clock), written as ustar with PAX records where a field does not fit, and
//! its sha256 is the blob's digest: the same image always gives the same
//! rootfs digest. Layer digests and diff_ids are verified while reading.
//!
//! A layer's tar is read as Go's `archive/tar` reads it: it may end right
//! after an entry's data, without padding or end-of-archive blocks (what
//! `umoci insert` writes); an entry cut short is refused by name
//! (`layer.rs`). [`check_stored`] and [`check_layer_file`] read layers with
//! every check flattening makes, writing nothing, so a stack candidate is
//! known to flatten at `bundle create` and at import
//! ([`crate::stacks::candidates`]).
//!
//! Files: `blob.rs` (a blob written from a blocking writer), `entry.rs`
//! (one tar entry and whiteouts), `layer.rs` (reading one layer), `plan.rs`
//! (pass 1), `out.rs` (pass 2's writer), `check.rs` (reading without
//! writing), `pick.rs` (a few files of the flattened file system without
//! flattening it: [`pick_files`]); this file holds the entry point [`flatten`].

use std::collections::{HashMap, HashSet};
use std::io::{Read, Write};
use std::sync::Arc;

use anyhow::{Context, Result, anyhow, bail};
use bytes::Bytes;
use tokio::sync::mpsc;

use crate::digest::{Algorithm, Digest, Hasher};
use crate::store::{Blobstore, blob_key};

mod blob;
mod check;
mod entry;
mod layer;
mod out;
mod pick;
mod plan;
pub use blob::write_blocking;
pub use check::{check_layer_file, check_stored};
use entry::*;
use layer::*;
use out::*;
pub use pick::{Wanted, pick_files, pick_from_store};
use plan::*;

/// One layer as its manifest describes it.
#[derive(Debug, Clone)]
pub struct Layer {
    /// Layer media type (tar, tar+gzip, tar+zstd; OCI or Docker names).
    pub media_type: String,
    /// Digest of the stored (compressed) blob.
    pub digest: Digest,
    /// Its size in bytes.
    pub size: u64,
    /// The config's `rootfs.diff_ids` entry: the digest of the uncompressed tar.
    pub diff_id: Option<Digest>,
}

/// The flattened root file system, stored as a blob.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Flattened {
    /// sha256 of the tar (its blob digest).
    pub digest: Digest,
    /// Size in bytes.
    pub size: u64,
}

/// Flattens `layers` (bottom first) into one tar stored as a blob; returns
/// its digest and size. Deterministic: the same layers give the same blob.
///
/// Errors: a layer missing from the store or not matching its digest,
/// size or diff_id; an unsupported media type or entry type; a path with
/// `..`; a store failure. Nothing is left in `blobs/` on error.
pub async fn flatten(store: Arc<dyn Blobstore>, layers: Vec<Layer>) -> Result<Flattened> {
    for l in &layers {
        compression(&l.media_type)?;
    }
    let mut from = 1.min(layers.len());
    loop {
        match flatten_once(store.clone(), layers.clone(), from).await {
            Err(e) if from > 0 && e.downcast_ref::<NeedFullScan>().is_some() => from = 0,
            other => return other,
        }
    }
}

async fn flatten_once(
    store: Arc<dyn Blobstore>,
    layers: Vec<Layer>,
    scan_from: usize,
) -> Result<Flattened> {
    let handle = tokio::runtime::Handle::current();
    let st = store.clone();
    let ((), digest, size) = write_blocking(store, move |w| {
        let plan = scan(&st, &handle, &layers, scan_from)?;
        write_all(&st, &handle, &layers, &plan, w)?;
        Ok(())
    })
    .await?;
    Ok(Flattened { digest, size })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_whiteouts() {
        assert!(matches!(name_of(b"./").unwrap(), Name::Root));
        assert!(
            matches!(name_of(b"./etc/.wh.motd").unwrap(), Name::Whiteout(p) if p == "etc/motd")
        );
        assert!(matches!(name_of(b"var/.wh..wh..opq").unwrap(), Name::Opaque(p) if p == "var"));
        assert!(matches!(name_of(b"/usr//bin/").unwrap(), Name::Path(p) if p == "usr/bin"));
        assert!(name_of(b"a/../../etc").is_err());
        assert_eq!(ancestors("a/b/c").collect::<Vec<_>>(), ["a", "a/b"]);
    }

    /// An uncompressed layer of (path, kind, content or link target), stored in `store`.
    async fn layer(store: &Arc<dyn Blobstore>, entries: &[(&str, Kind, &str)]) -> Layer {
        let mut b = tar::Builder::new(Vec::new());
        for (path, kind, text) in entries {
            let mut h = tar::Header::new_ustar();
            h.set_entry_type(kind.entry_type());
            h.set_mode(0o644);
            let data = if *kind == Kind::Regular {
                text.as_bytes()
            } else {
                b""
            };
            h.set_size(data.len() as u64);
            if matches!(kind, Kind::Hardlink | Kind::Symlink) {
                h.set_link_name(text).unwrap();
            }
            b.append_data(&mut h, path, data).unwrap();
        }
        let bytes = b.into_inner().unwrap();
        let digest = crate::store::put_bytes(&**store, &bytes).await.unwrap();
        Layer {
            media_type: "application/vnd.oci.image.layer.v1.tar".into(),
            size: bytes.len() as u64,
            diff_id: Some(digest.clone()),
            digest,
        }
    }

    async fn listing(store: &Arc<dyn Blobstore>, layers: Vec<Layer>) -> Vec<String> {
        let f = flatten(store.clone(), layers).await.unwrap();
        let bytes = crate::store::get_verified(&**store, &f.digest)
            .await
            .unwrap();
        let mut a = tar::Archive::new(&bytes[..]);
        a.entries()
            .unwrap()
            .map(|e| {
                let mut e = e.unwrap();
                let kind = Kind::of(e.header().entry_type()).unwrap();
                let mut text = String::new();
                if let Some(l) = e.link_name().unwrap() {
                    text = l.display().to_string();
                }
                e.read_to_string(&mut text).unwrap();
                format!("{} {kind:?} {text}", e.path().unwrap().display())
            })
            .collect()
    }

    #[tokio::test]
    async fn top_level_opaque_and_links_across_layers() {
        use Kind::*;
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Blobstore> =
            Arc::new(crate::store::fs::FsStore::open(dir.path()).unwrap());
        let l1 = layer(
            &store,
            &[
                ("a", Dir, ""),
                ("a/f", Regular, "f1"),
                ("a/l", Hardlink, "a/f"),
                ("b", Regular, "b1"),
            ],
        )
        .await;
        let opaque = layer(
            &store,
            &[(".wh..wh..opq", Regular, ""), ("c", Regular, "c2")],
        )
        .await;
        assert_eq!(
            listing(&store, vec![l1.clone(), opaque]).await,
            ["c Regular c2"]
        );
        // a/f replaced above: its other name a/l keeps the old content.
        let replace = layer(
            &store,
            &[
                ("a/f", Regular, "f2"),
                ("a/m", Hardlink, "a/l"),
                ("a/.wh.gone", Regular, ""),
            ],
        )
        .await;
        assert_eq!(
            listing(&store, vec![l1, replace]).await,
            [
                "a Dir ",
                "a/l Regular f1",
                "b Regular b1",
                "a/f Regular f2",
                "a/m Hardlink a/l"
            ]
        );
    }

    #[test]
    fn pax_record_lengths_count_themselves() {
        for (k, v) in [
            ("path", "x".repeat(5)),
            ("path", "y".repeat(95)),
            ("mtime", "1".into()),
        ] {
            let mut out = Vec::new();
            pax_record(&mut out, k, v.as_bytes());
            let s = String::from_utf8(out).unwrap();
            let (len, _) = s.split_once(' ').unwrap();
            assert_eq!(len.parse::<usize>().unwrap(), s.len(), "{s}");
        }
    }
}
