//! Changes to the state, described as data so that a lost compare-and-swap
//! race can simply apply them again to the new root.

use std::sync::Arc;

use super::page::{self, Delta, Pages, Value};
use super::{ManifestInfo, StateError, repo};
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

/// The signed bundle that sets a tag: its id and creation time (the
/// signed `created`, seconds since the Unix epoch), recorded with the tag.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct BundleMark {
    /// The bundle's id.
    pub id: String,
    /// Its signed creation time, seconds since the Unix epoch.
    pub created: u64,
}

/// What may move the tags an [`Op::PutManifest`] sets (issue 24 §1).
/// The default (a push) records nothing and refuses nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TagGuard {
    /// The signed bundle setting the tags (an import): a tag last set by a
    /// bundle created later is not moved back to this bundle's manifest
    /// ([`StateError::Rejected`]) unless `allow_downgrade`.
    pub bundle: Option<BundleMark>,
    /// The admin's explicit override of the rule above.
    pub allow_downgrade: bool,
    /// The tags may be created but never moved (immutable tag rules).
    pub frozen: bool,
}

/// What is recorded with a tag (`x/<manifest>/<tag>`): when it was set,
/// and by which bundle (absent for a push).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TagMark {
    /// When the tag was set to its manifest, seconds since the Unix epoch.
    pub pushed: u64,
    /// The bundle that set it, for an import.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bundle: Option<BundleMark>,
}

impl TagMark {
    /// The mark stored in `v`: `null` (set before marks were kept) and a
    /// bare number (a push time) read as what they say.
    pub fn read(v: &Value) -> Option<TagMark> {
        match serde_json::from_str::<serde_json::Value>(v.get()).ok()? {
            serde_json::Value::Number(n) => Some(TagMark {
                pushed: n.as_u64()?,
                bundle: None,
            }),
            serde_json::Value::Object(_) => page::parse_value(v).ok(),
            _ => None,
        }
    }
}

/// Seconds since the Unix epoch, now.
fn now_unix() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
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
        /// Who sets the tags and what may not move them ([`TagGuard`]).
        guard: TagGuard,
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

impl TagGuard {
    /// Whether `repo:tag`, now at `old` and set as `was` says, may move;
    /// [`StateError::Rejected`] naming both bundles and times when not.
    fn check(
        &self,
        repo: &RepositoryName,
        tag: &str,
        old: &Digest,
        was: Option<&TagMark>,
    ) -> Result<(), StateError> {
        if self.frozen {
            return Err(StateError::Rejected(format!(
                "tag {repo}:{tag} is immutable (registry.immutable_tags) and points at {old}"
            )));
        }
        if let (Some(new), Some(prev)) = (&self.bundle, was.and_then(|m| m.bundle.as_ref()))
            && prev.created > new.created
            && !self.allow_downgrade
        {
            return Err(StateError::Rejected(format!(
                "downgrade refused: {repo}:{tag} was set by bundle {} created {}; bundle {} was created {}, earlier (import --allow-downgrade --reason TEXT to move it back)",
                prev.id,
                super::rfc3339_of(prev.created),
                new.id,
                super::rfc3339_of(new.created)
            )));
        }
        Ok(())
    }
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

    /// Applies the op to one repository through `ed` (this change's edits
    /// on top of the batch and the snapshot). A repository left with no
    /// tags, manifests or blobs is removed when the batch is written.
    pub(super) async fn apply(&self, ed: &mut Edit<'_>) -> Result<(), StateError> {
        let Some(name) = self.repository() else {
            return Err(StateError::Corrupt {
                digest: "(op)".into(),
                cause: "a document op applied to a repository".into(),
            });
        };
        let missing = |what: String| StateError::NotFound(format!("{what} not known in {name}"));
        match self {
            Op::Document { .. } => {}
            Op::LinkBlobs { blobs, .. } => {
                for (d, size) in blobs {
                    ed.set(repo::blob_key(d), Some(page::json_value(size)?))
                        .await?;
                }
            }
            Op::PutManifest {
                digest,
                info,
                tags,
                guard,
                ..
            } => {
                let recorded = ed.get(&repo::manifest_key(digest)).await?.is_some();
                if !recorded {
                    for (k, v) in repo::manifest_entries(digest, info)? {
                        ed.set(k, Some(v)).await?;
                    }
                }
                let target = page::string_value(&digest.to_string());
                let mark = page::json_value(&TagMark {
                    pushed: now_unix(),
                    bundle: guard.bundle.clone(),
                })?;
                for t in tags {
                    let old = match ed.get(&repo::tag_key(t.as_str())).await? {
                        Some(v) => Some(page::digest_value(&v)?),
                        None => None,
                    };
                    if old.as_ref() == Some(digest) {
                        continue;
                    }
                    if let Some(old) = old {
                        let at = repo::tagged_key(&old, t.as_str());
                        let was = ed.get(&at).await?.as_ref().and_then(TagMark::read);
                        guard.check(name, t.as_str(), &old, was.as_ref())?;
                        ed.set(at, None).await?;
                        ed.mark_if_untagged(&old).await?;
                    }
                    ed.set(repo::tag_key(t.as_str()), Some(target.clone()))
                        .await?;
                    ed.set(repo::tagged_key(digest, t.as_str()), Some(mark.clone()))
                        .await?;
                }
                if !tags.is_empty() {
                    ed.set(repo::untagged_key(digest), None).await?;
                } else if !recorded {
                    let now = page::json_value(&now_unix())?;
                    ed.set(repo::untagged_key(digest), Some(now)).await?;
                }
            }
            Op::DeleteTag { tag, .. } => {
                let key = repo::tag_key(tag.as_str());
                let old = ed
                    .get(&key)
                    .await?
                    .ok_or_else(|| missing(format!("tag {tag}")))?;
                ed.set(key, None).await?;
                let old = page::digest_value(&old)?;
                ed.set(repo::tagged_key(&old, tag.as_str()), None).await?;
                ed.mark_if_untagged(&old).await?;
            }
            Op::DeleteManifest { digest, .. } => {
                let key = repo::manifest_key(digest);
                let info: ManifestInfo = match ed.get(&key).await? {
                    Some(v) => page::parse_value(&v)?,
                    None => return Err(missing(format!("manifest {digest}"))),
                };
                ed.set(key, None).await?;
                ed.set(repo::untagged_key(digest), None).await?;
                if let Some(s) = &info.subject {
                    ed.set(repo::referrer_key(s, digest), None).await?;
                }
                let prefix = repo::tagged_key(digest, "");
                for tag in ed.keys(&prefix).await? {
                    ed.set(repo::tag_key(&tag), None).await?;
                    ed.set(format!("{prefix}{tag}"), None).await?;
                }
            }
            Op::UnlinkBlob { digest, .. } => {
                let key = repo::blob_key(digest);
                if ed.get(&key).await?.is_none() {
                    return Err(missing(format!("blob {digest}")));
                }
                ed.set(key, None).await?;
            }
            Op::Require {
                blobs, manifests, ..
            } => {
                for d in blobs {
                    if ed.get(&repo::blob_key(d)).await?.is_none()
                        && ed.get(&repo::manifest_key(d)).await?.is_none()
                    {
                        return Err(missing(format!("blob {d}")));
                    }
                }
                for d in manifests {
                    if ed.get(&repo::manifest_key(d)).await?.is_none() {
                        return Err(missing(format!("manifest {d}")));
                    }
                }
            }
        }
        Ok(())
    }
}

