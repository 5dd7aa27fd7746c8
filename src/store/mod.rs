//! The blobstore: a small object-storage interface that every backend implements.
//!
//! Owns: object keys, the `Blobstore` trait (about ten operations, after
//! distribution's storage driver), and the one mutable object `refs/root`.
//! Never interprets the bytes it stores: metadata and registry semantics live in
//! `state` and `registry`.
//!
//! Key layout (DESIGN.md "State model"):
//! - `blobs/<alg>/<first 2 hex>/<hex>`: content-addressed blobs,
//! - `uploads/<id>`: scratch objects (in-progress uploads), expire,
//! - `links/<repository>/_blobs/<alg>-<hex>`: blobs pushed into a repository
//!   and not yet named by a committed manifest (`registry::links`),
//! - `refs/root`: the digest of the current `State` document,
//! - `refs/layout`: the layout version the store follows ([`layout`]),
//! - `quarantine/<alg>/<first 2 hex>/<hex>`: blobs found corrupt, never
//!   served ([`verify`]),
//! - `imports/<id>`: the journal of an import in progress ([`journal_key`]),
//! - `gc-trash/<alg>-<hex>.<run>`: blobs a garbage collection run moved
//!   aside before its last look ([`GC_TRASH_PREFIX`], `ops::gc`).

pub mod copies;
pub mod damage;
pub mod fs;
pub mod hot;
pub mod layout;
mod open;
pub mod refs;
pub mod s3;
pub mod space;
pub mod verified;
pub mod verify;
pub mod window;

use std::pin::Pin;

use bytes::Bytes;
use tokio::io::AsyncRead;

use crate::digest::{Digest, HashingReader, Mismatch};

pub use open::{OpenedStore, StoreUrl, open};

/// A boxed, sendable byte stream returned by [`Blobstore::read`].
pub type BoxRead = Pin<Box<dyn AsyncRead + Send>>;

/// A boxed stream of chunks returned by [`Blobstore::stream`], for response bodies.
pub type ByteStream = Pin<Box<dyn futures_util::Stream<Item = std::io::Result<Bytes>> + Send>>;

/// Chunk size of the default [`Blobstore::stream`].
const STREAM_CHUNK: usize = 256 * 1024;

