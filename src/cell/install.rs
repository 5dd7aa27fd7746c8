//! The install directory of one stack on a cell, and its atomic changes.
//!
//! ```text
//! <install-dir>/<stack>/rootfs.tar            what garden's persistent_image_list and
//!                                             rep's preloaded_rootfses name (stable path)
//! <install-dir>/<stack>/rootfs.tar.previous   the one it replaced (for rollback)
//! <install-dir>/<stack>/installed.json        what both are: {"current", "previous"}
//! <install-dir>/<stack>/.rootfs.tar.download  a download in progress (removed on failure)
//! <install-dir>/<stack>/.rootfs.tar.new       the download with trusted certs added
//! <install-dir>/<stack>/.chunks/              verified chunks of a delta download in
//!                                             progress (`super::delta`; resumed after a crash)
//! ```
//!
//! `rootfs.tar` always exists once installed: a new one is renamed over it
//! (after the old one was hard-linked to `rootfs.tar.previous`), a rollback
//! to the previous one swaps the two with `renameat2(RENAME_EXCHANGE)`.
//! Both are fsynced, and so is the directory. `installed.json` is cleared
//! before a change and written after it, so a crash in between costs one
//! download, never a wrong record. Each change sets the new `rootfs.tar`'s
//! modification time to now: garden sees a changed file and builds new
//! containers from it (running containers keep theirs until restarted).

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

use crate::digest::Digest;

/// What one installed rootfs file is.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Installed {
    /// The platform image manifest it was flattened from.
    pub digest: Digest,
    /// sha256 of the rootfs as published (before trusted certs).
    pub rootfs_digest: Digest,
    /// sha256 of the trusted certs file added, if any.
    pub trusted_certs: Option<Digest>,
    /// The promotion id it came with.
    pub promotion: u64,
    /// `repository@digest` promoted.
    pub image: String,
    /// RFC 3339 time of the install.
    pub installed_at: String,
    /// What the install moved (reported to the server while it stays installed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transfer: Option<crate::stacks::cells::Transfer>,
}

impl Installed {
    /// True when this is the rootfs of `digest`/`rootfs_digest` with `certs`.
    pub fn is(&self, digest: &Digest, rootfs_digest: &Digest, certs: Option<&Digest>) -> bool {
        self.digest == *digest
            && self.rootfs_digest == *rootfs_digest
            && self.trusted_certs.as_ref() == certs
    }
}

/// `installed.json`.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct Record {
    /// What `rootfs.tar` is.
    pub current: Option<Installed>,
    /// What `rootfs.tar.previous` is.
    pub previous: Option<Installed>,
}

/// One stack's directory under the install directory.
pub struct StackDir {
    dir: PathBuf,
}

impl StackDir {
    /// `<install_dir>/<stack>`, created when missing.
    pub fn open(install_dir: &Path, stack: &str) -> Result<StackDir> {
        let dir = install_dir.join(stack);
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        Ok(StackDir { dir })
    }

