//! airlock's state: a tree of immutable metadata documents under one root.
//!
//! Owns: reading consistent snapshots, applying changes ([`Op`]) with one
//! compare-and-swap of `refs/root` per batch of changes (group commit,
//! retrying with jittered backoff on a race lost to another process), and
//! history. Never speaks HTTP and never reads bundles; callers describe a
//! change as data and `commit` makes it visible all at once or not at all.

pub mod audit;
mod commit;
pub mod docs;
mod ops;
pub mod walk;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

pub use audit::Actor;
pub use docs::{ManifestInfo, RepoTable, Repository, STATE_KIND, StateDoc};
pub use ops::{DocumentChange, Op};
pub use walk::{Reached, WalkProblem};

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
    /// The root kept changing under this process (other processes
    /// committing) for longer than the retry deadline.
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

const REPO_CACHE_MAX: usize = 4096;

/// Reads and changes state in a blobstore. Caches the current snapshot
/// (revalidated against `refs/root` on every call) and immutable repository
/// documents (by digest). Cheap to clone: clones share the caches and the
/// group committer ([`StateStore::commit`]).
#[derive(Clone)]
pub struct StateStore {
    store: Arc<dyn Blobstore>,
    snapshot: Arc<Mutex<Arc<Snapshot>>>,
    repos: Arc<Mutex<HashMap<Digest, Arc<Repository>>>>,
    queue: Arc<commit::Queue>,
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
            snapshot: Arc::new(Mutex::new(Arc::new(Snapshot::default()))),
            repos: Arc::new(Mutex::new(HashMap::new())),
            queue: Arc::new(commit::Queue::default()),
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

    /// Every generation from the current one back to the first, newest first.
    ///
    /// Reads only the chain of [`StateDoc`]s (not the repository tables), so
    /// history still lists when a generation's other documents are damaged.
    /// The list ends early, with the cause, at the first generation whose
    /// document cannot be read (removed by `gc` retention, or damaged):
    /// `(generations, Some(cause))`.
    ///
    /// Errors: `refs/root` cannot be read or does not hold a digest.
    pub async fn history_partial(&self) -> Result<(Vec<(Digest, StateDoc)>, Option<StateError>)> {
        let mut out = Vec::new();
        let mut next = self.root_digest().await?;
        while let Some(d) = next {
            match load_doc::<StateDoc>(&*self.store, &d).await {
                Ok(doc) => {
                    next = doc.parent.clone();
                    out.push((d, doc));
                }
                Err(e) => return Ok((out, Some(e))),
            }
        }
        Ok((out, None))
    }

    /// Every generation from the current one back to the first, newest
    /// first. Errors: any generation's document cannot be read (see
    /// [`StateStore::history_partial`] for a listing that degrades).
    pub async fn history(&self) -> Result<Vec<(Digest, StateDoc)>> {
        match self.history_partial().await? {
            (out, None) => Ok(out),
            (_, Some(e)) => Err(e),
        }
    }

    /// The `StateDoc` digest `refs/root` names, `None` for an empty store.
    /// Errors: the root cannot be read or is not a digest.
    pub async fn root_digest(&self) -> Result<Option<Digest>> {
        let Some(root) = self.store.read_root().await? else {
            return Ok(None);
        };
        root.value
            .parse()
            .map(Some)
            .map_err(|e: crate::digest::DigestError| StateError::Corrupt {
                digest: "refs/root".into(),
                cause: e.to_string(),
            })
    }

    /// The [`StateDoc`] stored under `digest`.
    /// Errors: missing, corrupt or not a state document.
    pub async fn state_doc(&self, digest: &Digest) -> Result<StateDoc> {
        load_doc(&*self.store, digest).await
    }
}
