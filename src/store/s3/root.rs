//! Conditional writes: `PutObject` under `If-None-Match: *` or `If-Match:
//! <ETag>`, what the root compare-and-swap rests on, the probe of whether
//! (and in which form) the server honours them, and the check that tells
//! a lost race from a server that refuses every conditional write.
//!
//! RFC 9110 §13.1.1 compares `If-Match` entity tags with the quotes
//! (`If-Match: "abc"`), as AWS S3 and MinIO do. Ceph RGW 16.2 compares the
//! header byte for byte with its stored, unquoted ETag: the quoted form
//! fails with 412 even under the current ETag, the unquoted one works and
//! serializes racing writers. The probe finds which form the server takes.

use aws_sdk_s3::primitives::ByteStream as S3Body;
use bytes::Bytes;

use super::{S3Store, error, read::collect, status};
use crate::store::{Result, RootRead, RootVersion, StoreError};

/// A write precondition.
#[derive(Debug, Clone, Copy)]
pub(super) enum Condition<'a> {
    /// `If-None-Match: *`.
    Absent,
    /// `If-Match: <etag>`, the ETag as the server gave it (quoted or not);
    /// sent in the store's [`EtagForm`].
    Match(&'a str),
}

/// How an ETag is written in `If-Match`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum EtagForm {
    /// `"abc"`: RFC 9110, AWS S3, MinIO, moto.
    #[default]
    Quoted,
    /// `abc`: Ceph RGW (16.2), which compares the header with its stored,
    /// unquoted ETag.
    Bare,
}

impl EtagForm {
    /// `quoted` or `unquoted`, for logs.
    pub fn name(self) -> &'static str {
        match self {
            EtagForm::Quoted => "quoted",
            EtagForm::Bare => "unquoted",
        }
    }

    /// `etag` (quoted or not) in this form.
    pub fn write(self, etag: &str) -> String {
        let bare = bare(etag);
        match self {
            EtagForm::Quoted => format!("\"{bare}\""),
            EtagForm::Bare => bare.to_string(),
        }
    }
}

/// `etag` without its quotes (and without a weak prefix).
pub(super) fn bare(etag: &str) -> &str {
    etag.trim().trim_start_matches("W/").trim_matches('"')
}

/// A conditional `PutObject`'s outcome: the new ETag, or the status
/// (412, 409) with which its condition failed.
pub(super) type Put = std::result::Result<String, u16>;

/// What the probe of [`S3Store::probe_conditional_writes`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Probe {
    /// Conditional writes work, with `If-Match` in this form.
    Honoured(EtagForm),
    /// They do not: what the server answered, for the refusal's one line.
    Broken(String),
}

impl S3Store {
    /// Whether, and in which form, conditional writes on `PutObject` work,
    /// on a scratch key under `refs/` (removed afterwards):
    ///
    /// 1. `If-None-Match: *` on an existing key must fail (412);
    /// 2. `If-Match` under a wrong ETag must fail;
    /// 3. `If-Match` under the current ETag must succeed, in the quoted form
    ///    or else the unquoted one; then a write under the ETag it replaced
    ///    (stale) must fail, in the same form.
    ///
    /// Errors: a request failed otherwise than by its condition.
    pub(super) async fn probe_conditional_writes(&self) -> Result<Probe> {
        let key = format!("refs/probe-{}", uuid::Uuid::new_v4());
        let full = self.full(&key)?;
        let probe = self.probe_at(&full).await;
        let _ = self.delete_full(&full).await;
        tracing::debug!(?probe, "S3 conditional-write probe");
        probe
    }

    async fn probe_at(&self, full: &str) -> Result<Probe> {
        let body = |n: u32| Bytes::from(format!("airlock conditional-write probe {n}\n"));
        let Ok(mut current) = self.put_in(full, body(0), None, EtagForm::Quoted).await? else {
            return Ok(Probe::Broken("a plain PUT was refused".into()));
        };
        if self
            .put_in(full, body(0), Some(Condition::Absent), EtagForm::Quoted)
            .await?
            .is_ok()
        {
            return Ok(Probe::Broken(
                "PUT with If-None-Match: * over an existing object was written".into(),
            ));
        }
        let wrong = "00000000000000000000000000000000";
        if self
            .put_in(
                full,
                body(1),
                Some(Condition::Match(wrong)),
                EtagForm::Quoted,
            )
            .await?
            .is_ok()
        {
            return Ok(Probe::Broken(
                "PUT with If-Match under a wrong ETag was written".into(),
            ));
        }
        let mut n = 1;
        for form in [EtagForm::Quoted, EtagForm::Bare] {
            n += 1;
            let Ok(next) = self
                .put_in(full, body(n), Some(Condition::Match(&current)), form)
                .await?
            else {
                continue;
            };
            let stale = std::mem::replace(&mut current, next);
            n += 1;
            if self
                .put_in(full, body(n), Some(Condition::Match(&stale)), form)
                .await?
                .is_ok()
            {
                return Ok(Probe::Broken(format!(
                    "PUT with If-Match: {} under a replaced (stale) ETag was written",
                    form.write(&stale)
                )));
            }
            return Ok(Probe::Honoured(form));
        }
        Ok(Probe::Broken(format!(
            "PUT with If-Match under the object's current ETag was refused (412) both quoted ({}) and unquoted ({})",
            EtagForm::Quoted.write(&current),
            EtagForm::Bare.write(&current)
        )))
    }

