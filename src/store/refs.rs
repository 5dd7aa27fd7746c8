//! The root pointer and its second copy: `refs/root` names the current
//! state document (the one mutable object, swapped by compare-and-swap:
//! [`super::Blobstore::swap_root`]); `refs/root.copy` holds the same
//! digest, written by every backend's `swap_root` with the root (the
//! filesystem in the same fsync round, before the same directory sync;
//! S3 right after the conditional write), so that one damaged or deleted
//! root object is told apart from an empty store and the site keeps
//! serving the generation the copy names (issue 61: as ZFS keeps several
//! uberblocks).
//!
//! Owns: the two keys, reading the copy, and writing it where it is
//! missing or behind (a store written before the copy existed, a copy
//! damaged or lost: [`ensure_copy`], run when a store is opened for
//! writing and by `fsck`). The copy is a hint, never a compare-and-swap
//! target: which generation is current is decided by `refs/root`, or, when
//! that is damaged, by the newest state document that verifies
//! (`state::recover`).

use bytes::Bytes;

use super::{Blobstore, Result};
use crate::digest::Digest;

/// The root pointer.
pub const ROOT_KEY: &str = "refs/root";

/// Its second copy.
pub const ROOT_COPY_KEY: &str = "refs/root.copy";

/// The digest `refs/root.copy` names: `Ok(None)` when it is absent,
/// `Ok(Some(Err(text)))` when it holds no digest (damaged).
///
/// Errors: the store failed (an unreadable object in its place counts as
/// damaged).
pub async fn read_copy(
    store: &dyn Blobstore,
) -> Result<Option<std::result::Result<Digest, String>>> {
    match store.read_versioned(ROOT_COPY_KEY).await {
        Ok(Some(v)) => Ok(Some(v.value.parse().map_err(|_| v.value))),
        Ok(None) => Ok(None),
        Err(super::StoreError::Io(e)) if e.kind() != std::io::ErrorKind::PermissionDenied => {
            Ok(Some(Err(format!("cannot be read: {e}"))))
        }
        Err(e) => Err(e),
    }
}

/// Writes `value` (a state document's digest) to `refs/root.copy`,
/// whatever is there (the copy is never compared and swapped).
///
/// Errors: the write failed.
pub async fn write_copy(store: &dyn Blobstore, value: &str) -> Result<()> {
    let mut w = store.writer(ROOT_COPY_KEY).await?;
    w.write(Bytes::from(format!("{value}\n"))).await?;
    w.commit().await
}

/// Makes `refs/root.copy` name what `refs/root` names when the root names
/// an object that verifies (a state document, or its second copy) and the
/// copy does not hold the same (absent, damaged, or behind: an S3 copy
/// whose write was cut). A root that names nothing stored (a flipped
/// digit) is damage the copy outlives: it is left as it is. Returns
/// whether it wrote.
///
/// Errors: the store failed.
pub async fn ensure_copy(store: &dyn Blobstore) -> Result<bool> {
    let Some(root) = store.read_root().await? else {
        return Ok(false);
    };
    let Ok(digest) = root.value.parse::<Digest>() else {
        return Ok(false);
    };
    if matches!(read_copy(store).await?, Some(Ok(c)) if c == digest) {
        return Ok(false);
    }
    match super::get_verified(store, &digest).await {
        Ok(_) => {}
        Err(
            super::StoreError::NotFound(_)
            | super::StoreError::Corrupt(_)
            | super::StoreError::Mismatch(_),
        ) => return Ok(false),
        Err(e) => return Err(e),
    }
    write_copy(store, &root.value).await?;
    Ok(true)
}
