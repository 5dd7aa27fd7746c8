//! Reading objects: small blobs verified whole (and kept in memory,
//! [`super::super::hot`]), large ones streamed through read-only mappings
//! and hashed as they are sent; a corrupt blob is quarantined.

use super::*;

impl FsStore {
    /// Moves the blob `digest` to the quarantine prefix, if its key still
    /// names the file `(dev, ino)` that was found corrupt (a blob written
    /// anew since is left alone). Logged at error.
    pub(super) fn quarantine(&self, digest: &Digest, actual: &Digest, id: FileId) {
        use std::os::unix::fs::MetadataExt;
        let from = self.root.join(super::blob_key(digest));
        let to = self.root.join(verify::quarantine_key(digest));
        let same = std::fs::metadata(&from).is_ok_and(|m| (m.dev(), m.ino()) == (id.0, id.1));
        self.hot.remove(&super::blob_key(digest));
        self.verified.forget(digest);
        if !same {
            return;
        }
        let moved = to
            .parent()
            .map_or(Ok(()), std::fs::create_dir_all)
            .and_then(|()| std::fs::rename(&from, &to));
        match moved {
            Ok(()) => {
                tracing::error!(%digest, %actual, quarantine = %to.display(), "corrupt blob quarantined: its content does not match its digest")
            }
            Err(e) => {
                tracing::error!(%digest, %actual, error = %e, "corrupt blob found; moving it to quarantine failed")
            }
        }
    }

    /// For a blob key: the digest and the file's identity, for verification.
    fn blob_identity(key: &str, meta: &std::fs::Metadata) -> Option<(Digest, FileId)> {
        let digest = verify::blob_digest(key)?;
        Some((digest, file_id(meta)))
    }

    /// Reads the whole small blob `key` (at most [`VERIFY_WHOLE_MAX`]
    /// bytes) and verifies it; a mismatch quarantines it and is
    /// [`StoreError::Corrupt`]. Verified bytes are kept in [`HotBlobs`].
    async fn read_verified(
        &self,
        key: &str,
        file: std::fs::File,
        size: u64,
        digest: Digest,
        id: FileId,
        epoch: u64,
    ) -> Result<Bytes> {
        let bytes = if size <= INLINE_READ_MAX {
            read_at(&file, 0, size)?
        } else {
            blocking(move || read_at(&file, 0, size)).await?
        };
        let actual = digest.same_alg_of(&bytes);
        if actual != digest {
            self.quarantine(&digest, &actual, id);
            return Err(StoreError::Corrupt(
                verify::corrupt_error(&digest, &actual).to_string(),
            ));
        }
        let bytes = Bytes::from(bytes);
        self.hot.insert(key, id, epoch, bytes.clone());
        Ok(bytes)
    }

    /// The verified bytes of the blob `key` from [`HotBlobs`], when its
    /// path was found naming the file they were read from in the current
    /// root epoch, or one `stat(2)` shows that now.
    fn hot_read(&self, key: &str) -> Option<Bytes> {
        let hot = self.hot.get(key)?;
        let epoch = self.epoch.load(Ordering::Acquire);
        if hot.epoch == epoch {
            return Some(hot.bytes);
        }
        match std::fs::metadata(self.root.join(key)) {
            Ok(m) if file_id(&m) == hot.id => {
                self.hot.checked(key, epoch);
                Some(hot.bytes)
            }
            _ => {
                self.hot.remove(key);
                None
            }
        }
    }

    /// What a full hashed read of a large blob ends with: when it matched,
    /// the blob is remembered verified at the identity it was opened with
    /// ([`super::super::verified`]); when not, it is quarantined.
    pub(super) fn on_verdict(&self, digest: Digest, id: FileId, at: Identity) -> verify::OnVerdict {
        let store = self.clone();
        Box::new(move |actual| {
            if actual == &digest {
                store.verified.record(digest, at);
            } else {
                store.quarantine(&digest, actual, id);
            }
        })
    }

    /// Whether the blob `key` is remembered verified at the identity its
    /// file has now (tests: what verify-once decides).
    #[cfg(test)]
    pub(crate) fn verified_now(&self, key: &str) -> bool {
        let (Some(d), Ok(m)) = (
            verify::blob_digest(key),
            std::fs::metadata(self.root.join(key)),
        ) else {
            return false;
        };
        self.verified.is_verified(&d, identity(&m))
    }

    /// Records the blob `key` verified at its file's identity now, whatever
    /// its bytes (tests: bit rot under an unchanged identity).
    #[cfg(test)]
    pub(crate) fn pretend_verified(&self, key: &str) {
        if let (Some(d), Ok(m)) = (
            verify::blob_digest(key),
            std::fs::metadata(self.root.join(key)),
        ) {
            self.verified.record(d, identity(&m));
        }
    }

