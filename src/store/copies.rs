//! Second copies of metadata blobs: how one damaged metadata object costs
//! no acknowledged write.
//!
//! Owns: where a copy lives ([`copy_key`]: `copies/<alg>/<2 hex>/<hex>`,
//! beside `blobs/`), the read that falls back to it ([`super::get_verified`]
//! calls [`recover`] when a blob is missing or fails its digest), and the
//! record of what such reads repaired ([`Repairs`], read by `fsck` and
//! `scrub`).
//!
//! Design (docs/architecture.md, "Metadata copies"): ZFS keeps two copies
//! of every metadata block (`copies` / `redundant_metadata`), so one bad
//! sector in metadata costs nothing. airlock's metadata is a state commit's
//! content-addressed blobs (the state document, repository pages, room
//! documents such as the stacks and torcx documents, the changes
//! document); with `[store] metadata_copies = 2` each commit writes every
//! one of them twice, beside each other;
//! the object is durable before the root swap names it, its copy by the
//! kernel's writeback (started at once: a copy in the commit's fsync round
//! would double it), so a power cut right after a commit can lose a copy,
//! never an object, and `fsck` or `scrub` writes it again. A copy is never served
//! and never verified on the read path: it is read only when its blob is
//! missing or damaged, checked against the digest, and then written back
//! to `blobs/`. The default is 1 (no copies) for now: on the filesystem
//! the copies cost tag PUT latency over the metadata benchmark's target
//! (docs/benchmarks.md); on S3 the object store keeps its own redundancy.

use std::sync::Mutex;

use bytes::Bytes;

use super::{Blobstore, Result, StoreError, blob_key, read_all};
use crate::digest::Digest;

/// Prefix of the second copies.
pub const COPIES_PREFIX: &str = "copies/";

/// Where the second copy of `digest` lives: `copies/<alg>/<2 hex>/<hex>`.
pub fn copy_key(digest: &Digest) -> String {
    // `blobs/<alg>/...` with the other prefix.
    format!("{COPIES_PREFIX}{}", &blob_key(digest)["blobs/".len()..])
}

/// The digest a copy key names, `None` for another key.
pub fn copy_digest(key: &str) -> Option<Digest> {
    let rest = key.strip_prefix(COPIES_PREFIX)?;
    super::verify::blob_digest(&format!("blobs/{rest}"))
}

/// One metadata blob a read restored from its copy.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Repair {
    /// The blob.
    pub digest: Digest,
    /// What was wrong with it, one line.
    pub cause: String,
}

/// What reads of one store restored from copies since the record was last
/// taken ([`Repairs::take`]). Bounded: at most 10,000 entries are kept.
#[derive(Debug, Default)]
pub struct Repairs(Mutex<Vec<Repair>>);

impl Repairs {
    fn note(&self, repair: Repair) {
        if let Ok(mut r) = self.0.lock()
            && r.len() < 10_000
        {
            r.push(repair);
        }
    }

    /// The repairs recorded so far, emptying the record.
    pub fn take(&self) -> Vec<Repair> {
        self.0
            .lock()
            .map(|mut r| std::mem::take(&mut *r))
            .unwrap_or_default()
    }
}

