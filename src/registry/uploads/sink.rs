//! Writing one upload object: a request body (or stored chunks) copied
//! into an [`ObjectWriter`], optionally hashed, buffered into large
//! writes, and cut off at the blob size cap.
//!
//! Owns: the byte copy. Never decides what a session is.

use bytes::{Bytes, BytesMut};
use futures_util::{Stream, StreamExt};
use tokio::io::AsyncReadExt;

use super::{Result, UploadError};
use crate::digest::Hasher;
use crate::store::{Blobstore, ObjectWriter, StoreError};

/// Bytes buffered before each write to the store.
const WRITE_BUFFER: usize = 1 << 20;

/// A request body as a stream of chunks.
pub trait BodyStream:
    Stream<Item = std::result::Result<Bytes, axum::Error>> + Send + Unpin
{
}
impl<T: Stream<Item = std::result::Result<Bytes, axum::Error>> + Send + Unpin> BodyStream for T {}

/// Writes into one object, optionally hashing, buffering small chunks.
pub(super) struct Sink {
    pub(super) writer: Box<dyn ObjectWriter>,
    pub(super) hasher: Option<Hasher>,
    buf: BytesMut,
    /// Bytes written so far.
    pub(super) count: u64,
    /// Most bytes this object may hold; `max` is reported when it is passed.
    room: u64,
    max: u64,
}

impl Sink {
    pub(super) fn new(
        writer: Box<dyn ObjectWriter>,
        hasher: Option<Hasher>,
        room: u64,
        max: u64,
    ) -> Sink {
        Sink {
            writer,
            hasher,
            buf: BytesMut::new(),
            count: 0,
            room,
            max,
        }
    }

    async fn write(&mut self, chunk: &[u8]) -> Result<()> {
        if self.count + chunk.len() as u64 > self.room {
            return Err(UploadError::TooLarge(self.max));
        }
        if let Some(h) = &mut self.hasher {
            h.update(chunk);
        }
        self.count += chunk.len() as u64;
        self.buf.extend_from_slice(chunk);
        if self.buf.len() >= WRITE_BUFFER {
            self.flush().await?;
        }
        Ok(())
    }

    pub(super) async fn flush(&mut self) -> Result<()> {
        if !self.buf.is_empty() {
            let chunk = self.buf.split().freeze();
            self.writer.write(chunk).await?;
        }
        Ok(())
    }

    /// Copies `body` in; past `expires` (the session's expiry, checked
    /// while the body streams) the copy stops with `Unknown`.
    pub(super) async fn copy_body(
        &mut self,
        body: &mut (impl BodyStream + ?Sized),
        expires: Option<tokio::time::Instant>,
    ) -> Result<()> {
        loop {
            let next = match expires {
                Some(at) => tokio::time::timeout_at(at, body.next())
                    .await
                    .map_err(|_| UploadError::Unknown)?,
                None => body.next().await,
            };
            let Some(chunk) = next else {
                return Ok(());
            };
            let chunk = chunk.map_err(|e| UploadError::Body(e.to_string()))?;
            self.write(&chunk).await?;
        }
    }

    /// Copies the stored object `key` in; returns its size.
    pub(super) async fn copy_object(&mut self, store: &dyn Blobstore, key: &str) -> Result<u64> {
        let mut r = store.read(key, None).await?;
        let mut buf = vec![0u8; 256 * 1024];
        let mut n_total = 0;
        loop {
            let n = r.read(&mut buf).await.map_err(StoreError::from)?;
            if n == 0 {
                return Ok(n_total);
            }
            n_total += n as u64;
            self.write(&buf[..n]).await?;
        }
    }

    /// Discards everything written (a failure is logged: nothing is visible anyway).
    pub(super) async fn cancel(self) {
        if let Err(e) = self.writer.cancel().await {
            tracing::warn!(error = %e, "cannot discard an unfinished object");
        }
    }
}
