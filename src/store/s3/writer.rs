//! Streaming writes to S3: bytes are buffered up to the part size; an
//! object that stays below it is one `PutObject` at commit, a larger one
//! becomes a multipart upload whose parts are sent as they fill, up to
//! `parallel_parts` at once (memory: at most `parallel_parts + 1` parts per
//! writer). `commit` completes the upload (nothing is visible at the key
//! before); `cancel`, an error and drop abort it.

use std::sync::Arc;

use aws_sdk_s3::Client;
use aws_sdk_s3::primitives::ByteStream as S3Body;
use aws_sdk_s3::types::{CompletedMultipartUpload, CompletedPart};
use bytes::{Bytes, BytesMut};
use tokio::task::JoinSet;

use super::{S3Store, error, status};
use crate::store::{ObjectWriter, Result, StoreError};
use std::time::Duration;

/// Aborts the multipart upload `id` of `full`; failures are logged (the
/// start-up sweep retries them).
pub(super) async fn abort(client: &Client, bucket: &str, full: &str, id: &str) {
    let res = client
        .abort_multipart_upload()
        .bucket(bucket)
        .key(full)
        .upload_id(id)
        .send()
        .await;
    if let Err(e) = res
        && status(&e) != Some(404)
    {
        tracing::warn!(key = full, error = %super::error::cause(&e), "cannot abort an S3 multipart upload");
    }
}

/// One object being written (see the module docs).
pub(super) struct S3Writer {
    store: S3Store,
    full: String,
    buf: BytesMut,
    upload: Option<Multipart>,
}

/// A multipart upload in progress.
struct Multipart {
    id: Arc<str>,
    next_part: i32,
    running: JoinSet<Result<CompletedPart>>,
    done: Vec<CompletedPart>,
}

impl S3Writer {
    pub(super) fn new(store: S3Store, full: String) -> S3Writer {
        S3Writer {
            store,
            full,
            buf: BytesMut::new(),
            upload: None,
        }
    }

    fn part_size(&self) -> usize {
        self.store.part_size as usize
    }

    /// Starts the multipart upload if it is not started yet.
    async fn multipart(&mut self) -> Result<&mut Multipart> {
        if self.upload.is_none() {
            let out = self
                .store
                .client
                .create_multipart_upload()
                .bucket(&self.store.bucket)
                .key(&self.full)
                .send()
                .await
                .map_err(|e| error("CreateMultipartUpload", &self.full, e))?;
            let id = out.upload_id().ok_or_else(|| {
                StoreError::Io(std::io::Error::other(format!(
                    "S3 CreateMultipartUpload {}: no upload id in the answer",
                    self.full
                )))
            })?;
            self.upload = Some(Multipart {
                id: id.into(),
                next_part: 1,
                running: JoinSet::new(),
                done: Vec::new(),
            });
        }
        Ok(self.upload.as_mut().expect("started above"))
    }

    /// Sends `part` as the next part, after waiting for a slot.
    async fn send_part(&mut self, part: Bytes) -> Result<()> {
        let (client, bucket, full) = (
            self.store.client.clone(),
            self.store.bucket.clone(),
            self.full.clone(),
        );
        let parallel = self.store.parallel_parts;
        let deadlines = self.store.timeouts.override_for(part.len() as u64);
        let upload = self.multipart().await?;
        while upload.running.len() >= parallel {
            wait_one(upload).await?;
        }
        let (id, number) = (upload.id.clone(), upload.next_part);
        upload.next_part += 1;
        upload.running.spawn(async move {
            let out = client
                .upload_part()
                .bucket(&bucket)
                .key(&full)
                .upload_id(&*id)
                .part_number(number)
                .body(S3Body::from(part))
                .customize()
                .config_override(deadlines)
                .send()
                .await
                .map_err(|e| error("UploadPart", &full, e))?;
            Ok(CompletedPart::builder()
                .part_number(number)
                .set_e_tag(out.e_tag().map(str::to_owned))
                .build())
        });
        Ok(())
    }

    /// Commits; with `create_new`, only if nothing is at the key yet
    /// (`If-None-Match: *`): `Ok(false)` when something was.
    async fn finish(&mut self, create_new: bool) -> Result<bool> {
        let rest = self.buf.split().freeze();
        if self.upload.is_none() {
            let cond = create_new.then_some(super::Condition::Absent);
            return Ok(self.store.put_if(&self.full, rest, cond).await?.is_ok());
        }
        if !rest.is_empty() {
            self.send_part(rest).await?;
        }
        let upload = self.upload.as_mut().expect("checked above");
        while !upload.running.is_empty() {
            wait_one(upload).await?;
        }
        let mut parts = std::mem::take(&mut upload.done);
        parts.sort_by_key(|p| p.part_number());
        let mut req = self
            .store
            .client
            .complete_multipart_upload()
            .bucket(&self.store.bucket)
            .key(&self.full)
            .upload_id(&*upload.id)
            .multipart_upload(
                CompletedMultipartUpload::builder()
                    .set_parts(Some(parts))
                    .build(),
            );
        if create_new {
            req = req.if_none_match("*");
        }
        match req.send().await {
            Ok(_) => {
                self.upload = None;
                Ok(true)
            }
            Err(e) if create_new && matches!(status(&e), Some(412 | 409)) => Ok(false),
            Err(e) => Err(error("CompleteMultipartUpload", &self.full, e)),
        }
    }

