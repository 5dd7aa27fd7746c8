//! Blob upload sessions as scratch objects (distribution-spec v1.1 "Pushing
//! blobs": POST, PATCH, PUT, GET status, DELETE), backend-neutral.
//!
//! Owns: the `uploads/` key layout, session expiry and the final assembly
//! that hashes every byte on its way into `blobs/`. Never speaks HTTP and
//! never changes state: the handlers in `upload` link a finished blob.
//!
//! Layout (the [`Blobstore`] has no append, so every chunk is its own object):
//! - `uploads/<uuid>/info.json`: [`SessionInfo`] (repository, start time),
//!   written by POST; a session without it does not exist;
//! - `uploads/<uuid>/<offset>`: one object per PATCH, `<offset>` being the
//!   chunk's first byte as 20 decimal digits, so keys sort in upload order.
//!
//! The current size of a session is the offset of its last chunk plus that
//! chunk's size. Everything about a session is in the store, so a session
//! opened through one replica can be continued and finished through any
//! other (load balancers do not pin clients). Operations on one session are
//! serialized within this process by a lock, and across processes by the
//! store: a chunk is published with [`ObjectWriter::commit_new`] (create
//! only if absent: `link(2)`, S3 `If-None-Match: *`), so of two PATCHes
//! racing for one offset exactly one lands and the other is answered as
//! out of order (416 with the current size). The final PUT stores nothing
//! unless the whole content matches the client's digest. A finished blob
//! needs no root swap: it is linked into its repository
//! (`registry::links`) and becomes reachable when a manifest naming it is
//! committed.

mod book;
mod session;
mod sink;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use bytes::Bytes;

pub use self::book::{Full, Owner};

/// The user a request runs as, when users are configured: a request
/// extension set by the access layer (`server::access`), for the per-user
/// session caps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Uploader(pub String);
use self::book::Book;
use self::session::check_range;
pub use self::session::{SessionInfo, UPLOADS_PREFIX, UploadId, parse_content_range};
pub use self::sink::BodyStream;
use self::sink::Sink;
use crate::digest::{Digest, Hasher};
use crate::names::RepositoryName;
use crate::store::{self, Blobstore, StoreError, blob_key};

/// Why an upload operation failed.
#[derive(Debug, thiserror::Error)]
pub enum UploadError {
    /// No such session in this repository, or it expired.
    #[error("upload session unknown")]
    Unknown,
    /// A chunk does not start where the session ends (`offset` = current size).
    #[error("chunk starts at {start}, upload is at {offset}")]
    OutOfOrder {
        /// Where the chunk claimed to start.
        start: u64,
        /// The session's current size.
        offset: u64,
    },
    /// A `Content-Range` starting at the current size whose length is not
    /// representable (`0-18446744073709551615`): malformed, never wrapped.
    #[error("Content-Range {start}-{end} is too long")]
    RangeInvalid {
        /// First byte.
        start: u64,
        /// Last byte, inclusive.
        end: u64,
    },
    /// The body's length differs from what `Content-Range` announced.
    #[error("chunk announced {expected} bytes, body had {actual}")]
    Size {
        /// Announced bytes.
        expected: u64,
        /// Received bytes.
        actual: u64,
    },
    /// The content does not hash to the digest the client named; nothing was stored.
    #[error("content is {actual}, not {expected}")]
    Digest {
        /// The client's digest.
        expected: Digest,
        /// What the content hashes to.
        actual: Digest,
    },
    /// The blob would exceed the maximum blob size (bytes); nothing more was
    /// stored.
    #[error("blob larger than the maximum of {0} bytes")]
    TooLarge(u64),
    /// Too many open sessions, every one of them with a request in
    /// progress (`scope`: `registry`, `repository`, `client` or `user`,
    /// with the cap).
    #[error("too many open upload sessions in the {scope} (at most {cap}), all of them active")]
    TooMany {
        /// Which cap was hit.
        scope: &'static str,
        /// The cap.
        cap: usize,
    },
    /// Reading the request body failed (client went away).
    #[error("reading the request body: {0}")]
    Body(String),
    /// The store failed, or the session's objects are corrupt.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The result of upload operations.
pub type Result<T> = std::result::Result<T, UploadError>;

/// Caps on uploads, against clients that would fill the disk or the inode
/// table (`airlock serve` flags, `[limits]`). A session cap never refuses a
/// client because of sessions nobody uses: at a cap, the least recently
/// active session of that scope with no request in progress is removed to
/// make room ([`Uploads::create`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UploadLimits {
    /// Largest blob accepted, in bytes (413 `SIZE_INVALID` beyond).
    pub max_blob_size: u64,
    /// Sessions open at once in this process (429 `TOOMANYREQUESTS` when
    /// every one is active).
    pub max_sessions: usize,
    /// Sessions open at once in one repository.
    pub max_sessions_per_repository: usize,
    /// Sessions open at once opened by one client IP address.
    pub max_sessions_per_client: usize,
    /// Sessions open at once opened by one user (when users are
    /// configured; 0: no cap).
    pub max_sessions_per_user: usize,
    /// Bytes one user may hold in open sessions, counting bodies being
    /// received (0: no cap; 413 `DENIED` beyond, `server::access`).
    pub max_bytes_per_user: u64,
    /// A session with no request for this long is removed by the next
    /// sweep (separate from the maximum age, `RegistryConfig::upload_expiry`).
    pub idle_timeout: Duration,
}