/// One change's edits to one repository tree: reads see `change` (this
/// change so far), then `batch` (the earlier changes of the batch), then
/// the tree `base` of the snapshot; writes go to `change` only, so a
/// change that fails is dropped whole. A write that sets the value a key
/// already has is not recorded, so a change that changes nothing leaves
/// `change` empty.
pub(super) struct Edit<'a> {
    /// Page reader.
    pub(super) pages: &'a Pages,
    /// The repository's root page in the snapshot (`None`: absent).
    pub(super) base: Option<&'a Digest>,
    /// Earlier changes of the batch to this repository.
    pub(super) batch: Option<&'a Delta>,
    /// This change's edits.
    pub(super) change: &'a mut Delta,
}

impl Edit<'_> {
    async fn get(&self, key: &str) -> Result<Option<Value>, StateError> {
        if let Some(v) = self.change.get(key) {
            return Ok(v.clone());
        }
        if let Some(v) = self.batch.and_then(|b| b.get(key)) {
            return Ok(v.clone());
        }
        match self.base {
            Some(root) => self.pages.get(root, key).await,
            None => Ok(None),
        }
    }

    async fn set(&mut self, key: String, value: Option<Value>) -> Result<(), StateError> {
        let current = self.get(&key).await?;
        if current.as_ref().map(|v| v.get()) != value.as_ref().map(|v| v.get()) {
            self.change.insert(key, value);
        }
        Ok(())
    }

    /// Records that `manifest` lost its last tag now, when it has none left
    /// and is recorded here.
    async fn mark_if_untagged(&mut self, manifest: &Digest) -> Result<(), StateError> {
        if self.keys(&repo::tagged_key(manifest, "")).await?.is_empty()
            && self.get(&repo::manifest_key(manifest)).await?.is_some()
        {
            self.set(
                repo::untagged_key(manifest),
                Some(page::json_value(&now_unix())?),
            )
            .await?;
        }
        Ok(())
    }

    /// Every present key under `prefix`, without the prefix, sorted.
    async fn keys(&self, prefix: &str) -> Result<Vec<String>, StateError> {
        let to = format!("{prefix}{}", repo::END);
        let mut present = std::collections::BTreeMap::new();
        if let Some(root) = self.base {
            for (k, _) in self.pages.range(root, prefix, &to, usize::MAX).await? {
                present.insert(k, true);
            }
        }
        for delta in self.batch.into_iter().chain([&*self.change]) {
            for (k, v) in delta.range::<str, _>((
                std::ops::Bound::Included(prefix),
                std::ops::Bound::Excluded(to.as_str()),
            )) {
                present.insert(k.clone(), v.is_some());
            }
        }
        Ok(present
            .into_iter()
            .filter(|(_, here)| *here)
            .map(|(k, _)| k[prefix.len()..].to_string())
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_recorded_manifest_keeps_its_first_info() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(crate::store::fs::FsStore::open(dir.path()).unwrap());
        let state = super::super::StateStore::new(store);
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
            guard: TagGuard::default(),
        };
        state
            .commit("a", "t", &[put(crate::oci::OCI_MANIFEST, "a")])
            .await
            .unwrap();
        state
            .commit("b", "t", &[put("text/plain", "b")])
            .await
            .unwrap();
        let snap = state.snapshot().await.unwrap();
        let r = state.repository(&snap, &repo).await.unwrap().unwrap();
        assert_eq!(
            r.manifest(&digest).await.unwrap().unwrap(),
            info(crate::oci::OCI_MANIFEST)
        );
        let tags = r.tags(None, 10).await.unwrap();
        assert_eq!(tags.len(), 2);
        assert!(tags.iter().all(|(_, d)| d == &digest));
    }
}
