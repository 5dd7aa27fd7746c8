//! Filesystem blobstore: the embedded default (`--data DIR`, default `./airlock-data`).
//!
//! Owns: mapping keys to files below the data directory, atomic publication
//! (write to `tmp/`, fsync, rename) and the root compare-and-swap
//! (exclusive `flock` on `refs/root.lock`, write + fsync + rename).
//! Never parses stored content.

mod batch;
mod sync;

use std::collections::HashSet;
use std::io::{ErrorKind, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncSeekExt};

use super::hot::{FileId, HotBlobs};
use super::space::FreeSpaceFloor;
use super::verify::{self, VERIFY_WHOLE_MAX};
use super::{
    BoxRead, ByteStream, ObjectWriter, Result, RootVersion, StoreError, blob_key, check_key,
};
use crate::digest::Digest;

const ROOT_KEY: &str = "refs/root";
/// Size of one mapped chunk of a body: also the most of one response that
/// counts in the resident set at a time (see `stream`).
const MMAP_CHUNK: usize = 256 << 10;

fn page_size() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if n > 0 { n as u64 } else { 4096 }
}

/// `tmp/` files untouched for less than this are never swept, whatever
/// their lock says (a writer locks its file right after creating it).
pub const TMP_MIN_AGE: std::time::Duration = std::time::Duration::from_secs(2);
/// Directories waiting for the next [`super::Blobstore::sync`] at most; a
/// commit that finds more syncs them itself, so the wait before a root swap
/// stays bounded however many objects were written since the last one.
const MAX_DIRTY_DIRS: usize = 1024;

/// Reads of at most this many bytes are done inline in one `read(2)`, not streamed.
const INLINE_READ_MAX: u64 = 64 * 1024;

/// A blobstore rooted at a directory. Layout: `<dir>/<key>` for every key,
/// `<dir>/tmp/` for objects being written, `<dir>/refs/root.lock` for the CAS lock.
#[derive(Clone)]
pub struct FsStore {
    root: Arc<PathBuf>,
    /// Directories whose entries, and batch-written files whose content,
    /// are not durable yet: fsynced by the next sync or root swap.
    dirty: Arc<Mutex<Dirty>>,
    /// Held while dirty directories are fsynced: a sync that starts while
    /// another is in flight waits for it, so it never returns before the
    /// directories the other one took are durable.
    sync_lock: Arc<tokio::sync::Mutex<()>>,
    /// `<dir>/refs/root`, joined once (checked on every request).
    root_file: Arc<PathBuf>,
    root_cache: Arc<Mutex<Option<CachedRoot>>>,
    min_free: FreeSpaceFloor,
    /// Small blobs verified by earlier reads ([`super::hot`]).
    hot: Arc<HotBlobs>,
    /// The root epoch: how many times [`super::Blobstore::read_root`] found
    /// `refs/root` replaced (by another process, or at the first read). A
    /// small blob in [`HotBlobs`] whose path was checked in the current
    /// epoch is served without another `stat(2)` (see [`super::hot`]).
    epoch: Arc<AtomicU64>,
}

/// The last `refs/root` read, with the file it was read from held open.
/// Holding it open keeps its inode from being freed and reused, so "the
/// path still names the same inode" is an exact test that the root did not
/// change (it is only ever replaced by rename, never written in place):
/// one `stat(2)` per read instead of open, read and close.
struct CachedRoot {
    _file: std::fs::File,
    dev: u64,
    ino: u64,
    root: RootVersion,
}

impl FsStore {
    /// Opens (creating if needed) the store at `dir`.
    /// Errors: the directory cannot be created or is not writable.
    pub fn open(dir: &Path) -> Result<FsStore> {
        std::fs::create_dir_all(dir.join("tmp"))?;
        std::fs::create_dir_all(dir.join("refs"))?;
        Ok(FsStore {
            root: Arc::new(dir.to_path_buf()),
            dirty: Arc::default(),
            sync_lock: Arc::new(tokio::sync::Mutex::new(())),
            root_file: Arc::new(dir.join(ROOT_KEY)),
            root_cache: Arc::new(Mutex::new(None)),
            min_free: FreeSpaceFloor::Off,
            hot: Arc::default(),
            epoch: Arc::default(),
        })
    }

