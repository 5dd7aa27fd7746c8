//! Second copies of metadata: how one damaged metadata object costs no
//! acknowledged write.
//!
//! Owns: where copies live (one pack per commit, [`pack`]; a keyed
//! object's copy beside it, [`keyed`]), the read that falls back to them
//! ([`super::get_verified`] calls [`recover`] when a blob is missing or
//! fails its digest), the checks `fsck` and `scrub` run ([`ensure`]), and
//! the record of what reads repaired ([`Repairs`]).
//!
//! Design (docs/architecture.md, "Metadata copies"): ZFS keeps two copies
//! of every metadata block (`copies` / `redundant_metadata`), so one bad
//! sector in metadata costs nothing. airlock's metadata is a state commit's
//! content-addressed blobs (the state document, repository pages, room
//! documents such as the stacks and torcx documents, the changes
//! document) and the pull record's objects; with `[store] metadata_copies
//! = 2` (the filesystem store's default) each commit also writes its blobs
//! as one pack, in parallel with the blobs. The blobs are durable before
//! the root swap names them; the pack's write-back is started at once but
//! not waited for (in the commit's fsync round it would double the
//! round), so a power cut right after a commit can lose a copy, never an
//! object, and `fsck` writes it again. A copy is never served and never
//! verified on the read path: it is read only when its blob is missing or
//! damaged, checked against the digest, and then written back to
//! `blobs/`. On S3 the default is 1: the object store keeps its own
//! redundancy.

mod keyed;
pub mod pack;

pub use keyed::{check_keyed_copy, delete_keyed, keyed_copy_key, put_keyed, read_keyed};

use std::sync::Mutex;

use bytes::Bytes;

use super::{Blobstore, Result, StoreError, blob_key, read_all};
use crate::digest::Digest;

/// Prefix of the second copies.
pub const COPIES_PREFIX: &str = "copies/";

/// Where a blob's own second copy lived before copies were packed
/// (`copies/<alg>/<2 hex>/<hex>`, written by one earlier release with
/// `metadata_copies = 2`): still read, and removed by `gc` with its blob.
pub fn copy_key(digest: &Digest) -> String {
    // `blobs/<alg>/...` with the other prefix.
    format!("{COPIES_PREFIX}{}", &blob_key(digest)["blobs/".len()..])
}

/// The digest a copy key names, `None` for another key.
pub fn copy_digest(key: &str) -> Option<Digest> {
    let rest = key.strip_prefix(COPIES_PREFIX)?;
    super::verify::blob_digest(&format!("blobs/{rest}"))
}

/// One metadata object a read restored from its copy.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Repair {
    /// The object: a blob's digest (`sha256:<hex>`) or a keyed object's
    /// key (`pulls/<id>.json`).
    pub object: String,
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

/// A good copy of `digest`: from a pack ([`pack::find`]), or from an
/// unpacked copy of an earlier release ([`copy_key`]). `None`: no copy
/// matches the digest. Errors: the store failed.
pub async fn read_copy(store: &dyn Blobstore, digest: &Digest) -> Result<Option<Vec<u8>>> {
    match read_all(store, &copy_key(digest)).await {
        Ok(bytes) if super::matches(digest, &bytes).is_ok() => return Ok(Some(bytes)),
        Ok(_) | Err(StoreError::NotFound(_)) => {}
        Err(e) => return Err(e),
    }
    pack::find(store, digest).await
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
            object: digest.to_string(),
            cause,
        });
    }
    Ok(Some(bytes))
}

/// What a check of one metadata object's copy found ([`ensure`],
/// [`check_keyed_copy`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CopyState {
    /// A copy matches.
    Good,
    /// No copy was stored: written from the (verified) object.
    Written,
    /// Every copy stored was damaged: written again from the object.
    Rewritten,
}

/// Makes sure each of `blobs` (metadata blobs read and verified, `(digest,
/// bytes)`) has a good copy in some pack, writing one pack of those that
/// have none; returns what was found for each, in order. For `fsck` on a
/// store that keeps copies: it reads every pack's header once.
///
/// Errors: the store failed.
pub async fn ensure(store: &dyn Blobstore, blobs: &[(Digest, Bytes)]) -> Result<Vec<CopyState>> {
    use std::collections::HashMap;
    let mut wanted: HashMap<&Digest, Vec<usize>> = HashMap::new();
    for (i, (d, _)) in blobs.iter().enumerate() {
        wanted.entry(d).or_default().push(i);
    }
    let mut found = vec![CopyState::Written; blobs.len()];
    for m in pack::list(store).await? {
        let entries = match pack::entries(store, &m).await {
            Ok(Some(e)) => e,
            Ok(None) | Err(StoreError::Corrupt(_)) => continue,
            Err(e) => return Err(e),
        };
        for e in entries {
            let Some(at) = wanted.get(&e.digest) else {
                continue;
            };
            if found[at[0]] == CopyState::Good {
                continue;
            }
            let state = match pack::read_entry(store, &m.key, &e).await? {
                Some(_) => CopyState::Good,
                None => CopyState::Rewritten,
            };
            for &i in at {
                found[i] = state;
            }
        }
    }
    let missing: Vec<(Digest, Bytes)> = blobs
        .iter()
        .zip(&found)
        .filter(|(_, s)| **s != CopyState::Good)
        .map(|(b, _)| b.clone())
        .collect(); // a repeated digest is packed once (`pack::encode`)
    pack::write(store, &missing).await?;
    Ok(found)
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
        pack::write(&store, &[(d.clone(), Bytes::from(bytes.clone()))])
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
            assert_eq!(repairs[0].object, d.to_string());
        }
        for p in pack::list(&store).await.unwrap() {
            std::fs::remove_file(dir.path().join(p.key)).unwrap();
        }
        std::fs::remove_file(&path).unwrap();
        assert!(crate::store::get_verified(&store, &d).await.is_err());
    }
}
