//! The reachability walk: everything one generation of the state refers to,
//! streamed to a callback (for garbage collection and `fsck`).
//!
//! Owns: following one [`StateDoc`] digest through the repository tree
//! ([`StateStore::walk_tree`]: the pages of the repository table and of
//! each repository), then each recorded
//! manifest (parsed for `config`, `layers`, child `manifests` and
//! `subject`); the room documents named in `StateDoc.documents` are
//! reported as documents (what they refer to is each room's business:
//! `state` never imports the rooms). The caller decides (by its return
//! value) whether an already reached manifest is descended into again;
//! pages are walked once per call.
//!
//! A document or manifest that cannot be read or parsed does not stop the
//! walk: it is reported as a [`WalkProblem`] and its subtree is skipped.
//! Only a failing blobstore (an I/O error other than a missing object)
//! aborts it.

use std::collections::{HashMap, HashSet};

use super::{Result, StateDoc, StateError, StateStore, TreeItem};
use crate::digest::Digest;
use crate::names::RepositoryName;
use crate::oci::{self, Manifest};
use crate::store::{self, StoreError};

/// One thing a generation refers to.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Reached {
    /// A metadata document: the [`StateDoc`] itself, a page of the
    /// repository tree, or
    /// a room document (`StateDoc.documents`).
    Document(Digest),
    /// A manifest or index recorded in a repository, or named as a child or
    /// `subject` by one (the subject may live in another repository or
    /// nowhere: dangling subjects are allowed by the OCI spec).
    Manifest(Digest),
    /// A blob: linked in a repository, or a config or layer of a manifest.
    Blob(Digest),
}

impl Reached {
    /// The digest reached.
    pub fn digest(&self) -> &Digest {
        match self {
            Reached::Document(d) | Reached::Manifest(d) | Reached::Blob(d) => d,
        }
    }
}

/// Something the walk could not follow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WalkProblem {
    /// The document or manifest that could not be read or parsed.
    pub digest: Digest,
    /// What it was (`state document`, `repository table`, `repository a/b`,
    /// `manifest in a/b`).
    pub what: String,
    /// The one-line cause (missing, digest mismatch, parse error).
    pub cause: String,
}

impl std::fmt::Display for WalkProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}: {}", self.what, self.digest, self.cause)
    }
}

/// The digest of a blob key (`blobs/<alg>/<xx>/<hex>`), if it is one.
fn key_digest(key: &str) -> Option<Digest> {
    let mut parts = key.split('/');
    match (parts.next(), parts.next(), parts.next(), parts.next()) {
        (Some("blobs"), Some(alg), Some(_), Some(hex)) => format!("{alg}:{hex}").parse().ok(),
        _ => None,
    }
}

/// Whether a read failure is a problem to report (`Some`) or a store
/// failure that aborts the walk (`Err`).
fn problem(digest: &Digest, what: &str, e: StateError) -> Result<WalkProblem> {
    match e {
        StateError::Store(StoreError::Io(io)) if io.kind() != std::io::ErrorKind::InvalidData => {
            Err(StateError::Store(StoreError::Io(io)))
        }
        e @ StateError::Store(StoreError::Unavailable(_)) => Err(e),
        other => Ok(WalkProblem {
            digest: digest.clone(),
            what: what.to_string(),
            cause: other.to_string(),
        }),
    }
}

impl StateStore {
    /// Walks everything the generation `state` (a [`StateDoc`] digest) refers
    /// to, calling `visit` once per reference, parents before children.
    /// When `visit` returns `false` for a document or manifest, the walk does
    /// not descend into it (the caller has seen it already); blobs have no
    /// children. Room documents are reported as [`Reached::Document`] but not
    /// descended into: each room reports its own blobs.
    ///
    /// Returns the problems met (missing, corrupt or unparsable documents and
    /// manifests); each one's subtree is skipped. Errors: the blobstore
    /// failed (not a missing object).
    pub async fn walk(
        &self,
        state: &Digest,
        visit: &mut (dyn FnMut(Reached) -> bool + Send),
    ) -> Result<Vec<WalkProblem>> {
        let mut problems = Vec::new();
        if !visit(Reached::Document(state.clone())) {
            return Ok(problems);
        }
        match super::load_doc::<StateDoc>(&**self.blobstore(), state).await {
            Err(e) => {
                problems.push(problem(state, "state document", e)?);
                return Ok(problems);
            }
            // What the generation changed: kept with it (history reads it;
            // its absence is no damage to the generation).
            Ok(doc) => {
                if let Some(c) = doc.changes {
                    visit(Reached::Document(c));
                }
            }
        }
        // The paged tree: pages as documents,
        // linked blobs; recorded manifests are collected to descend below.
        let mut seen = HashSet::new();
        let mut recorded: Vec<(Digest, String, Option<String>)> = Vec::new();
        let tree = self
            .walk_tree(state, &mut seen, &mut |item| {
                match item {
                    TreeItem::Document(d) if &d == state => {}
                    TreeItem::Document(d) => {
                        visit(Reached::Document(d));
                    }
                    TreeItem::Blob { digest, .. } => {
                        visit(Reached::Blob(digest));
                    }
                    TreeItem::Manifest {
                        repository,
                        digest,
                        media_type,
                    } => {
                        recorded.push((
                            digest,
                            format!("manifest in {repository}"),
                            Some(media_type),
                        ));
                    }
                }
                Ok(())
            })
            .await;
        if let Err(e) = tree {
            // Name the page or document that failed when the error says.
            let at = match &e {
                StateError::Store(StoreError::NotFound(key)) => key_digest(key),
                StateError::Corrupt { digest, .. } => digest.parse().ok(),
                _ => None,
            };
            let at = at.unwrap_or_else(|| state.clone());
            problems.push(problem(&at, "repository tree", e)?);
        }
        self.descend(recorded, visit, &mut problems).await?;
        Ok(problems)
    }

