//! The reachability walk: everything one generation of the state refers to,
//! streamed to a callback (for garbage collection and `fsck`).
//!
//! Owns: following today's layout from one [`StateDoc`] digest:
//! `StateDoc` → [`RepoTable`] → each [`Repository`] → its manifests (each
//! parsed for `config`, `layers`, child `manifests` and `subject`) and linked
//! blobs; the room documents named in `StateDoc.documents` are reported as
//! documents (what they refer to is each room's business: `state` never
//! imports the rooms). Never holds more than one repository document and one
//! manifest in memory; the caller decides (by its return value) whether an
//! already reached digest is descended into again, so walking many
//! generations that share most documents parses each document once.
//!
//! A document or manifest that cannot be read or parsed does not stop the
//! walk: it is reported as a [`WalkProblem`] and its subtree is skipped.
//! Only a failing blobstore (an I/O error other than a missing object)
//! aborts it.

use super::{RepoTable, Repository, Result, StateDoc, StateError, StateStore};
use crate::digest::Digest;
use crate::oci::{self, Manifest};
use crate::store::{self, StoreError};

/// One thing a generation refers to.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Reached {
    /// A metadata document: the [`StateDoc`] itself, its [`RepoTable`], a
    /// [`Repository`] document, or a room document (`StateDoc.documents`).
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

/// Whether a read failure is a problem to report (`Some`) or a store
/// failure that aborts the walk (`Err`).
fn problem(digest: &Digest, what: &str, e: StateError) -> Result<WalkProblem> {
    match e {
        StateError::Store(StoreError::Io(io)) if io.kind() != std::io::ErrorKind::InvalidData => {
            Err(StateError::Store(StoreError::Io(io)))
        }
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
        let doc: StateDoc = match super::load_doc(&**self.blobstore(), state).await {
            Ok(d) => d,
            Err(e) => {
                problems.push(problem(state, "state document", e)?);
                return Ok(problems);
            }
        };
        for d in doc.documents.values() {
            visit(Reached::Document(d.clone()));
        }
        if !visit(Reached::Document(doc.repositories.clone())) {
            return Ok(problems);
        }
        let table: RepoTable = match super::load_doc(&**self.blobstore(), &doc.repositories).await {
            Ok(t) => t,
            Err(e) => {
                problems.push(problem(&doc.repositories, "repository table", e)?);
                return Ok(problems);
            }
        };
        for (name, digest) in &table.repositories {
            if !visit(Reached::Document(digest.clone())) {
                continue;
            }
            let what = format!("repository {name}");
            let repo: Repository = match super::load_doc(&**self.blobstore(), digest).await {
                Ok(r) => r,
                Err(e) => {
                    problems.push(problem(digest, &what, e)?);
                    continue;
                }
            };
            for b in repo.blobs.keys() {
                visit(Reached::Blob(b.clone()));
            }
            let within = format!("manifest in {name}");
            let mut stack: Vec<Digest> = repo.manifests.keys().cloned().collect();
            while let Some(m) = stack.pop() {
                if !visit(Reached::Manifest(m.clone())) {
                    continue;
                }
                match self.manifest_children(&m).await {
                    Ok(Some(children)) => {
                        for c in children {
                            match c {
                                Reached::Manifest(d) => stack.push(d),
                                other => {
                                    visit(other);
                                }
                            }
                        }
                    }
                    // A dangling subject or a child left out on purpose
                    // (`platforms`) is not recorded in the repository:
                    // absent is fine unless the repository records it.
                    Ok(None) if !repo.manifests.contains_key(&m) => {}
                    Ok(None) => problems.push(WalkProblem {
                        digest: m.clone(),
                        what: within.clone(),
                        cause: "missing from the blobstore".into(),
                    }),
                    Err(e) => problems.push(problem(&m, &within, e)?),
                }
            }
        }
        Ok(problems)
    }

    /// What a manifest refers to: config and layers as blobs, child
    /// manifests and the subject as manifests. `None` when it is absent.
    async fn manifest_children(&self, digest: &Digest) -> Result<Option<Vec<Reached>>> {
        let bytes = match store::get_verified(&**self.blobstore(), digest).await {
            Ok(b) => b,
            Err(StoreError::NotFound(_)) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let m = Manifest::parse(&bytes).map_err(|e| StateError::Corrupt {
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
