//! airlock's state: a tree of immutable metadata documents under one root.
//!
//! Owns: reading consistent snapshots, applying changes ([`Op`]) with one
//! compare-and-swap of `refs/root` per change (retrying on a lost race), and
//! history. Never speaks HTTP and never reads bundles; callers describe a
//! change as data and `commit` makes it visible all at once or not at all.

pub mod docs;
mod ops;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

pub use docs::{ManifestInfo, RepoTable, Repository, STATE_KIND, StateDoc};
pub use ops::{DocumentChange, Op};

use crate::digest::Digest;
use crate::names::RepositoryName;
use crate::store::{self, Blobstore, RootVersion, StoreError};

/// Errors from reading or changing state.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// The blobstore failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A stored document is not what it should be (store corruption).
    #[error("corrupt metadata document {digest}: {cause}")]
    Corrupt {
        /// The document's digest.
        digest: String,
        /// The parse error.
        cause: String,
    },
    /// A change refers to something that does not exist.
    #[error("{0}")]
    NotFound(String),
    /// A room's rules refused a document change (see [`Op::Document`]);
    /// the room reports its own typed error.
    #[error("{0}")]
    Rejected(String),
    /// Too many lost compare-and-swap races in a row.
    #[error("state root kept changing; gave up after {0} attempts")]
    Contention(usize),
}

/// The result type of state operations.
pub type Result<T> = std::result::Result<T, StateError>;

/// One consistent view of the state: a root and its repository table.
#[derive(Debug, Default)]
pub struct Snapshot {
    /// The root as read (None for an empty store).
    pub root: Option<RootVersion>,
    /// The `StateDoc` digest (None for an empty store).
    pub digest: Option<Digest>,
    /// The state document (None for an empty store).
    pub state: Option<StateDoc>,
    /// Repository name → repository document digest.
    pub table: RepoTable,
}

impl Snapshot {
    /// The generation number, 0 for an empty store.
    pub fn generation(&self) -> u64 {
        self.state.as_ref().map_or(0, |s| s.generation)
    }
}

/// The outcome of [`StateStore::commit`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Commit {
    /// The generation now current.
    pub generation: u64,
    /// False when the ops changed nothing (no new generation was written).
    pub changed: bool,
}

const MAX_ATTEMPTS: usize = 64;

/// Changes applied on top of a snapshot, not yet written: repositories
/// (`None`: removed) and named documents (`None`: removed).
#[derive(Default)]
struct Working {
    repos: BTreeMap<RepositoryName, Option<Repository>>,
    documents: BTreeMap<String, Option<Vec<u8>>>,
}
const REPO_CACHE_MAX: usize = 4096;

/// Reads and changes state in a blobstore. Caches the current snapshot
/// (revalidated against `refs/root` on every call) and immutable repository
/// documents (by digest).
pub struct StateStore {
    store: Arc<dyn Blobstore>,
    snapshot: Mutex<Arc<Snapshot>>,
    repos: Mutex<HashMap<Digest, Arc<Repository>>>,
}

async fn load_doc<T: serde::de::DeserializeOwned>(
    store: &dyn Blobstore,
    digest: &Digest,
) -> Result<T> {
    let bytes = store::get_verified(store, digest).await?;
    serde_json::from_slice(&bytes).map_err(|e| StateError::Corrupt {
        digest: digest.to_string(),
        cause: e.to_string(),
    })
}

async fn put_doc<T: serde::Serialize>(store: &dyn Blobstore, doc: &T) -> Result<Digest> {
    let bytes = serde_json::to_vec(doc).map_err(|e| StateError::Corrupt {
        digest: "(new)".into(),
        cause: e.to_string(),
    })?;
    Ok(store::put_bytes(store, &bytes).await?)
}

/// The current time as RFC 3339 UTC, whole seconds (`2026-11-30T01:33:18Z`).
pub fn now_rfc3339() -> String {
    let now = time::OffsetDateTime::now_utc();
    now.replace_nanosecond(0)
        .unwrap_or(now)
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_else(|_| "1970-01-01T00:00:00Z".into())
}