/// Errors of every backend, mapped onto what callers act on.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The key does not exist.
    #[error("object not found: {0}")]
    NotFound(String),
    /// The key is not of the allowed grammar (`[a-z0-9._-]` segments separated by `/`).
    #[error("invalid object key {0:?}")]
    InvalidKey(String),
    /// A byte range outside the object.
    #[error("range {start}-{end} outside object of {size} bytes")]
    Range {
        /// First byte requested.
        start: u64,
        /// One past the last byte requested.
        end: u64,
        /// Object size.
        size: u64,
    },
    /// Content did not match its digest or size; nothing was committed.
    #[error(transparent)]
    Mismatch(#[from] Mismatch),
    /// Backend I/O failure. A full disk (or free space below the floor,
    /// see [`space`]) is `ErrorKind::StorageFull`: [`StoreError::is_no_space`].
    #[error("storage I/O error: {0}")]
    Io(#[from] std::io::Error),
    /// A blob's content does not match the digest in its key; it was moved
    /// to the quarantine prefix ([`verify`]) and reads as absent from now on.
    #[error("{0}")]
    Corrupt(String),
    /// The store follows a layout this build does not read, or its
    /// layout marker is not one ([`layout`]); nothing was written.
    #[error("{0}")]
    Layout(String),
    /// The object store did not answer in time, could not be reached, or
    /// answered that it is unavailable (HTTP 5xx, throttling) after the
    /// client's retries: an outage, not a fault of the request
    /// ([`StoreError::retry_after`]). Every HTTP surface answers it 503
    /// with `Retry-After` (the registry: `UNAVAILABLE`).
    #[error("the object store is unavailable: {0}")]
    Unavailable(String),
}

/// `Retry-After` of an answer refused because the object store is
/// unavailable ([`StoreError::Unavailable`]), in seconds: a store outage
/// is usually a restart or a failover.
pub const UNAVAILABLE_RETRY_SECS: u64 = 10;

impl StoreError {
    /// Seconds after which the request that met this error may be tried
    /// again unchanged: `Some` for [`StoreError::Unavailable`]
    /// ([`UNAVAILABLE_RETRY_SECS`]), the one rule every HTTP surface maps
    /// to 503 with `Retry-After`.
    pub fn retry_after(&self) -> Option<u64> {
        matches!(self, StoreError::Unavailable(_)).then_some(UNAVAILABLE_RETRY_SECS)
    }

    /// Whether the store is out of space: `ENOSPC`, `EDQUOT`, or free space
    /// below the configured floor ([`space::FreeSpaceFloor`]).
    pub fn is_no_space(&self) -> bool {
        match self {
            StoreError::Io(e) => space::is_no_space(e),
            _ => false,
        }
    }
}

/// [`StoreError::retry_after`] of the first store or state error in the
/// chain of `e` (an `anyhow` error from a pipeline: an import, an SBOM
/// read): `Some` when the object store was unavailable.
pub fn retry_after_in(e: &anyhow::Error) -> Option<u64> {
    e.chain().find_map(|c| {
        c.downcast_ref::<StoreError>()
            .and_then(StoreError::retry_after)
            .or_else(|| {
                c.downcast_ref::<crate::state::StateError>()
                    .and_then(crate::state::StateError::retry_after)
            })
    })
}

/// The result type of store operations.
pub type Result<T> = std::result::Result<T, StoreError>;

/// The version of `refs/root` seen by a reader, for compare-and-swap.
///
/// `value` is the root's content (a `State` digest); `version` is the
/// backend's opaque token for it (filesystem: the content itself; S3: the ETag).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RootVersion {
    /// The stored value.
    pub value: String,
    /// Opaque compare-and-swap token.
    pub version: String,
}

/// What [`Blobstore::read_root_if_changed`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RootRead {
    /// `refs/root` is still at the version the caller holds.
    Unchanged,
    /// `refs/root` as it is now (`None`: absent). It may name the very
    /// value the caller holds (a server that ignores the condition).
    Changed(Option<RootVersion>),
}

/// One object of a listing with metadata ([`Blobstore::list_meta`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectMeta {
    /// The key (relative to the store, as every key).
    pub key: String,
    /// Size in bytes.
    pub size: u64,
    /// Last modification: the file's `mtime`, or S3's `LastModified`
    /// (the server's clock; whole seconds on most servers).
    pub modified: std::time::SystemTime,
}

/// A writer for one object. Nothing is visible at the key until
/// [`ObjectWriter::commit`]; a dropped or cancelled writer leaves no object.
#[async_trait::async_trait]
pub trait ObjectWriter: Send {
    /// Appends `chunk`.
    async fn write(&mut self, chunk: Bytes) -> Result<()>;
    /// Makes the object visible at its key, atomically (filesystem: fsync + rename).
    async fn commit(self: Box<Self>) -> Result<()>;
    /// Discards everything written.
    async fn cancel(self: Box<Self>) -> Result<()>;
    /// As [`ObjectWriter::commit`], but only if no object is at the key
    /// yet, atomically (filesystem: `link(2)`; S3: `If-None-Match: *`):
    /// `Ok(false)`, discarding what was written and changing nothing, when
    /// one is. Of two writers racing for one key, exactly one gets `true`
    /// (upload chunks across replicas, `registry::uploads`). The default
    /// refuses: a backend that cannot do it atomically must not pretend to.
    async fn commit_new(self: Box<Self>) -> Result<bool> {
        self.cancel().await?;
        Err(StoreError::Io(std::io::Error::new(
            std::io::ErrorKind::Unsupported,
            "this blobstore cannot create objects conditionally",
        )))
    }
}

