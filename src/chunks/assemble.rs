//! Putting a blob together from an index: chunks found in seeds (files the
//! caller already has, cut with the same chunker), chunks fetched before
//! (a resumable cache of verified `.cacnk` files) and chunks fetched now
//! from a [`ChunkStore`], each verified by its id.
//!
//! Owns: the seed table, the chunk cache directory, the plan (what is
//! missing, how many bytes come from where), the parallel fetch and the
//! assembly with its whole-file sha256 check. Never decides whether a
//! delta is worth it or installs anything (`cell` does).
//!
//! Crash safety: a fetched chunk is verified, written to `<id>.cacnk.tmp`
//! and renamed to `<id>.cacnk`, so after a kill the cache holds only
//! whole, verified chunks (leftover `.tmp` files are removed when the
//! cache is opened). It is not fsynced: every cached chunk is verified
//! again by its id whenever it is read (planned or assembled), so one torn
//! by a power loss is refused and fetched again, never used. An fsync per
//! chunk cost a delta of 300 chunks most of its fetch time.
//! The output is written to the caller's path and is correct only when
//! [`assemble`] returns `Ok`.

use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use futures_util::StreamExt;

use super::store::ChunkStore;
use super::{BlobIndex, ChunkId, ChunkSizes, Chunker, cacnk};
use crate::digest::{Algorithm, Digest, Hasher};
use crate::files::remove_entry;

/// Chunks of local files, by id: (file, offset, length).
#[derive(Debug, Default)]
pub struct Seeds {
    files: Vec<PathBuf>,
    at: HashMap<ChunkId, (usize, u64, usize)>,
    /// Bytes read to index the seeds.
    pub bytes: u64,
}

impl Seeds {
    /// Cuts each file of `files` that exists with `sizes` (blocking: run it
    /// on the blocking pool). Errors: a file could not be read.
    pub fn index(files: &[PathBuf], sizes: ChunkSizes) -> Result<Seeds> {
        let mut seeds = Seeds::default();
        for path in files {
            seeds.cut(path, sizes)?;
        }
        Ok(seeds)
    }

    /// Adds `path` cut with `sizes` (blocking); a missing file adds nothing.
    /// Errors: the file could not be read.
    pub fn cut(&mut self, path: &Path, sizes: ChunkSizes) -> Result<()> {
        let chunker = Chunker::new(sizes).map_err(anyhow::Error::msg)?;
        let f = match std::fs::File::open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e).with_context(|| format!("opening seed {}", path.display())),
        };
        // SAFETY: the seeds are the caller's own files (installed rootfs
        // tars), replaced only by rename, never written in place.
        let map = unsafe { memmap2::Mmap::map(&f) }
            .with_context(|| format!("mapping seed {}", path.display()))?;
        let n = self.files.len();
        self.files.push(path.to_path_buf());
        let mut off = 0usize;
        while off < map.len() {
            let len = chunker.cut(&map[off..]);
            let id = ChunkId::of(&map[off..off + len]);
            self.at.entry(id).or_insert((n, off as u64, len));
            off += len;
        }
        self.bytes += map.len() as u64;
        Ok(())
    }

    /// Adds `path` as the blob `index` describes (its published index),
    /// without reading it: when the file is not that blob after all, the
    /// assembled blob fails its sha256 check. Errors: the file's size is
    /// not the index's.
    pub fn add_indexed(&mut self, path: &Path, index: &BlobIndex) -> Result<()> {
        let size = std::fs::metadata(path)?.len();
        if size != index.blob_size() {
            bail!(
                "seed {} has {size} bytes, its index {}",
                path.display(),
                index.blob_size()
            );
        }
        let n = self.files.len();
        self.files.push(path.to_path_buf());
        for (i, c) in index.chunks.iter().enumerate() {
            let r = index.range(i);
            self.at
                .entry(c.id)
                .or_insert((n, r.start, (r.end - r.start) as usize));
        }
        Ok(())
    }

    /// Whether a seed holds chunk `id`.
    pub fn has(&self, id: &ChunkId) -> bool {
        self.at.contains_key(id)
    }

    /// Distinct chunks in the seeds.
    pub fn len(&self) -> usize {
        self.at.len()
    }

    /// Whether the seeds hold no chunk.
    pub fn is_empty(&self) -> bool {
        self.at.is_empty()
    }
}