    /// Takes the stack directory for this process (`flock(2)` on
    /// `<dir>/.lock`, held until the returned file is dropped), so that two
    /// `cell sync` runs (a daemon and a manual `--once`) never write the
    /// same temporary files. Errors: another process holds it (named in
    /// the message), or I/O.
    pub fn lock(&self) -> Result<std::fs::File> {
        use std::os::fd::AsRawFd;
        use std::os::unix::fs::OpenOptionsExt;
        let path = self.dir.join(".lock");
        let open = || {
            std::fs::File::options()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
                .open(&path)
        };
        let f = match open() {
            Ok(f) if f.metadata().is_ok_and(|m| m.is_file()) => f,
            // Not a regular file (a symlink, a FIFO, a directory): replaced.
            _ => crate::files::create_new(&path)
                .with_context(|| format!("creating {}", path.display()))?,
        };
        // SAFETY: a valid open descriptor.
        if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
                bail!(
                    "another airlock cell sync is working on {} (it holds {})",
                    self.dir.display(),
                    path.display()
                );
            }
            return Err(e).with_context(|| format!("locking {}", path.display()));
        }
        Ok(f)
    }

    /// Removes what an interrupted download, patch or delta left (the
    /// download, the patch, the rootfs with certs added, the chunk cache):
    /// for a pass that has nothing to download. Returns the paths removed.
    pub fn remove_leftovers(&self) -> Vec<PathBuf> {
        [
            self.download_path(),
            self.patch_path(),
            self.new_path(),
            self.chunk_cache(),
        ]
        .into_iter()
        .filter(|p| crate::files::remove_entry(p).is_ok())
        .collect()
    }

    /// The rootfs files present (`rootfs.tar`, then `rootfs.tar.previous`,
    /// each a regular file or a symlink to one), with what the record says
    /// each is: the seeds of a delta and the bases a patch may apply to.
    pub fn rootfs_files(&self) -> Vec<(PathBuf, Option<Installed>)> {
        let record = self.record();
        [
            (self.rootfs(), record.current),
            (self.previous(), record.previous),
        ]
        .into_iter()
        .filter(|(p, _)| p.is_file())
        .collect()
    }

    /// `<dir>/rootfs.tar`, the stable path.
    pub fn rootfs(&self) -> PathBuf {
        self.dir.join("rootfs.tar")
    }

    /// `<dir>/rootfs.tar.previous`.
    pub fn previous(&self) -> PathBuf {
        self.dir.join("rootfs.tar.previous")
    }

    /// Where a download is written.
    pub fn download_path(&self) -> PathBuf {
        self.dir.join(".rootfs.tar.download")
    }

    /// Where a rootfs patch is downloaded before it is applied.
    pub fn patch_path(&self) -> PathBuf {
        self.dir.join(".rootfs.patch")
    }

    /// The chunk cache of a delta download in progress.
    pub fn chunk_cache(&self) -> PathBuf {
        self.dir.join(".chunks")
    }

    /// Where the download with trusted certs added is written.
    pub fn new_path(&self) -> PathBuf {
        self.dir.join(".rootfs.tar.new")
    }

    fn record_path(&self) -> PathBuf {
        self.dir.join("installed.json")
    }

    /// The record, with entries whose file is missing dropped; empty when
    /// there is none or it does not parse.
    pub fn record(&self) -> Record {
        let mut r: Record = std::fs::read(self.record_path())
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default();
        if !self.rootfs().is_file() {
            r.current = None;
        }
        if !self.previous().is_file() {
            r.previous = None;
        }
        r
    }

    /// Writes the record (temporary file, fsync, rename, fsync of the directory).
    pub fn write_record(&self, r: &Record) -> Result<()> {
        let tmp = self.dir.join(".installed.json.tmp");
        let bytes = serde_json::to_vec_pretty(r)?;
        {
            let mut f = crate::files::create_new(&tmp)
                .with_context(|| format!("creating {}", tmp.display()))?;
            std::io::Write::write_all(&mut f, &bytes)?;
            f.sync_all()?;
        }
        std::fs::rename(&tmp, self.record_path())?;
        self.sync_dir()
    }

    fn sync_dir(&self) -> Result<()> {
        std::fs::File::open(&self.dir)
            .and_then(|d| d.sync_all())
            .with_context(|| format!("syncing {}", self.dir.display()))
    }

    /// Makes the complete, fsynced file `new` (in this directory) the
    /// rootfs described by `what`; the current one becomes the previous.
    pub fn install(&self, new: &Path, what: Installed) -> Result<()> {
        let old = self.record();
        self.write_record(&Record::default())?;
        let rootfs = self.rootfs();
        if rootfs.is_file() {
            let link = self.dir.join(".rootfs.tar.previous.tmp");
            let _ = std::fs::remove_file(&link);
            std::fs::hard_link(&rootfs, &link)
                .with_context(|| format!("linking {}", rootfs.display()))?;
            std::fs::rename(&link, self.previous())?;
        }
        // Damage where the rootfs should be (a directory, a symlink: the
        // cell writes neither) would fail every install: replace it.
        if let Ok(m) = std::fs::symlink_metadata(&rootfs)
            && !m.is_file()
        {
            tracing::warn!(path = %rootfs.display(), "rootfs is not a regular file; replacing it");
            crate::files::remove_entry(&rootfs)
                .with_context(|| format!("removing {}", rootfs.display()))?;
        }
        touch(new)?;
        std::fs::rename(new, &rootfs)
            .with_context(|| format!("renaming {} to {}", new.display(), rootfs.display()))?;
        self.sync_dir()?;
        self.write_record(&Record {
            current: Some(what),
            previous: old.current,
        })
    }

    /// Swaps `rootfs.tar` and `rootfs.tar.previous` (a rollback, or a
    /// roll forward again) in one `renameat2(RENAME_EXCHANGE)`.
    pub fn swap(&self) -> Result<()> {
        let old = self.record();
        if old.current.is_none() || old.previous.is_none() {
            bail!("nothing to swap in {}", self.dir.display());
        }
        self.write_record(&Record::default())?;
        exchange(&self.rootfs(), &self.previous())?;
        touch(&self.rootfs())?;
        self.sync_dir()?;
        self.write_record(&Record {
            current: old.previous,
            previous: old.current,
        })
    }
}

/// Sets `path`'s modification time to now.
fn touch(path: &Path) -> Result<()> {
    std::fs::File::options()
        .write(true)
        .open(path)
        .and_then(|f| f.set_modified(std::time::SystemTime::now()))
        .with_context(|| format!("touching {}", path.display()))
}

