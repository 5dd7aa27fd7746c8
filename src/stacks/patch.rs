//! The rootfs patch a promotion makes: the new rootfs as a zstd patch
//! from the rootfs of the same platform in the promotion it replaces
//! ([`crate::chunks::patch`]), kept as an ordinary blob that the new
//! rootfs record names (so GC keeps it while the promotion is kept).
//!
//! Owns: spooling both rootfs blobs out of the store (verified against
//! their digests) into anonymous files under `TMPDIR`, mapping them, and
//! storing a patch that pays (at most [`MAX_SHARE`] of the new rootfs).
//! Never decides which promotion is replaced (`ops` passes it) and never
//! fails a promotion: a patch not made only means cells use chunks.

use std::io::Write;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result};

use super::table::Rootfs;
use crate::chunks::patch::{self, PatchRef};
use crate::digest::{Digest, HashingReader};
use crate::store::{Blobstore, blob_key};

/// A patch is kept only when it is at most this share of the new rootfs
/// (1/8): a larger one means most of the rootfs changed, where the
/// chunks a cell lacks cost about as much and need no exact base.
pub const MAX_SHARE: u64 = 8;

/// The patch from `from` to `to`, stored: `Ok(None)` when there is nothing
/// to patch (same rootfs, an empty one) or the patch would not pay.
/// Disk: `from.size + to.size` bytes under `TMPDIR` while it runs (freed
/// when it returns); memory: zstd's tables and the patch (at most
/// `to.size / MAX_SHARE`). Errors: a blob missing or not matching its
/// digest, `TMPDIR` full, a store write failed.
pub async fn make(
    store: &Arc<dyn Blobstore>,
    from: &Rootfs,
    to: &Rootfs,
) -> Result<Option<PatchRef>> {
    if from.sha256 == to.sha256 || from.size == 0 || to.size == 0 {
        return Ok(None);
    }
    let started = Instant::now();
    let old = spool(store, &from.sha256, from.size).await?;
    let new = spool(store, &to.sha256, to.size).await?;
    let limit = (to.size / MAX_SHARE) as usize;
    let made = tokio::task::spawn_blocking(move || patch::make(&old, &new, limit))
        .await
        .context("patch worker")??;
    let Some(bytes) = made else {
        tracing::info!(from = %from.sha256, to = %to.sha256, limit, "no rootfs patch: it would be over 1/8 of the rootfs");
        return Ok(None);
    };
    let (_, blob, size) = crate::stacks::flatten::write_blocking(store.clone(), move |w| {
        w.write_all(&bytes)?;
        Ok(())
    })
    .await?;
    tracing::info!(
        from = %from.sha256,
        to = %to.sha256,
        patch = %blob,
        bytes = size,
        rootfs_size = to.size,
        seconds = format!("{:.2}", started.elapsed().as_secs_f64()),
        "rootfs patch made"
    );
    Ok(Some(PatchRef {
        from: from.sha256.clone(),
        from_size: from.size,
        blob,
        size,
    }))
}

/// The blob `digest` of `size` bytes copied out of `store` into an
/// anonymous file under `TMPDIR` (gone when the map is dropped), checked
/// against its digest, and mapped read-only.
async fn spool(store: &Arc<dyn Blobstore>, digest: &Digest, size: u64) -> Result<memmap2::Mmap> {
    let reader = store.read(&blob_key(digest), None).await?;
    let digest = digest.clone();
    tokio::task::spawn_blocking(move || -> Result<memmap2::Mmap> {
        let mut file = tempfile::tempfile().context("creating a spool file under TMPDIR")?;
        let mut r = HashingReader::new(
            tokio_util::io::SyncIoBridge::new(reader),
            digest.algorithm(),
        );
        {
            let mut w = std::io::BufWriter::with_capacity(1 << 20, &mut file);
            std::io::copy(&mut r, &mut w).context("spooling a rootfs under TMPDIR")?;
            w.flush().context("spooling a rootfs under TMPDIR")?;
        }
        r.verify(&digest, size)?;
        // SAFETY: an anonymous file of this process, written above and
        // never written again.
        Ok(unsafe { memmap2::Mmap::map(&file) }?)
    })
    .await
    .context("spool worker")?
}