/// The copy of `digest`, if one is stored and matches the digest.
/// Errors: the store failed (other than the copy being absent).
pub async fn read_copy(store: &dyn Blobstore, digest: &Digest) -> Result<Option<Vec<u8>>> {
    match read_all(store, &copy_key(digest)).await {
        Ok(bytes) if super::matches(digest, &bytes).is_ok() => Ok(Some(bytes)),
        Ok(_) | Err(StoreError::NotFound(_)) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Writes `bytes` at `key` whatever is there (a damaged object is replaced).
pub async fn overwrite(store: &dyn Blobstore, key: &str, bytes: &[u8]) -> Result<()> {
    let mut w = store.writer(key).await?;
    w.write(Bytes::copy_from_slice(bytes)).await?;
    w.commit().await?;
    store.forget_verified(key);
    Ok(())
}

/// The fall-back of a verified read whose blob failed with `failure`
/// (missing, or not matching `digest`): the copy's bytes when a good copy
/// exists, after writing them back to `blobs/` (best effort: a failed
/// write-back is logged) and noting the repair in the store's
/// [`Repairs`]; `None` when there is no good copy.
pub async fn recover(
    store: &dyn Blobstore,
    digest: &Digest,
    failure: &StoreError,
) -> Result<Option<Vec<u8>>> {
    let Some(bytes) = read_copy(store, digest).await? else {
        return Ok(None);
    };
    let cause = match failure {
        StoreError::NotFound(_) => "missing".to_string(),
        other => other.to_string(),
    };
    match overwrite(store, &blob_key(digest), &bytes).await {
        Ok(()) => {
            tracing::warn!(%digest, cause, "metadata blob damaged: read from its second copy and written back")
        }
        Err(e) => {
            tracing::error!(%digest, cause, error = %e, "metadata blob damaged: read from its second copy; writing it back failed")
        }
    }
    if let Some(r) = store.repairs() {
        r.note(Repair {
            digest: digest.clone(),
            cause,
        });
    }
    Ok(Some(bytes))
}

/// What a check of one metadata blob's copy found ([`check_copy`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CopyState {
    /// The copy matches its digest.
    Good,
    /// The copy was missing: written from the (verified) blob.
    Written,
    /// The copy did not match its digest: written again from the blob.
    Rewritten,
}

/// Makes sure `digest`'s copy holds `bytes` (the blob's verified content),
/// writing it when missing or damaged. For `fsck` and `scrub` on a store
/// that keeps copies. Errors: the store failed.
pub async fn check_copy(store: &dyn Blobstore, digest: &Digest, bytes: &[u8]) -> Result<CopyState> {
    let key = copy_key(digest);
    let state = match read_all(store, &key).await {
        Ok(have) if have == bytes => return Ok(CopyState::Good),
        Ok(_) => CopyState::Rewritten,
        Err(StoreError::NotFound(_)) => CopyState::Written,
        Err(e) => return Err(e),
    };
    overwrite(store, &key, bytes).await?;
    Ok(state)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::fs::FsStore;

    #[test]
    fn copy_keys_round_trip() {
        let d = Digest::sha256_of(b"page");
        let key = copy_key(&d);
        assert!(key.starts_with("copies/sha256/"));
        crate::store::check_key(&key).unwrap();
        assert_eq!(copy_digest(&key), Some(d));
        assert_eq!(copy_digest("blobs/sha256/ab/ab"), None);
    }

    /// A blob flipped, truncated or deleted reads from its copy, is
    /// written back whole, and the repair is recorded; without a copy the
    /// read fails as before.
    #[tokio::test]
    async fn a_damaged_blob_reads_from_its_copy_and_is_written_back() {
        let dir = tempfile::tempdir().unwrap();
        let store = FsStore::open(dir.path()).unwrap();
        let bytes = br#"{"kind":"airlock.page.v1"}"#.to_vec();
        let d = Digest::sha256_of(&bytes);
        store
            .put_blobs(vec![(d.clone(), Bytes::from(bytes.clone()))])
            .await
            .unwrap();
        store
            .put_copies(vec![(d.clone(), Bytes::from(bytes.clone()))])
            .await
            .unwrap();
        let path = dir.path().join(blob_key(&d));
        type Damage<'a> = (&'a str, Box<dyn Fn() + 'a>);
        let damages: [Damage; 3] = [
            (
                "flipped",
                Box::new(|| {
                    let mut b = std::fs::read(&path).unwrap();
                    b[3] ^= 1;
                    std::fs::write(&path, b).unwrap();
                }),
            ),
            (
                "truncated",
                Box::new(|| std::fs::write(&path, &bytes[..5]).unwrap()),
            ),
            ("deleted", Box::new(|| std::fs::remove_file(&path).unwrap())),
        ];
        for (what, damage) in damages {
            store.forget_verified(&blob_key(&d));
            damage();
            let got = crate::store::get_verified(&store, &d).await.unwrap();
            assert_eq!(got, bytes, "{what}");
            assert_eq!(std::fs::read(&path).unwrap(), bytes, "{what}: written back");
            let repairs = store.repairs().unwrap().take();
            assert_eq!(repairs.len(), 1, "{what}: {repairs:?}");
            assert_eq!(repairs[0].digest, d);
        }
        std::fs::remove_file(dir.path().join(copy_key(&d))).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert!(crate::store::get_verified(&store, &d).await.is_err());
    }
}