impl Default for UploadLimits {
    /// 64 GiB blobs, 4,096 sessions, 256 per repository, 128 per client,
    /// 64 and 128 GiB per user, 1 h idle timeout.
    fn default() -> UploadLimits {
        UploadLimits {
            max_blob_size: 64 << 30,
            max_sessions: 4096,
            max_sessions_per_repository: 256,
            max_sessions_per_client: 128,
            max_sessions_per_user: 64,
            max_bytes_per_user: 128 << 30,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
        }
    }
}

/// Default [`UploadLimits::idle_timeout`]: 1 hour.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(3600);

/// Upload sessions over a blobstore. Cheap to share behind an `Arc`.
pub struct Uploads {
    store: Arc<dyn Blobstore>,
    /// The maximum age and the caps; replaced whole by a config reload.
    times: arc_swap::ArcSwap<(Duration, UploadLimits)>,
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// The sessions this process counts against the caps.
    book: Book,
}

/// Holds one session's in-process lock; forgets the lock when the last holder goes.
struct SessionGuard<'a> {
    guard: Option<tokio::sync::OwnedMutexGuard<()>>,
    id: String,
    uploads: &'a Uploads,
}

impl Drop for SessionGuard<'_> {
    fn drop(&mut self) {
        self.guard = None;
        if let Ok(mut locks) = self.uploads.locks.lock()
            && locks
                .get(&self.id)
                .is_some_and(|l| Arc::strong_count(l) == 1)
        {
            locks.remove(&self.id);
        }
    }
}

fn now_unix() -> u64 {
    unix_secs(SystemTime::now())
}

