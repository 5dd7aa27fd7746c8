//! Batched writes of small blobs ([`super::super::Blobstore::put_blobs`]):
//! a state commit's new pages and documents in one pass of the blocking pool.
//!
//! Owns: the order of the system calls, chosen so that a commit waits for
//! as few rounds of `fsync(2)` as it can. Every file is written under a
//! temporary name, its write-back started
//! (`sync_file_range(SYNC_FILE_RANGE_WRITE)`, which on ext4 allocates its
//! blocks in the running journal transaction) and renamed to its key; the
//! files are handed back open, and [`super::FsStore`] fsyncs them with
//! their directories and the new root's file in the one round before the
//! root swap (they wait for the same journal commit and share its device
//! flushes). So a commit waits for two rounds (that one, then `refs/` after
//! the rename), not three.
//!
//! Durability does not depend on the order: every file and directory gets
//! its own `fsync(2)`, and all of them return before the rename of
//! `refs/root` that makes any of them reachable. Until then a file under
//! its key may not be durable: after a crash it can be empty or short.
//! So a blob found already present under its key is not trusted blindly:
//! its bytes are compared with the ones to store (a state page or document
//! is at most a few KiB), a different file is replaced, and an equal one is
//! fsynced in the same round as the new ones, as another process that
//! wrote it may not have synced it yet.

