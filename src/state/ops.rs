//! Changes to the state, described as data so that a lost compare-and-swap
//! race can simply apply them again to the new root.

use std::sync::Arc;

use super::{ManifestInfo, Repository, StateError};
use crate::digest::Digest;
use crate::names::{RepositoryName, Tag};

/// A change to one named document (see [`Op::Document`]): a pure function
/// from the current bytes (`None`: no such document yet) to the new bytes
/// (`None`: remove it). It may run more than once (after a lost
/// compare-and-swap race, on the newer document), so it must not have side
/// effects. An error aborts the change it belongs to.
#[derive(Clone)]
pub struct DocumentChange(Arc<ChangeFn>);

/// The function inside a [`DocumentChange`]: current bytes → new bytes.
type ChangeFn = dyn Fn(Option<&[u8]>) -> Result<Option<Vec<u8>>, StateError> + Send + Sync;

impl std::fmt::Debug for DocumentChange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DocumentChange(..)")
    }
}

impl DocumentChange {
    /// A change on raw bytes.
    pub fn bytes(
        f: impl Fn(Option<&[u8]>) -> Result<Option<Vec<u8>>, StateError> + Send + Sync + 'static,
    ) -> DocumentChange {
        DocumentChange(Arc::new(f))
    }

    /// A change on a JSON document of type `T`: `f` gets the parsed current
    /// document (`None` when absent) and returns the new one (`None`:
    /// remove). A stored document that does not parse as `T` is
    /// [`StateError::Corrupt`].
    pub fn json<T, F>(f: F) -> DocumentChange
    where
        T: serde::Serialize + serde::de::DeserializeOwned,
        F: Fn(Option<T>) -> Result<Option<T>, StateError> + Send + Sync + 'static,
    {
        DocumentChange::bytes(move |current| {
            let current = current
                .map(|b| {
                    serde_json::from_slice(b).map_err(|e| StateError::Corrupt {
                        digest: "(document)".into(),
                        cause: e.to_string(),
                    })
                })
                .transpose()?;
            f(current)?
                .map(|doc| {
                    serde_json::to_vec(&doc).map_err(|e| StateError::Corrupt {
                        digest: "(new document)".into(),
                        cause: e.to_string(),
                    })
                })
                .transpose()
        })
    }

    /// Applies the change to `current`.
    pub fn apply(&self, current: Option<&[u8]>) -> Result<Option<Vec<u8>>, StateError> {
        (self.0)(current)
    }
}

/// One change to one repository, or to one named document.
#[derive(Debug, Clone)]
pub enum Op {
    /// Replaces the named document of a room built on the registry (`stacks`,
    /// `torcx`, ...) with what `change` makes of it, in the same root swap
    /// as the other ops of the commit.
    Document {
        /// The document's name in [`super::StateDoc::documents`].
        name: String,
        /// What to make of it.
        change: DocumentChange,
    },
    /// Links blobs (digest, size in bytes) into `repo`, creating it if needed.
    LinkBlobs {
        /// The repository.
        repo: RepositoryName,
        /// Blobs to link.
        blobs: Vec<(Digest, u64)>,
    },
    /// Records a manifest in `repo` (creating it if needed) and points `tags` at it.
    ///
    /// A digest already recorded in `repo` keeps its first-recorded
    /// [`ManifestInfo`] (media type, size, subject, artifact type): content
    /// is immutable, and so is the type it is served as. Only the tags move.
    /// Re-pushing or re-importing the same bytes under another media type
    /// therefore never changes how they are served.
    PutManifest {
        /// The repository.
        repo: RepositoryName,
        /// The manifest's digest.
        digest: Digest,
        /// Media type, size, subject; ignored when `digest` is already recorded.
        info: ManifestInfo,
        /// Tags to point at it (moved from any other manifest).
        tags: Vec<Tag>,
    },
    /// Removes a tag. Error if it does not exist.
    DeleteTag {
        /// The repository.
        repo: RepositoryName,
        /// The tag.
        tag: Tag,
    },
    /// Removes a manifest and every tag pointing at it. Error if absent.
    DeleteManifest {
        /// The repository.
        repo: RepositoryName,
        /// The manifest.
        digest: Digest,
    },
    /// Unlinks a blob from `repo`. Error if it is not linked.
    UnlinkBlob {
        /// The repository.
        repo: RepositoryName,
        /// The blob.
        digest: Digest,
    },
    /// Changes nothing, but fails the whole change ([`StateError::NotFound`])
    /// unless every digest in `blobs` is linked in `repo` (as a blob or a
    /// manifest) and every digest in `manifests` is a manifest of `repo`.
    /// Put before an [`Op::PutManifest`] so that the check and the change
    /// see the same root (a manifest push racing a delete).
    Require {
        /// The repository.
        repo: RepositoryName,
        /// Blobs (configs, layers) that must be linked.
        blobs: Vec<Digest>,
        /// Child manifests that must be present.
        manifests: Vec<Digest>,
    },
}