/// The storage interface (filesystem default, [`fs`]; S3-compatible, [`s3`]).
///
/// Keys are `/`-separated relative paths of `[a-z0-9._-]` segments (no `..`);
/// any other key is refused with [`StoreError::InvalidKey`].
#[async_trait::async_trait]
pub trait Blobstore: Send + Sync + 'static {
    /// Size in bytes of the object at `key`, `None` when absent.
    async fn stat(&self, key: &str) -> Result<Option<u64>>;
    /// Streams bytes `start..end` (end exclusive) of the object, or all of it.
    /// Errors: `NotFound`, `Range` when `end` exceeds the size or `start > end`.
    async fn read(&self, key: &str, range: Option<(u64, u64)>) -> Result<BoxRead>;
    /// Streams bytes `start..end` (end exclusive) of the object, or all of it, as
    /// chunks for an HTTP body. Errors as [`Blobstore::read`]. The default reads
    /// through `read` in 256 KiB chunks; a backend may avoid copies (filesystem: mmap).
    async fn stream(&self, key: &str, range: Option<(u64, u64)>) -> Result<ByteStream> {
        let r = self.read(key, range).await?;
        Ok(Box::pin(tokio_util::io::ReaderStream::with_capacity(
            r,
            STREAM_CHUNK,
        )))
    }
    /// All of the object at `key` as chunks for an HTTP body, with its size
    /// in bytes; `None` when absent. Errors as [`Blobstore::stream`]. The
    /// default is [`Blobstore::stat`] then [`Blobstore::stream`]; a backend
    /// may do both at once (filesystem: one open, or one `stat(2)` for a
    /// small blob it holds verified in memory).
    async fn stream_sized(&self, key: &str) -> Result<Option<(u64, ByteStream)>> {
        stat_then_stream(self, key).await
    }
    /// Forgets that the blob at `key` was verified ([`verified`]): its next
    /// full read hashes it again (what a scrub does first, to find bit rot
    /// under an unchanged file identity). Default: nothing to forget.
    fn forget_verified(&self, key: &str) {
        let _ = key;
    }
    /// How many times this process's store has forgotten a blob it may
    /// have held in memory as verified (deleted, renamed, quarantined,
    /// found changed, or forgotten as verified for a scrub), counted up
    /// from 0: an answer kept above the store (`registry::kept`) is
    /// reused only while this count is the one it was read under.
    /// Default: 0 (a store that holds nothing in memory).
    fn forgotten(&self) -> u64 {
        0
    }
    /// Starts writing the object at `key`.
    async fn writer(&self, key: &str) -> Result<Box<dyn ObjectWriter>>;
    /// Removes the object; absent is not an error.
    async fn delete(&self, key: &str) -> Result<()>;
    /// Moves the object at `from` to `to` (replacing any object there);
    /// `from` is gone afterwards. For content whose key is known only once
    /// it is written (a flattened rootfs is named by its own digest). The
    /// default copies through [`Blobstore::read`] and [`Blobstore::writer`],
    /// then deletes `from`; a backend may move in place (filesystem: rename).
    /// Errors: `NotFound` when `from` is absent.
    async fn rename(&self, from: &str, to: &str) -> Result<()> {
        copy_through(self, from, to).await?;
        self.delete(from).await
    }
    /// Keys below `prefix` (a directory-like prefix ending in `/`), sorted.
    async fn list(&self, prefix: &str) -> Result<Vec<String>>;
    /// Objects below `prefix` (a directory-like prefix ending in `/`) with
    /// their size and modification time, sorted by key: what garbage
    /// collection reads for its grace period (filesystem: `mtime`; S3:
    /// `LastModified` from `ListObjectsV2`, paginated). The default
    /// refuses: a backend without modification times cannot be collected.
    /// Errors: the listing failed.
    async fn list_meta(&self, prefix: &str) -> Result<Vec<ObjectMeta>> {
        let _ = prefix;
        Err(StoreError::Io(std::io::Error::new(
            std::io::ErrorKind::Unsupported,
            "this blobstore cannot list modification times",
        )))
    }
    /// Makes every committed object durable (filesystem: fsync of touched directories).
    /// Called before the root swap that makes them reachable.
    async fn sync(&self) -> Result<()>;
    /// The current `refs/root`, `None` for an empty store.
    async fn read_root(&self) -> Result<Option<RootVersion>>;
    /// Sets `refs/root` to `value` if it is still at `expected` (`None`: must not exist yet).
    /// Returns `false`, changing nothing, when another writer got there first.
    /// Makes every committed object durable first, as [`Blobstore::sync`]
    /// does (the filesystem overlaps that with writing the new root).
    async fn swap_root(&self, expected: Option<&RootVersion>, value: &str) -> Result<bool>;
    /// [`Blobstore::swap_root`], answering the new root with its version
    /// token when the swap landed (`None` when another writer got there
    /// first), so the writer's next [`Blobstore::read_root_if_changed`]
    /// can be answered "unchanged" without the root's bytes. The default
    /// gives an empty (unknown) version: the next read is a whole one.
    async fn swap_root_versioned(
        &self,
        expected: Option<&RootVersion>,
        value: &str,
    ) -> Result<Option<RootVersion>> {
        Ok(self.swap_root(expected, value).await?.then(|| RootVersion {
            value: value.to_string(),
            version: String::new(),
        }))
    }
    /// `refs/root` unless it is still at `seen` (same version token):
    /// [`RootRead::Unchanged`] then. S3 asks with a conditional `GetObject`
    /// (`If-None-Match: <ETag>`, RFC 9110 §13.1.2), answered `304` with no
    /// body when unchanged: a round trip without the small-body stall some
    /// servers add (Ceph RGW's beast without `tcp_nodelay`: ~40 ms). The
    /// default reads the root and compares. An empty `seen.version` (not
    /// known) always reads. Errors: as [`Blobstore::read_root`].
    async fn read_root_if_changed(&self, seen: &RootVersion) -> Result<RootRead> {
        let now = self.read_root().await?;
        Ok(if !seen.version.is_empty() && now.as_ref() == Some(seen) {
            RootRead::Unchanged
        } else {
            RootRead::Changed(now)
        })
    }
    /// The small object at `key` (a lease, [`crate::ops::lease`]) with
    /// its compare-and-swap version, `None` when absent: what
    /// [`Blobstore::read_root`] is for `refs/root`. The default refuses: a
    /// backend without compare-and-swap cannot share periodic work.
    /// Errors: `InvalidKey`, or the read failed.
    async fn read_versioned(&self, key: &str) -> Result<Option<RootVersion>> {
        let _ = key;
        Err(no_swap())
    }
    /// Sets the small object at `key` to `value` if it is still at
    /// `expected` (`None`: must not exist yet), atomically (filesystem: an
    /// exclusive `flock` on `<key>.lock`, write, fsync, rename; S3: the
    /// conditional `PutObject` of the root swap): `false`, changing
    /// nothing, when another writer got there first. Of two writers racing
    /// from one version exactly one gets `true`. The default refuses.
    /// Errors: `InvalidKey`, the write failed, or (S3) the server refused
    /// a write whose condition held.
    async fn swap(&self, key: &str, expected: Option<&RootVersion>, value: &str) -> Result<bool> {
        let _ = (key, expected, value);
        Err(no_swap())
    }
    /// The version token of the small object `key` without reading its
    /// bytes (S3: `HeadObject`'s ETag), `None` when absent: whether it
    /// changed since a caller last looked. The default reads it
    /// ([`Blobstore::read_versioned`]; the filesystem's token is the
    /// content). Errors: `InvalidKey`, or the read failed.
    async fn version(&self, key: &str) -> Result<Option<String>> {
        Ok(self.read_versioned(key).await?.map(|r| r.version))
    }
    /// Stores small content-addressed blobs, each `(digest, bytes)` with the
    /// digest computed by the caller from those bytes, at their
    /// [`blob_key`]s, skipping those already present: what [`put_bytes`]
    /// does for one, as one batch (a state commit's new pages and
    /// documents). Durable by the next [`Blobstore::sync`] or
    /// [`Blobstore::swap_root`] (which makes them reachable), as the
    /// directory entries of committed writers are. The default writes up
    /// to 16 at once through [`Blobstore::writer`]; a backend may do better
    /// (filesystem: one pass that writes and renames every file, whose
    /// fsyncs join the round before the root swap; a present blob is
    /// compared byte for byte first).
    /// Returns the digests found present and so not written: unreferenced
    /// until the caller's root swap names them, `gc` may remove them in
    /// between, so a caller checks them again after its swap (a state
    /// commit: `state::commit`).
    /// Errors: the first failure; blobs stored before it stay (unreachable
    /// until a root names them, so `gc` collects them).
    async fn put_blobs(&self, blobs: Vec<(Digest, Bytes)>) -> Result<Vec<Digest>> {
        use futures_util::StreamExt;
        let mut puts = futures_util::stream::iter(blobs.into_iter().map(|(d, b)| async move {
            let written = put_digested(self, &d, b).await?;
            Ok::<_, StoreError>((!written).then_some(d))
        }))
        .buffer_unordered(16);
        let mut present = Vec::new();
        while let Some(r) = puts.next().await {
            present.extend(r?);
        }
        Ok(present)
    }
    /// How many copies of each metadata blob a state commit writes: 1, or
    /// 2 with a second copy in the commit's pack ([`copies::pack`];
    /// `[store] metadata_copies`; default 1, the filesystem's 2).
    fn metadata_copies(&self) -> u8 {
        1
    }
    /// Stores a copy pack ([`copies::pack::encode`]) whose sha256 is
    /// `digest` at [`copies::pack::pack_key`]. The default writes it
    /// through [`Blobstore::writer`] (durable when the write commits); the
    /// filesystem starts its write-back but does not wait for it (see
    /// [`copies`]). Errors: the store failed.
    async fn put_copy_pack(&self, digest: &Digest, bytes: Bytes) -> Result<()> {
        let mut w = self.writer(&copies::pack::pack_key(digest)).await?;
        w.write(bytes).await?;
        w.commit().await
    }
    /// The record of blobs that reads restored from their copies
    /// ([`copies::Repairs`]), for `fsck` and `scrub`; `None` for a backend
    /// that keeps none (a test wrapper).
    fn repairs(&self) -> Option<&copies::Repairs> {
        None
    }
    /// What this process knows to be damaged in the store and not yet
    /// repaired ([`damage::Notes`]), for `/readyz` and `fsck`; `None` for a
    /// backend that keeps none (a test wrapper).
    fn damage(&self) -> Option<&damage::Notes> {
        None
    }
    /// Whether `refs/root` still holds `seen.value`, when the backend can
    /// tell from local metadata alone, without a round trip and without
    /// allocating (filesystem: one `stat(2)` of the root file); `None` when
    /// it cannot (the default: the caller then uses [`Blobstore::read_root`]).
    /// For the state's root cache, which asks on every request when
    /// `root_refresh_ms` is 0.
    fn root_unchanged(&self, seen: &RootVersion) -> Option<bool> {
        let _ = seen;
        None
    }
    /// A URL that serves the object to any client for `expires` without
    /// going through airlock (S3: a presigned `GET`), for the registry's
    /// redirect mode; `None` (the default, and the filesystem) when the
    /// backend has no such URL.
    async fn presigned_get(
        &self,
        key: &str,
        expires: std::time::Duration,
    ) -> Result<Option<String>> {
        let _ = (key, expires);
        Ok(None)
    }
}