    /// The same store refusing writes that would leave less free space than
    /// `floor` (see [`super::space`]).
    pub fn with_min_free_space(mut self, floor: FreeSpaceFloor) -> FsStore {
        self.min_free = floor;
        self
    }

    /// Removes files under `tmp/` that no live writer holds (each writer
    /// holds an exclusive `flock` on its file until it commits or cancels;
    /// a killed process's locks are gone) and that were last modified more
    /// than `min_age` ago. Returns the files and bytes removed (`remove =
    /// false`: that would be). Run at start-up of `serve` and `import`, and
    /// by `gc`.
    ///
    /// Errors: `tmp/` cannot be listed.
    pub fn sweep_tmp(
        &self,
        min_age: std::time::Duration,
        remove: bool,
    ) -> std::io::Result<(u64, u64)> {
        let cutoff = std::time::SystemTime::now() - min_age;
        let (mut files, mut bytes) = (0, 0);
        for entry in std::fs::read_dir(self.root.join("tmp"))? {
            let Ok(entry) = entry else { continue };
            let Ok(meta) = entry.metadata() else { continue };
            if !meta.is_file() || meta.modified().is_ok_and(|m| m > cutoff) {
                continue;
            }
            let Ok(file) = std::fs::File::open(entry.path()) else {
                continue;
            };
            // Held by a live writer: not ours to remove.
            if file.try_lock().is_err() {
                continue;
            }
            if !remove || std::fs::remove_file(entry.path()).is_ok() {
                files += 1;
                bytes += meta.len();
            }
        }
        Ok((files, bytes))
    }

    /// Moves the blob `digest` to the quarantine prefix, if its key still
    /// names the file `(dev, ino)` that was found corrupt (a blob written
    /// anew since is left alone). Logged at error.
    fn quarantine(&self, digest: &Digest, actual: &Digest, id: FileId) {
        use std::os::unix::fs::MetadataExt;
        let from = self.root.join(super::blob_key(digest));
        let to = self.root.join(verify::quarantine_key(digest));
        let same = std::fs::metadata(&from).is_ok_and(|m| (m.dev(), m.ino()) == (id.0, id.1));
        self.hot.remove(&super::blob_key(digest));
        if !same {
            return;
        }
        let moved = to
            .parent()
            .map_or(Ok(()), std::fs::create_dir_all)
            .and_then(|()| std::fs::rename(&from, &to));
        match moved {
            Ok(()) => {
                tracing::error!(%digest, %actual, quarantine = %to.display(), "corrupt blob quarantined: its content does not match its digest")
            }
            Err(e) => {
                tracing::error!(%digest, %actual, error = %e, "corrupt blob found; moving it to quarantine failed")
            }
        }
    }

    /// For a blob key: the digest and the file's identity, for verification.
    fn blob_identity(key: &str, meta: &std::fs::Metadata) -> Option<(Digest, FileId)> {
        let digest = verify::blob_digest(key)?;
        Some((digest, file_id(meta)))
    }

    /// Reads the whole small blob `key` (at most [`VERIFY_WHOLE_MAX`]
    /// bytes) and verifies it; a mismatch quarantines it and is
    /// [`StoreError::Corrupt`]. Verified bytes are kept in [`HotBlobs`].
    async fn read_verified(
        &self,
        key: &str,
        file: std::fs::File,
        size: u64,
        digest: Digest,
        id: FileId,
        epoch: u64,
    ) -> Result<Bytes> {
        let bytes = if size <= INLINE_READ_MAX {
            read_at(&file, 0, size)?
        } else {
            blocking(move || read_at(&file, 0, size)).await?
        };
        let actual = digest.same_alg_of(&bytes);
        if actual != digest {
            self.quarantine(&digest, &actual, id);
            return Err(StoreError::Corrupt(
                verify::corrupt_error(&digest, &actual).to_string(),
            ));
        }
        let bytes = Bytes::from(bytes);
        self.hot.insert(key, id, epoch, bytes.clone());
        Ok(bytes)
    }