/// A directory of verified `.cacnk` files, `<id>.cacnk`: the cell's own,
/// so anything in it that is not what the cache wrote (a directory, a
/// symlink, a FIFO, a file larger than a chunk can be) is damage: it is
/// removed and the chunk fetched again, never followed or read unbounded.
pub struct ChunkCache {
    dir: PathBuf,
}

impl ChunkCache {
    /// Opens (creating) `dir`, removing `.tmp` leftovers of a killed run;
    /// a file or symlink where the directory should be is replaced by
    /// one. Errors: the directory cannot be created or listed (with its
    /// path).
    pub fn open(dir: &Path) -> Result<ChunkCache> {
        if std::fs::symlink_metadata(dir).is_ok_and(|m| !m.is_dir()) {
            tracing::warn!(path = %dir.display(), "chunk cache is not a directory; replacing it");
            remove_entry(dir).with_context(|| format!("removing {}", dir.display()))?;
        }
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let entries =
            std::fs::read_dir(dir).with_context(|| format!("listing {}", dir.display()))?;
        for e in entries {
            let p = e?.path();
            if p.extension().is_some_and(|x| x == "tmp") {
                let _ = remove_entry(&p);
            }
        }
        Ok(ChunkCache {
            dir: dir.to_path_buf(),
        })
    }

    fn path(&self, id: &ChunkId) -> PathBuf {
        self.dir.join(format!("{id}.cacnk"))
    }

    /// Chunk `id` from the cache, verified; `None` when absent or bad (a
    /// bad one is removed). Reads only a regular file (not following a
    /// symlink, never blocking on a FIFO) of at most
    /// [`cacnk::max_frame_size`]`(max)` bytes.
    pub fn read(&self, id: &ChunkId, max: usize) -> Option<Vec<u8>> {
        let path = self.path(id);
        let bytes = match read_regular(&path, cacnk::max_frame_size(max)) {
            Ok(Some(b)) => b,
            Ok(None) => return None,
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "cached chunk refused; fetching it again");
                let _ = remove_entry(&path);
                return None;
            }
        };
        match cacnk::decompress_verified(&bytes, id, max) {
            Ok(data) => Some(data),
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "cached chunk refused; fetching it again");
                let _ = remove_entry(&path);
                None
            }
        }
    }

    /// Keeps the verified `.cacnk` bytes of `id` (temporary file, rename;
    /// no fsync: see the module's crash-safety note); whatever is in the
    /// way at either name is removed first. Errors: I/O, with the path.
    pub fn put(&self, id: &ChunkId, cacnk: &[u8]) -> Result<()> {
        let (tmp, path) = (self.dir.join(format!("{id}.cacnk.tmp")), self.path(id));
        for p in [&tmp, &path] {
            if std::fs::symlink_metadata(p).is_ok_and(|m| !m.is_file()) {
                remove_entry(p).with_context(|| format!("removing {}", p.display()))?;
            }
        }
        std::fs::write(&tmp, cacnk).with_context(|| format!("writing {}", tmp.display()))?;
        std::fs::rename(&tmp, &path).with_context(|| format!("renaming {}", tmp.display()))?;
        Ok(())
    }

    /// Removes the cache directory and everything in it.
    pub fn remove(self) -> Result<()> {
        match remove_entry(&self.dir) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e.into()),
            _ => Ok(()),
        }
    }
}