fn no_swap() -> StoreError {
    StoreError::Io(std::io::Error::new(
        std::io::ErrorKind::Unsupported,
        "this blobstore cannot compare and swap objects",
    ))
}

/// Copies the object at `from` to `to` through [`Blobstore::read`] and
/// [`Blobstore::writer`] (the default of [`Blobstore::rename`]).
/// Errors: `NotFound` when `from` is absent.
pub async fn copy_through<S: Blobstore + ?Sized>(store: &S, from: &str, to: &str) -> Result<()> {
    use tokio::io::AsyncReadExt;
    let mut r = store.read(from, None).await?;
    let mut w = store.writer(to).await?;
    let mut buf = vec![0; STREAM_CHUNK];
    loop {
        let n = r.read(&mut buf).await?;
        if n == 0 {
            break;
        }
        w.write(Bytes::copy_from_slice(&buf[..n])).await?;
    }
    w.commit().await
}

/// The key of a content-addressed blob: `blobs/<alg>/<first 2 hex>/<hex>`.
pub fn blob_key(digest: &Digest) -> String {
    // Built by hand, not with `format!`: every blob and manifest GET makes one.
    let (alg, hex) = (digest.algorithm().name(), digest.hex());
    let mut key = String::with_capacity(6 + alg.len() + 4 + hex.len() + 1);
    for part in ["blobs/", alg, "/", &hex[..2], "/", hex] {
        key.push_str(part);
    }
    key
}

