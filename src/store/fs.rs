//! Filesystem blobstore: the embedded default (`--data DIR`, default `./airlock-data`).
//!
//! Owns: mapping keys to files below the data directory, atomic publication
//! (write to `tmp/`, fsync, rename) and the root compare-and-swap
//! (exclusive `flock` on `refs/root.lock`, write + fsync + rename).
//! Never parses stored content.

use std::collections::HashSet;
use std::io::{ErrorKind, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncSeekExt};

use super::space::FreeSpaceFloor;
use super::verify::{self, VERIFY_WHOLE_MAX};
use super::{BoxRead, ByteStream, ObjectWriter, Result, RootVersion, StoreError, check_key};
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
    dirty_dirs: Arc<Mutex<HashSet<PathBuf>>>,
    root_cache: Arc<Mutex<Option<CachedRoot>>>,
    min_free: FreeSpaceFloor,
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
            dirty_dirs: Arc::new(Mutex::new(HashSet::new())),
            root_cache: Arc::new(Mutex::new(None)),
            min_free: FreeSpaceFloor::Off,
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
    fn quarantine(&self, digest: &Digest, actual: &Digest, id: (u64, u64)) {
        use std::os::unix::fs::MetadataExt;
        let from = self.root.join(super::blob_key(digest));
        let to = self.root.join(verify::quarantine_key(digest));
        let same = std::fs::metadata(&from).is_ok_and(|m| (m.dev(), m.ino()) == id);
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
    fn blob_identity(key: &str, file: &std::fs::File) -> Option<(Digest, (u64, u64))> {
        use std::os::unix::fs::MetadataExt;
        let digest = verify::blob_digest(key)?;
        let m = file.metadata().ok()?;
        Some((digest, (m.dev(), m.ino())))
    }

    /// Reads a whole small blob (at most [`VERIFY_WHOLE_MAX`] bytes) and
    /// verifies it; a mismatch quarantines it and is [`StoreError::Corrupt`].
    async fn read_verified(
        &self,
        file: std::fs::File,
        size: u64,
        digest: Digest,
        id: (u64, u64),
    ) -> Result<Vec<u8>> {
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
        Ok(bytes)
    }

    /// What to do when a streamed blob turns out corrupt: quarantine it.
    fn on_mismatch(&self, digest: Digest, id: (u64, u64)) -> verify::OnMismatch {
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
    /// the file and the byte range `start..end`. open(2) and fstat(2) run inline:
    /// cheaper than a hop to the blocking pool on a local file system.
    fn open_range(
        &self,
        key: &str,
        range: Option<(u64, u64)>,
    ) -> Result<(std::fs::File, u64, u64)> {
        let path = self.path(key)?;
        let file = std::fs::File::open(&path).map_err(|e| not_found(key, e))?;
        let size = file.metadata()?.len();
        let (start, end) = range.unwrap_or((0, size));
        if start > end || end > size {
            return Err(StoreError::Range { start, end, size });
        }
        Ok((file, start, end))
    }

    /// Records `dir` for the next sync; `true` when the set is over
    /// [`MAX_DIRTY_DIRS`] (the caller syncs now).
    fn mark_dirty(&self, dir: PathBuf) -> bool {
        match self.dirty_dirs.lock() {
            Ok(mut d) => {
                d.insert(dir);
                d.len() > MAX_DIRTY_DIRS
            }
            Err(_) => false,
        }
    }

    fn is_scratch(&self, path: &Path) -> bool {
        path.starts_with(self.root.join("uploads"))
    }
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

fn fsync_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
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
        let (file, start, end) = self.open_range(key, range)?;
        let size = file.metadata()?.len();
        let blob = FsStore::blob_identity(key, &file);
        if let Some((digest, id)) = blob.clone()
            && size <= VERIFY_WHOLE_MAX
        {
            let bytes = self.read_verified(file, size, digest, id).await?;
            let part = bytes[start as usize..end as usize].to_vec();
            return Ok(Box::pin(std::io::Cursor::new(part)));
        }
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
        let (file, start, end) = self.open_range(key, range)?;
        let size = file.metadata()?.len();
        let blob = FsStore::blob_identity(key, &file);
        if let Some((digest, id)) = blob.clone()
            && size <= VERIFY_WHOLE_MAX
        {
            let bytes = Bytes::from(self.read_verified(file, size, digest, id).await?);
            let part = bytes.slice(start as usize..end as usize);
            return Ok(Box::pin(futures_util::stream::once(async { Ok(part) })));
        }
        if end - start <= INLINE_READ_MAX {
            let chunk = Bytes::from(read_at(&file, start, end)?);
            return Ok(Box::pin(futures_util::stream::once(async { Ok(chunk) })));
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
                Ok(verify::hashing_stream(stream, digest, size, check))
            }
            _ => Ok(stream),
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
                    } else if let Ok(rel) = p.strip_prefix(&*root) {
                        out.push(rel.to_string_lossy().into_owned());
                    }
                }
            }
            out.sort();
            Ok(out)
        })
        .await
    }

    async fn sync(&self) -> Result<()> {
        let dirs: Vec<PathBuf> = match self.dirty_dirs.lock() {
            Ok(mut d) => d.drain().collect(),
            Err(_) => Vec::new(),
        };
        blocking(move || {
            for d in dirs {
                match fsync_dir(&d) {
                    // Removed since (an emptied `uploads/<id>/`): nothing to make durable.
                    Err(e) if e.kind() == ErrorKind::NotFound => {}
                    other => other?,
                }
            }
            Ok(())
        })
        .await
    }

    async fn read_root(&self) -> Result<Option<RootVersion>> {
        use std::io::Read;
        use std::os::unix::fs::MetadataExt;
        let path = self.path(ROOT_KEY)?;
        // Readers call this on every request: one inline stat(2) while the
        // root is unchanged (see `CachedRoot`), else a tiny file read inline.
        let meta = match std::fs::metadata(&path) {
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
        let mut file = match std::fs::File::open(&path) {
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
        Ok(Some(root))
    }

    async fn swap_root(&self, expected: Option<&RootVersion>, value: &str) -> Result<bool> {
        let dir = self.root.join("refs");
        let expected = expected.map(|v| v.version.clone());
        let value = value.to_string();
        blocking(move || {
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
                return Ok(false);
            }
            let tmp = dir.join("root.tmp");
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(value.as_bytes())?;
            f.write_all(b"\n")?;
            f.sync_all()?;
            std::fs::rename(&tmp, dir.join("root"))?;
            fsync_dir(&dir)?;
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

    async fn commit(mut self: Box<Self>) -> Result<()> {
        let file = self.take_file()?;
        let tmp = std::mem::take(&mut self.tmp);
        let final_path = self.final_path.clone();
        // Scratch objects (upload chunks) are never made reachable by a root
        // swap: their directories are synced here, not queued for it.
        let scratch = self.store.is_scratch(&final_path);
        let parent = blocking(move || {
            file.sync_all()?;
            drop(file);
            let parent = final_path
                .parent()
                .map(Path::to_path_buf)
                .unwrap_or_default();
            std::fs::create_dir_all(&parent)?;
            std::fs::rename(&tmp, &final_path)?;
            if scratch {
                fsync_dir(&parent)?;
                if let Some(grand) = parent.parent() {
                    fsync_dir(grand)?;
                }
            }
            Ok(parent)
        })
        .await?;
        if scratch {
            return Ok(());
        }
        // The rename lives in `parent`; a directory created for it lives in the grandparent.
        let mut full = false;
        if let Some(grand) = parent.parent() {
            full |= self.store.mark_dirty(grand.to_path_buf());
        }
        full |= self.store.mark_dirty(parent);
        if full {
            super::Blobstore::sync(&self.store).await?;
        }
        Ok(())
    }

    /// `link(2)` instead of `rename(2)`: fails with `EEXIST` when the key
    /// exists, so of two writers exactly one publishes. Used for upload
    /// chunks (scratch: their directories are synced here).
    async fn commit_new(mut self: Box<Self>) -> Result<bool> {
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
            let linked = std::fs::hard_link(&tmp, &final_path);
            let _ = std::fs::remove_file(&tmp);
            match linked {
                Ok(()) => {}
                Err(e) if e.kind() == ErrorKind::AlreadyExists => return Ok((false, parent)),
                Err(e) => return Err(e),
            }
            fsync_dir(&parent)?;
            Ok((true, parent))
        })
        .await?;
        if created && !scratch {
            self.store.mark_dirty(parent);
        }
        Ok(created)
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
