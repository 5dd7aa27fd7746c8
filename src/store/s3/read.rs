//! Reads: ranged `GetObject` streamed, blobs verified against their digest
//! (small ones whole, then kept in memory; large ones hashed as they are
//! sent), a corrupt blob quarantined, presigned `GET` URLs.

use std::time::Duration;

use aws_sdk_s3::primitives::ByteStream as S3Body;
use bytes::Bytes;
use futures_util::StreamExt;

use super::error::{body_error, cause, error, status};
use super::{NO_FILE, S3Store, copy_source};
use crate::store::verify::{self, VERIFY_WHOLE_MAX};
use crate::store::{Blobstore, ByteStream, Result, StoreError};

impl S3Store {
    /// [`Blobstore::stream`]: bytes `start..end` of `key`, or all of it;
    /// a blob verified as the module docs say.
    pub(super) async fn stream_key(
        &self,
        key: &str,
        range: Option<(u64, u64)>,
    ) -> Result<ByteStream> {
        let full = self.full(key)?;
        if let Some(bytes) = self.hot.get(&full).map(|h| h.bytes) {
            let size = bytes.len() as u64;
            let (start, end) = range.unwrap_or((0, size));
            if start > end || end > size {
                return Err(StoreError::Range { start, end, size });
            }
            let part = bytes.slice(start as usize..end as usize);
            return Ok(Box::pin(futures_util::stream::once(async { Ok(part) })));
        }
        let (body, size, etag) = self.get(key, range).await?;
        let Some(digest) = verify::blob_digest(key) else {
            return Ok(body_stream(body, key, self.timeouts.idle));
        };
        if size <= VERIFY_WHOLE_MAX {
            // Small blobs (every manifest and document) are verified whole first.
            let (bytes, etag) = match range {
                None => (collect(body, key, self.timeouts.idle).await?, etag),
                Some(_) => {
                    drop(body);
                    let (body, _, etag) = self.get(key, None).await?;
                    (collect(body, key, self.timeouts.idle).await?, etag)
                }
            };
            self.verify_whole(&digest, &bytes, &etag).await?;
            // S3 objects have no file identity or root epoch: held until evicted
            // or deleted through this store.
            self.hot.insert(&full, NO_FILE, 0, bytes.clone());
            let (start, end) = range.unwrap_or((0, bytes.len() as u64));
            let part = bytes.slice(start as usize..end as usize);
            return Ok(Box::pin(futures_util::stream::once(async { Ok(part) })));
        }
        let at = super::super::verified::Identity::of((&etag, size));
        if range.is_none() && !self.verified.is_verified(&digest, at) {
            // A whole large blob is hashed as it is sent, until it was once
            // at this ETag (verify once); ranges are not verified.
            let check = self.on_verdict(digest.clone(), etag, at);
            return Ok(verify::hashing_stream(
                body_stream(body, key, self.timeouts.idle),
                digest,
                size,
                check,
            ));
        }
        Ok(body_stream(body, key, self.timeouts.idle))
    }

    /// `GetObject` of `key` (bytes `start..end` when given): the body and
    /// the object's size and ETag. Errors: `NotFound`, `Range`.
    pub(super) async fn get(
        &self,
        key: &str,
        range: Option<(u64, u64)>,
    ) -> Result<(S3Body, u64, String)> {
        let full = self.full(key)?;
        let mut req = self.client.get_object().bucket(&self.bucket).key(&full);
        if let Some((start, end)) = range {
            if start > end {
                let size = self
                    .stat(key)
                    .await?
                    .ok_or(StoreError::NotFound(key.into()))?;
                return Err(StoreError::Range { start, end, size });
            }
            if start == end {
                // An empty range has no `Range` header form: check it against the size.
                let size = self
                    .stat(key)
                    .await?
                    .ok_or(StoreError::NotFound(key.into()))?;
                if end > size {
                    return Err(StoreError::Range { start, end, size });
                }
                return Ok((S3Body::from_static(b""), size, String::new()));
            }
            req = req.range(format!("bytes={start}-{}", end - 1));
        }
        let out = match req.send().await {
            Ok(out) => out,
            Err(e) if status(&e) == Some(416) => {
                let size = self
                    .stat(key)
                    .await?
                    .ok_or(StoreError::NotFound(key.into()))?;
                let (start, end) = range.unwrap_or((0, size));
                return Err(StoreError::Range { start, end, size });
            }
            Err(e) => return Err(error("GetObject", key, e)),
        };
        let etag = out.e_tag().unwrap_or_default().to_string();
        let len = out.content_length().unwrap_or(0).max(0) as u64;
        let size = match (range, out.content_range()) {
            (Some(_), Some(cr)) => cr
                .rsplit('/')
                .next()
                .and_then(|s| s.parse().ok())
                .unwrap_or(len),
            _ => len,
        };
        if let Some((start, end)) = range
            && (end > size || end - start != len)
        {
            return Err(StoreError::Range { start, end, size });
        }
        Ok((out.body, size, etag))
    }

