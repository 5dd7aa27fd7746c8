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

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures_util::{Stream, StreamExt};
use tokio::io::AsyncReadExt;

use crate::digest::{Digest, Hasher};
use crate::names::RepositoryName;
use crate::store::{self, Blobstore, ObjectWriter, StoreError, blob_key};

/// Bytes buffered before each write to the store.
const WRITE_BUFFER: usize = 1 << 20;
/// Sessions counted this long ago and absent from the store are counted
/// down by the sweep.
const SWEEP_MIN_AGE: Duration = Duration::from_secs(60);
/// Prefix of every upload object.
pub const UPLOADS_PREFIX: &str = "uploads/";

/// A session id: a v4 UUID in lower-case hyphenated form (the form the
/// `Location` header carries). Parsing through [`UploadId::parse`] is the
/// only way to get one, so a session id can never escape `uploads/<id>/`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct UploadId(String);

impl UploadId {
    /// A fresh random id.
    pub fn new() -> UploadId {
        UploadId(uuid::Uuid::new_v4().hyphenated().to_string())
    }

    /// `Some` for a canonical lower-case hyphenated UUID, else `None`.
    pub fn parse(s: &str) -> Option<UploadId> {
        let u = uuid::Uuid::try_parse(s).ok()?;
        let canonical = u.hyphenated().to_string();
        (canonical == s).then_some(UploadId(canonical))
    }

    /// The id as sent in `Location` and `Docker-Upload-UUID`.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    fn info_key(&self) -> String {
        format!("{UPLOADS_PREFIX}{}/info.json", self.0)
    }

    fn dir(&self) -> String {
        format!("{UPLOADS_PREFIX}{}/", self.0)
    }

    fn part_key(&self, offset: u64) -> String {
        format!("{UPLOADS_PREFIX}{}/{offset:020}", self.0)
    }
}

impl Default for UploadId {
    fn default() -> UploadId {
        UploadId::new()
    }
}

/// `uploads/<uuid>/info.json`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SessionInfo {
    /// The repository the session was opened in; other repositories do not see it.
    pub repository: RepositoryName,
    /// When the session was opened, RFC 3339 UTC (for people).
    pub started: String,
    /// When the session was opened, seconds since the Unix epoch (for expiry).
    pub started_unix: u64,
    /// The IP address of the client that opened it, when known (for the
    /// per-client session cap).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<IpAddr>,
}

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
    /// Too many open sessions (`scope`: `repository`, `client` or
    /// `registry`, with the cap).
    #[error("too many open upload sessions in the {scope} (at most {cap})")]
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
/// table (`airlock serve` flags).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UploadLimits {
    /// Largest blob accepted, in bytes (413 `SIZE_INVALID` beyond).
    pub max_blob_size: u64,
    /// Sessions open at once in this process (429 `TOOMANYREQUESTS` beyond).
    pub max_sessions: usize,
    /// Sessions open at once in one repository.
    pub max_sessions_per_repository: usize,
    /// Sessions open at once opened by one client IP address.
    pub max_sessions_per_client: usize,
}

impl Default for UploadLimits {
    /// 64 GiB blobs, 4,096 sessions, 256 per repository, 128 per client.
    fn default() -> UploadLimits {
        UploadLimits {
            max_blob_size: 64 << 30,
            max_sessions: 4096,
            max_sessions_per_repository: 256,
            max_sessions_per_client: 128,
        }
    }
}

/// Upload sessions over a blobstore. Cheap to share behind an `Arc`.
pub struct Uploads {
    store: Arc<dyn Blobstore>,
    expiry: Duration,
    limits: UploadLimits,
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// Sessions this process opened and has not finished, cancelled or
    /// swept (sessions from before a restart are not counted).
    open_sessions: Mutex<OpenSessions>,
}

/// Counts of open sessions, in total, per repository and per client.
#[derive(Default)]
struct OpenSessions {
    total: usize,
    per_repository: HashMap<RepositoryName, usize>,
    per_client: HashMap<IpAddr, usize>,
    /// The sessions counted, with their repository and client: a session
    /// opened through another replica and finished through this one is not
    /// counted down here, and one opened here and finished elsewhere is
    /// counted down by the next sweep.
    ids: HashMap<String, (RepositoryName, Option<IpAddr>, std::time::Instant)>,
}

/// Adds one to `map[key]`.
fn count_up<K: std::hash::Hash + Eq>(map: &mut HashMap<K, usize>, key: K) {
    *map.entry(key).or_default() += 1;
}

