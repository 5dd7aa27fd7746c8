//! Patched downloads: a new rootfs from the installed one and the zstd
//! patch the server made at promotion ([`crate::chunks::patch`]).
//!
//! Owns: the decision (the assignment lists a patch and the cell holds
//! its base as published: `rootfs.tar` or `rootfs.tar.previous` whose
//! record names the patch's `from` digest, installed without added CA
//! certificates, of `from_size` bytes), the patch download
//! (`<install-dir>/<stack>/.rootfs.patch`, verified by its digest, with the
//! cell's download lease) and applying it into the download path:
//! allocated first (`posix_fallocate`, so a full disk is an error, not a
//! fault in a mapping), then mapped, so memory stays the decoder's
//! whatever the rootfs size. The output must match the published sha256.
//! Any failure is [`Patched::Skipped`]: the caller goes on to chunks
//! ([`super::delta`]), then to the whole rootfs. A patch is a shortcut,
//! never the only way.

use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use anyhow::{Context, Result, bail};

use super::client::{Assignment, PatchInfo, StacksClient};
use super::install::StackDir;
use crate::digest::Digest;

/// What applying a patch did.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PatchStats {
    /// Bytes downloaded: the patch.
    pub bytes: u64,
    /// Seconds downloading it.
    pub fetch_seconds: f64,
    /// Seconds applying it and checking the rootfs.
    pub apply_seconds: f64,
}

/// What [`try_patch`] did.
#[derive(Debug)]
pub enum Patched {
    /// The rootfs is at the download path, sha256 checked.
    Applied(PatchStats),
    /// No patch applied (the reason, for the log; the bytes the attempt
    /// moved).
    Skipped(String, u64),
}

/// The installed rootfs file the patch `p` applies to, if the cell has it.
fn base(dir: &StackDir, p: &PatchInfo) -> Option<PathBuf> {
    dir.rootfs_files()
        .into_iter()
        .find(|(path, installed)| {
            installed
                .as_ref()
                .is_some_and(|i| i.rootfs_digest == p.from && i.trusted_certs.is_none())
                && std::fs::metadata(path).is_ok_and(|m| m.len() == p.from_size)
        })
        .map(|(path, _)| path)
}

/// Tries to make the rootfs `a` names at `dir`'s download path from the
/// installed rootfs and the patch the assignment lists (see the module
/// docs). Never fails: anything that goes wrong is [`Patched::Skipped`].
pub async fn try_patch(
    client: &StacksClient,
    stack: &str,
    cell: &str,
    dir: &StackDir,
    a: &Assignment,
    progress: &indicatif::ProgressBar,
) -> Patched {
    let Some(p) = &a.rootfs_patch else {
        return Patched::Skipped("the server has no patch for this rootfs".into(), 0);
    };
    let Some(base) = base(dir, p) else {
        let why = format!(
            "the cell does not hold the patch's base {} as published",
            p.from
        );
        return Patched::Skipped(why, 0);
    };
    if p.size >= a.rootfs_size {
        return Patched::Skipped("the patch is not smaller than the rootfs".into(), 0);
    }
    let file = dir.patch_path();
    let url = super::client::with_cell(&p.url, cell);
    let received = AtomicU64::new(0);
    let started = Instant::now();
    let fetched = client
        .download_file(&url, &p.digest, p.size, &file, progress, Some(&received))
        .await;
    let moved = received.load(Ordering::Relaxed);
    if let Err(e) = fetched {
        let _ = std::fs::remove_file(&file);
        return Patched::Skipped(format!("patch download: {e:#}"), moved);
    }
    let fetch_seconds = started.elapsed().as_secs_f64();
    let out = dir.download_path();
    let (pf, o, size, expected) = (
        file.clone(),
        out.clone(),
        a.rootfs_size,
        a.rootfs_digest.clone(),
    );
    let started = Instant::now();
    let applied = tokio::task::spawn_blocking(move || apply_file(&base, &pf, &o, size, &expected))
        .await
        .context("patch worker")
        .and_then(|r| r);
    let _ = std::fs::remove_file(&file);
    if let Err(e) = applied {
        let _ = std::fs::remove_file(&out);
        tracing::warn!(stack, error = format!("{e:#}"), "rootfs patch refused");
        return Patched::Skipped(format!("patch refused: {e:#}"), moved);
    }
    Patched::Applied(PatchStats {
        bytes: moved,
        fetch_seconds,
        apply_seconds: started.elapsed().as_secs_f64(),
    })
}

/// Applies the patch file `patch` to `base`, writing `size` bytes to `out`
/// (allocated, then mapped), and checks them against `expected` (sha256)
/// while they are written back, before the fsync. Errors: the files, a full disk, the patch
/// ([`crate::chunks::patch::apply`]), a sha256 mismatch.
pub fn apply_file(
    base: &Path,
    patch: &Path,
    out: &Path,
    size: u64,
    expected: &Digest,
) -> Result<()> {
    if size == 0 {
        bail!("a rootfs of 0 bytes");
    }
    let map = |path: &Path| -> Result<memmap2::Mmap> {
        let f = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
        // SAFETY: the cell's own files: installed rootfs tars are replaced
        // only by rename, the patch was written and checked by this pass.
        unsafe { memmap2::Mmap::map(&f) }.with_context(|| format!("mapping {}", path.display()))
    };
    let (from, patch) = (map(base)?, map(patch)?);
    let f = crate::files::create_new(out).with_context(|| format!("creating {}", out.display()))?;
    allocate(&f, size).with_context(|| format!("allocating {size} bytes for {}", out.display()))?;
    // SAFETY: a file this pass created and allocated in full; nothing else
    // writes it.
    let mut output = unsafe { memmap2::MmapMut::map_mut(&f) }
        .with_context(|| format!("mapping {}", out.display()))?;
    crate::chunks::patch::apply(&from, &patch, &mut output)?;
    // Start writing the pages back now, so that the disk works while the
    // sha256 is computed (the fsync below then waits for little; about
    // 60 ms less for 150 MB here). Advisory: an error shows at the fsync.
    // SAFETY: a valid open descriptor; no memory is passed.
    unsafe {
        libc::sync_file_range(f.as_raw_fd(), 0, 0, libc::SYNC_FILE_RANGE_WRITE);
    }
    let got = Digest::sha256_of(&output);
    if got != *expected {
        bail!("patched rootfs is {got}, expected {expected}");
    }
    output.flush()?;
    drop(output);
    f.sync_all()?;
    Ok(())
}

/// Gives `f` `size` bytes of real blocks (`posix_fallocate`), so that
/// writing through a mapping cannot hit a full disk; a file system that
/// cannot allocate ahead gets a plain `ftruncate`.
fn allocate(f: &std::fs::File, size: u64) -> std::io::Result<()> {
    let len = libc::off_t::try_from(size).map_err(std::io::Error::other)?;
    // SAFETY: a valid open descriptor; posix_fallocate reads no memory.
    match unsafe { libc::posix_fallocate(f.as_raw_fd(), 0, len) } {
        0 => Ok(()),
        libc::EOPNOTSUPP | libc::EINVAL => f.set_len(size),
        e => Err(std::io::Error::from_raw_os_error(e)),
    }
}
