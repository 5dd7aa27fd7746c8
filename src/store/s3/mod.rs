//! S3 blobstore: every key is an object `<prefix><key>` in one bucket of an
//! S3-compatible object store (AWS S3, MinIO, Ceph RGW, ...), through
//! aws-sdk-s3. Any number of stateless airlock replicas may share a bucket.
//!
//! Owns: the client (endpoint, region, path-style addressing, credentials
//! from the standard AWS chain: environment, profile, web identity, instance
//! metadata; a CA bundle for private endpoints; rustls with ring, the one TLS
//! stack of airlock), retries (the SDK's standard mode: exponential backoff
//! with jitter on 5xx, throttling and connection errors, then a one-line
//! error), the conditional-write probe and the root compare-and-swap.
//! Never parses stored content.
//!
//! - Writes ([`writer`]): a single `PutObject` below the part size, a
//!   multipart upload above it (parts in parallel, bounded). Nothing is
//!   visible at the key before `commit`; callers (import, push) verify the
//!   digest before they commit, so a mismatch never reaches a final key.
//!   `cancel` and drop abort the multipart upload; [`S3Store::sweep_multipart`]
//!   aborts those a killed process left.
//! - Reads: ranged `GetObject` streamed, `HeadObject` for [`Blobstore::stat`];
//!   blobs are verified against their digest as on the filesystem
//!   ([`super::verify`]). Small blobs (manifests, configs, small layers:
//!   at most [`super::hot::HOT_BLOB_MAX`]) once verified are kept in memory
//!   ([`super::hot`]) and read again without a round trip: a blob key names
//!   its content, so the bytes cannot go stale; a delete or quarantine
//!   through this process forgets them. What a request may read is decided
//!   by the state, never by this cache, and [`Blobstore::stat`] always asks
//!   the server (writers decide with it whether a blob is stored).
//! - `refs/root`: one `GetObject` (value + ETag); the swap is a `PutObject`
//!   with `If-Match: <ETag>` (`If-None-Match: *` for the first), so two
//!   replicas never lose each other's commits. [`S3Store::open`] probes
//!   whether, and in which `If-Match` form, the server honours conditional
//!   writes and refuses to run otherwise unless the single-writer mode is
//!   acknowledged. A swap refused (412) while the root is unchanged is an
//!   error at once, never taken for a lost race ([`root`]).
//!
//! Files: [`settings`] (how to reach the bucket, the client), [`http`]
//! (the client's connections: acknowledged at once, so a gateway's small
//! responses are not held ~40 ms by Nagle's algorithm), [`read`],
//! [`writer`] (and the sweep of abandoned multipart uploads), [`root`]
//! (conditional writes), [`error`] (one-line causes); here the store and
//! its [`Blobstore`] implementation.

mod error;
mod http;
mod read;
mod root;
mod settings;
mod writer;

use std::time::Duration;

use aws_sdk_s3::Client;

use super::hot::HotBlobs;
use super::verify;
use super::{
    Blobstore, BoxRead, ByteStream, ObjectWriter, Result, RootVersion, StoreError, check_key,
};
use error::{error, status};
use read::collect;
pub use root::EtagForm;
use root::{Condition, Probe, versioned};
pub use settings::{S3Settings, S3Timeouts};

use super::refs::ROOT_KEY;
/// Default multipart part size (16 MiB).
pub const DEFAULT_PART_SIZE: u64 = 16 << 20;
/// Smallest part S3 accepts (all but the last part).
const MIN_PART_SIZE: u64 = 5 << 20;
/// Parts of one object uploaded at once.
pub const DEFAULT_PARALLEL_PARTS: usize = 4;
/// Multipart uploads older than this belong to no live writer (a 64 GiB
/// blob at 1 MiB/s still finishes within it); swept at start-up.
pub const MULTIPART_MIN_AGE: Duration = Duration::from_secs(24 * 3600);
/// Largest object `CopyObject` copies in one request (5 GiB).
const MAX_COPY: u64 = 5 << 30;