/// The fan-out prefixes `blobs/<alg>/<2 hex>/` of every digest algorithm:
/// GC, `fsck --deep`, scrub and recovery list one at a time, so one listing is in memory at
/// a time (on S3, an empty prefix costs one `ListObjectsV2`).
pub fn fan_prefixes() -> impl Iterator<Item = String> {
    [
        crate::digest::Algorithm::Sha256,
        crate::digest::Algorithm::Sha512,
    ]
    .into_iter()
    .flat_map(|alg| (0..=255u8).map(move |fan| format!("blobs/{}/{fan:02x}/", alg.name())))
}

/// Classes of key bytes for [`check_key`]: 0 = not allowed.
const PLAIN: u8 = 1;
const DOT: u8 = 2;
const SLASH: u8 = 3;
const KEY_BYTES: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        t[b] = if c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'_' || c == b'-' {
            PLAIN
        } else if c == b'.' {
            DOT
        } else if c == b'/' {
            SLASH
        } else {
            0
        };
        b += 1;
    }
    t
};

/// Checks the key grammar shared by every backend.
pub fn check_key(key: &str) -> Result<()> {
    // One pass over the bytes through a table (this runs on every read):
    // each segment is non-empty, not `.` or `..`, and of the allowed bytes.
    let (mut seg_len, mut seg_dots) = (0usize, 0usize);
    let mut ok = !key.is_empty();
    for &b in key.as_bytes() {
        match KEY_BYTES[b as usize] {
            SLASH => {
                ok &= seg_len > 0 && !(seg_dots == seg_len && seg_len <= 2);
                (seg_len, seg_dots) = (0, 0);
            }
            DOT => (seg_len, seg_dots) = (seg_len + 1, seg_dots + 1),
            PLAIN => seg_len += 1,
            _ => return Err(StoreError::InvalidKey(key.to_string())),
        }
    }
    ok &= seg_len > 0 && !(seg_dots == seg_len && seg_len <= 2);
    if ok {
        Ok(())
    } else {
        Err(StoreError::InvalidKey(key.to_string()))
    }
}