    /// For a whole read of a large blob: `None` when it was verified at
    /// this identity before (no hashing), else what the hashing reports to.
    pub(super) fn verdict_for(&self, f: &OpenFile) -> Option<(Digest, verify::OnVerdict)> {
        let (digest, id, at) = f.blob.clone()?;
        if (f.start, f.end) != (0, f.size) || self.verified.is_verified(&digest, at) {
            return None;
        }
        let check = self.on_verdict(digest.clone(), id, at);
        Some((digest, check))
    }
}

/// Where a read of bytes `start..end` of an object starts from.
pub(super) enum Opened {
    /// The verified bytes of a small blob (from [`HotBlobs`] or read and
    /// verified now): `part` is the range asked for, `size` the whole blob's.
    Small { size: u64, part: Bytes },
    /// Anything else, opened.
    File(OpenFile),
}

/// An opened object: its size and, for a blob, its digest, file id (for
/// quarantine) and identity (for verify-once); `start..end` is the range
/// to read.
pub(super) struct OpenFile {
    pub(super) file: std::fs::File,
    pub(super) size: u64,
    pub(super) blob: Option<(Digest, FileId, Identity)>,
    pub(super) start: u64,
    pub(super) end: u64,
}

impl FsStore {
    /// Opens bytes `start..end` of `key` (default: all) for reading; a
    /// small blob ([`VERIFY_WHOLE_MAX`]) comes back verified, from memory
    /// when it is held there ([`FsStore::hot_read`]).
    pub(super) async fn open_read(&self, key: &str, range: Option<(u64, u64)>) -> Result<Opened> {
        // Read before the path is: a root change meanwhile leaves the
        // entry to be checked again.
        let epoch = self.epoch.load(Ordering::Acquire);
        // Only keys checked by `open_range` (`check_key`) are ever held.
        if let Some(bytes) = self.hot_read(key) {
            let size = bytes.len() as u64;
            let (start, end) = span(range, size)?;
            let part = bytes.slice(start as usize..end as usize);
            return Ok(Opened::Small { size, part });
        }
        let (file, meta, start, end) = self.open_range(key, range)?;
        let size = meta.len();
        let blob = FsStore::blob_identity(key, &meta);
        if let Some((digest, id)) = blob.clone()
            && size <= VERIFY_WHOLE_MAX
        {
            let bytes = self
                .read_verified(key, file, size, digest, id, epoch)
                .await?;
            let part = bytes.slice(start as usize..end as usize);
            return Ok(Opened::Small { size, part });
        }
        Ok(Opened::File(OpenFile {
            file,
            size,
            blob: blob.map(|(d, id)| (d, id, identity(&meta))),
            start,
            end,
        }))
    }

    /// Bytes `start..end` of `key` (default: all) as a body, and the
    /// object's whole size: for a small blob held in [`HotBlobs`] one
    /// `stat(2)`, else one open and one `fstat(2)` (see
    /// [`crate::store::Blobstore::stream`]).
    pub(super) async fn open_stream(
        &self,
        key: &str,
        range: Option<(u64, u64)>,
    ) -> Result<(u64, ByteStream)> {
        let opened = match self.open_read(key, range).await? {
            Opened::Small { size, part } => {
                return Ok((
                    size,
                    Box::pin(futures_util::stream::once(async { Ok(part) })),
                ));
            }
            Opened::File(f) => f,
        };
        let verdict = self.verdict_for(&opened);
        let (file, size) = (opened.file, opened.size);
        let (start, end) = (opened.start, opened.end);
        if end - start <= INLINE_READ_MAX {
            let chunk = Bytes::from(read_at(&file, start, end)?);
            return Ok((
                size,
                Box::pin(futures_util::stream::once(async { Ok(chunk) })),
            ));
        }
        // The body is sent straight from the page cache through read-only
        // mappings, with no read(2) into user buffers. Each chunk is a mapping of its
        // own, made when the body is polled and unmapped when the chunk is dropped
        // (after it is written to the socket), so only the chunks in flight count in
        // the process's resident set, however large the blob or however many clients.
        // Bytes served as they are on disk (a verified blob, or a range) are
        // registered windows: a plain HTTP/1.1 connection sends them with
        // sendfile(2) and never touches the mapped pages at all.
        // mmap offsets must be page aligned; MMAP_CHUNK is a multiple of the page size.
        let file = std::sync::Arc::new(file);
        let register = verdict.is_none();
        let aligned = start - start % page_size();
        let chunks = (aligned..end).step_by(MMAP_CHUNK).map(move |at| {
            let len = (end - at).min(MMAP_CHUNK as u64) as usize;
            let window = Window::map(&file, at, len, register)?;
            let skip = start.saturating_sub(at) as usize;
            Ok(Bytes::from_owner(window).slice(skip..))
        });
        let stream: ByteStream = Box::pin(futures_util::stream::iter(chunks));
        // A whole large blob is hashed as it is sent, until it was once
        // (verify once per file identity); ranges are not verified.
        match verdict {
            Some((digest, check)) => {
                Ok((size, verify::hashing_stream(stream, digest, size, check)))
            }
            None => Ok((size, stream)),
        }
    }
}
