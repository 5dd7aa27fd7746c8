//! Second copies of keyed metadata objects: objects named by a key, not by
//! their digest, that carry their own check (a pull record's checksum,
//! [`crate::state::pulls`]). The copy of `<key>` is `copies/<key>`; it is
//! written after the object and deleted before it, so a copy without its
//! object is always damage.

use super::{COPIES_PREFIX, CopyState, Repair, overwrite};
use crate::store::{Blobstore, Result, StoreError, read_all};

/// Where the second copy of the keyed (not content-addressed) metadata
/// object `key` lives: `copies/<key>`, e.g. `copies/pulls/<id>.json`
/// (never a blob's copy key: those start `copies/<alg>/`).
pub fn keyed_copy_key(key: &str) -> String {
    format!("{COPIES_PREFIX}{key}")
}

/// Writes the keyed metadata object `key` (one that carries its own check,
/// such as a pull record's checksum), then its second copy when the store
/// keeps copies. Errors: the store failed (the copy is not written when the
/// object was not).
pub async fn put_keyed(store: &dyn Blobstore, key: &str, bytes: &[u8]) -> Result<()> {
    overwrite(store, key, bytes).await?;
    if store.metadata_copies() >= 2 {
        overwrite(store, &keyed_copy_key(key), bytes).await?;
    }
    Ok(())
}

/// Deletes the keyed object `key` and its second copy, the copy first: a
/// copy without its object is then always damage, never a deletion half
/// done. Errors: the store failed.
pub async fn delete_keyed(store: &dyn Blobstore, key: &str) -> Result<()> {
    match store.delete(&keyed_copy_key(key)).await {
        Ok(()) | Err(StoreError::NotFound(_)) => {}
        Err(e) => return Err(e),
    }
    store.delete(key).await
}

/// Reads the keyed object `key` through `check` (which parses and
/// verifies it, or says in one line why not). When the object is missing
/// or fails `check` and its second copy passes, the copy's content is
/// returned, written back to `key` (best effort) and the repair noted in
/// the store's [`super::Repairs`].
///
/// Errors: `NotFound` when neither exists; `Corrupt("<key>: <cause>")`
/// when the object fails `check` and no good copy exists (a missing object
/// with a damaged copy is `Corrupt` too); the store failed.
pub async fn read_keyed<T>(
    store: &dyn Blobstore,
    key: &str,
    check: impl Fn(&[u8]) -> std::result::Result<T, String>,
) -> Result<T> {
    let cause = match read_all(store, key).await {
        Ok(bytes) => match check(&bytes) {
            Ok(t) => return Ok(t),
            Err(cause) => cause,
        },
        Err(StoreError::NotFound(_)) => "missing".to_string(),
        Err(e) => return Err(e),
    };
    let copy = match read_all(store, &keyed_copy_key(key)).await {
        Ok(bytes) => bytes,
        Err(StoreError::NotFound(_)) if cause == "missing" => {
            return Err(StoreError::NotFound(key.to_string()));
        }
        Err(StoreError::NotFound(_)) => return Err(StoreError::Corrupt(format!("{key}: {cause}"))),
        Err(e) => return Err(e),
    };
    let t = check(&copy).map_err(|copy_cause| {
        StoreError::Corrupt(format!("{key}: {cause}; its second copy: {copy_cause}"))
    })?;
    match overwrite(store, key, &copy).await {
        Ok(()) => tracing::warn!(
            key,
            cause,
            "metadata object damaged: read from its second copy and written back"
        ),
        Err(e) => {
            tracing::error!(key, cause, error = %e, "metadata object damaged: read from its second copy; writing it back failed")
        }
    }
    if let Some(r) = store.repairs() {
        r.note(Repair {
            object: key.to_string(),
            cause,
        });
    }
    Ok(t)
}

/// Makes sure the keyed object `key`, which passes its check with content
/// `bytes`, has a second copy that passes `check` too, writing it from
/// `bytes` when it is missing or does not (a copy that passes but differs
/// is a write in progress, left alone). For `fsck` and `scrub` on a store
/// that keeps copies. Errors: the store failed.
pub async fn check_keyed_copy<T>(
    store: &dyn Blobstore,
    key: &str,
    bytes: &[u8],
    check: impl Fn(&[u8]) -> std::result::Result<T, String>,
) -> Result<CopyState> {
    let copy = keyed_copy_key(key);
    let state = match read_all(store, &copy).await {
        Ok(have) if check(&have).is_ok() => return Ok(CopyState::Good),
        Ok(_) => CopyState::Rewritten,
        Err(StoreError::NotFound(_)) => CopyState::Written,
        Err(e) => return Err(e),
    };
    overwrite(store, &copy, bytes).await?;
    Ok(state)
}
