//! Pushed-blob links: a blob pushed (or mounted) into a repository is
//! visible there at once, without a root swap, through a small object
//! `links/<repository>/_blobs/<alg>-<hex>` holding its size in decimal.
//!
//! Owns: those objects. A manifest PUT that names a linked blob moves the
//! link into the state tree in the manifest's own root swap
//! (`Op::LinkBlobs`), so a push of N blobs and one manifest makes one
//! generation, not N+1 (DESIGN.md "Group commit"). Never changes state
//! itself. Link objects are scratch: garbage collection may remove those
//! older than its grace period, like upload sessions (a blob still only
//! linked by then must be pushed again).
//!
//! `_blobs` cannot be a repository path component (components start with a
//! letter or digit), so no repository's links can collide with another's.

use crate::digest::Digest;
use crate::names::RepositoryName;
use crate::store::{Blobstore, Result, read_all};

/// The key of the link of `digest` in `name`.
pub fn key(name: &RepositoryName, digest: &Digest) -> String {
    format!(
        "links/{name}/_blobs/{}-{}",
        digest.algorithm().name(),
        digest.hex()
    )
}

/// Links `digest` (`size` bytes, already committed to the store) into
/// `name` and makes the link durable.
pub async fn put(
    store: &dyn Blobstore,
    name: &RepositoryName,
    digest: &Digest,
    size: u64,
) -> Result<()> {
    let mut w = store.writer(&key(name, digest)).await?;
    w.write(bytes::Bytes::from(size.to_string())).await?;
    w.commit().await?;
    store.sync().await
}

/// The size recorded by the link of `digest` in `name`, `None` when there
/// is no (readable) link.
pub async fn get(store: &dyn Blobstore, name: &RepositoryName, digest: &Digest) -> Option<u64> {
    let bytes = read_all(store, &key(name, digest)).await.ok()?;
    std::str::from_utf8(&bytes).ok()?.trim().parse().ok()
}

/// Whether any blob is linked into `name` by a pushed-blob link (a
/// repository that received a push but no manifest yet exists).
pub async fn any(store: &dyn Blobstore, name: &RepositoryName) -> Result<bool> {
    Ok(!store
        .list(&format!("links/{name}/_blobs/"))
        .await?
        .is_empty())
}

/// Removes the link of `digest` from `name`; `true` when there was one.
pub async fn remove(store: &dyn Blobstore, name: &RepositoryName, digest: &Digest) -> Result<bool> {
    let key = key(name, digest);
    if store.stat(&key).await?.is_none() {
        return Ok(false);
    }
    store.delete(&key).await?;
    Ok(true)
}

/// Logs that the blob `digest`, linked in `repo` (by a link or the state),
/// is absent from `blobs/`: at info when a garbage collection holds it in
/// `gc-trash/` (it is moving it: that run puts it back or deletes it), at
/// warn otherwise (damage: `airlock fsck` names it). Callers answer as
/// for an absent blob either way.
pub async fn log_missing(store: &dyn Blobstore, digest: &Digest, repo: &RepositoryName) {
    match crate::store::in_gc_trash(store, digest).await {
        Ok(true) => {
            tracing::info!(%digest, %repo, "linked blob is being moved by the garbage collector; answering as absent")
        }
        _ => tracing::warn!(%digest, %repo, "blob linked in state is missing from the blobstore"),
    }
}
