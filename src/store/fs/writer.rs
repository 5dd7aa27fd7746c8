//! Writing one object: a file under `tmp/`, fsynced and renamed (or
//! hard-linked, for create-only commits) into place.

use super::*;

pub(super) struct FsWriter {
    pub(super) file: Option<std::fs::File>,
    pub(super) tmp: PathBuf,
    pub(super) final_path: PathBuf,
    pub(super) store: FsStore,
}

impl FsWriter {
    fn take_file(&mut self) -> Result<std::fs::File> {
        self.file
            .take()
            .ok_or_else(|| StoreError::Io(std::io::Error::other("writer already finished")))
    }

    /// Makes the written file the object at its key: fsync, then
    /// `rename(2)`, or with `exclusive` `link(2)`, which leaves an existing
    /// object alone (returns `false`). Scratch objects (upload chunks) are
    /// never made reachable by a root swap: their directories are synced
    /// here; others are queued for the sync before the root swap.
    async fn publish(mut self: Box<Self>, exclusive: bool) -> Result<bool> {
        let file = self.take_file()?;
        let tmp = std::mem::take(&mut self.tmp);
        let final_path = self.final_path.clone();
        let scratch = self.store.is_scratch(&final_path);
        let (created, parent) = blocking(move || {
            file.sync_all()?;
            drop(file);
            let parent = final_path
                .parent()
                .map(Path::to_path_buf)
                .unwrap_or_default();
            std::fs::create_dir_all(&parent)?;
            if exclusive {
                let linked = std::fs::hard_link(&tmp, &final_path);
                let _ = std::fs::remove_file(&tmp);
                match linked {
                    Ok(()) => {}
                    Err(e) if e.kind() == ErrorKind::AlreadyExists => return Ok((false, parent)),
                    Err(e) => return Err(e),
                }
            } else {
                std::fs::rename(&tmp, &final_path)?;
            }
            crate::failpoint::fs_write_done();
            if scratch {
                let dirs: Vec<PathBuf> = std::iter::once(parent.clone())
                    .chain(parent.parent().map(Path::to_path_buf))
                    .collect();
                fsync_dirs(&dirs)?;
            }
            Ok((true, parent))
        })
        .await?;
        if !created || scratch {
            return Ok(created);
        }
        // The new name lives in `parent`; a directory created for it lives in the grandparent.
        let mut full = false;
        if let Some(grand) = parent.parent() {
            full |= self.store.mark_dirty(grand.to_path_buf());
        }
        full |= self.store.mark_dirty(parent);
        if full {
            crate::store::Blobstore::sync(&self.store).await?;
        }
        Ok(true)
    }
}

#[async_trait::async_trait]
impl ObjectWriter for FsWriter {
    async fn write(&mut self, chunk: Bytes) -> Result<()> {
        self.store.check_space(chunk.len() as u64)?;
        let mut file = self.take_file()?;
        let file = blocking(move || file.write_all(&chunk).map(|()| file)).await?;
        self.file = Some(file);
        Ok(())
    }

    async fn commit(self: Box<Self>) -> Result<()> {
        self.publish(false).await.map(drop)
    }

    /// `link(2)` instead of `rename(2)`: fails with `EEXIST` when the key
    /// exists, so of two writers exactly one publishes (upload chunks).
    async fn commit_new(self: Box<Self>) -> Result<bool> {
        self.publish(true).await
    }

    async fn cancel(mut self: Box<Self>) -> Result<()> {
        self.file = None;
        let tmp = std::mem::take(&mut self.tmp);
        blocking(move || match std::fs::remove_file(&tmp) {
            Err(e) if e.kind() != ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        })
        .await
    }
}

impl Drop for FsWriter {
    fn drop(&mut self) {
        if !self.tmp.as_os_str().is_empty() {
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}
