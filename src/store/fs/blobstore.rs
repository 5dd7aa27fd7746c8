//! [`Blobstore`](crate::store::Blobstore) for [`FsStore`]: each operation
//! maps a key to a file below the data directory.

use super::*;

#[async_trait::async_trait]
impl crate::store::Blobstore for FsStore {
    async fn stat(&self, key: &str) -> Result<Option<u64>> {
        let path = self.path(key)?;
        // One lstat(2) on a local file system: cheaper inline than a hop to
        // the blocking pool. The store writes only regular files: anything
        // else at a key (a symbolic link, even a looping one, a directory, a
        // FIFO) reads as absent, so it is written anew, never through.
        match std::fs::symlink_metadata(&path) {
            Ok(m) if m.is_file() => Ok(Some(m.len())),
            Ok(_) => Ok(None),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    async fn read(&self, key: &str, range: Option<(u64, u64)>) -> Result<BoxRead> {
        let opened = match self.open_read(key, range).await? {
            Opened::Small { part, .. } => return Ok(Box::pin(std::io::Cursor::new(part))),
            Opened::File(f) => f,
        };
        let verdict = self.verdict_for(&opened);
        let file = opened.file;
        let (start, end) = (opened.start, opened.end);
        if end - start <= INLINE_READ_MAX {
            return Ok(Box::pin(std::io::Cursor::new(read_at(&file, start, end)?)));
        }
        // Large reads stream through tokio's blocking pool.
        let mut file = tokio::fs::File::from_std(file);
        if start > 0 {
            file.seek(SeekFrom::Start(start)).await?;
        }
        let reader = tokio::io::BufReader::with_capacity(256 * 1024, file.take(end - start));
        match verdict {
            Some((digest, check)) => Ok(verify::hashing_reader(Box::pin(reader), digest, check)),
            None => Ok(Box::pin(reader)),
        }
    }

    async fn stream(&self, key: &str, range: Option<(u64, u64)>) -> Result<ByteStream> {
        Ok(self.open_stream(key, range).await?.1)
    }

    async fn stream_sized(&self, key: &str) -> Result<Option<(u64, ByteStream)>> {
        match self.open_stream(key, None).await {
            Ok(sized) => Ok(Some(sized)),
            Err(StoreError::NotFound(_)) => Ok(None),
            Err(e) => Err(e),
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

    fn forgotten(&self) -> u64 {
        self.hot.removals()
    }

    fn forget_verified(&self, key: &str) {
        self.hot.remove(key);
        if let Some(d) = verify::blob_digest(key) {
            self.verified.forget(&d);
        }
    }

    async fn delete(&self, key: &str) -> Result<()> {
        let path = self.path(key)?;
        self.hot.remove(key);
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
        self.hot.remove(from);
        self.hot.remove(to);
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
            crate::store::Blobstore::sync(self).await?;
        }
        Ok(())
    }

    async fn list(&self, prefix: &str) -> Result<Vec<String>> {
        let base = self.path(prefix.trim_end_matches('/'))?;
        let root = self.root.clone();
        blocking(move || {
            let mut out = Vec::new();
            walk_files(&root, base, &mut |rel, _| out.push(rel))?;
            out.sort();
            Ok(out)
        })
        .await
    }

    async fn list_meta(&self, prefix: &str) -> Result<Vec<crate::store::ObjectMeta>> {
        let base = self.path(prefix.trim_end_matches('/'))?;
        let root = self.root.clone();
        blocking(move || {
            let mut out = Vec::new();
            walk_files(&root, base, &mut |key, entry| {
                // Gone since the directory was read: not listed.
                if let Ok(m) = entry.metadata() {
                    out.push(crate::store::ObjectMeta {
                        key,
                        size: m.len(),
                        modified: m.modified().unwrap_or(std::time::SystemTime::UNIX_EPOCH),
                    });
                }
            })?;
            out.sort_by(|a, b| a.key.cmp(&b.key));
            Ok(out)
        })
        .await
    }

    async fn sync(&self) -> Result<()> {
        let _syncing = self.sync_lock.lock().await;
        let dirty = self.take_dirty();
        if dirty.is_empty() {
            return Ok(());
        }
        blocking(move || dirty.sync_with(&[])).await
    }

    async fn put_blobs(&self, blobs: Vec<(Digest, Bytes)>) -> Result<Vec<Digest>> {
        let total: u64 = blobs.iter().map(|(_, b)| b.len() as u64).sum();
        self.check_space(total)?;
        let root = self.root.clone();
        let batch = blocking(move || batch::put_blobs(&root, blob_key, blobs)).await?;
        let mut full = self.mark_unsynced(batch.files);
        for d in batch.dirs {
            full |= self.mark_dirty(d);
        }
        if full {
            crate::store::Blobstore::sync(self).await?;
        }
        Ok(batch.present)
    }

    fn metadata_copies(&self) -> u8 {
        self.copies
    }

    /// One write and rename, as [`Blobstore::put_blobs`], with write-back
    /// started at once but not waited for: the pack is not in the
    /// commit's fsync round (which it would double), so a power cut right
    /// after a commit can lose a copy, never its object; `fsck` writes a
    /// missing or torn copy again ([`crate::store::copies`]).
    async fn put_copy_pack(&self, digest: &Digest, bytes: Bytes) -> Result<()> {
        self.check_space(bytes.len() as u64)?;
        let root = self.root.clone();
        let digest = digest.clone();
        blocking(move || {
            batch::put_blobs(
                &root,
                crate::store::copies::pack::pack_key,
                vec![(digest, bytes)],
            )
        })
        .await?;
        Ok(())
    }

    fn repairs(&self) -> Option<&crate::store::copies::Repairs> {
        Some(&self.repairs)
    }

    fn damage(&self) -> Option<&crate::store::damage::Notes> {
        Some(&self.damage)
    }

    fn root_unchanged(&self, seen: &RootVersion) -> Option<bool> {
        self.root_unchanged_now(seen)
    }

    async fn read_root(&self) -> Result<Option<RootVersion>> {
        self.read_root_now().await
    }

    async fn swap_root(&self, expected: Option<&RootVersion>, value: &str) -> Result<bool> {
        self.swap_root_now(expected, value).await
    }

    async fn read_versioned(&self, key: &str) -> Result<Option<RootVersion>> {
        self.read_versioned_now(key).await
    }

    async fn swap(&self, key: &str, expected: Option<&RootVersion>, value: &str) -> Result<bool> {
        self.swap_now(key, expected, value).await
    }
}