/// `user@host` of the current process, for `who` and `creator` fields:
/// `$USER` (else `$LOGNAME`, else the uid's name in /etc/passwd) and /etc/hostname.
pub fn user_at_host() -> String {
    use std::os::unix::fs::MetadataExt;
    let from_passwd = || {
        let uid = std::fs::metadata("/proc/self").ok()?.uid();
        let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
        passwd.lines().find_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            (f.len() > 2 && f[2] == uid.to_string()).then(|| f[0].to_string())
        })
    };
    let user = std::env::var("USER")
        .or_else(|_| std::env::var("LOGNAME"))
        .ok()
        .or_else(from_passwd)
        .unwrap_or_else(|| "unknown".into());
    let host = std::fs::read_to_string("/etc/hostname").unwrap_or_else(|_| "localhost".into());
    format!("{user}@{}", host.trim())
}

impl StateStore {
    /// State over `store`.
    pub fn new(store: Arc<dyn Blobstore>) -> StateStore {
        StateStore {
            store,
            snapshot: Mutex::new(Arc::new(Snapshot::default())),
            repos: Mutex::new(HashMap::new()),
        }
    }

    /// The underlying blobstore.
    pub fn blobstore(&self) -> &Arc<dyn Blobstore> {
        &self.store
    }

    /// The current snapshot: one read of `refs/root`, documents from cache when unchanged.
    pub async fn snapshot(&self) -> Result<Arc<Snapshot>> {
        let root = self.store.read_root().await?;
        if let Ok(cached) = self.snapshot.lock()
            && cached.root == root
        {
            return Ok(cached.clone());
        }
        let snap = Arc::new(self.load_snapshot(root).await?);
        if let Ok(mut cached) = self.snapshot.lock() {
            *cached = snap.clone();
        }
        Ok(snap)
    }

    async fn load_snapshot(&self, root: Option<RootVersion>) -> Result<Snapshot> {
        let Some(root) = root else {
            return Ok(Snapshot::default());
        };
        let digest: Digest = root
            .value
            .parse()
            .map_err(|e: crate::digest::DigestError| StateError::Corrupt {
                digest: "refs/root".into(),
                cause: e.to_string(),
            })?;
        let state: StateDoc = load_doc(&*self.store, &digest).await?;
        let table: RepoTable = load_doc(&*self.store, &state.repositories).await?;
        Ok(Snapshot {
            root: Some(root),
            digest: Some(digest),
            state: Some(state),
            table,
        })
    }

    /// The repository `name` in `snap`, `None` if it does not exist.
    pub async fn repository(
        &self,
        snap: &Snapshot,
        name: &RepositoryName,
    ) -> Result<Option<Arc<Repository>>> {
        let Some(digest) = snap.table.repositories.get(name) else {
            return Ok(None);
        };
        self.repository_doc(digest).await.map(Some)
    }

    async fn repository_doc(&self, digest: &Digest) -> Result<Arc<Repository>> {
        if let Some(r) = self.repos.lock().ok().and_then(|m| m.get(digest).cloned()) {
            return Ok(r);
        }
        let repo: Arc<Repository> = Arc::new(load_doc(&*self.store, digest).await?);
        if let Ok(mut m) = self.repos.lock() {
            if m.len() >= REPO_CACHE_MAX {
                m.clear();
            }
            m.insert(digest.clone(), repo.clone());
        }
        Ok(repo)
    }

    /// The named document `name` (see [`Op::Document`]) in `snap`, parsed as
    /// `T`; `None` when the state has no such document.
    ///
    /// Errors: the document cannot be read or does not parse as `T` ([`StateError::Corrupt`]).
    pub async fn document<T: serde::de::DeserializeOwned>(
        &self,
        snap: &Snapshot,
        name: &str,
    ) -> Result<Option<T>> {
        match snap.state.as_ref().and_then(|s| s.documents.get(name)) {
            Some(d) => load_doc(&*self.store, d).await.map(Some),
            None => Ok(None),
        }
    }

    async fn document_bytes(&self, snap: &Snapshot, name: &str) -> Result<Option<Vec<u8>>> {
        match snap.state.as_ref().and_then(|s| s.documents.get(name)) {
            Some(d) => Ok(Some(store::get_verified(&*self.store, d).await?)),
            None => Ok(None),
        }
    }