    /// The verified bytes of the blob `key` from [`HotBlobs`], when its
    /// path was found naming the file they were read from in the current
    /// root epoch, or one `stat(2)` shows that now.
    fn hot_read(&self, key: &str) -> Option<Bytes> {
        let hot = self.hot.get(key)?;
        let epoch = self.epoch.load(Ordering::Acquire);
        if hot.epoch == epoch {
            return Some(hot.bytes);
        }
        match std::fs::metadata(self.root.join(key)) {
            Ok(m) if file_id(&m) == hot.id => {
                self.hot.checked(key, epoch);
                Some(hot.bytes)
            }
            _ => {
                self.hot.remove(key);
                None
            }
        }
    }

    /// What to do when a streamed blob turns out corrupt: quarantine it.
    fn on_mismatch(&self, digest: Digest, id: FileId) -> verify::OnMismatch {
        let store = self.clone();
        Box::new(move |actual| store.quarantine(&digest, actual, id))
    }

    fn check_space(&self, more: u64) -> std::io::Result<()> {
        self.min_free.check(&self.root, more)
    }

    /// The data directory.
    pub fn dir(&self) -> &Path {
        &self.root
    }

    fn path(&self, key: &str) -> Result<PathBuf> {
        check_key(key)?;
        Ok(self.root.join(key))
    }

    /// Opens `key` and checks `range` (default: all) against its size; returns
    /// the file, its metadata and the byte range `start..end`. open(2) and
    /// fstat(2) run inline: cheaper than a hop to the blocking pool on a
    /// local file system.
    fn open_range(
        &self,
        key: &str,
        range: Option<(u64, u64)>,
    ) -> Result<(std::fs::File, std::fs::Metadata, u64, u64)> {
        let path = self.path(key)?;
        let file = std::fs::File::open(&path).map_err(|e| not_found(key, e))?;
        let meta = file.metadata()?;
        let (start, end) = span(range, meta.len())?;
        Ok((file, meta, start, end))
    }

    /// Records `dir` for the next sync; `true` when the set is over
    /// [`MAX_DIRTY_DIRS`] (the caller syncs now).
    fn mark_dirty(&self, dir: PathBuf) -> bool {
        match self.dirty.lock() {
            Ok(mut d) => {
                d.dirs.insert(dir);
                d.dirs.len() > MAX_DIRTY_DIRS
            }
            Err(_) => false,
        }
    }

    /// Records files written by [`batch::put_blobs`] for the next sync;
    /// `true` when more than [`MAX_DIRTY_DIRS`] wait (the caller syncs now).
    fn mark_unsynced(&self, files: Vec<std::fs::File>) -> bool {
        match self.dirty.lock() {
            Ok(mut d) => {
                d.files.extend(files);
                d.files.len() > MAX_DIRTY_DIRS
            }
            Err(_) => false,
        }
    }

    /// Takes the files and directories waiting for sync.
    fn take_dirty(&self) -> Dirty {
        match self.dirty.lock() {
            Ok(mut d) => std::mem::take(&mut *d),
            Err(_) => Dirty::default(),
        }
    }

    fn is_scratch(&self, path: &Path) -> bool {
        path.starts_with(self.root.join("uploads"))
    }
}

/// `range` (default: all) checked against an object of `size` bytes.
fn span(range: Option<(u64, u64)>, size: u64) -> Result<(u64, u64)> {
    let (start, end) = range.unwrap_or((0, size));
    if start > end || end > size {
        return Err(StoreError::Range { start, end, size });
    }
    Ok((start, end))
}

fn file_id(meta: &std::fs::Metadata) -> FileId {
    use std::os::unix::fs::MetadataExt;
    (meta.dev(), meta.ino(), meta.ctime(), meta.ctime_nsec())
}

fn not_found(key: &str, e: std::io::Error) -> StoreError {
    if e.kind() == ErrorKind::NotFound {
        StoreError::NotFound(key.to_string())
    } else {
        StoreError::Io(e)
    }
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> std::io::Result<T> + Send + 'static,
) -> Result<T> {
    match tokio::task::spawn_blocking(f).await {
        Ok(r) => Ok(r?),
        Err(e) => Err(StoreError::Io(std::io::Error::other(e))),
    }
}

