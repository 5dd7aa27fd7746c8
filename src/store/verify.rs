//! Verified reads: a blob's bytes are checked against the digest in its key
//! whenever they are read, so a flipped bit on disk is never served.
//!
//! Owns: which keys are verified (`blobs/<alg>/<2 hex>/<hex>`), the size
//! threshold below which a blob is verified whole before its first byte is
//! handed out ([`VERIFY_WHOLE_MAX`], which covers every manifest and
//! metadata document), the hashing stream and reader for larger blobs (a
//! mismatch turns the last chunk into an error, so a client sees a broken
//! transfer, never a complete wrong body), and the quarantine prefix
//! (`quarantine/<alg>/<2 hex>/<hex>`) where a corrupt blob is moved so it is
//! never served again (a later import or push of the same digest writes it
//! anew). Backends call these from their read paths.

use std::pin::Pin;
use std::task::{Context, Poll};

use futures_util::StreamExt;
use tokio::io::{AsyncRead, ReadBuf};

use super::{BoxRead, ByteStream};
use crate::digest::{Digest, Hasher};

/// Blobs of at most this many bytes (4 MiB: every manifest, see
/// [`crate::oci::MAX_MANIFEST_SIZE`], and metadata document) are verified
/// whole before any byte is returned, by every read (whole or ranged) and by
/// [`super::check`] (HEAD). Larger blobs are hashed while read in full;
/// ranged reads of them are not verified.
pub const VERIFY_WHOLE_MAX: u64 = 4 << 20;

/// Prefix of quarantined blobs.
pub const QUARANTINE_PREFIX: &str = "quarantine/";

/// The digest a blob key names (`blobs/<alg>/<2 hex>/<hex>`), `None` for
/// any other key.
pub fn blob_digest(key: &str) -> Option<Digest> {
    let rest = key.strip_prefix("blobs/")?;
    let mut parts = rest.split('/');
    let (alg, fan, hex) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || !hex.starts_with(fan) || fan.len() != 2 {
        return None;
    }
    format!("{alg}:{hex}").parse().ok()
}

/// Where a corrupt blob is kept: `quarantine/<alg>/<2 hex>/<hex>`.
pub fn quarantine_key(digest: &Digest) -> String {
    let hex = digest.hex();
    format!(
        "{QUARANTINE_PREFIX}{}/{}/{}",
        digest.algorithm().name(),
        &hex[..2],
        hex
    )
}

/// Makes sure the corrupt blob `digest` is in `quarantine/` (the verified
/// read may have moved it already; on S3 it does so in the background, and
/// a CLI run must not exit before that move is done):
/// `true` when it is there and gone from `blobs/`, `false` when neither
/// holds it (removed meanwhile). Errors: the store failed.
pub async fn settle_quarantine(
    store: &dyn super::Blobstore,
    digest: &Digest,
) -> super::Result<bool> {
    let (from, to) = (super::blob_key(digest), quarantine_key(digest));
    for _ in 0..50 {
        if store.stat(&to).await?.is_some() && store.stat(&from).await?.is_none() {
            return Ok(true);
        }
        match store.rename(&from, &to).await {
            Ok(()) => return Ok(true),
            Err(super::StoreError::NotFound(_)) => {}
            Err(e) => return Err(e),
        }
        // The store's own quarantine is moving it: wait for it to finish.
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    Ok(store.stat(&to).await?.is_some())
}

/// The error a corrupt read ends with: `InvalidData`, naming both digests.
pub fn corrupt_error(expected: &Digest, actual: &Digest) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        format!("blob {expected} is corrupt (content hashes to {actual}); quarantined"),
    )
}

/// Called once with the actual digest when a streamed blob has been read
/// in full: the backend quarantines it when it is not the expected one, and
/// records it verified ([`super::verified`]) when it is.
pub type OnVerdict = Box<dyn FnOnce(&Digest) + Send>;