/// A blobstore in one S3 bucket. Cheap to clone (the client is shared).
#[derive(Clone)]
pub struct S3Store {
    client: Client,
    bucket: String,
    prefix: String,
    part_size: u64,
    parallel_parts: usize,
    /// The server does not honour conditional writes (accepted by the
    /// single-writer acknowledgement): the root swap compares, then writes.
    unconditional: bool,
    /// How `If-Match` carries an ETag on this server (the probe's finding).
    etag_form: root::EtagForm,
    /// Small blobs verified by earlier reads, by full key.
    hot: std::sync::Arc<HotBlobs>,
    /// Large blobs hashed in full and found whole, with their object's
    /// ETag and size ([`super::verified`]).
    verified: std::sync::Arc<super::verified::VerifiedBlobs>,
    /// Copies of each metadata blob a commit writes ([`super::copies`]).
    copies: u8,
    /// What reads restored from copies ([`super::copies::Repairs`]).
    repairs: std::sync::Arc<super::copies::Repairs>,
    damage: std::sync::Arc<super::damage::Notes>,
    /// Deadlines of every call ([`S3Timeouts`]).
    timeouts: S3Timeouts,
}

/// The file identity [`HotBlobs`] keeps: none on S3 (blob keys are
/// content-addressed; see the module doc).
const NO_FILE: super::hot::FileId = (0, 0, 0, 0);

impl S3Store {
    /// `HeadObject` of `key`: its size (bytes) and ETag, `None` when absent.
    /// Errors: the request failed otherwise than by a 404.
    pub(super) async fn head(&self, key: &str) -> Result<Option<(u64, String)>> {
        let full = self.full(key)?;
        match self
            .client
            .head_object()
            .bucket(&self.bucket)
            .key(&full)
            .send()
            .await
        {
            Ok(out) => Ok(Some((
                out.content_length().unwrap_or(0).max(0) as u64,
                out.e_tag().unwrap_or_default().to_string(),
            ))),
            Err(e) if status(&e) == Some(404) => Ok(None),
            Err(e) => Err(error("HeadObject", key, e)),
        }
    }

    /// Connects to the bucket: builds the client from `settings` and the
    /// standard AWS chain, checks that the bucket answers, and probes
    /// whether the server honours conditional writes (`If-None-Match: *`
    /// and `If-Match` on `PutObject`, on a scratch key under `refs/`).
    ///
    /// The probe also finds the form of `If-Match` the server takes
    /// (quoted as RFC 9110 says, or bare as Ceph RGW 16.2 wants; see
    /// [`root`]) and it is used from then on; which one is logged at INFO.
    ///
    /// Errors: a one-line cause: the CA file cannot be read, the bucket is
    /// missing or unreachable (after the retries), or conditional writes
    /// do not work in either form (naming what the server answered) and
    /// `single_writer` is not set.
    pub async fn open(settings: &S3Settings) -> Result<S3Store> {
        let store = S3Store::connect(settings).await?;
        store.check_bucket().await?;
        // Before the probe writes a scratch object: a store of a newer
        // layout is refused as it is ([`crate::store::layout`]).
        crate::store::layout::check(&store, &settings.url(), false).await?;
        match store.probe_conditional_writes().await? {
            Probe::Honoured(form) => {
                // `serve` says it at start (OpenedStore::describe_writes).
                tracing::debug!(store = %settings.url(), if_match = form.name(), "S3 conditional writes honoured");
                Ok(S3Store {
                    etag_form: form,
                    ..store
                })
            }
            Probe::Broken(answer) if settings.single_writer => {
                tracing::warn!(store = %settings.url(), answer, "S3 conditional writes do not work: single-writer mode");
                Ok(S3Store {
                    unconditional: true,
                    ..store
                })
            }
            Probe::Broken(answer) => Err(StoreError::Io(std::io::Error::other(format!(
                "the S3 server of {} does not honour conditional writes ({answer}): two airlock processes writing to it could lose each other's commits; run exactly one writer and say so with --s3-single-writer (store.s3_single_writer = true)",
                settings.url()
            )))),
        }
    }

    /// How `If-Match` carries an ETag on this server, as the probe of
    /// [`S3Store::open`] found (quoted per RFC 9110; unquoted on Ceph RGW).
    pub fn etag_form(&self) -> EtagForm {
        self.etag_form
    }

    /// `S3 conditional writes: If-Match quoted` (or `unquoted`), or
    /// `S3 single writer: conditional writes not honoured`.
    pub fn describe_writes(&self) -> String {
        if self.unconditional {
            "S3 single writer: conditional writes not honoured".into()
        } else {
            format!("S3 conditional writes: If-Match {}", self.etag_form.name())
        }
    }