/// Reads bytes `start..end` in one inline `pread(2)` (small reads, usually page-cache hits).
fn read_at(file: &std::fs::File, start: u64, end: u64) -> std::io::Result<Vec<u8>> {
    let mut buf = vec![0; (end - start) as usize];
    std::os::unix::fs::FileExt::read_exact_at(file, &mut buf, start)?;
    Ok(buf)
}

/// Calls `f` with the key (relative to `root`) and entry of every file
/// below `base` (absent: none).
fn walk_files(
    root: &Path,
    base: PathBuf,
    f: &mut dyn FnMut(String, &std::fs::DirEntry),
) -> std::io::Result<()> {
    let mut stack = vec![base];
    while let Some(dir) = stack.pop() {
        let entries = match std::fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        for entry in entries {
            let entry = entry?;
            let p = entry.path();
            if entry.file_type()?.is_dir() {
                stack.push(p);
            } else if let Ok(rel) = p.strip_prefix(root) {
                f(rel.to_string_lossy().into_owned(), &entry);
            }
        }
    }
    Ok(())
}

/// Fsyncs each of `dirs`, side by side ([`sync::round`]); one removed
/// since (an emptied `uploads/<id>/`) has nothing to make durable.
fn fsync_dirs(dirs: &[PathBuf]) -> std::io::Result<()> {
    sync::round(&[], dirs)
}

/// What waits for the next sync: directories whose entries changed, and
/// files [`batch::put_blobs`] wrote (or found) under their keys whose
/// content is not known to be durable.
#[derive(Default)]
struct Dirty {
    dirs: HashSet<PathBuf>,
    files: Vec<std::fs::File>,
}

impl Dirty {
    fn is_empty(&self) -> bool {
        self.dirs.is_empty() && self.files.is_empty()
    }

    /// Fsyncs every file and directory (and `extra`, e.g. a new root's
    /// file) in one round.
    fn sync_with(&self, extra: Option<&std::fs::File>) -> std::io::Result<()> {
        let dirs: Vec<PathBuf> = self.dirs.iter().cloned().collect();
        let files: Vec<&std::fs::File> = extra.into_iter().chain(&self.files).collect();
        sync::round(&files, &dirs)
    }
}

/// Where a read of bytes `start..end` of an object starts from.
enum Opened {
    /// The verified bytes of a small blob (from [`HotBlobs`] or read and
    /// verified now): `part` is the range asked for, `size` the whole blob's.
    Small { size: u64, part: Bytes },
    /// Anything else, opened.
    File(OpenFile),
}

/// An opened object: its size and, for a blob, its digest and file
/// identity for verification; `start..end` is the range to read.
struct OpenFile {
    file: std::fs::File,
    size: u64,
    blob: Option<(Digest, FileId)>,
    start: u64,
    end: u64,
}

impl FsStore {
    /// Opens bytes `start..end` of `key` (default: all) for reading; a
    /// small blob ([`VERIFY_WHOLE_MAX`]) comes back verified, from memory
    /// when it is held there ([`FsStore::hot_read`]).
    async fn open_read(&self, key: &str, range: Option<(u64, u64)>) -> Result<Opened> {
        // Read before the path is: a root change meanwhile leaves the
        // entry to be checked again.
        let epoch = self.epoch.load(Ordering::Acquire);
        // Only keys checked by `open_range` (`check_key`) are ever held.
        if let Some(bytes) = self.hot_read(key) {
            let size = bytes.len() as u64;
            let (start, end) = span(range, size)?;
            let part = bytes.slice(start as usize..end as usize);
            return Ok(Opened::Small { size, part });
        }
        let (file, meta, start, end) = self.open_range(key, range)?;
        let size = meta.len();
        let blob = FsStore::blob_identity(key, &meta);
        if let Some((digest, id)) = blob.clone()
            && size <= VERIFY_WHOLE_MAX
        {
            let bytes = self
                .read_verified(key, file, size, digest, id, epoch)
                .await?;
            let part = bytes.slice(start as usize..end as usize);
            return Ok(Opened::Small { size, part });
        }
        Ok(Opened::File(OpenFile {
            file,
            size,
            blob,
            start,
            end,
        }))
    }