impl Op {
    /// The repository this op changes; `None` for [`Op::Document`].
    pub fn repository(&self) -> Option<&RepositoryName> {
        match self {
            Op::LinkBlobs { repo, .. }
            | Op::PutManifest { repo, .. }
            | Op::DeleteTag { repo, .. }
            | Op::DeleteManifest { repo, .. }
            | Op::UnlinkBlob { repo, .. }
            | Op::Require { repo, .. } => Some(repo),
            Op::Document { .. } => None,
        }
    }

    /// Applies the op to `slot` (`None`: the repository does not exist).
    /// A repository left with no tags, manifests or blobs is removed.
    pub(super) fn apply(&self, slot: &mut Option<Repository>) -> Result<(), StateError> {
        let missing = |what: String| StateError::NotFound(what);
        match self {
            Op::Document { .. } => {
                return Err(StateError::Corrupt {
                    digest: "(op)".into(),
                    cause: "a document op applied to a repository".into(),
                });
            }
            Op::LinkBlobs { blobs, .. } => {
                let repo = slot.get_or_insert_with(Repository::default);
                for (d, size) in blobs {
                    repo.blobs.insert(d.clone(), *size);
                }
            }
            Op::PutManifest {
                digest, info, tags, ..
            } => {
                let repo = slot.get_or_insert_with(Repository::default);
                repo.manifests
                    .entry(digest.clone())
                    .or_insert_with(|| info.clone());
                for t in tags {
                    repo.tags.insert(t.clone(), digest.clone());
                }
            }
            Op::DeleteTag { repo: name, tag } => {
                let repo = slot
                    .as_mut()
                    .ok_or_else(|| missing(format!("repository {name} not known")))?;
                repo.tags
                    .remove(tag)
                    .ok_or_else(|| missing(format!("tag {tag} not known in {name}")))?;
            }
            Op::DeleteManifest { repo: name, digest } => {
                let repo = slot
                    .as_mut()
                    .ok_or_else(|| missing(format!("repository {name} not known")))?;
                repo.manifests
                    .remove(digest)
                    .ok_or_else(|| missing(format!("manifest {digest} not known in {name}")))?;
                repo.tags.retain(|_, d| d != digest);
            }
            Op::UnlinkBlob { repo: name, digest } => {
                let repo = slot
                    .as_mut()
                    .ok_or_else(|| missing(format!("repository {name} not known")))?;
                repo.blobs
                    .remove(digest)
                    .ok_or_else(|| missing(format!("blob {digest} not known in {name}")))?;
            }
            Op::Require {
                repo: name,
                blobs,
                manifests,
            } => {
                let empty = Repository::default();
                let repo = slot.as_ref().unwrap_or(&empty);
                let linked =
                    |d: &Digest| repo.blobs.contains_key(d) || repo.manifests.contains_key(d);
                if let Some(d) = blobs.iter().find(|d| !linked(d)) {
                    return Err(missing(format!("blob {d} not known in {name}")));
                }
                if let Some(d) = manifests.iter().find(|d| !repo.manifests.contains_key(*d)) {
                    return Err(missing(format!("manifest {d} not known in {name}")));
                }
            }
        }
        if slot
            .as_ref()
            .is_some_and(|r| r.tags.is_empty() && r.manifests.is_empty() && r.blobs.is_empty())
        {
            *slot = None;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recorded_manifest_keeps_its_first_info() {
        let repo: RepositoryName = "img".parse().unwrap();
        let digest = Digest::sha256_of(b"m");
        let info = |media_type: &str| ManifestInfo {
            media_type: media_type.into(),
            size: 1,
            subject: None,
            artifact_type: None,
        };
        let put = |media_type: &str, tag: &str| Op::PutManifest {
            repo: repo.clone(),
            digest: digest.clone(),
            info: info(media_type),
            tags: vec![tag.parse().unwrap()],
        };
        let mut slot = None;
        put(crate::oci::OCI_MANIFEST, "a").apply(&mut slot).unwrap();
        put("text/plain", "b").apply(&mut slot).unwrap();
        let r = slot.unwrap();
        assert_eq!(r.manifests[&digest], info(crate::oci::OCI_MANIFEST));
        assert_eq!(r.tags.len(), 2);
        assert!(r.tags.values().all(|d| d == &digest));
    }
}