/// The bytes of the regular file at `path` (not followed if a symlink,
/// opened without blocking if a FIFO); `None` when absent. Errors: not a
/// regular file, larger than `limit` bytes, or I/O.
fn read_regular(path: &Path, limit: usize) -> std::io::Result<Option<Vec<u8>>> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::File::options()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path);
    let f = match f {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let meta = f.metadata()?;
    if !meta.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    if meta.len() > limit as u64 {
        return Err(std::io::Error::other(format!(
            "{} bytes, more than a chunk's {limit}",
            meta.len()
        )));
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    f.take(limit as u64 + 1).read_to_end(&mut bytes)?;
    if bytes.len() > limit {
        return Err(std::io::Error::other("grew past a chunk's size"));
    }
    Ok(Some(bytes))
}

/// What an index needs beyond the seeds and the cache.
#[derive(Debug, Clone, Default)]
pub struct Plan {
    /// Distinct chunks to fetch, in index order, with their uncompressed length.
    pub missing: Vec<(ChunkId, u64)>,
    /// Bytes of the blob the seeds provide.
    pub seeded_bytes: u64,
    /// Bytes of the blob earlier runs fetched (the cache).
    pub cached_bytes: u64,
    /// Uncompressed bytes of the chunks to fetch (each once).
    pub missing_bytes: u64,
}

/// What `index` needs that neither `seeds` nor `cache` holds (cached
/// chunks are verified here; bad ones are removed and planned for fetching).
pub fn plan(index: &BlobIndex, seeds: &Seeds, cache: &ChunkCache) -> Plan {
    let max = index.sizes.max as usize;
    let mut p = Plan::default();
    let mut cached: HashSet<ChunkId> = HashSet::new();
    let mut planned: HashSet<ChunkId> = HashSet::new();
    for (i, c) in index.chunks.iter().enumerate() {
        let len = index.range(i).end - index.range(i).start;
        if seeds.has(&c.id) {
            p.seeded_bytes += len;
        } else if cached.contains(&c.id) || cache.read(&c.id, max).is_some() {
            cached.insert(c.id);
            p.cached_bytes += len;
        } else if planned.insert(c.id) {
            p.missing.push((c.id, len));
            p.missing_bytes += len;
        }
    }
    p
}

/// Why fetching stopped.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    /// The store does not hold a chunk the index names.
    #[error("chunk {0} is missing from the chunk store")]
    Missing(ChunkId),
    /// A chunk's bytes are not its id's (or not a bounded zstd frame).
    #[error(transparent)]
    Refused(#[from] cacnk::ChunkError),
    /// Writing the local cache failed (a full or read-only disk): a
    /// caller falls back to a download that needs no cache.
    #[error("chunk cache: {0:#}")]
    Cache(anyhow::Error),
    /// Reading the store failed.
    #[error(transparent)]
    Other(#[from] anyhow::Error),
}

/// Fetches every chunk of `missing` from `store`, up to `parallel` at
/// once, verifies each by its id and keeps it in `cache`; `on_chunk` sees
/// the stored size of each. Returns the bytes fetched (as stored,
/// compressed). Errors: the first [`FetchError`]; chunks kept before it
/// stay in the cache for the next run.
pub async fn fetch(
    store: &dyn ChunkStore,
    cache: &ChunkCache,
    missing: &[(ChunkId, u64)],
    max: usize,
    parallel: usize,
    on_chunk: &(dyn Fn(u64) + Send + Sync),
) -> Result<u64, FetchError> {
    let mut gets = futures_util::stream::iter(missing.iter().map(|(id, _)| {
        let id = *id;
        async move {
            let bytes = store.fetch(&id).await?.ok_or(FetchError::Missing(id))?;
            let b = bytes.clone();
            tokio::task::spawn_blocking(move || cacnk::decompress_verified(&b, &id, max))
                .await
                .map_err(anyhow::Error::from)??;
            Ok::<_, FetchError>((id, bytes))
        }
    }))
    .buffer_unordered(parallel.max(1));
    let mut total = 0u64;
    while let Some(r) = gets.next().await {
        let (id, bytes) = r?;
        cache.put(&id, &bytes).map_err(FetchError::Cache)?;
        total += bytes.len() as u64;
        on_chunk(bytes.len() as u64);
    }
    Ok(total)
}

/// Writes the blob `index` describes to `out` from `seeds` and `cache`
/// (blocking), checks its sha256 against `expected`, and fsyncs it.
/// Errors: a chunk neither source holds, a seed that changed under us, a
/// sha256 or size mismatch, I/O. `out` is then incomplete: the caller
/// removes it.
pub fn assemble(
    index: &BlobIndex,
    seeds: &Seeds,
    cache: &ChunkCache,
    out: &Path,
    expected: &Digest,
) -> Result<()> {
    let max = index.sizes.max as usize;
    let files = seeds
        .files
        .iter()
        .map(std::fs::File::open)
        .collect::<std::io::Result<Vec<_>>>()?;
    let mut w = std::io::BufWriter::with_capacity(1 << 20, crate::files::create_new(out)?);
    let mut hasher = Hasher::new(Algorithm::Sha256);
    let mut buf = vec![0u8; max];
    for (i, c) in index.chunks.iter().enumerate() {
        let len = (index.range(i).end - index.range(i).start) as usize;
        let data: &[u8] = if let Some(&(f, off, n)) = seeds.at.get(&c.id) {
            files[f].read_exact_at(&mut buf[..n], off)?;
            &buf[..n]
        } else {
            match cache.read(&c.id, max) {
                Some(d) => {
                    buf[..d.len()].copy_from_slice(&d);
                    &buf[..d.len()]
                }
                None => bail!("chunk {} is in neither a seed nor the cache", c.id),
            }
        };
        if data.len() != len {
            bail!(
                "chunk {} is {} bytes, the index says {len}",
                c.id,
                data.len()
            );
        }
        hasher.update(data);
        w.write_all(data)?;
    }
    let f = w.into_inner().map_err(|e| e.into_error())?;
    f.sync_all()?;
    let got = hasher.finish();
    if got != *expected {
        bail!("assembled blob is {got}, expected {expected}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAX: usize = 64 << 10;

    fn chunk(seed: u8) -> (ChunkId, Vec<u8>) {
        let data: Vec<u8> = (0..40_000u32).map(|i| (i as u8) ^ seed).collect();
        (ChunkId::of(&data), cacnk::compress(&data).unwrap())
    }

    /// Damage in the cache directory (from the attacks of a review: a
    /// symlink to /dev/zero was read until the OOM killer came, a FIFO
    /// blocked, a directory at a chunk's or a `.tmp` name failed every
    /// pass) is refused without reading it, removed, and the chunk can be
    /// kept again; nothing outside the cache is touched.
    #[test]
    fn damaged_cache_entries_are_removed_not_followed_or_read() {
        let tmp = tempfile::tempdir().unwrap();
        let outside = tmp.path().join("outside");
        std::fs::write(&outside, b"not the cache's").unwrap();
        let dir = tmp.path().join("cache");
        let cache = ChunkCache::open(&dir).unwrap();
        let (id, bytes) = chunk(1);
        let at = cache.path(&id);
        let fifo = std::ffi::CString::new(at.to_str().unwrap()).unwrap();
        type Damage<'a> = (&'a str, Box<dyn Fn() + 'a>);
        let damage: Vec<Damage> = vec![
            (
                "symlink to /dev/zero",
                Box::new(|| std::os::unix::fs::symlink("/dev/zero", &at).unwrap()),
            ),
            (
                "symlink to a file",
                Box::new(|| std::os::unix::fs::symlink(&outside, &at).unwrap()),
            ),
            (
                "directory",
                Box::new(|| std::fs::create_dir_all(at.join("d")).unwrap()),
            ),
            // SAFETY: a valid NUL-terminated path.
            (
                "fifo",
                Box::new(|| assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0)),
            ),
            (
                "larger than a chunk",
                Box::new(|| std::fs::write(&at, vec![0u8; 2 * MAX]).unwrap()),
            ),
            (
                "half a chunk",
                Box::new(|| std::fs::write(&at, &bytes[..bytes.len() / 2]).unwrap()),
            ),
        ];
        for (what, make) in damage {
            make();
            assert_eq!(cache.read(&id, MAX), None, "{what}");
            assert!(
                std::fs::symlink_metadata(&at).is_err(),
                "{what} left in place"
            );
            cache.put(&id, &bytes).unwrap();
            assert!(cache.read(&id, MAX).is_some(), "{what}: kept again");
            std::fs::remove_file(&at).unwrap();
        }
        // A directory at the temporary name is cleared by `put` and `open`.
        std::fs::create_dir_all(dir.join(format!("{id}.cacnk.tmp")).join("d")).unwrap();
        cache.put(&id, &bytes).unwrap();
        std::fs::create_dir_all(dir.join("x.cacnk.tmp")).unwrap();
        ChunkCache::open(&dir).unwrap();
        assert!(!dir.join("x.cacnk.tmp").exists());
        assert_eq!(std::fs::read(&outside).unwrap(), b"not the cache's");
    }

    /// A file, or a symlink to another directory, where the cache
    /// directory should be is replaced by a directory of its own.
    #[test]
    fn a_cache_path_that_is_not_a_directory_is_replaced() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("cache");
        std::fs::write(&dir, b"x").unwrap();
        let (id, bytes) = chunk(2);
        ChunkCache::open(&dir).unwrap().put(&id, &bytes).unwrap();
        assert!(dir.is_dir());
        let elsewhere = tmp.path().join("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        std::os::unix::fs::symlink(&elsewhere, &dir).unwrap();
        ChunkCache::open(&dir).unwrap().put(&id, &bytes).unwrap();
        assert!(std::fs::symlink_metadata(&dir).unwrap().is_dir());
        assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0);
    }
}