    /// Whether the tree of repository `name` (root page `root`) reads
    /// whole: its pages, every manifest it records and what each names (as
    /// [`StateStore::walk`] reads them). For a recovery at the grain of the
    /// damage (`super::recover`). Errors: the blobstore failed.
    pub async fn repository_verifies(&self, name: &RepositoryName, root: &Digest) -> Result<bool> {
        let mut recorded = Vec::new();
        let tree = self
            .walk_repository_tree(name, root, &mut |item| {
                if let TreeItem::Manifest {
                    digest, media_type, ..
                } = item
                {
                    recorded.push((digest, format!("manifest in {name}"), Some(media_type)));
                }
                Ok(())
            })
            .await;
        match tree {
            Ok(()) => {}
            Err(e) if e.is_damage() => return Ok(false),
            Err(e) => return Err(e),
        }
        let mut problems = Vec::new();
        self.descend(recorded, &mut |_| true, &mut problems).await?;
        Ok(problems.is_empty())
    }

    /// Follows each of `recorded` (digest, what it is, recorded media
    /// type) to what it names, visiting manifests and blobs, and records
    /// what cannot be read in `problems`.
    async fn descend(
        &self,
        recorded: Vec<(Digest, String, Option<String>)>,
        visit: &mut (dyn FnMut(Reached) -> bool + Send),
        problems: &mut Vec<WalkProblem>,
    ) -> Result<()> {
        // The media type each manifest is recorded with: what it is read
        // as, also where it is reached as an index child or a subject.
        let types: HashMap<Digest, String> = recorded
            .iter()
            .filter_map(|(d, _, t)| Some((d.clone(), t.clone()?)))
            .collect();
        let mut stack = recorded;
        while let Some((m, within, media_type)) = stack.pop() {
            if !visit(Reached::Manifest(m.clone())) {
                continue;
            }
            match self.manifest_children(&m, media_type.as_deref()).await {
                Ok(Some(children)) => {
                    for c in children {
                        match c {
                            Reached::Manifest(d) => {
                                let t = types.get(&d).cloned();
                                stack.push((d, within.clone(), t));
                            }
                            other => {
                                visit(other);
                            }
                        }
                    }
                }
                // A dangling subject or a child left out on purpose
                // (`platforms`) is not recorded in the repository:
                // absent is fine unless the repository records it.
                Ok(None) if !types.contains_key(&m) => {}
                Ok(None) => problems.push(WalkProblem {
                    digest: m.clone(),
                    what: within,
                    cause: "missing from the blobstore".into(),
                }),
                Err(e) => problems.push(problem(&m, &within, e)?),
            }
        }
        Ok(())
    }

    /// What a manifest refers to: config and layers as blobs, child
    /// manifests and the subject as manifests, read by the one manifest
    /// rule with the media type it is recorded with ([`Manifest::read`]:
    /// what the registry accepted it by). `None` when it is absent.
    async fn manifest_children(
        &self,
        digest: &Digest,
        media_type: Option<&str>,
    ) -> Result<Option<Vec<Reached>>> {
        let bytes = match store::get_verified(&**self.blobstore(), digest).await {
            Ok(b) => b,
            Err(StoreError::NotFound(_)) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let m = Manifest::read(&bytes, media_type).map_err(|e| StateError::Corrupt {
            digest: digest.to_string(),
            cause: e.to_string(),
        })?;
        let mut out = Vec::new();
        for c in &m.manifests {
            if oci::is_manifest_type(&c.media_type) {
                out.push(Reached::Manifest(c.digest.clone()));
            } else {
                out.push(Reached::Blob(c.digest.clone()));
            }
        }
        out.extend(m.blobs().map(|b| Reached::Blob(b.digest.clone())));
        if let Some(s) = &m.subject {
            out.push(Reached::Manifest(s.digest.clone()));
        }
        Ok(Some(out))
    }
}
