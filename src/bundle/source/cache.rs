//! The local content cache of the connected side (`bundle create --cache DIR`).
//!
//! Owns: the cache directory `DIR/blobs/<alg>/<hex>` (blobs and manifests
//! pulled from registries, each verified before it is renamed into place) and
//! `DIR/tmp/` (downloads in progress). Never holds anything unverified under
//! `blobs/`, so a blob found there is never downloaded again; `create` still
//! hashes it while copying it into the tar. Safe to delete at any time.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::digest::Digest;

/// A cache directory.
#[derive(Debug, Clone)]
pub struct Cache {
    root: PathBuf,
}

impl Cache {
    /// Opens (creating) the cache at `root`. Errors: the directories cannot be made.
    pub fn open(root: &Path) -> Result<Cache> {
        for sub in ["blobs", "tmp"] {
            std::fs::create_dir_all(root.join(sub))
                .with_context(|| format!("creating cache {}", root.join(sub).display()))?;
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
