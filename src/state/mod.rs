//! airlock's state: a tree of immutable metadata documents under one root.
//!
//! Owns: reading consistent snapshots, applying changes ([`Op`]) with one
//! compare-and-swap of `refs/root` per batch of changes (group commit,
//! retrying with jittered backoff on a race lost to another process), and
//! history. Never speaks HTTP and never reads bundles; callers describe a
//! change as data and `commit` makes it visible all at once or not at all.
//!
//! Design (DESIGN.md "State model"): `refs/root` names a [`StateDoc`]; its
//! `repositories` is the root page of the repository table, a paged tree
//! ([`page`]: a B+tree of immutable pages of about 4 KiB, each a
//! content-addressed blob) of repository name → root page of that
//! repository's own paged tree (keys in [`repo`]: tags, manifests, linked
//! blobs, the referrers index). A change rewrites only the pages on the
//! paths to the keys it changes, O(log N) pages, and shares every other
//! page with the previous generation, as git shares trees. Pages are read
//! through a cache bounded in bytes ([`StateStore::with_cache_bytes`]).
//! [`StateStore::walk`] enumerates what one generation reaches, for GC.
//! Outside the tree: when manifests were last pulled ([`pulls`]), for GC's
//! retention rules.

pub mod audit;
mod cache;
pub mod changes;
mod commit;
pub mod docs;
mod memo;
mod ops;
mod page;
pub mod pulls;
mod reach;
pub mod recover;
mod repo;
mod root;
mod turns;
pub mod walk;

use std::sync::{Arc, Mutex};
use std::time::Duration;

pub use audit::Actor;
pub use cache::DEFAULT_CACHE_BYTES;
pub use changes::{Changes, TagChange};
pub use docs::{ManifestInfo, STATE_KIND, StateDoc};
pub use ops::{BundleMark, DocumentChange, Op, TagGuard, TagMark};
pub use page::{MAX_PAGE_BYTES, PAGE_KIND};
pub use reach::TreeItem;
pub use repo::{Repository, TagEntry};
pub use root::DEFAULT_REMOTE_ROOT_REFRESH;
pub use walk::{Reached, WalkProblem};

use crate::digest::Digest;
use crate::names::RepositoryName;
use crate::store::{self, Blobstore, RootRead, RootVersion, StoreError};

/// How a missing `refs/root` is named where a root value is expected
/// (damage notes, logs).
const MISSING_ROOT: &str = "(refs/root missing)";

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

impl StateError {
    /// Whether this is damage to stored metadata (a document or page that
    /// is missing, fails its digest or does not parse), as opposed to a
    /// refusal, a race or a failing store: what `airlock fsck --repair`
    /// and a re-import repair ([`recover`]).
    pub fn is_damage(&self) -> bool {
        matches!(
            self,
            StateError::Corrupt { .. }
                | StateError::Store(StoreError::NotFound(_) | StoreError::Corrupt(_))
        )
    }

    /// Seconds after which the request that failed may be tried again
    /// unchanged, when that is the remedy: a commit that kept losing the
    /// root race to other writers ([`StateError::Contention`]), or an
    /// object store that is unavailable ([`StoreError::retry_after`]).
    /// Every HTTP surface answers it 503 with `Retry-After`, never 500.
    pub fn retry_after(&self) -> Option<u64> {
        match self {
            StateError::Contention(_) => Some(1),
            StateError::Store(s) => s.retry_after(),
            _ => None,
        }
    }
}

/// The result type of state operations.
pub type Result<T> = std::result::Result<T, StateError>;

/// One consistent view of the state: a root and its state document.
/// Repositories are read from it on demand ([`StateStore::repository`]).
#[derive(Debug, Default)]
pub struct Snapshot {
    /// The root as read (None for an empty store).
    pub root: Option<RootVersion>,
    /// The `StateDoc` digest (None for an empty store).
    pub digest: Option<Digest>,
    /// The state document (None for an empty store).
    pub state: Option<StateDoc>,
}