/// Reads bytes `start..end` (end exclusive, within the object) of an
/// object into memory. Errors as [`Blobstore::read`] (a range past the
/// end is refused by the backend).
pub async fn read_range(store: &dyn Blobstore, key: &str, start: u64, end: u64) -> Result<Vec<u8>> {
    use tokio::io::AsyncReadExt;
    let mut r = store.read(key, Some((start, end))).await?;
    let mut buf = Vec::with_capacity(usize::try_from(end.saturating_sub(start)).unwrap_or(0));
    r.read_to_end(&mut buf).await?;
    Ok(buf)
}

/// Reads a whole (small) object into memory.
pub async fn read_all(store: &dyn Blobstore, key: &str) -> Result<Vec<u8>> {
    use tokio::io::AsyncReadExt;
    let mut r = store.read(key, None).await?;
    let mut buf = Vec::new();
    r.read_to_end(&mut buf).await?;
    Ok(buf)
}

/// Stores `bytes` as a blob under its own sha256 digest, unless already present.
/// Returns the digest. Used for metadata documents and manifests.
pub async fn put_bytes(store: &dyn Blobstore, bytes: &[u8]) -> Result<Digest> {
    let digest = Digest::sha256_of(bytes);
    put_digested(store, &digest, Bytes::copy_from_slice(bytes)).await?;
    Ok(digest)
}

