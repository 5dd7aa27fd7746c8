//! Filesystem blobstore: the embedded default (`--data DIR`, default `./airlock-data`).
//!
//! Owns: mapping keys to files below the data directory, atomic publication
//! (write to `tmp/`, fsync, rename) and the root compare-and-swap
//! (exclusive `flock` on `refs/root.lock`, write + fsync + rename).
//! Never parses stored content.

mod batch;
mod blobstore;
mod read;
mod root;
mod sync;
mod writer;

use std::collections::HashSet;
use std::io::{ErrorKind, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncSeekExt};

use self::read::Opened;
use self::root::CachedRoot;
pub use self::root::{DEFAULT_ROOT_REFRESH, settle};
use self::writer::FsWriter;
use super::hot::{FileId, HotBlobs};
use super::space::FreeSpaceFloor;
use super::verified::{Identity, VerifiedBlobs};
use super::verify::{self, VERIFY_WHOLE_MAX};
use super::window::Window;
use super::{
    BoxRead, ByteStream, ObjectWriter, Result, RootVersion, StoreError, blob_key, check_key,
};
use crate::digest::Digest;

use super::refs::ROOT_KEY;
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

/// How many copies of each metadata blob the filesystem store writes unless
/// told otherwise (`[store] metadata_copies`): 2, as ZFS keeps two copies
/// of metadata blocks, since one file system on one disk has no other
/// redundancy ([`super::copies`]).
pub const DEFAULT_METADATA_COPIES: u8 = 2;

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
    /// Large blobs hashed in full and found whole, with their file's
    /// identity ([`super::verified`]).
    verified: Arc<VerifiedBlobs>,
    /// The root epoch: how many times [`super::Blobstore::read_root`] found
    /// `refs/root` replaced (by another process, or at the first read). A
    /// small blob in [`HotBlobs`] whose path was checked in the current
    /// epoch is served without another `stat(2)` (see [`super::hot`]).
    epoch: Arc<AtomicU64>,
    /// Copies of each metadata blob a commit writes ([`super::copies`]).
    copies: u8,
    /// What reads restored from copies ([`super::copies::Repairs`]).
    repairs: Arc<super::copies::Repairs>,
    damage: Arc<super::damage::Notes>,
}

impl FsStore {
    /// Opens (creating if needed) the store at `dir`.
    /// Errors: the directory cannot be created or is not writable.
    pub fn open(dir: &Path) -> Result<FsStore> {
        std::fs::create_dir_all(dir.join("tmp"))?;
        std::fs::create_dir_all(dir.join("refs"))?;
        Ok(FsStore::unopened(dir))
    }

    /// The store at `dir` without creating anything: for reading what is
    /// there before deciding to open it (the layout marker), never for
    /// writing.
    pub fn unopened(dir: &Path) -> FsStore {
        FsStore {
            root: Arc::new(dir.to_path_buf()),
            dirty: Arc::default(),
            sync_lock: Arc::new(tokio::sync::Mutex::new(())),
            root_file: Arc::new(dir.join(ROOT_KEY)),
            root_cache: Arc::new(Mutex::new(None)),
            min_free: FreeSpaceFloor::Off,
            hot: Arc::default(),
            verified: Arc::default(),
            epoch: Arc::default(),
            copies: DEFAULT_METADATA_COPIES,
            repairs: Arc::default(),
            damage: Arc::default(),
        }
    }

    /// The same store writing `copies` (1 or 2) of each metadata blob
    /// ([`super::copies`]; the default is [`DEFAULT_METADATA_COPIES`]).
    pub fn with_metadata_copies(mut self, copies: u8) -> FsStore {
        self.copies = copies.clamp(1, 2);
        self
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
        use std::os::unix::fs::OpenOptionsExt;
        let path = self.path(key)?;
        // O_NONBLOCK: a FIFO where an object should be is opened without
        // waiting for a writer, and then refused as not a regular file
        // (as `stat` reports it absent), instead of hanging the reader.
        // O_NOFOLLOW: a symbolic link there is refused the same way (ELOOP).
        let file = std::fs::File::options()
            .read(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW)
            .open(&path)
            .map_err(|e| match e.raw_os_error() {
                Some(libc::ELOOP) => StoreError::NotFound(format!("{key} (not a regular file)")),
                _ => not_found(key, e),
            })?;
        let meta = file.metadata()?;
        if !meta.is_file() {
            return Err(StoreError::NotFound(format!("{key} (not a regular file)")));
        }
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

/// The identity a verified large blob is remembered with: device, inode,
/// size, mtime and ctime (any write moves the ctime).
fn identity(meta: &std::fs::Metadata) -> Identity {
    use std::os::unix::fs::MetadataExt;
    Identity::of((
        (meta.dev(), meta.ino(), meta.len()),
        (meta.mtime(), meta.mtime_nsec()),
        (meta.ctime(), meta.ctime_nsec()),
    ))
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
    fn sync_with(&self, extra: &[&std::fs::File]) -> std::io::Result<()> {
        let dirs: Vec<PathBuf> = self.dirs.iter().cloned().collect();
        let files: Vec<&std::fs::File> = extra.iter().copied().chain(&self.files).collect();
        sync::round(&files, &dirs)
    }
}
