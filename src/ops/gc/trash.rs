//! Where a GC run keeps its candidates until its third look:
//! `gc-trash/<alg>-<hex>.<run id>` ([`store::GC_TRASH_PREFIX`]), one run id
//! per run, so a run settles only what it moved itself.
//!
//! Moves go through [`Blobstore::rename`]: one `rename(2)` on the
//! filesystem; `CopyObject` then `DeleteObject` on S3. Killed between the
//! two, both keys hold the same bytes (the key is the content's digest):
//! [`restore`] finds the blob present again and drops the trash copy.

use std::collections::HashSet;

use anyhow::{Context, Result};
use futures_util::StreamExt;
use futures_util::future::BoxFuture;

use super::GcReport;
use crate::digest::Digest;
use crate::store::{self, Blobstore, StoreError};

/// Moves, deletes and put-backs in flight at once (each one blocking
/// `rename(2)`/`unlink(2)` on the filesystem, one or two round trips on S3).
pub const PARALLEL: usize = 16;

/// One trashed blob settled: (its size in bytes, its digest, whether it was put back).
type Settled = (u64, Digest, bool);

/// The trash of one run.
pub struct Run {
    /// `.<run id>`, the suffix of every key this run moved.
    suffix: String,
}

impl Run {
    /// A run with a fresh id.
    pub fn new() -> Run {
        Run {
            suffix: format!(".{}", uuid::Uuid::new_v4().simple()),
        }
    }

    fn key(&self, digest: &Digest) -> String {
        format!(
            "{}{}{}",
            store::GC_TRASH_PREFIX,
            store::trash_name(digest),
            self.suffix
        )
    }

    /// Moves the blob at `key` (of `digest`) to this run's trash; `false`
    /// when it was gone already. Errors: the store failed.
    pub async fn take(&self, store: &dyn Blobstore, key: &str, digest: &Digest) -> Result<bool> {
        match store.rename(key, &self.key(digest)).await {
            Ok(()) => Ok(true),
            Err(StoreError::NotFound(_)) => Ok(false),
            Err(e) => Err(e).with_context(|| format!("moving {digest} to gc-trash/")),
        }
    }

    /// After the third look: deletes this run's trashed blobs still not in
    /// `reached` (counted at deletion; those in `failed_young` as failed
    /// imports' too), puts the others back. Errors: the store failed.
    pub async fn settle(
        &self,
        store: &dyn Blobstore,
        reached: &HashSet<Digest>,
        failed_young: &HashSet<Digest>,
        report: &mut GcReport,
    ) -> Result<()> {
        let listed = store
            .list_meta(store::GC_TRASH_PREFIX)
            .await
            .context("listing gc-trash/")?;
        let mine = listed.iter().filter_map(|m| {
            let digest = store::trash_digest(&m.key)?;
            m.key.ends_with(&self.suffix).then_some((m, digest))
        });
        // Boxed futures, not a `map` closure: see `sweep_blobs`.
        let settles: Vec<BoxFuture<'_, Result<Settled>>> = mine
            .map(|(m, digest)| -> BoxFuture<'_, _> {
                Box::pin(async move {
                    let kept = reached.contains(&digest);
                    if kept {
                        put_back(store, &m.key, &digest).await?;
                    } else {
                        store.delete(&m.key).await?;
                    }
                    Ok((m.size, digest, kept))
                })
            })
            .collect();
        let mut settled = futures_util::stream::iter(settles).buffer_unordered(PARALLEL);
        while let Some(one) = settled.next().await {
            let (size, digest, kept) = one?;
            if kept {
                report.blobs_put_back += 1;
            } else {
                report.blobs_removed += 1;
                report.blob_bytes_freed += size;
                report.failed_import_blobs_removed += u64::from(failed_young.contains(&digest));
            }
        }
        Ok(())
    }
}

/// Puts every blob in `gc-trash/` back (a killed run's, or a live run's on
/// another replica: putting back is always safe, that run then finds
/// nothing to delete), so this run decides about each afresh.
/// Errors: the store failed.
pub async fn restore(store: &dyn Blobstore) -> Result<()> {
    let listed = store
        .list_meta(store::GC_TRASH_PREFIX)
        .await
        .context("listing gc-trash/")?;
    for m in listed {
        match store::trash_digest(&m.key) {
            Some(digest) => put_back(store, &m.key, &digest).await?,
            None => store.delete(&m.key).await?,
        }
    }
    Ok(())
}

/// Moves a trashed blob back to its key, or drops it when the key holds
/// the blob again (written by a push or import meanwhile, or a move killed
/// between its copy and its delete: same content). Gone meanwhile (another
/// run settled or restored it): nothing to do.
async fn put_back(store: &dyn Blobstore, trashed: &str, digest: &Digest) -> Result<()> {
    let target = store::blob_key(digest);
    if store.stat(&target).await?.is_some() {
        store.delete(trashed).await?;
        return Ok(());
    }
    match store.rename(trashed, &target).await {
        Ok(()) | Err(StoreError::NotFound(_)) => Ok(()),
        Err(e) => Err(e).with_context(|| format!("putting {digest} back from gc-trash/")),
    }
}