    /// Moves the blob `digest` (found corrupt) to the quarantine prefix,
    /// if the object is still the one read (its ETag). Logged at error.
    async fn quarantine(
        &self,
        digest: &crate::digest::Digest,
        actual: &crate::digest::Digest,
        etag: &str,
    ) {
        let (Ok(from), Ok(to)) = (
            self.full(&crate::store::blob_key(digest)),
            self.full(&verify::quarantine_key(digest)),
        ) else {
            return;
        };
        let copied = self
            .client
            .copy_object()
            .bucket(&self.bucket)
            .key(&to)
            .copy_source(copy_source(&self.bucket, &from))
            .copy_source_if_match(etag)
            .send()
            .await;
        match copied {
            Ok(_) => {
                let _ = self.delete_full(&from).await;
                tracing::error!(%digest, %actual, quarantine = %to, "corrupt blob quarantined: its content does not match its digest");
            }
            Err(e) => {
                tracing::error!(%digest, %actual, error = %cause(&e), "corrupt blob found; moving it to quarantine failed")
            }
        }
    }

    /// What a full hashed read of a large blob ends with: remembered
    /// verified at `at` (its ETag and size) when it matched, quarantined
    /// when not.
    fn on_verdict(
        &self,
        digest: crate::digest::Digest,
        etag: String,
        at: super::super::verified::Identity,
    ) -> verify::OnVerdict {
        let store = self.clone();
        Box::new(move |actual| {
            if actual == &digest {
                store.verified.record(digest, at);
                return;
            }
            store.verified.forget(&digest);
            let actual = actual.clone();
            tokio::spawn(async move { store.quarantine(&digest, &actual, &etag).await });
        })
    }

    /// Checks the whole `bytes` of the blob `digest` (read with `etag`); a
    /// mismatch quarantines it and is [`StoreError::Corrupt`].
    async fn verify_whole(
        &self,
        digest: &crate::digest::Digest,
        bytes: &[u8],
        etag: &str,
    ) -> Result<()> {
        let actual = digest.same_alg_of(bytes);
        if &actual != digest {
            self.quarantine(digest, &actual, etag).await;
            return Err(StoreError::Corrupt(
                verify::corrupt_error(digest, &actual).to_string(),
            ));
        }
        Ok(())
    }

    /// A presigned `GET` URL for `key`, valid for `expires` (redirect mode).
    ///
    /// Errors: the key is invalid or the URL cannot be signed.
    pub async fn presign_get(&self, key: &str, expires: Duration) -> Result<String> {
        let full = self.full(key)?;
        let config = aws_sdk_s3::presigning::PresigningConfig::expires_in(expires)
            .map_err(|e| std::io::Error::other(format!("presigning {key}: {e}")))?;
        let req = self
            .client
            .get_object()
            .bucket(&self.bucket)
            .key(&full)
            .presigned(config)
            .await
            .map_err(|e| error("presign GetObject", key, e))?;
        Ok(req.uri().to_string())
    }
}

/// A whole (small) S3 body in memory, read within `idle` (the store's
/// idle deadline: [`super::S3Timeouts::idle`]).
///
/// Errors: the body failed, or did not arrive within `idle`
/// ([`StoreError::Unavailable`]).
pub(super) async fn collect(body: S3Body, key: &str, idle: Duration) -> Result<Bytes> {
    match tokio::time::timeout(idle, body.collect()).await {
        Ok(got) => Ok(got.map_err(|e| body_error(key, e))?.into_bytes()),
        Err(_) => Err(stalled(key, idle)),
    }
}

/// The error of a body the store stopped sending for `idle`.
fn stalled(key: &str, idle: Duration) -> StoreError {
    StoreError::Unavailable(format!(
        "S3 GetObject {key}: no byte of the body for {} s",
        idle.as_secs_f64()
    ))
}

/// An S3 body as a stream of chunks; a wait of more than `idle` for the
/// next chunk fails the stream (a download cut, never completed short).
/// The deadline runs only while the stream is polled: a client that does
/// not read holds the body back without it counting.
fn body_stream(body: S3Body, key: &str, idle: Duration) -> ByteStream {
    let key = key.to_string();
    Box::pin(futures_util::stream::unfold(
        Some((body, key)),
        move |st| async move {
            let (mut body, key) = st?;
            match tokio::time::timeout(idle, body.next()).await {
                Ok(None) => None,
                Ok(Some(Ok(b))) => Some((Ok(b), Some((body, key)))),
                Ok(Some(Err(e))) => {
                    let err = body_error(&key, e);
                    Some((Err(err), Some((body, key))))
                }
                // Stalled: one error, then the stream ends.
                Err(_) => Some((Err(std::io::Error::other(stalled(&key, idle))), None)),
            }
        },
    ))
    .filter(|c| futures_util::future::ready(!matches!(c, Ok(b) if b.is_empty())))
    .boxed()
}