fn unix_secs(t: SystemTime) -> u64 {
    t.duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// What a listing of `uploads/` says of one session.
#[derive(Debug, Default, Clone, Copy)]
struct Listed {
    /// Its `info.json` exists (it is open).
    info: bool,
    /// The newest modification time of its objects (its last chunk, or
    /// its opening): activity through any replica.
    newest: Option<SystemTime>,
}

impl Uploads {
    /// Sessions in `store` that expire `expiry` after they were opened.
    pub fn new(store: Arc<dyn Blobstore>, expiry: Duration) -> Uploads {
        Uploads::with_limits(store, expiry, UploadLimits::default())
    }

    /// Sessions as [`Uploads::new`], under `limits`.
    pub fn with_limits(
        store: Arc<dyn Blobstore>,
        expiry: Duration,
        limits: UploadLimits,
    ) -> Uploads {
        Uploads {
            store,
            times: arc_swap::ArcSwap::from_pointee((expiry, limits)),
            locks: Mutex::new(HashMap::new()),
            book: Book::new(limits),
        }
    }

    /// Replaces the maximum age and the caps (a config reload): sessions
    /// already open are counted under the new caps from now on.
    pub fn set_limits(&self, expiry: Duration, limits: UploadLimits) {
        self.times.store(Arc::new((expiry, limits)));
        self.book.set_limits(limits);
    }

    fn expiry(&self) -> Duration {
        self.times.load().0
    }

    /// The largest blob a session or monolithic upload may complete, in
    /// bytes (`[limits] max_blob_size`).
    pub fn max_blob_size(&self) -> u64 {
        self.limits().max_blob_size
    }

    /// The caps these sessions are under.
    pub fn limits(&self) -> UploadLimits {
        self.times.load().1
    }

    /// How often [`Uploads::sweep`] should run: a quarter of the shorter
    /// of the expiry and the idle timeout, between 1 s and 1 h.
    pub fn sweep_period(&self) -> Duration {
        (self.expiry().min(self.limits().idle_timeout) / 4)
            .min(Duration::from_secs(3600))
            .max(Duration::from_secs(1))
    }

    /// Bytes `user` holds in open sessions counted here plus bodies being
    /// received (for the per-user byte cap, `server::access`).
    pub fn held_by(&self, user: &str) -> u64 {
        self.book.held(user)
    }

    /// Reserves `n` more bytes of a body `user` is sending; false (nothing
    /// reserved) when that passes [`UploadLimits::max_bytes_per_user`].
    pub fn reserve(&self, user: &str, n: u64) -> bool {
        self.book.reserve(user, n)
    }

    /// Gives back `n` bytes reserved by [`Uploads::reserve`] (the body ended;
    /// what was stored is now held by its session).
    pub fn unreserve(&self, user: &str, n: u64) {
        self.book.unreserve(user, n);
    }

    /// The per-user byte cap (0: none).
    pub fn user_byte_cap(&self) -> u64 {
        self.book.user_byte_cap()
    }

    /// How many sessions have a request in progress on this replica (a
    /// PATCH or PUT body still arriving, or waiting for one): the sessions
    /// an eviction passes over.
    pub fn busy(&self) -> usize {
        let Ok(locks) = self.locks.lock() else {
            return 0;
        };
        locks.values().filter(|l| l.try_lock().is_err()).count()
    }

    /// The session's lock if no one holds it (sweeps and evictions never wait).
    fn try_lock(&self, id: &UploadId) -> Option<SessionGuard<'_>> {
        let lock = self
            .locks
            .lock()
            .ok()?
            .entry(id.0.clone())
            .or_default()
            .clone();
        // On failure, dropping the guard forgets the lock entry if it was
        // the last holder.
        let mut guard = SessionGuard {
            guard: None,
            id: id.0.clone(),
            uploads: self,
        };
        guard.guard = Some(lock.try_lock_owned().ok()?);
        Some(guard)
    }

    /// When the session opened at `info.started_unix` expires, as a timer instant.
    fn expires_at(&self, info: &SessionInfo) -> tokio::time::Instant {
        let age = now_unix().saturating_sub(info.started_unix);
        let left = self
            .expiry()
            .as_secs()
            .saturating_add(1)
            .saturating_sub(age);
        tokio::time::Instant::now() + Duration::from_secs(left)
    }

    /// The session's lock, waited for; the session counts as active from now.
    async fn lock(&self, id: &UploadId) -> SessionGuard<'_> {
        let lock = match self.locks.lock() {
            Ok(mut locks) => Some(locks.entry(id.0.clone()).or_default().clone()),
            Err(_) => None,
        };
        let guard = match lock {
            Some(l) => Some(l.lock_owned().await),
            None => None,
        };
        self.book.touch(id, SystemTime::now());
        SessionGuard {
            guard,
            id: id.0.clone(),
            uploads: self,
        }
    }

    fn expired(&self, info: &SessionInfo, now: u64) -> bool {
        now.saturating_sub(info.started_unix) > self.expiry().as_secs()
    }

    async fn info(&self, id: &UploadId) -> Result<Option<SessionInfo>> {
        match store::read_all(&*self.store, &id.info_key()).await {
            Ok(bytes) => Ok(serde_json::from_slice(&bytes).ok()),
            Err(StoreError::NotFound(_)) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// The session's info if it exists in `repo` and has not expired.
    async fn open(&self, id: &UploadId, repo: &RepositoryName) -> Result<SessionInfo> {
        match self.info(id).await? {
            Some(info) if &info.repository == repo && !self.expired(&info, now_unix()) => Ok(info),
            _ => Err(UploadError::Unknown),
        }
    }

    /// Chunks of a session: (offset, key), in upload order.
    async fn parts(&self, id: &UploadId) -> Result<Vec<(u64, String)>> {
        let keys = self.store.list(&id.dir()).await?;
        Ok(keys
            .into_iter()
            .filter_map(|k| Some((UploadId::part_offset(&k)?, k)))
            .collect())
    }

    async fn size(&self, id: &UploadId) -> Result<u64> {
        let Some((offset, key)) = self.parts(id).await?.pop() else {
            return Ok(0);
        };
        match self.store.stat(&key).await? {
            Some(n) => Ok(offset + n),
            None => Err(StoreError::NotFound(key).into()),
        }
    }

    /// Every session the store holds objects of, with what the listing
    /// says of it (one listing of `uploads/`; modification times where the
    /// backend lists them).
    async fn listing(&self) -> Result<BTreeMap<UploadId, Listed>> {
        let objects: Vec<(String, Option<SystemTime>)> =
            match self.store.list_meta(UPLOADS_PREFIX).await {
                Ok(metas) => metas
                    .into_iter()
                    .map(|m| (m.key, Some(m.modified)))
                    .collect(),
                Err(StoreError::Io(e)) if e.kind() == std::io::ErrorKind::Unsupported => self
                    .store
                    .list(UPLOADS_PREFIX)
                    .await?
                    .into_iter()
                    .map(|k| (k, None))
                    .collect(),
                Err(e) => return Err(e.into()),
            };
        let mut sessions: BTreeMap<UploadId, Listed> = BTreeMap::new();
        for (key, modified) in objects {
            let Some(id) = UploadId::of_key(&key) else {
                continue;
            };
            let l = sessions.entry(id).or_default();
            l.info |= key.ends_with("/info.json");
            l.newest = l.newest.max(modified);
        }
        Ok(sessions)
    }

    /// Brings the book in line with the store: sessions ended through
    /// another replica are no longer counted, and chunks written through
    /// another replica count as activity.
    async fn reconcile(&self) -> Result<BTreeMap<UploadId, Listed>> {
        let listed = self.listing().await?;
        for id in self.book.stored_ids() {
            match listed.get(&id) {
                Some(l) if l.info => {
                    if let Some(t) = l.newest {
                        self.book.touch(&id, t);
                    }
                }
                _ => self.book.release(&id),
            }
        }
        Ok(listed)
    }

    /// Removes the least recently active session in `full`'s scope of
    /// `owner` that has no request in progress here; false when every one
    /// has (the new session is then refused).
    async fn evict_one(&self, owner: &Owner, full: Full) -> Result<bool> {
        for id in self.book.in_scope(owner, full) {
            let Some(_g) = self.try_lock(&id) else {
                continue;
            };
            self.remove(&id).await?;
            self.book.release(&id);
            tracing::info!(
                session = id.as_str(),
                scope = full.scope,
                cap = full.cap,
                "idle upload session removed to make room for a new one"
            );
            return Ok(true);
        }
        Ok(false)
    }

    /// Opens a session in `owner.repository` (POST, end-4a), counted
    /// against the caps of its repository, client address and user.
    ///
    /// At a cap, the book is first reconciled with the store (sessions
    /// finished through another replica stop counting), then the least
    /// recently active session of that scope with no request in progress
    /// is removed to make room: only when every counted session of the
    /// scope is busy is the new one refused with [`UploadError::TooMany`].
    pub async fn create(&self, owner: Owner) -> Result<UploadId> {
        let id = UploadId::new();
        let mut reconciled = false;
        while let Err(full) = self.book.admit(&id, &owner) {
            if !reconciled {
                self.reconcile().await?;
                reconciled = true;
            } else if !self.evict_one(&owner, full).await? {
                return Err(UploadError::TooMany {
                    scope: full.scope,
                    cap: full.cap,
                });
            }
        }
        let created = self.create_admitted(&id, &owner).await;
        match created {
            Ok(()) => {
                self.book.stored(&id);
                Ok(id)
            }
            Err(e) => {
                self.book.release(&id);
                Err(e)
            }
        }
    }

    async fn create_admitted(&self, id: &UploadId, owner: &Owner) -> Result<()> {
        let info = SessionInfo {
            repository: owner.repository.clone(),
            started: crate::state::now_rfc3339(),
            started_unix: now_unix(),
            client: owner.client,
            user: owner.user.clone(),
        };
        let bytes = serde_json::to_vec(&info).map_err(|e| StoreError::Io(e.into()))?;
        let mut w = self.store.writer(&id.info_key()).await?;
        w.write(Bytes::from(bytes)).await?;
        w.commit().await?;
        Ok(())
    }

    /// The number of bytes received so far (GET status, end-13).
    pub async fn status(&self, id: &UploadId, repo: &RepositoryName) -> Result<u64> {
        let _g = self.lock(id).await;
        self.open(id, repo).await?;
        self.size(id).await
    }

    /// Appends `body` as one chunk (PATCH, end-5). `range` is the
    /// `Content-Range` (first byte, last byte inclusive) if the client sent
    /// one: it must start at the current size and match the body's length.
    /// Returns the new size. An empty body changes nothing.
    pub async fn append(
        &self,
        id: &UploadId,
        repo: &RepositoryName,
        range: Option<(u64, u64)>,
        body: &mut (impl BodyStream + ?Sized),
    ) -> Result<u64> {
        let _g = self.lock(id).await;
        let info = self.open(id, repo).await?;
        let offset = self.size(id).await?;
        let expected = check_range(range, offset)?;
        let max = self.limits().max_blob_size;
        if expected.is_some_and(|n| offset.saturating_add(n) > max) {
            return Err(UploadError::TooLarge(max));
        }
        let writer = self.store.writer(&id.part_key(offset)).await?;
        let mut sink = Sink::new(writer, None, max.saturating_sub(offset), max);
        let copied = sink.copy_body(body, Some(self.expires_at(&info))).await;
        // The client was active until its body ended, also when it ended
        // early (it went away): the session that went idle last is the
        // most recently active, whatever order the requests started in.
        self.book.touch(id, SystemTime::now());
        if let Err(e) = copied {
            sink.cancel().await;
            return Err(e);
        }
        let count = sink.count;
        if let Some(expected) = expected
            && expected != count
        {
            sink.cancel().await;
            return Err(UploadError::Size {
                expected,
                actual: count,
            });
        }
        if count == 0 {
            sink.cancel().await;
            return Ok(offset);
        }
        if let Err(e) = sink.flush().await {
            sink.cancel().await;
            return Err(e);
        }
        if !sink.writer.commit_new().await? {
            // Another replica (or process) wrote this offset first.
            return Err(UploadError::OutOfOrder {
                start: offset,
                offset: self.size(id).await?,
            });
        }
        self.book.set_bytes(id, offset + count);
        Ok(offset + count)
    }

    /// Completes a session (PUT, end-6): streams every chunk and then `body`
    /// (the optional last chunk, checked against `range` like
    /// [`Uploads::append`]) through the hasher into `blobs/`, and commits
    /// the blob only if it hashes to `digest`. The session is gone
    /// afterwards, whatever the outcome, except for an out-of-order or
    /// unknown session. Returns the blob's size.
    pub async fn finish(
        &self,
        id: &UploadId,
        repo: &RepositoryName,
        digest: &Digest,
        range: Option<(u64, u64)>,
        body: &mut (impl BodyStream + ?Sized),
    ) -> Result<u64> {
        let _g = self.lock(id).await;
        let info = match self.open(id, repo).await {
            Ok(info) => info,
            Err(e) => {
                // Gone (expired, removed, or finished through another
                // replica): no longer counted here either.
                self.book.release(id);
                return Err(e);
            }
        };
        let parts = self.parts(id).await?;
        let offset = self.size(id).await?;
        let expected = check_range(range, offset)?;
        let expires = Some(self.expires_at(&info));
        let result = self.assemble(&parts, digest, expected, body, expires).await;
        self.remove(id).await?;
        self.book.release(id);
        result
    }

    async fn assemble(
        &self,
        parts: &[(u64, String)],
        digest: &Digest,
        expected: Option<u64>,
        body: &mut (impl BodyStream + ?Sized),
        expires: Option<tokio::time::Instant>,
    ) -> Result<u64> {
        let writer = self.store.writer(&blob_key(digest)).await?;
        let max = self.limits().max_blob_size;
        let mut sink = Sink::new(writer, Some(Hasher::new(digest.algorithm())), max, max);
        let result = async {
            for (offset, key) in parts {
                if *offset != sink.count {
                    return Err(UploadError::Store(StoreError::Io(std::io::Error::other(
                        format!("upload chunk {key} does not follow byte {}", sink.count),
                    ))));
                }
                sink.copy_object(&*self.store, key).await?;
            }
            let before = sink.count;
            sink.copy_body(body, expires).await?;
            if let Some(expected) = expected
                && expected != sink.count - before
            {
                return Err(UploadError::Size {
                    expected,
                    actual: sink.count - before,
                });
            }
            let actual = sink
                .hasher
                .take()
                .map(Hasher::finish)
                .ok_or_else(|| StoreError::Io(std::io::Error::other("hasher missing")))?;
            if &actual != digest {
                return Err(UploadError::Digest {
                    expected: digest.clone(),
                    actual,
                });
            }
            sink.flush().await
        }
        .await;
        match result {
            Ok(()) => {
                let size = sink.count;
                sink.writer.commit().await?;
                Ok(size)
            }
            Err(e) => {
                sink.cancel().await;
                Err(e)
            }
        }
    }

    /// Stores `body` as the blob `digest` in one go (POST with `digest`,
    /// end-4b), verified like [`Uploads::finish`]; no session is created.
    pub async fn put_blob(
        &self,
        digest: &Digest,
        body: &mut (impl BodyStream + ?Sized),
    ) -> Result<u64> {
        self.assemble(&[], digest, None, body, None).await
    }

    /// Cancels a session (DELETE): removes all its objects.
    pub async fn cancel(&self, id: &UploadId, repo: &RepositoryName) -> Result<()> {
        let _g = self.lock(id).await;
        if let Err(e) = self.open(id, repo).await {
            self.book.release(id);
            return Err(e);
        }
        self.remove(id).await?;
        self.book.release(id);
        Ok(())
    }

    async fn remove(&self, id: &UploadId) -> Result<()> {
        // The info object goes first: from then on the session does not exist.
        self.store.delete(&id.info_key()).await?;
        for (_, key) in self.parts(id).await? {
            self.store.delete(&key).await?;
        }
        Ok(())
    }

    /// Removes every session opened more than the expiry ago or without a
    /// request for the idle timeout (its last chunk, through any replica,
    /// or its last request here), and chunks left behind by a session that
    /// no longer exists; sessions counted here and finished elsewhere stop
    /// counting. A session whose lock is held (a request on it in
    /// progress) is skipped, never waited for: it is swept at a later run,
    /// and a PATCH or PUT on it is refused at its expiry. Returns how many
    /// sessions were removed.
    pub async fn sweep(&self) -> Result<usize> {
        let listed = self.reconcile().await?;
        let now = SystemTime::now();
        let idle = self.limits().idle_timeout;
        let mut removed = 0;
        for (id, l) in listed {
            let Some(_g) = self.try_lock(&id) else {
                continue;
            };
            let stale = match self.info(&id).await? {
                Some(info) => {
                    let opened = std::time::UNIX_EPOCH + Duration::from_secs(info.started_unix);
                    let last = [Some(opened), l.newest, self.book.active(&id)]
                        .into_iter()
                        .flatten()
                        .max()
                        .unwrap_or(opened);
                    self.expired(&info, unix_secs(now))
                        || now.duration_since(last).is_ok_and(|d| d > idle)
                }
                None => true,
            };
            if stale {
                self.remove(&id).await?;
                self.book.release(&id);
                removed += 1;
            }
        }
        Ok(removed)
    }
}
