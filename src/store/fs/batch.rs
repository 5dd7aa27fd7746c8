//! Batched writes of small blobs ([`super::super::Blobstore::put_blobs`]):
//! a state commit's new pages and documents in one pass of the blocking pool.
//!
//! Owns: the order of the system calls, chosen so that the fsyncs share
//! journal commits. Every file is first written and its write-back started
//! (`sync_file_range(SYNC_FILE_RANGE_WRITE)`, which on ext4 allocates its
//! blocks in the running journal transaction), then all are fsynced at once
//! ([`super::sync::round`]: they wait for the same journal commit and share
//! its device flushes), then each is renamed to its key.
//! Durability does not depend on the order: every file still gets its own
//! `fsync(2)` before its rename, and its directory is queued for the
//! [`super::FsStore`] sync before the root swap, as a single writer's are.

use std::io::{ErrorKind, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use bytes::Bytes;

use crate::digest::Digest;

/// One blob being written: its temporary file, the file and its final path.
struct Pending {
    tmp: PathBuf,
    file: Option<std::fs::File>,
    path: PathBuf,
}

/// Removes the temporary files not renamed yet (on an error).
struct Cleanup(Vec<Pending>);

impl Drop for Cleanup {
    fn drop(&mut self) {
        for p in &self.0 {
            let _ = std::fs::remove_file(&p.tmp);
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

/// Writes each blob of `blobs` that is not present yet below `root` (blob
/// keys from `key`, temporary files in `root/tmp/`), fsyncs and renames
/// them. Returns the directories whose entries changed (each blob's
/// directory and its parent, which holds the directory if it was just
/// created), for the sync before the root swap, and the digests found
/// present and not written ([`crate::store::Blobstore::put_blobs`]).
///
/// Errors: the first I/O error; temporary files are removed, blobs renamed
/// before it stay.
pub(super) fn put_blobs(
    root: &Path,
    key: impl Fn(&Digest) -> String,
    blobs: Vec<(Digest, Bytes)>,
) -> std::io::Result<(Vec<PathBuf>, Vec<Digest>)> {
    let t0 = std::time::Instant::now();
    let mut pending = Cleanup(Vec::with_capacity(blobs.len()));
    let mut present = Vec::new();
    for (digest, bytes) in blobs {
        let path = root.join(key(&digest));
        match std::fs::metadata(&path) {
            Ok(m) if m.is_file() => {
                present.push(digest);
                continue;
            }
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        if pending.0.iter().any(|p| p.path == path) {
            continue;
        }
        let tmp = root.join("tmp").join(uuid::Uuid::new_v4().to_string());
        let mut file = std::fs::File::create_new(&tmp)?;
        pending.0.push(Pending {
            tmp,
            file: None,
            path,
        });
        // Held until renamed: `sweep_tmp` leaves locked files alone.
        file.lock()?;
        file.write_all(&bytes)?;
        start_writeback(&file);
        if let Some(p) = pending.0.last_mut() {
            p.file = Some(file);
        }
    }
    let t1 = std::time::Instant::now();
    let files: Vec<&std::fs::File> = pending.0.iter().filter_map(|p| p.file.as_ref()).collect();
    super::sync::round(&files, &[])?;
    let (t2, written) = (std::time::Instant::now(), pending.0.len());
    let mut dirs: Vec<PathBuf> = Vec::new();
    while let Some(mut p) = pending.0.pop() {
        let parent = p.path.parent().map(Path::to_path_buf).unwrap_or_default();
        std::fs::create_dir_all(&parent)?;
        // A directory another writer has just created lives in the grandparent.
        if let Some(grand) = parent.parent() {
            dirs.push(grand.to_path_buf());
        }
        let renamed = std::fs::rename(&p.tmp, &p.path);
        p.file = None;
        if let Err(e) = renamed {
            pending.0.push(p);
            return Err(e);
        }
        dirs.push(parent);
    }
    dirs.sort();
    dirs.dedup();
    tracing::debug!(
        written,
        files_us = (t1 - t0).as_micros(),
        fsync_us = (t2 - t1).as_micros(),
        rename_us = t2.elapsed().as_micros(),
        "fs: blob batch stored"
    );
    Ok((dirs, present))
}