    fn full(&self, key: &str) -> Result<String> {
        check_key(key)?;
        Ok(format!("{}{key}", self.prefix))
    }

    async fn check_bucket(&self) -> Result<()> {
        match self.client.head_bucket().bucket(&self.bucket).send().await {
            Ok(_) => Ok(()),
            Err(e) if status(&e) == Some(404) => Err(StoreError::Io(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("S3 bucket {} does not exist (create it first)", self.bucket),
            ))),
            Err(e) => Err(error("HeadBucket", &self.bucket, e)),
        }
    }

    async fn delete_full(&self, full: &str) -> Result<()> {
        self.hot.remove(full);
        match self
            .client
            .delete_object()
            .bucket(&self.bucket)
            .key(full)
            .send()
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if status(&e) == Some(404) => Ok(()),
            Err(e) => Err(error("DeleteObject", full, e)),
        }
    }
}

/// The `x-amz-copy-source` value: `bucket/key`, URL-encoded.
fn copy_source(bucket: &str, full: &str) -> String {
    // Keys are `[a-z0-9._-]` segments and `/`: nothing to encode.
    format!("{bucket}/{full}")
}

#[async_trait::async_trait]
impl Blobstore for S3Store {
    async fn stat(&self, key: &str) -> Result<Option<u64>> {
        Ok(self.head(key).await?.map(|(size, _)| size))
    }

    async fn version(&self, key: &str) -> Result<Option<String>> {
        Ok(self.head(key).await?.map(|(_, etag)| etag))
    }

    async fn read(&self, key: &str, range: Option<(u64, u64)>) -> Result<BoxRead> {
        let s = self.stream(key, range).await?;
        Ok(Box::pin(tokio_util::io::StreamReader::new(s)))
    }

    async fn stream(&self, key: &str, range: Option<(u64, u64)>) -> Result<ByteStream> {
        self.stream_key(key, range).await
    }

    /// A small blob held verified in memory is served without a round trip
    /// (the registry's GETs); otherwise `HeadObject`, then [`Self::stream`].
    /// [`Blobstore::stat`] always asks the server: writers decide with it
    /// whether a blob is stored.
    async fn stream_sized(&self, key: &str) -> Result<Option<(u64, ByteStream)>> {
        if let Some(bytes) = self.hot.get(&self.full(key)?).map(|h| h.bytes) {
            let size = bytes.len() as u64;
            return Ok(Some((
                size,
                Box::pin(futures_util::stream::once(async { Ok(bytes) })),
            )));
        }
        super::stat_then_stream(self, key).await
    }

    fn metadata_copies(&self) -> u8 {
        self.copies
    }

    fn repairs(&self) -> Option<&super::copies::Repairs> {
        Some(&self.repairs)
    }

    fn damage(&self) -> Option<&super::damage::Notes> {
        Some(&self.damage)
    }

    async fn put_blobs(
        &self,
        blobs: Vec<(crate::digest::Digest, bytes::Bytes)>,
    ) -> Result<Vec<crate::digest::Digest>> {
        // One conditional `PutObject` each (`If-None-Match: *`: 412 when
        // present), up to 16 at once: no `HeadObject` round before. In
        // single-writer mode (a server without conditional writes) a
        // `HeadObject`, then the write.
        use futures_util::StreamExt;
        let mut puts = futures_util::stream::iter(blobs.into_iter().map(|(d, b)| async move {
            if self.unconditional {
                return Ok((!super::put_digested(self, &d, b).await?).then_some(d));
            }
            let full = self.full(&super::blob_key(&d))?;
            let put = self.put_if(&full, b, Some(Condition::Absent)).await?;
            Ok::<_, StoreError>(put.is_err().then_some(d))
        }))
        .buffer_unordered(16);
        let mut present = Vec::new();
        while let Some(r) = puts.next().await {
            present.extend(r?);
        }
        Ok(present)
    }

    async fn writer(&self, key: &str) -> Result<Box<dyn ObjectWriter>> {
        let full = self.full(key)?;
        Ok(Box::new(writer::S3Writer::new(self.clone(), full)))
    }

    async fn delete(&self, key: &str) -> Result<()> {
        let full = self.full(key)?;
        self.delete_full(&full).await
    }

    fn forgotten(&self) -> u64 {
        self.hot.removals()
    }

