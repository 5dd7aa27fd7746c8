//! Conditional writes: `PutObject` under `If-None-Match: *` or `If-Match:
//! <ETag>`, what the root compare-and-swap rests on, and the probe of
//! whether the server honours them.

use aws_sdk_s3::primitives::ByteStream as S3Body;
use bytes::Bytes;

use super::{S3Store, error, status};
use crate::store::Result;

/// A write precondition.
#[derive(Debug, Clone, Copy)]
pub(super) enum Condition<'a> {
    /// `If-None-Match: *`.
    Absent,
    /// `If-Match: <etag>`.
    Match(&'a str),
}

impl S3Store {
    /// Whether `If-None-Match: *` and `If-Match` on `PutObject` are honoured:
    /// creates a scratch key, then tries to create it again and to replace
    /// it under a wrong ETag; both must fail with 412. Removes the key.
    pub(super) async fn probe_conditional_writes(&self) -> Result<bool> {
        let key = format!("refs/probe-{}", uuid::Uuid::new_v4());
        let full = self.full(&key)?;
        let first = self
            .put_if(&full, Bytes::from_static(b"probe"), None)
            .await?;
        let again = self
            .put_if(&full, Bytes::from_static(b"probe"), Some(Condition::Absent))
            .await?;
        let wrong = self
            .put_if(
                &full,
                Bytes::from_static(b"probe"),
                Some(Condition::Match("\"00000000000000000000000000000000\"")),
            )
            .await?;
        let _ = self.delete_full(&full).await;
        tracing::debug!(?first, ?again, ?wrong, "S3 conditional-write probe");
        Ok(first.is_some() && again.is_none() && wrong.is_none())
    }

    /// `PutObject` of `body` at `full` under `cond`. `Ok(Some(etag))` when
    /// written, `Ok(None)` when the condition failed (412, or 409 for a
    /// concurrent conditional write).
    pub(super) async fn put_if(
        &self,
        full: &str,
        body: Bytes,
        cond: Option<Condition<'_>>,
    ) -> Result<Option<String>> {
        let mut req = self
            .client
            .put_object()
            .bucket(&self.bucket)
            .key(full)
            .body(S3Body::from(body));
        req = match cond {
            Some(Condition::Absent) => req.if_none_match("*"),
            Some(Condition::Match(etag)) => req.if_match(etag),
            None => req,
        };
        match req.send().await {
            Ok(out) => Ok(Some(out.e_tag().unwrap_or_default().to_string())),
            Err(e) if cond.is_some() && matches!(status(&e), Some(412 | 409)) => Ok(None),
            Err(e) => Err(error("PutObject", full, e)),
        }
    }
}