/// Where a generation's repository table is.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Table {
    /// No generation yet.
    Empty,
    /// The root page of the paged table (`airlock.state.v2`).
    Paged(Digest),
}

impl Snapshot {
    /// The generation number, 0 for an empty store.
    pub fn generation(&self) -> u64 {
        self.state.as_ref().map_or(0, |s| s.generation)
    }

    fn table(&self) -> Result<Table> {
        match &self.state {
            None => Ok(Table::Empty),
            Some(s) => table_of(s),
        }
    }
}

/// Where `state`'s repository table is, by its layout (`kind`).
fn table_of(state: &StateDoc) -> Result<Table> {
    match state.kind.as_str() {
        STATE_KIND => Ok(Table::Paged(state.repositories.clone())),
        other => Err(StateError::Corrupt {
            digest: state.repositories.to_string(),
            cause: format!("unknown state layout {other:?}"),
        }),
    }
}

/// The outcome of [`StateStore::commit`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Commit {
    /// The generation now current.
    pub generation: u64,
    /// False when the ops changed nothing (no new generation was written).
    pub changed: bool,
    /// What this change changed (tags, room documents), as applied.
    pub changes: changes::Changes,
}

/// Reads and changes state in a blobstore. Caches the current snapshot
/// (revalidated against `refs/root` by generation, see
/// [`StateStore::with_root_refresh`]) and immutable pages and documents (by
/// digest, in a cache bounded in bytes). Cheap to clone: clones share the
/// caches and the group committer ([`StateStore::commit`]).
#[derive(Clone)]
pub struct StateStore {
    store: Arc<dyn Blobstore>,
    roots: Arc<root::RootCache>,
    pages: page::Pages,
    queue: Arc<commit::Queue>,
}

async fn load_doc<T: serde::de::DeserializeOwned>(
    store: &dyn Blobstore,
    digest: &Digest,
) -> Result<T> {
    parse_doc(digest, &store::get_verified(store, digest).await?)
}

fn parse_doc<T: serde::de::DeserializeOwned>(digest: &Digest, bytes: &[u8]) -> Result<T> {
    serde_json::from_slice(bytes).map_err(|e| StateError::Corrupt {
        digest: digest.to_string(),
        cause: e.to_string(),
    })
}

/// Notes `object` as damaged in the store's notes ([`store::damage`]:
/// `/readyz` answers 503 "degraded" while the root names the generation
/// it was read in) when `e` is damage: what a reader of the current
/// generation met that no copy restored. Reads the root once (damage is
/// rare).
async fn note_damage(store: &dyn Blobstore, object: &Digest, e: &StateError) {
    if !e.is_damage() {
        return;
    }
    let Some(notes) = store.damage() else {
        return;
    };
    let root = store
        .read_root()
        .await
        .ok()
        .flatten()
        .map_or_else(|| MISSING_ROOT.to_string(), |r| r.value);
    notes.note(
        &object.to_string(),
        store::damage::Scope::Root(root),
        &e.to_string(),
    );
}

/// The current time as RFC 3339 UTC, whole seconds (`2026-11-30T01:33:18Z`).
pub fn now_rfc3339() -> String {
    let now = time::OffsetDateTime::now_utc();
    now.replace_nanosecond(0)
        .unwrap_or(now)
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_else(|_| "1970-01-01T00:00:00Z".into())
}