    /// Bytes `start..end` of `key` (default: all) as a body, and the
    /// object's whole size: for a small blob held in [`HotBlobs`] one
    /// `stat(2)`, else one open and one `fstat(2)` (see
    /// [`super::Blobstore::stream`]).
    async fn open_stream(&self, key: &str, range: Option<(u64, u64)>) -> Result<(u64, ByteStream)> {
        let opened = match self.open_read(key, range).await? {
            Opened::Small { size, part } => {
                return Ok((
                    size,
                    Box::pin(futures_util::stream::once(async { Ok(part) })),
                ));
            }
            Opened::File(f) => f,
        };
        let (file, size, blob) = (opened.file, opened.size, opened.blob);
        let (start, end) = (opened.start, opened.end);
        if end - start <= INLINE_READ_MAX {
            let chunk = Bytes::from(read_at(&file, start, end)?);
            return Ok((
                size,
                Box::pin(futures_util::stream::once(async { Ok(chunk) })),
            ));
        }
        // Zero copy: the body is sent straight from the page cache through read-only
        // mappings, with no read(2) into user buffers. Each chunk is a mapping of its
        // own, made when the body is polled and unmapped when the chunk is dropped
        // (after it is written to the socket), so only the chunks in flight count in
        // the process's resident set, however large the blob or however many clients.
        // mmap offsets must be page aligned; MMAP_CHUNK is a multiple of the page size.
        let file = std::sync::Arc::new(file);
        let aligned = start - start % page_size();
        let chunks = (aligned..end).step_by(MMAP_CHUNK).map(move |at| {
            let len = (end - at).min(MMAP_CHUNK as u64) as usize;
            // SAFETY: objects are immutable once committed: they are written under tmp/
            // and renamed into place, never modified or truncated in place, so the mapped
            // bytes cannot change while mapped (an unlinked file stays mapped until dropped).
            let map = unsafe {
                memmap2::MmapOptions::new()
                    .offset(at)
                    .len(len)
                    .map(&*file)?
            };
            let _ = map.advise(memmap2::Advice::Sequential);
            let skip = start.saturating_sub(at) as usize;
            Ok(Bytes::from_owner(map).slice(skip..))
        });
        let stream: ByteStream = Box::pin(futures_util::stream::iter(chunks));
        // A whole large blob is hashed as it is sent; ranges are not verified.
        match blob {
            Some((digest, id)) if (start, end) == (0, size) => {
                let check = self.on_mismatch(digest.clone(), id);
                Ok((size, verify::hashing_stream(stream, digest, size, check)))
            }
            _ => Ok((size, stream)),
        }
    }
}