/// [`put_bytes`] for a metadata document (a state document written
/// outside a commit: rollback, recovery), with its second copy when the
/// store keeps copies ([`Blobstore::metadata_copies`]). Errors: the store failed.
pub async fn put_metadata(store: &dyn Blobstore, bytes: &[u8]) -> Result<Digest> {
    let digest = put_bytes(store, bytes).await?;
    if store.metadata_copies() >= 2 {
        copies::pack::write(store, &[(digest.clone(), Bytes::copy_from_slice(bytes))]).await?;
    }
    Ok(digest)
}

/// Stores `bytes` at [`blob_key`]`(digest)` (`digest` computed by the
/// caller from them) through a committed writer, unless already present;
/// `false` when present. Errors: the store failed.
pub async fn put_digested<S: Blobstore + ?Sized>(
    store: &S,
    digest: &Digest,
    bytes: Bytes,
) -> Result<bool> {
    let key = blob_key(digest);
    if store.stat(&key).await?.is_some() {
        return Ok(false);
    }
    let mut w = store.writer(&key).await?;
    w.write(bytes).await?;
    w.commit().await?;
    Ok(true)
}

/// The size of the blob `digest`, verified against its digest when it is
/// small enough to be verified whole ([`verify::VERIFY_WHOLE_MAX`]): what a
/// HEAD answers. `None` when absent (or just found corrupt and quarantined).
/// Errors: the store failed.
pub async fn check(store: &dyn Blobstore, digest: &Digest) -> Result<Option<u64>> {
    let key = blob_key(digest);
    let Some(size) = store.stat(&key).await? else {
        return Ok(None);
    };
    if size <= verify::VERIFY_WHOLE_MAX {
        match get_verified(store, digest).await {
            Ok(_) => {}
            Err(StoreError::NotFound(_) | StoreError::Corrupt(_) | StoreError::Mismatch(_)) => {
                return Ok(None);
            }
            Err(e) => return Err(e),
        }
    }
    Ok(Some(size))
}

/// Prefix of the blobs a garbage collection moved aside until its last
/// look: `gc-trash/<alg>-<hex>.<run id>` (`ops::gc`; flat, so a run leaves
/// no directory behind).
pub const GC_TRASH_PREFIX: &str = "gc-trash/";

/// The name of `digest` in `gc-trash/` (before `.<run id>`) and of its
/// pushed-blob links (`registry::links`): `<alg>-<hex>`.
pub fn trash_name(digest: &Digest) -> String {
    format!("{}-{}", digest.algorithm().name(), digest.hex())
}

