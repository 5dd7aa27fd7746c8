//! The local content cache of the connected side (`bundle create --cache DIR`).
//!
//! Owns: the cache directory `DIR/blobs/<alg>/<hex>` (blobs and manifests
//! pulled from registries, each verified before it is renamed into place) and
//! `DIR/tmp/` (downloads in progress). Never holds anything unverified under
//! `blobs/`, so a blob found there is never downloaded again; `create` still
//! hashes it while copying it into the tar. Safe to delete at any time.
//! A `tmp/*.part` file untouched for [`STALE_PART`] is left over from a run
//! that died (a download writes its file as it goes, so a live one is
//! fresh): opening the cache removes it.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use anyhow::{Context, Result};

use crate::digest::Digest;

/// How long a `tmp/*.part` file may go unmodified before opening the cache
/// removes it (one hour).
pub const STALE_PART: Duration = Duration::from_secs(3600);

/// A cache directory.
#[derive(Debug, Clone)]
pub struct Cache {
    root: PathBuf,
}

impl Cache {
    /// Opens (creating) the cache at `root` and removes stale downloads
    /// (`tmp/*.part` older than [`STALE_PART`]). Errors: the directories
    /// cannot be made (a file that cannot be swept is only logged).
    pub fn open(root: &Path) -> Result<Cache> {
        for sub in ["blobs", "tmp"] {
            std::fs::create_dir_all(root.join(sub))
                .with_context(|| format!("creating cache {}", root.join(sub).display()))?;
        }
        let swept = sweep_parts(&root.join("tmp"), STALE_PART);
        if swept > 0 {
            tracing::info!(cache = %root.display(), files = swept, "removed stale partial downloads");
        }
        Ok(Cache {
            root: root.to_path_buf(),
        })
    }

    /// Where blob `d` lives once verified.
    pub fn blob_path(&self, d: &Digest) -> PathBuf {
        self.root
            .join("blobs")
            .join(d.algorithm().name())
            .join(d.hex())
    }

    /// True when `d` is cached with `size` bytes.
    pub fn has(&self, d: &Digest, size: u64) -> bool {
        std::fs::metadata(self.blob_path(d)).is_ok_and(|m| m.is_file() && m.len() == size)
    }

    /// A fresh temporary path for a download of `d`.
    pub fn tmp_path(&self, d: &Digest) -> PathBuf {
        self.root.join("tmp").join(format!(
            "{}.{}.part",
            d.hex(),
            uuid::Uuid::new_v4().simple()
        ))
    }

    /// Moves a verified, fsynced `tmp` file to `d`'s place.
    pub fn commit(&self, tmp: &Path, d: &Digest) -> Result<PathBuf> {
        let dest = self.blob_path(d);
        if let Some(parent) = dest.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("creating {}", parent.display()))?;
        }
        std::fs::rename(tmp, &dest)
            .with_context(|| format!("moving {} into the cache", tmp.display()))?;
        Ok(dest)
    }

    /// Stores small verified bytes (a manifest) under `d`.
    pub fn put_small(&self, d: &Digest, bytes: &[u8]) -> Result<PathBuf> {
        if self.has(d, bytes.len() as u64) {
            return Ok(self.blob_path(d));
        }
        let tmp = self.tmp_path(d);
        std::fs::write(&tmp, bytes).with_context(|| format!("writing {}", tmp.display()))?;
        self.commit(&tmp, d)
    }
}

/// Removes the `*.part` files directly in `tmp` last modified more than
/// `older_than` ago; returns how many were removed.
fn sweep_parts(tmp: &Path, older_than: Duration) -> usize {
    let Ok(entries) = std::fs::read_dir(tmp) else {
        return 0;
    };
    let now = SystemTime::now();
    let mut removed = 0;
    for e in entries.flatten() {
        let path = e.path();
        let stale = e.metadata().is_ok_and(|m| {
            m.is_file()
                && m.modified()
                    .is_ok_and(|t| now.duration_since(t).is_ok_and(|age| age > older_than))
        });
        if !stale || path.extension().is_none_or(|x| x != "part") {
            continue;
        }
        match std::fs::remove_file(&path) {
            Ok(()) => removed += 1,
            Err(e) => {
                tracing::warn!(file = %path.display(), error = %e, "cannot remove a stale partial download")
            }
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opening_sweeps_stale_part_files_only() {
        let dir = tempfile::tempdir().unwrap();
        let tmp = dir.path().join("tmp");
        std::fs::create_dir_all(&tmp).unwrap();
        let file = |name: &str, age: Duration| {
            let p = tmp.join(name);
            std::fs::write(&p, b"partial").unwrap();
            let f = std::fs::File::options().write(true).open(&p).unwrap();
            f.set_modified(SystemTime::now() - age).unwrap();
            p
        };
        let old = file("aa.1.part", STALE_PART + Duration::from_secs(60));
        let fresh = file("bb.2.part", Duration::from_secs(60));
        let other = file("notes.txt", STALE_PART * 3);
        let cache = Cache::open(dir.path()).unwrap();
        assert!(!old.exists(), "a stale .part file is removed");
        assert!(fresh.exists(), "a download in progress is kept");
        assert!(other.exists(), "only .part files are swept");
        // The cache still works after the sweep.
        let d = Digest::sha256_of(b"m");
        cache.put_small(&d, b"m").unwrap();
        assert!(cache.has(&d, 1));
    }
}