    fn forget_verified(&self, key: &str) {
        if let Ok(full) = self.full(key) {
            self.hot.remove(&full);
        }
        if let Some(d) = verify::blob_digest(key) {
            self.verified.forget(&d);
        }
    }

    async fn rename(&self, from: &str, to: &str) -> Result<()> {
        let (src, dst) = (self.full(from)?, self.full(to)?);
        let size = self
            .stat(from)
            .await?
            .ok_or_else(|| StoreError::NotFound(from.to_string()))?;
        if size > MAX_COPY {
            super::copy_through(self, from, to).await?;
        } else {
            self.client
                .copy_object()
                .bucket(&self.bucket)
                .key(&dst)
                .copy_source(copy_source(&self.bucket, &src))
                .send()
                .await
                .map_err(|e| error("CopyObject", from, e))?;
        }
        self.delete_full(&src).await
    }

    async fn list(&self, prefix: &str) -> Result<Vec<String>> {
        Ok(self
            .list_meta(prefix)
            .await?
            .into_iter()
            .map(|m| m.key)
            .collect())
    }

    async fn list_meta(&self, prefix: &str) -> Result<Vec<super::ObjectMeta>> {
        check_key(prefix.trim_end_matches('/'))?;
        let full = format!("{}{prefix}", self.prefix);
        // ListObjectsV2, 1000 keys a page, followed through its continuation tokens.
        let mut pages = self
            .client
            .list_objects_v2()
            .bucket(&self.bucket)
            .prefix(&full)
            .into_paginator()
            .send();
        let mut out = Vec::new();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| error("ListObjectsV2", prefix, e))?;
            for obj in page.contents() {
                if let Some(k) = obj.key().and_then(|k| k.strip_prefix(&self.prefix)) {
                    out.push(super::ObjectMeta {
                        key: k.to_string(),
                        size: obj.size().unwrap_or(0).max(0) as u64,
                        modified: obj
                            .last_modified()
                            .and_then(|t| std::time::SystemTime::try_from(*t).ok())
                            // Unknown counts as new: kept through a grace period.
                            .unwrap_or_else(std::time::SystemTime::now),
                    });
                }
            }
        }
        out.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(out)
    }

    async fn sync(&self) -> Result<()> {
        // A completed PutObject or multipart upload is durable.
        Ok(())
    }

    async fn read_root(&self) -> Result<Option<RootVersion>> {
        self.read_versioned(ROOT_KEY).await
    }

    async fn swap_root(&self, expected: Option<&RootVersion>, value: &str) -> Result<bool> {
        Ok(self.swap_root_versioned(expected, value).await?.is_some())
    }

    async fn swap_root_versioned(
        &self,
        expected: Option<&RootVersion>,
        value: &str,
    ) -> Result<Option<RootVersion>> {
        let Some(version) = self.swap_to(ROOT_KEY, expected, value).await? else {
            return Ok(None);
        };
        // The root's second copy ([`crate::store::refs`]): a hint, so a
        // failed write is logged (`fsck` and the next commit write it).
        if let Err(e) = super::refs::write_copy(self, value).await {
            tracing::warn!(error = %e, "refs/root.copy not written; written again by the next commit or fsck");
        }
        Ok(Some(RootVersion {
            value: value.to_string(),
            version,
        }))
    }

    async fn read_root_if_changed(&self, seen: &RootVersion) -> Result<super::RootRead> {
        if seen.version.is_empty() {
            return Ok(super::RootRead::Changed(self.read_root().await?));
        }
        self.read_versioned_unless(ROOT_KEY, &seen.version).await
    }

    async fn read_versioned(&self, key: &str) -> Result<Option<RootVersion>> {
        let (body, _, etag) = match self.get(key, None).await {
            Ok(got) => got,
            Err(StoreError::NotFound(_)) => return Ok(None),
            Err(e) => return Err(e),
        };
        Ok(Some(versioned(
            collect(body, key, self.timeouts.idle).await?,
            etag,
        )))
    }

    async fn swap(&self, key: &str, expected: Option<&RootVersion>, value: &str) -> Result<bool> {
        Ok(self.swap_to(key, expected, value).await?.is_some())
    }

    async fn presigned_get(&self, key: &str, expires: Duration) -> Result<Option<String>> {
        self.presign_get(key, expires).await.map(Some)
    }
}
