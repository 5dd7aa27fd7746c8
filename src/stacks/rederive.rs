//! Making a stack's derived blobs again: the flattened rootfs, its chunk
//! index, chunk map and `.cacnk` chunks, and its promotion patch are made
//! from the stack image at promotion; no bundle carries them. When one is
//! missing or quarantined (a damaged disk, a scrub), `airlock fsck --repair`
//! makes it again from the same inputs ([`run`]): the image's layers for
//! the rootfs, the rootfs for its chunks, the two rootfs for the patch.
//! The same inputs make the same bytes, and each blob made is kept only
//! when it is the one its record names (the state is never changed).

use std::sync::Arc;

use crate::digest::Digest;
use crate::state::StateStore;
use crate::store::{Blobstore, blob_key};

use super::StackError;
use super::table::{Rootfs, StackTable};

/// One derived blob found missing, and what making it again gave.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Rederived {
    /// The rootfs it belongs to (its tar's digest).
    pub rootfs: Digest,
    /// `rootfs`, `chunks` or `patch`.
    pub what: &'static str,
    /// The blob its record names (for `chunks`, the index).
    pub blob: Digest,
    /// `None`: made again (or, in a dry run, would be); else why not.
    pub error: Option<String>,
}

impl std::fmt::Display for Rederived {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let verb = if self.error.is_some() {
            "cannot make again"
        } else {
            "made again"
        };
        write!(f, "{verb}: {} {}", self.what, self.blob)?;
        if self.what != "rootfs" {
            write!(f, " of rootfs {}", self.rootfs)?;
        }
        match &self.error {
            Some(e) => write!(f, ": {e}"),
            None => Ok(()),
        }
    }
}

/// Finds every derived blob of every rootfs the current stack table names
/// that is missing from `blobs/` (a quarantined one, or one whose size is
/// not the size its record names, included) and, unless `dry_run`, makes it
/// again: rootfs first (chunks and patches are made from them), then
/// chunks (the index, the map and every chunk the map names), then
/// patches. A pass that could not make something runs again (at most
/// three passes), as reading a base may have just found it corrupt (and
/// quarantined it: missing now, so made next pass). Returns one entry per
/// blob found missing, in that order, with the outcome of its last try;
/// empty when nothing is missing.
///
/// Errors: the state or the store cannot be read (a blob that cannot be
/// made is an entry with its `error`, not an error).
pub async fn run(state: &StateStore, dry_run: bool) -> Result<Vec<Rederived>, StackError> {
    let table = super::ops::load(state).await?;
    let mut out: Vec<Rederived> = Vec::new();
    let mut last: Vec<Rederived> = Vec::new();
    for _ in 0..3 {
        let found = pass(state.blobstore(), &table, dry_run).await?;
        // Another pass helps only when this one found something new (a
        // base quarantined while it was read) or made something.
        let progress = found != last;
        let failed = found.iter().any(|e| e.error.is_some());
        last = found.clone();
        for e in found {
            merge(&mut out, e);
        }
        if dry_run || !failed || !progress {
            break;
        }
    }
    for e in &out {
        match &e.error {
            None if dry_run => {}
            None => {
                tracing::warn!(rootfs = %e.rootfs, what = e.what, blob = %e.blob, "derived stack blob made again")
            }
            Some(err) => {
                tracing::error!(rootfs = %e.rootfs, what = e.what, blob = %e.blob, error = %err, "derived stack blob cannot be made again")
            }
        }
    }
    Ok(out)
}

/// One pass of [`run`].
async fn pass(
    store: &Arc<dyn Blobstore>,
    table: &StackTable,
    dry_run: bool,
) -> Result<Vec<Rederived>, StackError> {
    let mut seen = std::collections::HashSet::new();
    let all: Vec<&Rootfs> = table
        .rootfs()
        .filter(|r| seen.insert(r.sha256.clone()))
        .collect();
    let mut out = Vec::new();
    for r in &all {
        if store.stat(&blob_key(&r.sha256)).await? != Some(r.size) {
            let error = if dry_run {
                None
            } else {
                rootfs(store, r).await.err()
            };
            out.push(entry(r, "rootfs", &r.sha256, error));
        }
    }
    for r in &all {
        let Some(c) = &r.chunks else { continue };
        if chunks_missing(&**store, c).await? {
            let error = if dry_run {
                None
            } else {
                chunks(store, r, c).await.err()
            };
            out.push(entry(r, "chunks", &c.index, error));
        }
    }
    for r in &all {
        let Some(p) = &r.patch else { continue };
        if store.stat(&blob_key(&p.blob)).await? != Some(p.size) {
            let error = if dry_run {
                None
            } else {
                patch(store, table, r, p).await.err()
            };
            out.push(entry(r, "patch", &p.blob, error));
        }
    }
    Ok(out)
}