/// Takes one from `map[key]`, forgetting keys that reach 0.
fn count_down<K: std::hash::Hash + Eq>(map: &mut HashMap<K, usize>, key: &K) {
    if let Some(n) = map.get_mut(key) {
        *n = n.saturating_sub(1);
        if *n == 0 {
            map.remove(key);
        }
    }
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
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// A request body as a stream of chunks.
pub trait BodyStream:
    Stream<Item = std::result::Result<Bytes, axum::Error>> + Send + Unpin
{
}
impl<T: Stream<Item = std::result::Result<Bytes, axum::Error>> + Send + Unpin> BodyStream for T {}

/// Writes into one object, optionally hashing, buffering small chunks.
struct Sink {
    writer: Box<dyn ObjectWriter>,
    hasher: Option<Hasher>,
    buf: BytesMut,
    count: u64,
    /// Most bytes this object may hold; `max` is reported when it is passed.
    room: u64,
    max: u64,
}

impl Sink {
    fn new(writer: Box<dyn ObjectWriter>, hasher: Option<Hasher>, room: u64, max: u64) -> Sink {
        Sink {
            writer,
            hasher,
            buf: BytesMut::new(),
            count: 0,
            room,
            max,
        }
    }

    async fn write(&mut self, chunk: &[u8]) -> Result<()> {
        if self.count + chunk.len() as u64 > self.room {
            return Err(UploadError::TooLarge(self.max));
        }
        if let Some(h) = &mut self.hasher {
            h.update(chunk);
        }
        self.count += chunk.len() as u64;
        self.buf.extend_from_slice(chunk);
        if self.buf.len() >= WRITE_BUFFER {
            self.flush().await?;
        }
        Ok(())
    }

    async fn flush(&mut self) -> Result<()> {
        if !self.buf.is_empty() {
            let chunk = self.buf.split().freeze();
            self.writer.write(chunk).await?;
        }
        Ok(())
    }

    /// Copies `body` in; past `expires` (the session's expiry, checked
    /// while the body streams) the copy stops with `Unknown`.
    async fn copy_body(
        &mut self,
        body: &mut (impl BodyStream + ?Sized),
        expires: Option<tokio::time::Instant>,
    ) -> Result<()> {
        loop {
            let next = match expires {
                Some(at) => tokio::time::timeout_at(at, body.next())
                    .await
                    .map_err(|_| UploadError::Unknown)?,
                None => body.next().await,
            };
            let Some(chunk) = next else {
                return Ok(());
            };
            let chunk = chunk.map_err(|e| UploadError::Body(e.to_string()))?;
            self.write(&chunk).await?;
        }
    }

    async fn copy_object(&mut self, store: &dyn Blobstore, key: &str) -> Result<u64> {
        let mut r = store.read(key, None).await?;
        let mut buf = vec![0u8; 256 * 1024];
        let mut n_total = 0;
        loop {
            let n = r.read(&mut buf).await.map_err(StoreError::from)?;
            if n == 0 {
                return Ok(n_total);
            }
            n_total += n as u64;
            self.write(&buf[..n]).await?;
        }
    }

    async fn cancel(self) {
        if let Err(e) = self.writer.cancel().await {
            tracing::warn!(error = %e, "cannot discard an unfinished object");
        }
    }
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
            expiry,
            limits,
            locks: Mutex::new(HashMap::new()),
            open_sessions: Mutex::new(OpenSessions::default()),
        }
    }

    /// The largest blob a session or monolithic upload may complete, in
    /// bytes (`[limits] max_blob_size`).
    pub fn max_blob_size(&self) -> u64 {
        self.limits.max_blob_size
    }

    /// Counts a new session in `repo` opened by `client`; `TooMany` at a cap.
    fn admit(&self, id: &UploadId, repo: &RepositoryName, client: Option<IpAddr>) -> Result<()> {
        let Ok(mut open) = self.open_sessions.lock() else {
            return Ok(());
        };
        let too_many = |scope, cap| Err(UploadError::TooMany { scope, cap });
        if open.total >= self.limits.max_sessions {
            return too_many("registry", self.limits.max_sessions);
        }
        let cap = self.limits.max_sessions_per_repository;
        if open.per_repository.get(repo).is_some_and(|n| *n >= cap) {
            return too_many("repository", cap);
        }
        let cap = self.limits.max_sessions_per_client;
        if let Some(ip) = client
            && open.per_client.get(&ip).is_some_and(|n| *n >= cap)
        {
            return too_many("client", cap);
        }
        open.total += 1;
        let now = std::time::Instant::now();
        open.ids.insert(id.0.clone(), (repo.clone(), client, now));
        count_up(&mut open.per_repository, repo.clone());
        if let Some(ip) = client {
            count_up(&mut open.per_client, ip);
        }
        Ok(())
    }

    /// Forgets a session that ended, if this process counted it.
    fn release(&self, id: &UploadId) {
        if let Ok(mut open) = self.open_sessions.lock()
            && let Some((repo, client, _)) = open.ids.remove(&id.0)
        {
            open.total = open.total.saturating_sub(1);
            count_down(&mut open.per_repository, &repo);
            if let Some(ip) = client {
                count_down(&mut open.per_client, &ip);
            }
        }
    }

    /// The session's lock if no one holds it (the sweeper never waits).
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
        let left = self.expiry.as_secs().saturating_add(1).saturating_sub(age);
        tokio::time::Instant::now() + Duration::from_secs(left)
    }

    async fn lock(&self, id: &UploadId) -> SessionGuard<'_> {
        let lock = match self.locks.lock() {
            Ok(mut locks) => Some(locks.entry(id.0.clone()).or_default().clone()),
            Err(_) => None,
        };
        let guard = match lock {
            Some(l) => Some(l.lock_owned().await),
            None => None,
        };
        SessionGuard {
            guard,
            id: id.0.clone(),
            uploads: self,
        }
    }

    fn expired(&self, info: &SessionInfo, now: u64) -> bool {
        now.saturating_sub(info.started_unix) > self.expiry.as_secs()
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
            .filter_map(|k| {
                let name = k.rsplit('/').next()?;
                let ok = name.len() == 20 && name.bytes().all(|b| b.is_ascii_digit());
                let offset = if ok { name.parse().ok()? } else { return None };
                Some((offset, k))
            })
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

    /// Opens a session in `repo` (POST, end-4a).
    /// `client`: the IP address of the client, counted against the
    /// per-client cap when known.
    pub async fn create(&self, repo: &RepositoryName, client: Option<IpAddr>) -> Result<UploadId> {
        let id = UploadId::new();
        self.admit(&id, repo, client)?;
        let created = self.create_admitted(id.clone(), repo, client).await;
        if created.is_err() {
            self.release(&id);
        }
        created
    }

    async fn create_admitted(
        &self,
        id: UploadId,
        repo: &RepositoryName,
        client: Option<IpAddr>,
    ) -> Result<UploadId> {
        let info = SessionInfo {
            repository: repo.clone(),
            started: crate::state::now_rfc3339(),
            started_unix: now_unix(),
            client,
        };
        let bytes = serde_json::to_vec(&info).map_err(|e| StoreError::Io(e.into()))?;
        let mut w = self.store.writer(&id.info_key()).await?;
        w.write(Bytes::from(bytes)).await?;
        w.commit().await?;
        Ok(id)
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
        let max = self.limits.max_blob_size;
        if expected.is_some_and(|n| offset.saturating_add(n) > max) {
            return Err(UploadError::TooLarge(max));
        }
        let writer = self.store.writer(&id.part_key(offset)).await?;
        let mut sink = Sink::new(writer, None, max.saturating_sub(offset), max);
        if let Err(e) = sink.copy_body(body, Some(self.expires_at(&info))).await {
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
        let info = self.open(id, repo).await?;
        let parts = self.parts(id).await?;
        let offset = self.size(id).await?;
        let expected = check_range(range, offset)?;
        let expires = Some(self.expires_at(&info));
        let result = self.assemble(&parts, digest, expected, body, expires).await;
        self.remove(id).await?;
        self.release(id);
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
        let max = self.limits.max_blob_size;
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
        self.open(id, repo).await?;
        self.remove(id).await?;
        self.release(id);
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

    /// Removes every session opened more than the expiry ago, and chunks
    /// left behind by a session that no longer exists. A session whose
    /// lock is held (a request on it in progress) is skipped, never waited
    /// for: it is swept at a later run, and a PATCH or PUT on it is refused
    /// at its expiry. Returns how many sessions were removed.
    pub async fn sweep(&self) -> Result<usize> {
        let keys = self.store.list(UPLOADS_PREFIX).await?;
        let mut ids: Vec<String> = keys
            .iter()
            .filter_map(|k| k.strip_prefix(UPLOADS_PREFIX)?.split('/').next())
            .map(str::to_owned)
            .collect();
        ids.dedup();
        // Sessions counted here but finished through another replica (not
        // ones just opened, whose objects the listing may predate).
        let gone: Vec<String> = match self.open_sessions.lock() {
            Ok(open) => open
                .ids
                .iter()
                .filter(|(id, (_, _, at))| at.elapsed() > SWEEP_MIN_AGE && !ids.contains(id))
                .map(|(id, _)| id.clone())
                .collect(),
            Err(_) => Vec::new(),
        };
        for id in gone {
            self.release(&UploadId(id));
        }
        let now = now_unix();
        let mut removed = 0;
        for raw in ids {
            let Some(id) = UploadId::parse(&raw) else {
                continue;
            };
            let Some(_g) = self.try_lock(&id) else {
                continue;
            };
            let stale = match self.info(&id).await? {
                Some(info) => self.expired(&info, now),
                None => true,
            };
            if stale {
                self.remove(&id).await?;
                self.release(&id);
                removed += 1;
            }
        }
        Ok(removed)
    }
}

/// Checks a chunk's `Content-Range` against the session's size `offset`;
/// returns the chunk's announced length. A range not starting at `offset`
/// or ending before its start is out of order (416); one whose length
/// overflows `u64` is [`UploadError::RangeInvalid`] (400). Checked
/// arithmetic only: a length never wraps.
fn check_range(range: Option<(u64, u64)>, offset: u64) -> Result<Option<u64>> {
    let Some((start, end)) = range else {
        return Ok(None);
    };
    if start != offset || end < start {
        return Err(UploadError::OutOfOrder { start, offset });
    }
    (end - start)
        .checked_add(1)
        .map(Some)
        .ok_or(UploadError::RangeInvalid { start, end })
}

/// Parses a chunk's `Content-Range`: `<start>-<end>` (distribution-spec
/// regex `^[0-9]+-[0-9]+$`, inclusive end). A `bytes ` prefix (RFC 9110
/// form, sent by some clients) is accepted too. `None`: malformed.
pub fn parse_content_range(value: &str) -> Option<(u64, u64)> {
    let v = value.trim();
    let v = v.strip_prefix("bytes ").unwrap_or(v);
    let v = v.split('/').next()?;
    let (a, b) = v.split_once('-')?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|c| c.is_ascii_digit());
    if !digits(a) || !digits(b) {
        return None;
    }
    Some((a.parse().ok()?, b.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids() {
        let id = UploadId::new();
        assert_eq!(UploadId::parse(id.as_str()), Some(id.clone()));
        assert!(UploadId::parse("../x").is_none());
        assert!(UploadId::parse(&id.as_str().to_uppercase()).is_none());
        assert!(UploadId::parse(&id.as_str().replace('-', "")).is_none());
        assert!(id.part_key(5).ends_with("/00000000000000000005"));
    }

    #[test]
    fn range_lengths_never_wrap() {
        assert_eq!(check_range(None, 7).unwrap(), None);
        assert_eq!(check_range(Some((0, 0)), 0).unwrap(), Some(1));
        assert_eq!(check_range(Some((5, 9)), 5).unwrap(), Some(5));
        assert!(matches!(
            check_range(Some((0, u64::MAX)), 0),
            Err(UploadError::RangeInvalid {
                start: 0,
                end: u64::MAX
            })
        ));
        assert_eq!(check_range(Some((1, u64::MAX)), 1).unwrap(), Some(u64::MAX));
        assert!(matches!(
            check_range(Some((5, 4)), 5),
            Err(UploadError::OutOfOrder {
                start: 5,
                offset: 5
            })
        ));
        assert!(matches!(
            check_range(Some((3, 9)), 0),
            Err(UploadError::OutOfOrder {
                start: 3,
                offset: 0
            })
        ));
    }

    #[test]
    fn content_ranges() {
        assert_eq!(parse_content_range("0-99"), Some((0, 99)));
        assert_eq!(parse_content_range("bytes 100-199/*"), Some((100, 199)));
        assert_eq!(parse_content_range("0-"), None);
        assert_eq!(parse_content_range("-5"), None);
        assert_eq!(parse_content_range("a-b"), None);
        assert_eq!(parse_content_range("1-2-3"), None);
    }
}