    /// Applies `ops` to `work` (the changes so far on top of `snap`), all or
    /// nothing: on an error `work` is left as it was.
    async fn apply(&self, snap: &Snapshot, work: &mut Working, ops: &[Op]) -> Result<()> {
        let mut trial = Working::default();
        for op in ops {
            match op {
                Op::Document { name, change } => {
                    if !trial.documents.contains_key(name) {
                        let current = match work.documents.get(name) {
                            Some(v) => v.clone(),
                            None => self.document_bytes(snap, name).await?,
                        };
                        trial.documents.insert(name.clone(), current);
                    }
                    let slot = trial
                        .documents
                        .get_mut(name)
                        .ok_or_else(|| StateError::NotFound(name.clone()))?;
                    *slot = change.apply(slot.as_deref())?;
                }
                _ => {
                    let Some(name) = op.repository() else {
                        continue;
                    };
                    if !trial.repos.contains_key(name) {
                        let current = match work.repos.get(name) {
                            Some(r) => r.clone(),
                            None => self.repository(snap, name).await?.map(|r| (*r).clone()),
                        };
                        trial.repos.insert(name.clone(), current);
                    }
                    let slot = trial
                        .repos
                        .get_mut(name)
                        .ok_or_else(|| StateError::NotFound(name.to_string()))?;
                    op.apply(slot)?;
                }
            }
        }
        work.repos.extend(trial.repos);
        work.documents.extend(trial.documents);
        Ok(())
    }

    /// Writes the documents `work` changed and the new [`StateDoc`] on top
    /// of `snap`; `None` when nothing changed.
    async fn write(
        &self,
        snap: &Snapshot,
        work: &Working,
        reason: &str,
        who: &str,
    ) -> Result<Option<(Digest, StateDoc)>> {
        let mut table = snap.table.clone();
        for (name, repo) in &work.repos {
            match repo {
                Some(repo) => {
                    let d = put_doc(&*self.store, repo).await?;
                    table.repositories.insert(name.clone(), d);
                }
                None => {
                    table.repositories.remove(name);
                }
            }
        }
        let old_documents = snap
            .state
            .as_ref()
            .map(|s| s.documents.clone())
            .unwrap_or_default();
        let mut documents = old_documents.clone();
        for (name, bytes) in &work.documents {
            match bytes {
                Some(b) => {
                    documents.insert(name.clone(), store::put_bytes(&*self.store, b).await?);
                }
                None => {
                    documents.remove(name);
                }
            }
        }
        if table == snap.table && documents == old_documents {
            return Ok(None);
        }
        let state = StateDoc {
            kind: STATE_KIND.into(),
            generation: snap.generation() + 1,
            parent: snap.digest.clone(),
            time: now_rfc3339(),
            reason: reason.into(),
            who: who.into(),
            repositories: put_doc(&*self.store, &table).await?,
            documents,
        };
        let digest = put_doc(&*self.store, &state).await?;
        Ok(Some((digest, state)))
    }

    /// Applies `ops` to the current state and swaps the root once.
    ///
    /// On a lost race the ops are re-applied to the new root (up to 64 times).
    /// When the ops change nothing, no generation is written. Errors from
    /// applying an op (e.g. deleting a tag that does not exist) abort the
    /// change and leave the root as it was.
    pub async fn commit(&self, reason: &str, who: &str, ops: &[Op]) -> Result<Commit> {
        for _ in 0..MAX_ATTEMPTS {
            let snap = self.snapshot().await?;
            let mut work = Working::default();
            self.apply(&snap, &mut work, ops).await?;
            let Some((digest, state)) = self.write(&snap, &work, reason, who).await? else {
                return Ok(Commit {
                    generation: snap.generation(),
                    changed: false,
                });
            };
            self.store.sync().await?;
            if self
                .store
                .swap_root(snap.root.as_ref(), &digest.to_string())
                .await?
            {
                tracing::info!(generation = state.generation, %digest, reason, "state root swapped");
                return Ok(Commit {
                    generation: state.generation,
                    changed: true,
                });
            }
            tracing::debug!("lost root compare-and-swap race; retrying");
        }
        Err(StateError::Contention(MAX_ATTEMPTS))
    }

    /// Every generation from the current one back to the first, newest first.
    pub async fn history(&self) -> Result<Vec<(Digest, StateDoc)>> {
        let snap = self.snapshot().await?;
        let mut out = Vec::new();
        let mut next = snap.digest.clone();
        while let Some(d) = next {
            let doc: StateDoc = load_doc(&*self.store, &d).await?;
            next = doc.parent.clone();
            out.push((d, doc));
        }
        Ok(out)
    }
}