/// Adds `e` to `out`, replacing the entry for the same blob (a later try
/// of it), else at the end.
pub fn merge(out: &mut Vec<Rederived>, e: Rederived) {
    match out
        .iter_mut()
        .find(|o| (o.what, &o.blob) == (e.what, &e.blob))
    {
        Some(o) => *o = e,
        None => out.push(e),
    }
}

fn entry(r: &Rootfs, what: &'static str, blob: &Digest, error: Option<String>) -> Rederived {
    Rederived {
        rootfs: r.sha256.clone(),
        what,
        blob: blob.clone(),
        error,
    }
}

/// Flattens the image manifest `r` names again.
async fn rootfs(store: &Arc<dyn Blobstore>, r: &Rootfs) -> Result<(), String> {
    let img = super::image::platform_image(&**store, &r.manifest)
        .await
        .map_err(|e| format!("reading its image manifest {}: {e}", r.manifest))?;
    let f = super::flatten::flatten(store.clone(), img.layers)
        .await
        .map_err(|e| {
            format!(
                "flattening {}: {e:#} (re-import a bundle that carries the image, then run fsck --repair again)",
                r.manifest
            )
        })?;
    same("flattening", &f.digest, &r.sha256)
}

/// Whether the index or the map of `c`, or a chunk the map names, is not stored.
async fn chunks_missing(
    store: &dyn Blobstore,
    c: &crate::chunks::ChunkRefs,
) -> Result<bool, StackError> {
    for d in [&c.index, &c.map] {
        if store.stat(&blob_key(d)).await?.is_none() {
            return Ok(true);
        }
    }
    let map = match crate::chunks::map::load(store, &c.map).await {
        Ok(m) => m,
        Err(_) => return Ok(true),
    };
    for d in map.blobs() {
        if store.stat(&blob_key(d)).await?.is_none() {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Chunks the rootfs `r` again (every chunk is written; present ones are kept).
async fn chunks(
    store: &Arc<dyn Blobstore>,
    r: &Rootfs,
    c: &crate::chunks::ChunkRefs,
) -> Result<(), String> {
    let built = match super::ops::chunk_rootfs(store, r).await {
        Ok(b) => b,
        Err(StackError::Other(e)) => return Err(settle_if_corrupt(store, &r.sha256, e).await),
        Err(e) => return Err(e.to_string()),
    };
    same("chunking (index)", &built.refs.index, &c.index)?;
    same("chunking (map)", &built.refs.map, &c.map)
}

/// Makes the patch `p` to `r` again from the rootfs it names as its base.
async fn patch(
    store: &Arc<dyn Blobstore>,
    table: &StackTable,
    r: &Rootfs,
    p: &crate::chunks::patch::PatchRef,
) -> Result<(), String> {
    let from = table
        .rootfs()
        .find(|x| x.sha256 == p.from)
        .ok_or_else(|| format!("its base rootfs {} is named by no promotion", p.from))?;
    if store.stat(&blob_key(&from.sha256)).await.ok().flatten() != Some(from.size) {
        return Err(format!(
            "its base rootfs {} is not stored (it is made again first when its image's layers are)",
            from.sha256
        ));
    }
    match super::patch::make(store, from, r).await {
        Ok(Some(made)) => same("patching", &made.blob, &p.blob),
        Ok(None) => Err("the patch made now is over 1/8 of the rootfs".into()),
        Err(e) => Err(settle_if_corrupt(store, &from.sha256, e).await),
    }
}

/// Why reading the rootfs `source` failed (`e`); when its verified read
/// found it corrupt, first waits until the store moved it to quarantine
/// (S3 moves it in the background), so the next pass finds it missing and
/// makes it again.
async fn settle_if_corrupt(
    store: &Arc<dyn Blobstore>,
    source: &Digest,
    e: anyhow::Error,
) -> String {
    let corrupt = e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::InvalidData)
            || matches!(
                c.downcast_ref::<crate::store::StoreError>(),
                Some(crate::store::StoreError::Corrupt(_))
            )
    });
    if corrupt {
        let _ = crate::store::verify::settle_quarantine(&**store, source).await;
    }
    format!("{e:#}")
}

/// `Ok` when `made` is `want`; else why (the blob made stays unreferenced:
/// GC removes it).
fn same(step: &str, made: &Digest, want: &Digest) -> Result<(), String> {
    if made == want {
        Ok(())
    } else {
        Err(format!(
            "{step} gave {made}, not the {want} the record names (made by another airlock version?)"
        ))
    }
}
