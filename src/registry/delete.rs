//! Content management (distribution-spec v1.1 "Deleting tags", "Deleting
//! Manifests", "Deleting Blobs"): end-9 and end-10.
//!
//! Owns: removing a tag, a manifest (with every tag pointing at it) or a
//! blob link from a repository, each in one root swap, answering 202.
//! Never deletes stored bytes: earlier generations still reference them
//! (history, rollback); garbage collection reclaims them.

use serde_json::json;

use super::errors::{ErrorCode, RegistryError, Result};
use super::links;
use super::pull::repository;
use super::responses::Accepted;
use super::upload::HTTP_WHO;
use crate::digest::Digest;
use crate::names::{Reference, RepositoryName};
use crate::state::{Op, StateError, StateStore};

/// DELETE `/v2/<name>/manifests/<tag or digest>`: 202.
///
/// By digest the manifest and all its tags go; by tag only the tag.
/// Errors: 404 `NAME_UNKNOWN`, 404 `MANIFEST_UNKNOWN`.
///
/// A tag matching an immutable tag rule (`is_immutable`) is never deleted,
/// nor is a manifest one names: 403 `DENIED`.
pub async fn manifest(
    state: &StateStore,
    name: &RepositoryName,
    reference: &Reference,
    is_immutable: &(dyn Fn(&str) -> bool + Sync),
) -> Result<Accepted> {
    let repo = repository(state, name).await?;
    let immutable = |tag: &str| {
        RegistryError::new(
            ErrorCode::Denied,
            json!({ "name": name, "tag": tag, "reason": "the tag is immutable (registry.immutable_tags)" }),
        )
    };
    let unknown = || {
        RegistryError::new(
            ErrorCode::ManifestUnknown,
            json!({ "name": name, "reference": reference.to_string() }),
        )
    };
    let (op, reason) = match reference {
        Reference::Tag(tag) => {
            if repo.tag(tag).await?.is_none() {
                return Err(unknown());
            }
            if is_immutable(tag.as_str()) {
                return Err(immutable(tag.as_str()));
            }
            let op = Op::DeleteTag {
                repo: name.clone(),
                tag: tag.clone(),
            };
            (op, format!("delete tag {name}:{tag}"))
        }
        Reference::Digest(digest) => {
            if repo.manifest(digest).await?.is_none() {
                return Err(unknown());
            }
            if let Some(tag) = repo
                .tags_of(digest)
                .await?
                .into_iter()
                .find(|t| is_immutable(t))
            {
                return Err(immutable(&tag));
            }
            let op = Op::DeleteManifest {
                repo: name.clone(),
                digest: digest.clone(),
            };
            (op, format!("delete manifest {name}@{digest}"))
        }
    };
    commit(state, &reason, op, unknown).await
}

/// DELETE `/v2/<name>/blobs/<digest>`: unlinks the blob from `name` (its
/// pushed-blob link and, when the state links it, one root swap), 202.
/// Errors: 404 `NAME_UNKNOWN`, 404 `BLOB_UNKNOWN` (not linked here).
pub async fn blob(state: &StateStore, name: &RepositoryName, digest: &Digest) -> Result<Accepted> {
    let unknown = || RegistryError::new(ErrorCode::BlobUnknown, json!({ "digest": digest }));
    let had_link = links::remove(&**state.blobstore(), name, digest).await?;
    let snap = state.snapshot().await?;
    let in_tree = match state.repository(&snap, name).await? {
        Some(r) => r.blob(digest).await?.is_some(),
        None => false,
    };
    if !in_tree {
        return if had_link {
            Ok(Accepted)
        } else {
            repository(state, name).await?;
            Err(unknown())
        };
    }
    let op = Op::UnlinkBlob {
        repo: name.clone(),
        digest: digest.clone(),
    };
    commit(state, &format!("delete blob {name}@{digest}"), op, unknown).await
}

async fn commit(
    state: &StateStore,
    reason: &str,
    op: Op,
    unknown: impl Fn() -> RegistryError,
) -> Result<Accepted> {
    match state.commit(reason, HTTP_WHO, &[op]).await {
        Ok(_) => Ok(Accepted),
        // Removed by a concurrent request between the check and the swap.
        Err(StateError::NotFound(_)) => Err(unknown()),
        Err(e) => Err(e.into()),
    }
}