#[async_trait::async_trait]
impl super::Blobstore for FsStore {
    async fn stat(&self, key: &str) -> Result<Option<u64>> {
        let path = self.path(key)?;
        // One stat(2) on a local file system: cheaper inline than a hop to the blocking pool.
        match std::fs::metadata(&path) {
            Ok(m) if m.is_file() => Ok(Some(m.len())),
            Ok(_) => Ok(None),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    async fn read(&self, key: &str, range: Option<(u64, u64)>) -> Result<BoxRead> {
        let opened = match self.open_read(key, range).await? {
            Opened::Small { part, .. } => return Ok(Box::pin(std::io::Cursor::new(part))),
            Opened::File(f) => f,
        };
        let (file, size, blob) = (opened.file, opened.size, opened.blob);
        let (start, end) = (opened.start, opened.end);
        if end - start <= INLINE_READ_MAX {
            return Ok(Box::pin(std::io::Cursor::new(read_at(&file, start, end)?)));
        }
        // Large reads stream through tokio's blocking pool.
        let mut file = tokio::fs::File::from_std(file);
        if start > 0 {
            file.seek(SeekFrom::Start(start)).await?;
        }
        let reader = tokio::io::BufReader::with_capacity(256 * 1024, file.take(end - start));
        match blob {
            Some((digest, id)) if (start, end) == (0, size) => {
                let check = self.on_mismatch(digest.clone(), id);
                Ok(verify::hashing_reader(Box::pin(reader), digest, check))
            }
            _ => Ok(Box::pin(reader)),
        }
    }

    async fn stream(&self, key: &str, range: Option<(u64, u64)>) -> Result<ByteStream> {
        Ok(self.open_stream(key, range).await?.1)
    }

    async fn stream_sized(&self, key: &str) -> Result<Option<(u64, ByteStream)>> {
        match self.open_stream(key, None).await {
            Ok(sized) => Ok(Some(sized)),
            Err(StoreError::NotFound(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    async fn writer(&self, key: &str) -> Result<Box<dyn ObjectWriter>> {
        let final_path = self.path(key)?;
        let tmp = self.root.join("tmp").join(uuid::Uuid::new_v4().to_string());
        let tmp2 = tmp.clone();
        self.check_space(0)?;
        let file = blocking(move || {
            let f = std::fs::File::create_new(&tmp2)?;
            // Held until commit or cancel: `sweep_tmp` leaves locked files alone.
            f.lock()?;
            Ok(f)
        })
        .await?;
        Ok(Box::new(FsWriter {
            file: Some(file),
            tmp,
            final_path,
            store: self.clone(),
        }))
    }

    async fn delete(&self, key: &str) -> Result<()> {
        let path = self.path(key)?;
        self.hot.remove(key);
        match tokio::fs::remove_file(&path).await {
            Ok(()) => {
                // Scratch directories (`uploads/<id>/`) go with their last object.
                if key.starts_with("uploads/")
                    && let Some(parent) = path.parent()
                {
                    let _ = tokio::fs::remove_dir(parent).await;
                }
                Ok(())
            }
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    async fn rename(&self, from: &str, to: &str) -> Result<()> {
        let (src, dst) = (self.path(from)?, self.path(to)?);
        self.hot.remove(from);
        self.hot.remove(to);
        let key = from.to_string();
        let parent = dst.parent().map(Path::to_path_buf).unwrap_or_default();
        let p = parent.clone();
        blocking(move || {
            std::fs::create_dir_all(&p)?;
            std::fs::rename(&src, &dst)
        })
        .await
        .map_err(|e| match e {
            StoreError::Io(io) => not_found(&key, io),
            other => other,
        })?;
        let mut full = false;
        if let Some(grand) = parent.parent() {
            full |= self.mark_dirty(grand.to_path_buf());
        }
        full |= self.mark_dirty(parent);
        if full {
            super::Blobstore::sync(self).await?;
        }
        Ok(())
    }

    async fn list(&self, prefix: &str) -> Result<Vec<String>> {
        let base = self.path(prefix.trim_end_matches('/'))?;
        let root = self.root.clone();
        blocking(move || {
            let mut out = Vec::new();
            walk_files(&root, base, &mut |rel, _| out.push(rel))?;
            out.sort();
            Ok(out)
        })
        .await
    }

    async fn list_meta(&self, prefix: &str) -> Result<Vec<super::ObjectMeta>> {
        let base = self.path(prefix.trim_end_matches('/'))?;
        let root = self.root.clone();
        blocking(move || {
            let mut out = Vec::new();
            walk_files(&root, base, &mut |key, entry| {
                // Gone since the directory was read: not listed.
                if let Ok(m) = entry.metadata() {
                    out.push(super::ObjectMeta {
                        key,
                        size: m.len(),
                        modified: m.modified().unwrap_or(std::time::SystemTime::UNIX_EPOCH),
                    });
                }
            })?;
            out.sort_by(|a, b| a.key.cmp(&b.key));
            Ok(out)
        })
        .await
    }

    async fn sync(&self) -> Result<()> {
        let _syncing = self.sync_lock.lock().await;
        let dirty = self.take_dirty();
        if dirty.is_empty() {
            return Ok(());
        }
        blocking(move || dirty.sync_with(None)).await
    }

    async fn put_blobs(&self, blobs: Vec<(Digest, Bytes)>) -> Result<Vec<Digest>> {
        let total: u64 = blobs.iter().map(|(_, b)| b.len() as u64).sum();
        self.check_space(total)?;
        let root = self.root.clone();
        let batch = blocking(move || batch::put_blobs(&root, blob_key, blobs)).await?;
        let mut full = self.mark_unsynced(batch.files);
        for d in batch.dirs {
            full |= self.mark_dirty(d);
        }
        if full {
            super::Blobstore::sync(self).await?;
        }
        Ok(batch.present)
    }

    fn root_unchanged(&self, seen: &RootVersion) -> Option<bool> {
        use std::os::unix::fs::MetadataExt;
        let meta = match std::fs::metadata(&*self.root_file) {
            Ok(m) => m,
            Err(e) if e.kind() == ErrorKind::NotFound => return Some(false),
            Err(_) => return None,
        };
        let cache = self.root_cache.lock().ok()?;
        let c = cache.as_ref()?;
        Some((c.dev, c.ino) == (meta.dev(), meta.ino()) && c.root.value == seen.value)
    }

    async fn read_root(&self) -> Result<Option<RootVersion>> {
        use std::io::Read;
        use std::os::unix::fs::MetadataExt;
        let path = &*self.root_file;
        // Readers call this on every request: one inline stat(2) while the
        // root is unchanged (see `CachedRoot`), else a tiny file read inline.
        let meta = match std::fs::metadata(path) {
            Ok(m) => m,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        if let Ok(cache) = self.root_cache.lock()
            && let Some(c) = cache.as_ref()
            && (c.dev, c.ino) == (meta.dev(), meta.ino())
        {
            return Ok(Some(c.root.clone()));
        }
        let mut file = match std::fs::File::open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let opened = file.metadata()?;
        let mut text = String::new();
        file.read_to_string(&mut text)?;
        let value = text.trim().to_string();
        let root = RootVersion {
            version: value.clone(),
            value,
        };
        if let Ok(mut cache) = self.root_cache.lock() {
            *cache = Some(CachedRoot {
                _file: file,
                dev: opened.dev(),
                ino: opened.ino(),
                root: root.clone(),
            });
        }
        // A new root: small blobs in memory are checked against their
        // paths again ([`super::hot`]).
        self.epoch.fetch_add(1, Ordering::AcqRel);
        Ok(Some(root))
    }

    async fn swap_root(&self, expected: Option<&RootVersion>, value: &str) -> Result<bool> {
        let dir = self.root.join("refs");
        let expected = expected.map(|v| v.version.clone());
        let value = value.to_string();
        let cache = self.root_cache.clone();
        // The directories waiting for sync are fsynced here too, after the
        // new root's file is (on ext4 that fsync commits their entries in
        // the same journal commit, so theirs return at once), and before
        // the rename that makes the new root current.
        let _syncing = self.sync_lock.lock().await;
        let dirty = self.take_dirty();
        blocking(move || {
            use std::os::unix::fs::MetadataExt;
            let lock = std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(dir.join("root.lock"))?;
            lock.lock()?;
            let current = match std::fs::read_to_string(dir.join("root")) {
                Ok(s) => Some(s.trim().to_string()),
                Err(e) if e.kind() == ErrorKind::NotFound => None,
                Err(e) => return Err(e),
            };
            if current != expected {
                dirty.sync_with(None)?;
                return Ok(false);
            }
            let t0 = std::time::Instant::now();
            let tmp = dir.join("root.tmp");
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(value.as_bytes())?;
            f.write_all(b"\n")?;
            // The new root's file, the directories of what was written
            // since the last sync and the batch-written files in one round:
            // all durable before the rename.
            dirty.sync_with(Some(&f))?;
            let t1 = std::time::Instant::now();
            std::fs::rename(&tmp, dir.join("root"))?;
            sync::dir(&dir)?;
            tracing::debug!(
                dirs = dirty.dirs.len(),
                files = dirty.files.len(),
                sync_us = (t1 - t0).as_micros(),
                refs_sync_us = t1.elapsed().as_micros(),
                "fs: root swapped"
            );
            // Remember the new root (its file held open, see `CachedRoot`),
            // so the next read is one stat(2).
            let meta = f.metadata()?;
            if let Ok(mut c) = cache.lock() {
                *c = Some(CachedRoot {
                    _file: f,
                    dev: meta.dev(),
                    ino: meta.ino(),
                    root: RootVersion {
                        version: value.clone(),
                        value,
                    },
                });
            }
            // The lock is released when `lock` is dropped.
            Ok(true)
        })
        .await
    }
}

struct FsWriter {
    file: Option<std::fs::File>,
    tmp: PathBuf,
    final_path: PathBuf,
    store: FsStore,
}

impl FsWriter {
    fn take_file(&mut self) -> Result<std::fs::File> {
        self.file
            .take()
            .ok_or_else(|| StoreError::Io(std::io::Error::other("writer already finished")))
    }

    /// Makes the written file the object at its key: fsync, then
    /// `rename(2)`, or with `exclusive` `link(2)`, which leaves an existing
    /// object alone (returns `false`). Scratch objects (upload chunks) are
    /// never made reachable by a root swap: their directories are synced
    /// here; others are queued for the sync before the root swap.
    async fn publish(mut self: Box<Self>, exclusive: bool) -> Result<bool> {
        let file = self.take_file()?;
        let tmp = std::mem::take(&mut self.tmp);
        let final_path = self.final_path.clone();
        let scratch = self.store.is_scratch(&final_path);
        let (created, parent) = blocking(move || {
            file.sync_all()?;
            drop(file);
            let parent = final_path
                .parent()
                .map(Path::to_path_buf)
                .unwrap_or_default();
            std::fs::create_dir_all(&parent)?;
            if exclusive {
                let linked = std::fs::hard_link(&tmp, &final_path);
                let _ = std::fs::remove_file(&tmp);
                match linked {
                    Ok(()) => {}
                    Err(e) if e.kind() == ErrorKind::AlreadyExists => return Ok((false, parent)),
                    Err(e) => return Err(e),
                }
            } else {
                std::fs::rename(&tmp, &final_path)?;
            }
            if scratch {
                let dirs: Vec<PathBuf> = std::iter::once(parent.clone())
                    .chain(parent.parent().map(Path::to_path_buf))
                    .collect();
                fsync_dirs(&dirs)?;
            }
            Ok((true, parent))
        })
        .await?;
        if !created || scratch {
            return Ok(created);
        }
        // The new name lives in `parent`; a directory created for it lives in the grandparent.
        let mut full = false;
        if let Some(grand) = parent.parent() {
            full |= self.store.mark_dirty(grand.to_path_buf());
        }
        full |= self.store.mark_dirty(parent);
        if full {
            super::Blobstore::sync(&self.store).await?;
        }
        Ok(true)
    }
}

#[async_trait::async_trait]
impl ObjectWriter for FsWriter {
    async fn write(&mut self, chunk: Bytes) -> Result<()> {
        self.store.check_space(chunk.len() as u64)?;
        let mut file = self.take_file()?;
        let file = blocking(move || file.write_all(&chunk).map(|()| file)).await?;
        self.file = Some(file);
        Ok(())
    }

    async fn commit(self: Box<Self>) -> Result<()> {
        self.publish(false).await.map(drop)
    }

    /// `link(2)` instead of `rename(2)`: fails with `EEXIST` when the key
    /// exists, so of two writers exactly one publishes (upload chunks).
    async fn commit_new(self: Box<Self>) -> Result<bool> {
        self.publish(true).await
    }

    async fn cancel(mut self: Box<Self>) -> Result<()> {
        self.file = None;
        let tmp = std::mem::take(&mut self.tmp);
        blocking(move || match std::fs::remove_file(&tmp) {
            Err(e) if e.kind() != ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        })
        .await
    }
}

impl Drop for FsWriter {
    fn drop(&mut self) {
        if !self.tmp.as_os_str().is_empty() {
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}