/// Hashes `stream` (all `size` bytes of the blob `digest`) as it is
/// consumed; the chunk that completes the blob is held back until the
/// digest is checked, and replaced by an `InvalidData` error when it does
/// not match; `on_verdict` is called with the actual digest either way.
pub fn hashing_stream(
    stream: ByteStream,
    digest: Digest,
    size: u64,
    on_verdict: OnVerdict,
) -> ByteStream {
    let mut hasher = Some(Hasher::new(digest.algorithm()));
    let mut seen = 0u64;
    let mut on_verdict = Some(on_verdict);
    Box::pin(stream.map(move |chunk| {
        let chunk = chunk?;
        seen += chunk.len() as u64;
        if let Some(h) = hasher.as_mut() {
            h.update(&chunk);
        }
        if seen >= size
            && let Some(h) = hasher.take()
        {
            let actual = h.finish();
            if let Some(f) = on_verdict.take() {
                f(&actual);
            }
            if actual != digest || seen != size {
                return Err(corrupt_error(&digest, &actual));
            }
        }
        Ok(chunk)
    }))
}

/// An [`AsyncRead`] over all `size` bytes of the blob `digest` that hashes
/// what it returns and fails at the end (before reporting end of file) when
/// the digest does not match; `on_verdict` is called with the actual
/// digest either way.
pub fn hashing_reader(inner: BoxRead, digest: Digest, on_verdict: OnVerdict) -> BoxRead {
    Box::pin(HashingRead {
        inner,
        hasher: Some(Hasher::new(digest.algorithm())),
        digest,
        on_verdict: Some(on_verdict),
    })
}

struct HashingRead {
    inner: BoxRead,
    hasher: Option<Hasher>,
    digest: Digest,
    on_verdict: Option<OnVerdict>,
}

impl AsyncRead for HashingRead {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        match self.inner.as_mut().poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                let new = &buf.filled()[before..];
                if !new.is_empty() {
                    if let Some(h) = self.hasher.as_mut() {
                        h.update(new);
                    }
                    return Poll::Ready(Ok(()));
                }
                // End of file: the verdict comes before the caller sees it.
                if let Some(h) = self.hasher.take() {
                    let actual = h.finish();
                    if let Some(f) = self.on_verdict.take() {
                        f(&actual);
                    }
                    if actual != self.digest {
                        return Poll::Ready(Err(corrupt_error(&self.digest, &actual)));
                    }
                }
                Poll::Ready(Ok(()))
            }
            other => other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blob_keys_parse() {
        let d = Digest::sha256_of(b"x");
        assert_eq!(blob_digest(&super::super::blob_key(&d)), Some(d.clone()));
        assert_eq!(blob_digest("uploads/x/0"), None);
        assert_eq!(blob_digest(&format!("blobs/sha256/zz/{}", d.hex())), None);
        assert!(quarantine_key(&d).starts_with("quarantine/sha256/"));
    }

    #[tokio::test]
    async fn a_wrong_stream_ends_in_an_error_not_its_last_chunk() {
        let d = Digest::sha256_of(b"hello world");
        let chunks = |a: &'static [u8], b: &'static [u8]| -> ByteStream {
            Box::pin(futures_util::stream::iter(vec![
                Ok(bytes::Bytes::from_static(a)),
                Ok(bytes::Bytes::from_static(b)),
            ]))
        };
        let good: Vec<_> =
            hashing_stream(chunks(b"hello ", b"world"), d.clone(), 11, Box::new(|_| {}))
                .collect()
                .await;
        assert!(good.iter().all(|c| c.is_ok()));
        let flag = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let f = flag.clone();
        let d2 = d.clone();
        let bad: Vec<_> = hashing_stream(
            chunks(b"hello ", b"worle"),
            d,
            11,
            Box::new(move |actual| f.store(actual != &d2, std::sync::atomic::Ordering::SeqCst)),
        )
        .collect()
        .await;
        assert!(bad[0].is_ok());
        assert!(bad[1].is_err());
        assert!(flag.load(std::sync::atomic::Ordering::SeqCst));
    }
}
