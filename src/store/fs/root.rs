//! `refs/root`: reading it (one `stat(2)` while unchanged) and the
//! compare-and-swap (an exclusive `flock` on `refs/root.lock`, write the
//! new root and its copy `refs/root.copy` ([`crate::store::refs`]), fsync
//! both in one round with the directories waiting for sync, rename both,
//! fsync `refs/`); the same compare-and-swap for any small object (a
//! lease), without the cache.

use super::*;

/// How soon a server on the filesystem notices a root another process
/// replaced, by default (`[store] root_refresh_ms`): 1 ms. A reader uses
/// the snapshot it confirmed less than this long ago without a `stat(2)`;
/// a process that replaced the root waits out the same interval before it
/// exits ([`settle`]), so what a CLI command committed is served to every
/// request sent after it returned.
pub const DEFAULT_ROOT_REFRESH: std::time::Duration = std::time::Duration::from_millis(1);

/// When this process last replaced `refs/root` (after the rename).
static LAST_SWAP: std::sync::Mutex<Option<std::time::Instant>> = std::sync::Mutex::new(None);

/// Blocks until [`DEFAULT_ROOT_REFRESH`] has passed since this process last
/// replaced `refs/root` (at once when it never did): a server on the same
/// host with the default interval then sees the new root on its next
/// request (every reader's last check is older than the interval, or read
/// the new root). Called by the CLI before it exits.
pub fn settle() {
    let last = LAST_SWAP.lock().ok().and_then(|t| *t);
    if let Some(left) = last.and_then(|t| DEFAULT_ROOT_REFRESH.checked_sub(t.elapsed())) {
        std::thread::sleep(left);
    }
}

/// The last `refs/root` read, with the file it was read from held open.
/// Holding it open keeps its inode from being freed and reused, so "the
/// path still names the same inode" is an exact test that the root did not
/// change (it is only ever replaced by rename, never written in place):
/// one `stat(2)` per read instead of open, read and close.
pub(super) struct CachedRoot {
    pub(super) _file: std::fs::File,
    pub(super) dev: u64,
    pub(super) ino: u64,
    pub(super) root: RootVersion,
}

impl FsStore {
    pub(super) fn root_unchanged_now(&self, seen: &RootVersion) -> Option<bool> {
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

    pub(super) async fn read_root_now(&self) -> Result<Option<RootVersion>> {
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
        // paths again ([`crate::store::hot`]).
        self.epoch.fetch_add(1, Ordering::AcqRel);
        Ok(Some(root))
    }

    pub(super) async fn swap_root_now(
        &self,
        expected: Option<&RootVersion>,
        value: &str,
    ) -> Result<bool> {
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
                dirty.sync_with(&[])?;
                return Ok(false);
            }
            let t0 = std::time::Instant::now();
            let tmp = dir.join("root.tmp");
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(value.as_bytes())?;
            f.write_all(b"\n")?;
            let copy_tmp = dir.join("root.copy.tmp");
            let mut copy = std::fs::File::create(&copy_tmp)?;
            copy.write_all(value.as_bytes())?;
            copy.write_all(b"\n")?;
            // The new root's file and its copy, the directories of what was
            // written since the last sync and the batch-written files in
            // one round: all durable before the renames.
            dirty.sync_with(&[&f, &copy])?;
            let t1 = std::time::Instant::now();
            std::fs::rename(&tmp, dir.join("root"))?;
            // The copy follows in the same directory sync (a crash between
            // the two renames leaves it one generation behind: a hint).
            std::fs::rename(&copy_tmp, dir.join("root.copy"))?;
            if let Ok(mut t) = LAST_SWAP.lock() {
                *t = Some(std::time::Instant::now());
            }
            sync::dir(&dir)?;
            crate::failpoint::fs_write_done();
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

    pub(super) async fn read_versioned_now(&self, key: &str) -> Result<Option<RootVersion>> {
        let path = self.path(key)?;
        blocking(move || {
            Ok(read_trimmed(&path)?.map(|value| RootVersion {
                version: value.clone(),
                value,
            }))
        })
        .await
    }

    pub(super) async fn swap_now(
        &self,
        key: &str,
        expected: Option<&RootVersion>,
        value: &str,
    ) -> Result<bool> {
        let path = self.path(key)?;
        let expected = expected.map(|v| v.version.clone());
        let value = value.to_string();
        blocking(move || {
            let dir = path.parent().expect("a key has a parent").to_path_buf();
            std::fs::create_dir_all(&dir)?;
            let mut lock_name = path.file_name().expect("a key names a file").to_owned();
            lock_name.push(".lock");
            let lock = std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(dir.join(lock_name))?;
            lock.lock()?;
            if read_trimmed(&path)? != expected {
                return Ok(false);
            }
            let mut tmp_name = path.file_name().expect("a key names a file").to_owned();
            tmp_name.push(".tmp");
            let tmp = dir.join(tmp_name);
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(value.as_bytes())?;
            f.write_all(b"\n")?;
            f.sync_all()?;
            std::fs::rename(&tmp, &path)?;
            sync::dir(&dir)?;
            crate::failpoint::fs_write_done();
            Ok(true)
        })
        .await
    }
}

/// The trimmed text of the file at `path`, `None` when absent.
fn read_trimmed(path: &Path) -> std::io::Result<Option<String>> {
    match std::fs::read_to_string(path) {
        Ok(s) => Ok(Some(s.trim().to_string())),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}