    /// Aborts the multipart upload, if one was started.
    async fn abort(&mut self) {
        if let Some(mut upload) = self.upload.take() {
            upload.running.abort_all();
            abort(
                &self.store.client,
                &self.store.bucket,
                &self.full,
                &upload.id,
            )
            .await;
        }
    }
}

/// Waits for one running part; its failure fails the upload.
async fn wait_one(upload: &mut Multipart) -> Result<()> {
    match upload.running.join_next().await {
        Some(Ok(Ok(part))) => {
            upload.done.push(part);
            Ok(())
        }
        Some(Ok(Err(e))) => Err(e),
        Some(Err(e)) => Err(StoreError::Io(std::io::Error::other(e))),
        None => Ok(()),
    }
}

#[async_trait::async_trait]
impl ObjectWriter for S3Writer {
    async fn write(&mut self, chunk: Bytes) -> Result<()> {
        self.buf.extend_from_slice(&chunk);
        while self.buf.len() >= self.part_size() {
            let part = self.buf.split_to(self.part_size()).freeze();
            if let Err(e) = self.send_part(part).await {
                self.abort().await;
                return Err(e);
            }
        }
        Ok(())
    }

    async fn commit(mut self: Box<Self>) -> Result<()> {
        match self.finish(false).await {
            Ok(_) => Ok(()),
            Err(e) => {
                self.abort().await;
                Err(e)
            }
        }
    }

    async fn commit_new(mut self: Box<Self>) -> Result<bool> {
        let res = self.finish(true).await;
        if !matches!(res, Ok(true)) {
            self.abort().await;
        }
        res
    }

    async fn cancel(mut self: Box<Self>) -> Result<()> {
        self.abort().await;
        Ok(())
    }
}

impl Drop for S3Writer {
    fn drop(&mut self) {
        // A writer dropped unfinished (a cancelled request): abort in the
        // background; the start-up sweep catches what this misses.
        if let Some(mut upload) = self.upload.take()
            && let Ok(rt) = tokio::runtime::Handle::try_current()
        {
            upload.running.abort_all();
            let (client, bucket, full) = (
                self.store.client.clone(),
                self.store.bucket.clone(),
                self.full.clone(),
            );
            rt.spawn(async move { abort(&client, &bucket, &full, &upload.id).await });
        }
    }
}

impl S3Store {
    /// Aborts multipart uploads under the prefix started more than
    /// `min_age` ago (left by killed processes; a live writer finishes
    /// within its request's lifetime). Returns how many were aborted.
    /// Run at start-up of `serve` and `import`.
    ///
    /// Errors: listing the uploads failed (a server that does not implement
    /// the listing, 501, is not an error: nothing is swept).
    pub async fn sweep_multipart(&self, min_age: Duration) -> Result<u64> {
        let cutoff = std::time::SystemTime::now() - min_age;
        let mut aborted = 0;
        let (mut key_marker, mut id_marker) = (None::<String>, None::<String>);
        loop {
            let out = self
                .client
                .list_multipart_uploads()
                .bucket(&self.bucket)
                .prefix(&self.prefix)
                .set_key_marker(key_marker.clone())
                .set_upload_id_marker(id_marker.clone())
                .send()
                .await;
            let out = match out {
                Ok(out) => out,
                // A server without the operation (s3s-fs answers 501) has
                // nothing a user could mend: said at debug, not on every
                // command's stderr (whose errors are one line).
                Err(e) if status(&e) == Some(501) => {
                    tracing::debug!("the S3 server cannot list multipart uploads: no sweep");
                    return Ok(0);
                }
                Err(e) => return Err(error("ListMultipartUploads", &self.prefix, e)),
            };
            for u in out.uploads() {
                let old = u
                    .initiated()
                    .and_then(|t| std::time::SystemTime::try_from(*t).ok())
                    .is_some_and(|t| t < cutoff);
                if let (true, Some(key), Some(id)) = (old, u.key(), u.upload_id()) {
                    abort(&self.client, &self.bucket, key, id).await;
                    aborted += 1;
                }
            }
            if out.is_truncated() != Some(true) {
                return Ok(aborted);
            }
            key_marker = out.next_key_marker().map(str::to_owned);
            id_marker = out.next_upload_id_marker().map(str::to_owned);
            if key_marker.is_none() && id_marker.is_none() {
                return Ok(aborted);
            }
        }
    }
}