/// The digest a `gc-trash/` or link key names (last segment
/// `<alg>-<hex>`, then `.<run id>` in the trash); `None` for another key.
pub fn trash_digest(key: &str) -> Option<Digest> {
    let name = key.rsplit('/').next()?;
    let name = name.split_once('.').map_or(name, |(n, _)| n);
    let (alg, hex) = name.split_once('-')?;
    format!("{alg}:{hex}").parse().ok()
}

/// The blob a pushed-blob link names: `links/<repo>/_blobs/<alg>-<hex>`;
/// `None` for another key.
pub fn link_digest(key: &str) -> Option<Digest> {
    if !key.starts_with("links/") || !key.contains("/_blobs/") {
        return None;
    }
    trash_digest(key)
}

/// Whether a garbage collection holds the blob `digest` aside right now
/// (it is absent from `blobs/` until the collector puts it back or
/// deletes it). One listing of `gc-trash/`, for the rare read that finds
/// a linked blob absent. Errors: the store failed.
pub async fn in_gc_trash(store: &dyn Blobstore, digest: &Digest) -> Result<bool> {
    Ok(store
        .list(GC_TRASH_PREFIX)
        .await?
        .iter()
        .any(|k| trash_digest(k).as_ref() == Some(digest)))
}

/// [`Blobstore::stat`], then [`Blobstore::stream`] of the whole object:
/// the default [`Blobstore::stream_sized`], for backends that override it
/// only in part. `None` when absent (also when removed in between).
pub async fn stat_then_stream<S: Blobstore + ?Sized>(
    store: &S,
    key: &str,
) -> Result<Option<(u64, ByteStream)>> {
    let Some(size) = store.stat(key).await? else {
        return Ok(None);
    };
    match store.stream(key, None).await {
        Ok(body) => Ok(Some((size, body))),
        Err(StoreError::NotFound(_)) => Ok(None),
        Err(e) => Err(e),
    }
}

/// The key of the journal of the import `id` (see `bundle::journal`).
pub fn journal_key(id: &str) -> String {
    format!("imports/{id}")
}

/// Reads a blob and verifies it against `digest` (any size). For small blobs
/// such as manifests and metadata documents. A blob that is missing or
/// fails its digest is read from its second copy when one is stored
/// ([`copies::recover`]: a metadata blob on a store with
/// `metadata_copies = 2`), and written back. Errors: `NotFound`, `Corrupt`
/// or `Mismatch` when neither the blob nor a copy is good; the store failed.
pub async fn get_verified(store: &dyn Blobstore, digest: &Digest) -> Result<Vec<u8>> {
    let failure = match read_all(store, &blob_key(digest)).await {
        Ok(bytes) => match matches(digest, &bytes) {
            Ok(()) => return Ok(bytes),
            Err(e) => e,
        },
        Err(e @ (StoreError::NotFound(_) | StoreError::Corrupt(_))) => e,
        Err(e) => return Err(e),
    };
    match copies::recover(store, digest, &failure).await? {
        Some(bytes) => Ok(bytes),
        None => Err(failure),
    }
}

/// Whether `bytes` are the content `digest` names. Errors: `Mismatch`.
pub fn matches(digest: &Digest, bytes: &[u8]) -> Result<()> {
    let mut h = HashingReader::new(bytes, digest.algorithm());
    std::io::copy(&mut h, &mut std::io::sink())?;
    h.verify(digest, bytes.len() as u64)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_grammar() {
        for ok in [
            "refs/root",
            "blobs/sha256/ab/ab12",
            "a",
            "x/.hidden/y",
            "a/.../b",
            "links/a-b_c.d/_blobs/sha256-00",
        ] {
            assert!(check_key(ok).is_ok(), "{ok}");
        }
        for bad in [
            "", "/", "a/", "/a", "a//b", ".", "..", "a/../b", "a/./b", "a/..", "A", "a/b c",
            "a\\b", "ä",
        ] {
            assert!(check_key(bad).is_err(), "{bad:?}");
        }
    }
}