/// RFC 3339 (UTC) of `secs` since the Unix epoch, for messages; the
/// number itself when it is out of range.
pub fn rfc3339_of(secs: u64) -> String {
    time::OffsetDateTime::from_unix_timestamp(secs as i64)
        .ok()
        .and_then(|t| {
            t.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_else(|| secs.to_string())
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
    /// State over `store`, with a page cache of [`DEFAULT_CACHE_BYTES`].
    pub fn new(store: Arc<dyn Blobstore>) -> StateStore {
        StateStore::with_cache_bytes(store, DEFAULT_CACHE_BYTES)
    }

    /// State over `store`, caching at most `bytes` of pages and documents
    /// (`airlock serve --cache-size`; 0 caches nothing).
    pub fn with_cache_bytes(store: Arc<dyn Blobstore>, bytes: u64) -> StateStore {
        StateStore {
            pages: page::Pages {
                store: store.clone(),
                cache: Arc::new(Mutex::new(cache::ByteLru::new(bytes))),
                staged: Default::default(),
                superseded: Default::default(),
                memo: Arc::new(memo::Memo::new(bytes > 0)),
            },
            store,
            roots: Arc::new(root::RootCache::new(Duration::ZERO)),
            queue: Arc::new(commit::Queue::default()),
        }
    }

    /// The same state, noticing changes made by other processes (a CLI
    /// import while the server runs, another replica) within `refresh`:
    /// a snapshot whose root was checked less than `refresh` ago is used
    /// without asking the store, and the first reader after that reads the
    /// root once for all readers waiting. Zero (the default) checks the root
    /// on every [`StateStore::snapshot`] (on the filesystem one `stat(2)`).
    /// This process's own commits are visible at once either way.
    /// (`airlock serve --root-refresh-ms`; 0 on the filesystem,
    /// [`DEFAULT_REMOTE_ROOT_REFRESH`] on S3.) Call before cloning.
    pub fn with_root_refresh(mut self, refresh: Duration) -> StateStore {
        self.roots = Arc::new(root::RootCache::new(refresh));
        self
    }

    /// Makes the next [`StateStore::snapshot`] read `refs/root` whatever the
    /// refresh interval (after changing the root outside
    /// [`StateStore::commit`], as `rollback` does).
    pub fn forget_root(&self) {
        self.roots.forget();
    }

    /// Bytes the page cache holds now (at most the configured size).
    pub fn cache_bytes(&self) -> u64 {
        self.pages.cache.lock().map(|c| c.used()).unwrap_or(0)
    }

    /// How many times this process's commits waited for another writer's
    /// turn before a batch ([`turns`]; issue 37 §2): 0 for a writer alone.
    pub fn turn_waits(&self) -> u64 {
        self.queue.turns.waits()
    }

    /// The underlying blobstore.
    pub fn blobstore(&self) -> &Arc<dyn Blobstore> {
        &self.store
    }

    /// The held snapshot when it is fresh by the same rule as
    /// [`StateStore::snapshot`] (within the refresh interval, or the root
    /// seen unchanged), without waiting: `None` when a read of the root is
    /// due (then [`StateStore::snapshot`] makes it). For a caller that has
    /// an answer kept per snapshot and a slower way without one.
    pub fn fresh_snapshot(&self) -> Option<Arc<Snapshot>> {
        self.roots.fresh(&*self.store)
    }

    /// The current snapshot, from the root cache while it is fresh (see
    /// [`StateStore::with_root_refresh`]; this process's own commits are
    /// visible at once), else after one read of `refs/root` (its state
    /// document read only when the root changed).
    pub async fn snapshot(&self) -> Result<Arc<Snapshot>> {
        if let Some(snap) = self.roots.fresh(&*self.store) {
            return Ok(snap);
        }
        // One reader revalidates; the others wait for it and use its answer.
        let _one = self.roots.revalidating().await;
        if !self.roots.refresh().is_zero()
            && let Some(snap) = self.roots.fresh(&*self.store)
        {
            return Ok(snap);
        }
        // Boxed: a new root is rare, and loading it would otherwise make
        // every request's future larger (see `server::conn`).
        Box::pin(self.snapshot_or_last_good()).await
    }

    /// A snapshot whose root was read from the store at or after `since`
    /// (a request's arrival), for a read that names what the held snapshot
    /// lacks: a digest another replica just handed out (a cell's rootfs
    /// URL, a manifest or blob of the generation it served) is then found
    /// at once, not up to `root_refresh_ms` later. Concurrent callers share
    /// one read of the root. With a refresh interval of 0 (the filesystem
    /// default) every snapshot is current already: the same as
    /// [`StateStore::snapshot`].
    ///
    /// Errors: as [`StateStore::snapshot`].
    pub async fn snapshot_since(&self, since: std::time::Instant) -> Result<Arc<Snapshot>> {
        if self.roots.refresh().is_zero() {
            return self.snapshot().await;
        }
        if let Some(snap) = self.roots.read_since(since) {
            return Ok(snap);
        }
        let _one = self.roots.revalidating().await;
        if let Some(snap) = self.roots.read_since(since) {
            return Ok(snap);
        }
        Box::pin(self.snapshot_or_last_good()).await
    }

    async fn snapshot_or_last_good(&self) -> Result<Arc<Snapshot>> {
        match self.snapshot_now().await {
            // A damaged current generation (or root pointer): readers keep
            // the last good one, or, in a process that has none yet, the
            // one the root's copy names; `/readyz` says so
            // ([`StateStore::damage`]). Commits are refused meanwhile
            // (theirs is always [`StateStore::snapshot_now`]).
            Err(e) if e.is_damage() => {
                let root = self.store.read_root().await.ok().flatten();
                let root = root.map_or_else(|| MISSING_ROOT.to_string(), |r| r.value);
                if let Some(held) = self.roots.last_good(&root, &e.to_string()) {
                    return Ok(held);
                }
                match self.copy_snapshot().await {
                    Some(snap) => Ok(self.roots.hold_last_good(snap, &root, &e.to_string())),
                    None => Err(e),
                }
            }
            other => other,
        }
    }

    /// The snapshot `refs/root.copy` names ([`crate::store::refs`]), when
    /// it holds a digest whose state document reads.
    async fn copy_snapshot(&self) -> Option<Snapshot> {
        let digest = crate::store::refs::read_copy(&*self.store)
            .await
            .ok()??
            .ok()?;
        let state: StateDoc = load_doc(&*self.store, &digest).await.ok()?;
        table_of(&state).ok()?;
        Some(Snapshot {
            root: Some(RootVersion {
                value: digest.to_string(),
                version: String::new(),
            }),
            digest: Some(digest),
            state: Some(state),
        })
    }

    /// When the current generation is damaged and reads are answered from
    /// the last good one: the damaged root and the cause.
    pub fn damage(&self) -> Option<(String, String)> {
        self.roots.damage()
    }

    /// The snapshot `refs/root` names now (always one read of the root:
    /// for a commit, whose compare-and-swap needs the store's current version).
    async fn snapshot_now(&self) -> Result<Arc<Snapshot>> {
        let started = std::time::Instant::now();
        let root = match self.roots.seen() {
            Some(seen) => match self.store.read_root_if_changed(&seen).await? {
                RootRead::Unchanged => Some(seen),
                RootRead::Changed(root) => root,
            },
            None => self.store.read_root().await?,
        };
        if let Some(snap) = self.roots.confirm(&root, started) {
            return Ok(snap);
        }
        let snap = Arc::new(self.load_snapshot(root).await?);
        self.roots.loaded(snap.clone(), started);
        Ok(snap)
    }

    async fn load_snapshot(&self, root: Option<RootVersion>) -> Result<Snapshot> {
        let Some(root) = root else {
            // No root and no copy: an empty store. No root but a copy: a
            // deleted or lost root, never an empty site (a commit on it
            // would start history again at generation 1).
            return match crate::store::refs::read_copy(&*self.store).await? {
                None => Ok(Snapshot::default()),
                Some(copy) => Err(StateError::Corrupt {
                    digest: crate::store::refs::ROOT_KEY.into(),
                    cause: format!(
                        "refs/root is missing; its copy refs/root.copy names {}",
                        copy.map_or_else(
                            |text| format!("{text:?} (damaged too)"),
                            |d| d.to_string()
                        )
                    ),
                }),
            };
        };
        let digest: Digest = root
            .value
            .parse()
            .map_err(|e: crate::digest::DigestError| StateError::Corrupt {
                digest: "refs/root".into(),
                cause: e.to_string(),
            })?;
        let state: StateDoc = load_doc(&*self.store, &digest).await?;
        table_of(&state)?;
        Ok(Snapshot {
            root: Some(root),
            digest: Some(digest),
            state: Some(state),
        })
    }

    /// What the generation `doc` changed, when it was kept with it
    /// (`None`: nothing listable, a generation written before changes were
    /// kept, or the document is gone).
    pub async fn changes(&self, doc: &StateDoc) -> Option<Changes> {
        self.changes_record(doc).await.ok().flatten()
    }

    /// [`StateStore::changes`], telling a record that cannot be read
    /// (damaged, with no good copy) from one never kept.
    ///
    /// Errors: the record `doc` names cannot be read (missing, corrupt and
    /// no copy restores it, not a changes document); the store failed.
    pub async fn changes_record(&self, doc: &StateDoc) -> Result<Option<Changes>> {
        match &doc.changes {
            None => Ok(None),
            Some(d) => load_doc(&*self.store, d).await.map(Some),
        }
    }

    /// The repository `name` in `snap`, `None` if it does not exist.
    /// Reads O(log R) pages of the repository table (R repositories).
    pub async fn repository(
        &self,
        snap: &Snapshot,
        name: &RepositoryName,
    ) -> Result<Option<Repository>> {
        match snap.table()? {
            Table::Empty => Ok(None),
            Table::Paged(root) => {
                let key = memo::Key::text(&root, memo::Kind::Repository, name.as_str());
                let found = match self.pages.memo.get(&key) {
                    Some(memo::Answer::Digest(d)) => Some(d),
                    Some(_) => None,
                    None => {
                        // Boxed: a rare miss (see `repo::Repository::memoized`).
                        let found = match Box::pin(self.pages.get(&root, name.as_str())).await? {
                            Some(v) => Some(page::digest_value(&v)?),
                            None => None,
                        };
                        let answer = found
                            .clone()
                            .map_or(memo::Answer::Absent, memo::Answer::Digest);
                        self.pages.memo.put(&key, answer);
                        found
                    }
                };
                Ok(found.map(|d| Repository::paged(self.pages.clone(), d)))
            }
        }
    }

    /// Up to `limit` repository names of `snap` after `last` (exclusive;
    /// it need not exist), in byte-wise order (`/v2/_catalog`).
    pub async fn repositories(
        &self,
        snap: &Snapshot,
        last: Option<&str>,
        limit: usize,
    ) -> Result<Vec<RepositoryName>> {
        let corrupt = |k: &str| StateError::Corrupt {
            digest: "(repository table)".into(),
            cause: format!("bad repository name {k:?}"),
        };
        match snap.table()? {
            Table::Empty => Ok(Vec::new()),
            Table::Paged(root) => {
                let from = last.map_or(String::new(), |l| format!("{l}\0"));
                let to = repo::END.to_string();
                self.pages
                    .range(&root, &from, &to, limit)
                    .await?
                    .into_iter()
                    .map(|(k, _)| k.parse().map_err(|_| corrupt(&k)))
                    .collect()
            }
        }
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
        let Some(d) = snap.state.as_ref().and_then(|s| s.documents.get(name)) else {
            return Ok(None);
        };
        let read = async { parse_doc(d, &self.document_blob(d).await?) };
        match read.await {
            Ok(t) => Ok(Some(t)),
            Err(e) => {
                note_damage(&*self.store, d, &e).await;
                Err(e)
            }
        }
    }

    /// The bytes of the document blob `digest`, through the byte-bounded
    /// cache (documents are immutable: a digest never goes stale).
    async fn document_blob(&self, digest: &Digest) -> Result<bytes::Bytes> {
        let cached = self.pages.cache.lock().ok().and_then(|mut c| c.get(digest));
        if let Some(cache::Cached::Document(b)) = cached {
            return Ok(b);
        }
        let bytes = bytes::Bytes::from(store::get_verified(&*self.store, digest).await?);
        if let Ok(mut c) = self.pages.cache.lock() {
            let w = cache::weight(bytes.len(), 0);
            c.insert(digest.clone(), cache::Cached::Document(bytes.clone()), w);
        }
        Ok(bytes)
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
