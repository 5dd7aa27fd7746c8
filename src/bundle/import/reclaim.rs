//! What a refused import wrote, removed before it exits (issue 23 §5), so
//! a full disk is not left full of unreferenced blobs until the next `gc`.
//!
//! Owns: the clean-up of the blobs this import committed itself (found
//! absent, written, verified). Never touches a blob that was present
//! before it, and never one another writer may rely on: each blob is first
//! moved aside to `gc-trash/<alg>-<hex>.import-<uuid>` (readers and
//! presence checks see it absent from then on), then it is deleted only if
//! no other live import's journal lists it, no pushed-blob link names it
//! and the state root is still the one the import started from (every
//! writer that relies on a blob registers a journal or link before it
//! checks the blob's presence, or checks it again after its root swap, as
//! `ops::gc` describes); otherwise it goes back and `gc` decides. A kill in
//! the middle leaves the blob in `gc-trash/`, which the next `gc` puts back
//! before it marks; the failed journal lets that `gc` free it at once.

use std::collections::HashSet;

use super::*;
use crate::bundle::journal::{self, Journal};

/// Removes the blobs in `written` (committed by the import whose journal is
/// `own_journal`, which started at root `root_before`), when nothing else
/// may rely on them; returns how many were removed. Errors are logged and
/// leave the rest to `gc`.
pub(super) async fn reclaim(
    state: &StateStore,
    written: &[Digest],
    root_before: Option<&Digest>,
    own_journal: &str,
) -> usize {
    if written.is_empty() {
        return 0;
    }
    match reclaim_inner(state, written, root_before, own_journal).await {
        Ok(n) => {
            tracing::info!(
                removed = n,
                of = written.len(),
                "refused import: blobs it wrote removed"
            );
            n
        }
        Err(e) => {
            tracing::warn!(error = %format!("{e:#}"), "refused import: blobs it wrote are left to gc");
            0
        }
    }
}

async fn reclaim_inner(
    state: &StateStore,
    written: &[Digest],
    root_before: Option<&Digest>,
    own_journal: &str,
) -> Result<usize> {
    let store = &**state.blobstore();
    let suffix = format!(".import-{}", uuid::Uuid::new_v4().simple());
    let trash_key =
        |d: &Digest| format!("{}{}{suffix}", store::GC_TRASH_PREFIX, store::trash_name(d));
    let mut moved = Vec::new();
    for d in written {
        match store.rename(&blob_key(d), &trash_key(d)).await {
            Ok(()) => moved.push(d.clone()),
            Err(store::StoreError::NotFound(_)) => {}
            Err(e) => {
                put_back(store, &moved, &trash_key).await;
                return Err(e).context("moving a written blob aside");
            }
        }
    }
    let named = match named_elsewhere(state, own_journal, root_before).await {
        Ok(n) => n,
        Err(e) => {
            put_back(store, &moved, &trash_key).await;
            return Err(e);
        }
    };
    let Some(named) = named else {
        // The root moved: a commit may reference these; gc decides.
        put_back(store, &moved, &trash_key).await;
        return Ok(0);
    };
    let mut removed = 0;
    for d in &moved {
        if named.contains(d) {
            put_back(store, std::slice::from_ref(d), &trash_key).await;
        } else if store.delete(&trash_key(d)).await.is_ok() {
            removed += 1;
        }
    }
    Ok(removed)
}

/// The blobs other live imports' journals and pushed-blob links name, or
/// `None` when the root is no longer `root_before`.
async fn named_elsewhere(
    state: &StateStore,
    own_journal: &str,
    root_before: Option<&Digest>,
) -> Result<Option<HashSet<Digest>>> {
    let store = &**state.blobstore();
    let mut named = HashSet::new();
    for key in store.list(journal::PREFIX).await? {
        if key == own_journal || key == journal::failed_key(own_journal) {
            continue;
        }
        if let Some(j) = Journal::get(store, &key).await
            && !journal::is_failed_key(&key)
            && !j.is_dead()
        {
            named.extend(j.blobs);
        }
    }
    for key in store.list("links/").await? {
        named.extend(store::link_digest(&key));
    }
    if state.root_digest().await?.as_ref() != root_before {
        return Ok(None);
    }
    Ok(Some(named))
}

/// Moves `digests` back from the trash (a failure is logged: `gc` puts
/// back whatever it finds in `gc-trash/`).
async fn put_back(
    store: &dyn Blobstore,
    digests: &[Digest],
    trash_key: &impl Fn(&Digest) -> String,
) {
    for d in digests {
        if let Err(e) = store.rename(&trash_key(d), &blob_key(d)).await {
            tracing::warn!(error = %e, digest = %d, "cannot put a blob back from gc-trash/ (gc will)");
        }
    }
}