use std::io::{ErrorKind, Read, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use bytes::Bytes;

use crate::digest::Digest;

/// Removes a temporary file not renamed yet (on an error).
struct Cleanup(Option<PathBuf>);

impl Drop for Cleanup {
    fn drop(&mut self) {
        if let Some(tmp) = &self.0 {
            let _ = std::fs::remove_file(tmp);
        }
    }
}

/// Starts write-back of `file` (a hint; errors are ignored: the fsync that
/// follows is what makes the data durable).
fn start_writeback(file: &std::fs::File) {
    #[cfg(target_os = "linux")]
    // SAFETY: a valid open descriptor; sync_file_range only reads its arguments.
    unsafe {
        libc::sync_file_range(file.as_raw_fd(), 0, 0, libc::SYNC_FILE_RANGE_WRITE);
    }
    #[cfg(not(target_os = "linux"))]
    let _ = file.as_raw_fd();
}

/// Writes each blob of `blobs` below `root` (blob keys from `key`,
/// temporary files in `root/tmp/`) and renames it to its key, unless the
/// key already holds exactly its bytes. Returns the files to fsync (the
/// written ones and the ones found equal) and the directories whose
/// entries changed (each blob's directory and its parent, which holds the
/// directory if it was just created), for the round before the root swap,
/// and the digests found present and so not written
/// ([`crate::store::Blobstore::put_blobs`]).
///
/// Errors: the first I/O error; temporary files are removed, blobs renamed
/// before it stay (unreachable: no root names them before that round).
pub(super) fn put_blobs(
    root: &Path,
    key: impl Fn(&Digest) -> String,
    blobs: Vec<(Digest, Bytes)>,
) -> std::io::Result<Batch> {
    let t0 = std::time::Instant::now();
    let mut files = Vec::with_capacity(blobs.len());
    let mut dirs: Vec<PathBuf> = Vec::new();
    let mut present = Vec::new();
    let mut seen = std::collections::HashSet::new();
    let mut written = 0;
    for (digest, bytes) in blobs {
        let path = root.join(key(&digest));
        if !seen.insert(path.clone()) {
            continue;
        }
        if let Some(file) = holds(&path, &bytes)? {
            files.push(file);
            present.push(digest);
            continue;
        }
        let tmp = root.join("tmp").join(uuid::Uuid::new_v4().to_string());
        let mut file = std::fs::File::create_new(&tmp)?;
        let mut guard = Cleanup(Some(tmp.clone()));
        // Held until renamed: `sweep_tmp` leaves locked files alone.
        file.lock()?;
        file.write_all(&bytes)?;
        start_writeback(&file);
        let parent = path.parent().map(Path::to_path_buf).unwrap_or_default();
        std::fs::create_dir_all(&parent)?;
        // A directory another writer has just created lives in the grandparent.
        if let Some(grand) = parent.parent() {
            dirs.push(grand.to_path_buf());
        }
        std::fs::rename(&tmp, &path)?;
        crate::failpoint::fs_write_done();
        guard.0 = None;
        dirs.push(parent);
        files.push(file);
        written += 1;
    }
    dirs.sort();
    dirs.dedup();
    tracing::debug!(
        written,
        present = present.len(),
        files_us = t0.elapsed().as_micros(),
        "fs: blob batch written"
    );
    Ok(Batch {
        files,
        dirs,
        present,
    })
}

/// What [`put_blobs`] leaves for its caller.
pub(super) struct Batch {
    /// The files to fsync in the round before the root swap.
    pub files: Vec<std::fs::File>,
    /// The directories whose entries changed.
    pub dirs: Vec<PathBuf>,
    /// The digests whose keys already held their bytes.
    pub present: Vec<Digest>,
}

/// The file at `path` opened, when it holds exactly `bytes`; `None` when
/// there is none (or something else, e.g. the leftover of a crash, which
/// the caller then replaces).
fn holds(path: &Path, bytes: &[u8]) -> std::io::Result<Option<std::fs::File>> {
    let mut file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let meta = file.metadata()?;
    if !meta.is_file() || meta.len() != bytes.len() as u64 {
        return Ok(None);
    }
    let mut have = Vec::with_capacity(bytes.len());
    file.read_to_end(&mut have)?;
    Ok((have == bytes).then_some(file))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{StoreError, blob_key};

    /// A FIFO or a directory where a blob should be is absent to a read,
    /// at once (a FIFO opened for reading would wait for a writer).
    #[tokio::test]
    async fn a_non_regular_file_at_a_key_reads_as_absent_without_hanging_or_following() {
        use crate::store::Blobstore as _;
        let dir = tempfile::tempdir().unwrap();
        let store = crate::store::fs::FsStore::open(dir.path()).unwrap();
        let d = Digest::sha256_of(b"x");
        let path = dir.path().join(blob_key(&d));
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let read = tokio::time::timeout(
            std::time::Duration::from_secs(5),
            store.read(&blob_key(&d), None),
        )
        .await
        .expect("a read of a FIFO hung");
        assert!(matches!(read, Err(StoreError::NotFound(_))));
        std::fs::remove_file(&path).unwrap();
        std::fs::create_dir(&path).unwrap();
        assert!(matches!(
            store.read(&blob_key(&d), None).await,
            Err(StoreError::NotFound(_))
        ));
        // A symbolic link, looping or to a file holding the right bytes, is
        // absent too; writing the blob replaces the link, not its target.
        std::fs::remove_dir(&path).unwrap();
        std::os::unix::fs::symlink(&path, &path).unwrap();
        assert_eq!(store.stat(&blob_key(&d)).await.unwrap(), None);
        assert!(matches!(
            store.read(&blob_key(&d), None).await,
            Err(StoreError::NotFound(_))
        ));
        std::fs::remove_file(&path).unwrap();
        let target = dir.path().join("target");
        std::fs::write(&target, b"x").unwrap();
        std::os::unix::fs::symlink(&target, &path).unwrap();
        assert_eq!(store.stat(&blob_key(&d)).await.unwrap(), None);
        assert!(matches!(
            store.read(&blob_key(&d), None).await,
            Err(StoreError::NotFound(_))
        ));
        crate::store::put_bytes(&store, b"x").await.unwrap();
        assert!(std::fs::symlink_metadata(&path).unwrap().is_file());
        assert_eq!(std::fs::read(&target).unwrap(), b"x");
    }

    #[test]
    fn a_present_blob_is_kept_only_when_its_bytes_match() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("tmp")).unwrap();
        let a = Bytes::from_static(b"{\"page\":\"a\"}");
        let b = Bytes::from_static(b"{\"page\":\"bb\"}");
        let (da, db) = (Digest::sha256_of(&a), Digest::sha256_of(&b));
        let blobs = vec![(da.clone(), a.clone()), (db.clone(), b.clone())];
        let batch = put_blobs(dir.path(), blob_key, blobs.clone()).unwrap();
        assert_eq!((batch.files.len(), batch.present.len()), (2, 0));
        assert!(
            batch.dirs.contains(
                &dir.path()
                    .join(blob_key(&da))
                    .parent()
                    .unwrap()
                    .to_path_buf()
            )
        );
        let (pa, pb) = (
            dir.path().join(blob_key(&da)),
            dir.path().join(blob_key(&db)),
        );
        assert_eq!(std::fs::read(&pa).unwrap(), a);
        // What a crash can leave: an empty file under one key, a short one
        // under the other.
        std::fs::write(&pa, b"").unwrap();
        std::fs::write(&pb, &b[..4]).unwrap();
        let batch = put_blobs(dir.path(), blob_key, blobs.clone()).unwrap();
        assert_eq!(
            (
                batch.files.len(),
                batch.dirs.is_empty(),
                batch.present.len()
            ),
            (2, false, 0)
        );
        assert_eq!(std::fs::read(&pa).unwrap(), a);
        assert_eq!(std::fs::read(&pb).unwrap(), b);
        // Both intact now: kept, handed back for the round, no entry changed.
        let batch = put_blobs(dir.path(), blob_key, blobs).unwrap();
        assert_eq!((batch.files.len(), batch.dirs.len()), (2, 0));
        assert_eq!(batch.present, vec![da, db]);
        assert_eq!(
            std::fs::read_dir(dir.path().join("tmp")).unwrap().count(),
            0
        );
    }
}