    /// `PutObject` of `body` at `full` under `cond`, `If-Match` in the
    /// store's probed form. `Ok(Ok(etag))` when written, `Ok(Err(status))`
    /// when the condition failed (412; 409 for a concurrent conditional
    /// write; 404 for `If-Match` on an absent object).
    pub(super) async fn put_if(
        &self,
        full: &str,
        body: Bytes,
        cond: Option<Condition<'_>>,
    ) -> Result<Put> {
        self.put_in(full, body, cond, self.etag_form).await
    }

    async fn put_in(
        &self,
        full: &str,
        body: Bytes,
        cond: Option<Condition<'_>>,
        form: EtagForm,
    ) -> Result<Put> {
        let deadlines = self.timeouts.override_for(body.len() as u64);
        let mut req = self
            .client
            .put_object()
            .bucket(&self.bucket)
            .key(full)
            .body(S3Body::from(body));
        req = match cond {
            Some(Condition::Absent) => req.if_none_match("*"),
            Some(Condition::Match(etag)) => req.if_match(form.write(etag)),
            None => req,
        };
        match req.customize().config_override(deadlines).send().await {
            Ok(out) => Ok(Ok(out.e_tag().unwrap_or_default().to_string())),
            // 404 under `If-Match`: the object is gone (AWS S3 answers so).
            Err(e)
                if matches!(
                    (cond, status(&e)),
                    (Some(_), Some(412 | 409)) | (Some(Condition::Match(_)), Some(404))
                ) =>
            {
                Ok(Err(status(&e).unwrap_or(412)))
            }
            Err(e) => Err(error("PutObject", full, e)),
        }
    }

    /// Sets the small object `key` to `value` if it is still at `expected`
    /// (`None`: absent): its new ETag when written, `None` when another
    /// writer got there first (the compare-and-swap of
    /// [`crate::store::Blobstore::swap`]). In single-writer mode
    /// (`--s3-single-writer`) compares, then writes unconditionally.
    /// Errors: the write failed, or the server refused a write whose
    /// condition held ([`S3Store::check_refusal`]).
    pub(super) async fn swap_to(
        &self,
        key: &str,
        expected: Option<&RootVersion>,
        value: &str,
    ) -> Result<Option<String>> {
        let full = self.full(key)?;
        let body = Bytes::from(format!("{value}\n"));
        if self.unconditional {
            // Single-writer mode: compare, then write (acknowledged at start).
            let current = crate::store::Blobstore::read_versioned(self, key).await?;
            if current.as_ref().map(|r| &r.value) != expected.map(|r| &r.value) {
                return Ok(None);
            }
            return Ok(self.put_if(&full, body, None).await?.ok());
        }
        let cond = match expected {
            Some(v) => Condition::Match(&v.version),
            None => Condition::Absent,
        };
        match self.put_if(&full, body, Some(cond)).await? {
            Ok(etag) => Ok(Some(etag)),
            // 412 with the object unchanged is a broken server, not a race.
            Err(412) => self.check_refusal(key, cond).await.map(|()| None),
            Err(_) => Ok(None),
        }
    }

    /// The small object `key` unless its ETag is still `etag`: a
    /// `GetObject` under `If-None-Match: <etag>` (in the probed form),
    /// which the server answers `304` without a body when unchanged. A
    /// server that ignores the condition answers the object: returned as
    /// [`RootRead::Changed`] with the same value.
    /// Errors: the read failed.
    pub(super) async fn read_versioned_unless(&self, key: &str, etag: &str) -> Result<RootRead> {
        let full = self.full(key)?;
        let sent = self
            .client
            .get_object()
            .bucket(&self.bucket)
            .key(&full)
            .if_none_match(self.etag_form.write(etag))
            .send()
            .await;
        match sent {
            Ok(out) => {
                let etag = out.e_tag().unwrap_or_default().to_string();
                let bytes = collect(out.body, key, self.timeouts.idle).await?;
                Ok(RootRead::Changed(Some(versioned(bytes, etag))))
            }
            Err(e) if status(&e) == Some(304) => Ok(RootRead::Unchanged),
            Err(e) if status(&e) == Some(404) => Ok(RootRead::Changed(None)),
            Err(e) => Err(error("GetObject", key, e)),
        }
    }

    /// After a conditional write of `key` under `cond` failed: `Ok(())`
    /// when the object changed meanwhile (a race lost to another writer),
    /// else an error: the server refused a write whose condition held
    /// (same ETag on a fresh `HeadObject`, or still absent), which no retry
    /// can win. Logged at ERROR with the cause.
    pub(super) async fn check_refusal(&self, key: &str, cond: Condition<'_>) -> Result<()> {
        let full = self.full(key)?;
        let now = self.head(key).await?.map(|(_, etag)| etag);
        let (held, sent) = match (cond, &now) {
            (Condition::Absent, None) => (true, "If-None-Match: *".to_string()),
            (Condition::Match(etag), Some(now)) if bare(now) == bare(etag) => {
                (true, format!("If-Match: {}", self.etag_form.write(etag)))
            }
            _ => (false, String::new()),
        };
        if !held {
            return Ok(());
        }
        let cause = format!(
            "the S3 server refused (412) PutObject {full} with {sent} although the condition holds (the object is unchanged): its conditional writes are broken, so no commit can land; check the object store (or a proxy in front of it), or run one writer with --s3-single-writer"
        );
        tracing::error!(key = full, condition = %sent, "S3 conditional write refused although its condition holds");
        Err(StoreError::Io(std::io::Error::other(cause)))
    }
}

/// A small versioned object's value (its trimmed text) and version (the
/// ETag; the value itself when the server gave none).
pub(super) fn versioned(bytes: Bytes, etag: String) -> RootVersion {
    let value = String::from_utf8_lossy(&bytes).trim().to_string();
    let version = if etag.is_empty() { value.clone() } else { etag };
    RootVersion { value, version }
}