/// Atomically exchanges two paths (Linux `renameat2` with `RENAME_EXCHANGE`).
fn exchange(a: &Path, b: &Path) -> Result<()> {
    let ca = CString::new(a.as_os_str().as_bytes())?;
    let cb = CString::new(b.as_os_str().as_bytes())?;
    // SAFETY: both are valid NUL-terminated paths; AT_FDCWD resolves them
    // relative to the working directory as rename(2) would.
    let rc = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            ca.as_ptr(),
            libc::AT_FDCWD,
            cb.as_ptr(),
            libc::RENAME_EXCHANGE,
        )
    };
    if rc != 0 {
        let e = std::io::Error::last_os_error();
        bail!("exchanging {} and {}: {e}", a.display(), b.display());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(n: u8) -> Installed {
        let d: Digest = format!("sha256:{}", hex::encode([n; 32])).parse().unwrap();
        Installed {
            digest: d.clone(),
            rootfs_digest: d,
            trusted_certs: None,
            promotion: n as u64,
            image: format!("stacks/x@{n}"),
            installed_at: String::new(),
            transfer: None,
        }
    }

    #[test]
    fn install_keeps_previous_and_swap_exchanges() {
        let tmp = tempfile::tempdir().unwrap();
        let d = StackDir::open(tmp.path(), "s").unwrap();
        for (n, text) in [(1u8, "one"), (2, "two")] {
            std::fs::write(d.new_path(), text).unwrap();
            d.install(&d.new_path(), meta(n)).unwrap();
        }
        assert_eq!(std::fs::read_to_string(d.rootfs()).unwrap(), "two");
        assert_eq!(std::fs::read_to_string(d.previous()).unwrap(), "one");
        assert_eq!(d.record().current, Some(meta(2)));
        d.swap().unwrap();
        assert_eq!(std::fs::read_to_string(d.rootfs()).unwrap(), "one");
        assert_eq!(std::fs::read_to_string(d.previous()).unwrap(), "two");
        let r = d.record();
        assert_eq!((r.current, r.previous), (Some(meta(1)), Some(meta(2))));
    }

    /// A directory where rootfs.tar should be (damage: the cell never
    /// makes one) is replaced, not a rename error on every pass.
    #[test]
    fn install_replaces_a_directory_in_the_rootfs_place() {
        let tmp = tempfile::tempdir().unwrap();
        let d = StackDir::open(tmp.path(), "s").unwrap();
        std::fs::create_dir_all(d.rootfs().join("x")).unwrap();
        std::fs::write(d.new_path(), "new").unwrap();
        d.install(&d.new_path(), meta(3)).unwrap();
        assert_eq!(std::fs::read_to_string(d.rootfs()).unwrap(), "new");
        assert_eq!(d.record().current, Some(meta(3)));
    }

    /// Two syncs on one stack directory: the second is refused while the
    /// first holds it, and may go once it is done; a FIFO planted at the
    /// lock's path neither hangs nor blocks it.
    #[test]
    fn one_sync_at_a_time_per_stack_directory() {
        let tmp = tempfile::tempdir().unwrap();
        let d = StackDir::open(tmp.path(), "s").unwrap();
        let held = d.lock().unwrap();
        let e = format!("{:#}", d.lock().unwrap_err());
        assert!(e.contains("another airlock cell sync is working on"), "{e}");
        drop(held);
        drop(d.lock().unwrap());
        std::fs::remove_file(tmp.path().join("s/.lock")).unwrap();
        let fifo = std::ffi::CString::new(tmp.path().join("s/.lock").to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        drop(d.lock().unwrap());
        assert!(
            std::fs::metadata(tmp.path().join("s/.lock"))
                .unwrap()
                .is_file()
        );
    }

    /// What an interrupted download left is removed when nothing is to be
    /// downloaded; the installed rootfs stays.
    #[test]
    fn leftovers_are_removed_and_the_rootfs_kept() {
        let tmp = tempfile::tempdir().unwrap();
        let d = StackDir::open(tmp.path(), "s").unwrap();
        std::fs::write(d.new_path(), "one").unwrap();
        d.install(&d.new_path(), meta(1)).unwrap();
        std::fs::write(d.download_path(), "partial").unwrap();
        std::fs::write(d.patch_path(), "patch").unwrap();
        std::fs::create_dir_all(d.chunk_cache().join("ab12")).unwrap();
        let gone = d.remove_leftovers();
        assert_eq!(
            gone,
            vec![d.download_path(), d.patch_path(), d.chunk_cache()]
        );
        assert!(!d.download_path().exists() && !d.chunk_cache().exists());
        assert_eq!(std::fs::read_to_string(d.rootfs()).unwrap(), "one");
    }
}
