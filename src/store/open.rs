//! Opening the blobstore a command or the server names: the one place that
//! turns `--data DIR` / `--store URL` (and the `[store]` keys) into a
//! backend.
//!
//! URL forms: `s3://BUCKET` or `s3://BUCKET/PREFIX` (the S3 store, with the
//! `--s3-*` settings), `file:///path` or a plain path (the filesystem store,
//! the same as `--data /path`).

use std::path::PathBuf;
use std::sync::Arc;

use super::fs::FsStore;
use super::s3::{S3Settings, S3Store};
use super::space::FreeSpaceFloor;
use super::{Blobstore, Result, StoreError};

/// A parsed `--store` value.
#[derive(Debug, Clone, PartialEq)]
pub enum StoreUrl {
    /// The filesystem store in this directory.
    File(PathBuf),
    /// An S3 bucket and key prefix (empty or `/`-terminated).
    S3 {
        /// The bucket.
        bucket: String,
        /// The key prefix.
        prefix: String,
    },
}

impl std::str::FromStr for StoreUrl {
    type Err = String;

    /// Parses `s3://BUCKET[/PREFIX]`, `file:///path` or a path.
    /// Errors: an empty bucket, another scheme, a prefix that is not of the
    /// key grammar (`[a-z0-9._-]` segments).
    fn from_str(s: &str) -> std::result::Result<StoreUrl, String> {
        if let Some(rest) = s.strip_prefix("s3://") {
            let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
            let valid_bucket = !bucket.is_empty()
                && bucket
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-.".contains(&b));
            if !valid_bucket {
                return Err(format!(
                    "{s}: the bucket name must be lower-case letters, digits, '-' and '.'"
                ));
            }
            let prefix = prefix.trim_matches('/');
            if !prefix.is_empty() && super::check_key(prefix).is_err() {
                return Err(format!(
                    "{s}: the key prefix must be '/'-separated segments of a-z, 0-9, '.', '_' and '-'"
                ));
            }
            return Ok(StoreUrl::S3 {
                bucket: bucket.to_string(),
                prefix: if prefix.is_empty() {
                    String::new()
                } else {
                    format!("{prefix}/")
                },
            });
        }
        if let Some(path) = s.strip_prefix("file://") {
            if !path.starts_with('/') {
                return Err(format!(
                    "{s}: a file URL names an absolute path (file:///path)"
                ));
            }
            return Ok(StoreUrl::File(path.into()));
        }
        if s.contains("://") {
            return Err(format!(
                "{s}: unknown store URL scheme (s3://BUCKET/PREFIX or file:///path)"
            ));
        }
        if s.is_empty() {
            return Err("empty store URL".into());
        }
        Ok(StoreUrl::File(s.into()))
    }
}

impl std::fmt::Display for StoreUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreUrl::File(p) => write!(f, "{}", p.display()),
            StoreUrl::S3 { bucket, prefix } => write!(f, "s3://{bucket}/{prefix}"),
        }
    }
}

/// An opened blobstore: the backend itself, for what only it can do (the
/// filesystem's `gc`, `fsck` and `tmp/` sweep; S3's multipart sweep).
#[derive(Clone)]
pub enum OpenedStore {
    /// The filesystem store.
    Fs(FsStore),
    /// The S3 store.
    S3(S3Store),
}

impl OpenedStore {
    /// The store behind the common interface.
    pub fn blobstore(&self) -> Arc<dyn Blobstore> {
        match self {
            OpenedStore::Fs(s) => Arc::new(s.clone()),
            OpenedStore::S3(s) => Arc::new(s.clone()),
        }
    }

    /// How the store's root swap is conditioned, for `serve`'s start-up
    /// log: on S3 `If-Match quoted` / `If-Match unquoted` (the probe's
    /// finding, [`super::s3::EtagForm`]) or `single writer`; `None` on the
    /// filesystem.
    pub fn describe_writes(&self) -> Option<String> {
        match self {
            OpenedStore::Fs(_) => None,
            OpenedStore::S3(s) => Some(s.describe_writes()),
        }
    }

    /// The filesystem store, if it is one.
    pub fn fs(&self) -> Option<&FsStore> {
        match self {
            OpenedStore::Fs(s) => Some(s),
            OpenedStore::S3(_) => None,
        }
    }

    /// Removes what killed writers left: `tmp/` files no live writer holds
    /// ([`super::fs::TMP_MIN_AGE`]) or S3 multipart uploads started more
    /// than [`super::s3::MULTIPART_MIN_AGE`] ago (other replicas may be
    /// writing). Logged, never fatal. Run at start-up of `serve` and `import`.
    pub async fn sweep_scratch(&self) {
        match self {
            OpenedStore::Fs(s) => match s.sweep_tmp(super::fs::TMP_MIN_AGE, true) {
                Ok((0, _)) => {}
                Ok((files, bytes)) => {
                    tracing::info!(files, bytes, "stale temporary files removed")
                }
                Err(e) => tracing::warn!(error = %e, "cannot sweep tmp/"),
            },
            OpenedStore::S3(s) => match s.sweep_multipart(super::s3::MULTIPART_MIN_AGE).await {
                Ok(0) => {}
                Ok(n) => tracing::info!(uploads = n, "stale S3 multipart uploads aborted"),
                Err(e) => tracing::warn!(error = %e, "cannot sweep S3 multipart uploads"),
            },
        }
    }
}

/// Opens the store `url`: a filesystem directory (created when `create`,
/// else it must exist; writes keep `min_free` free) or an S3 bucket
/// (`s3` gives the endpoint, region and the rest; the bucket and prefix
/// come from the URL), checked and probed by [`S3Store::open`].
/// `metadata_copies` (1 or 2, [`super::copies`]) overrides the backend's
/// default (2 on the filesystem, `s3.metadata_copies` on S3, default 1).
///
/// The store's layout version is checked ([`super::layout::check`])
/// before anything is written to it (not even the filesystem's `tmp/`):
/// a store of a newer layout than this build reads is refused, byte for
/// byte as it was; the marker is recorded when absent and `create`; a
/// damaged marker is noted ([`super::damage`]: `/readyz` and `fsck` say
/// so) and the store opened. With `create`, the root's second copy is
/// written where it is missing ([`super::refs::ensure_copy`]).
///
/// Errors: a one-line cause naming the directory or bucket.
pub async fn open(
    url: &StoreUrl,
    s3: &S3Settings,
    min_free: FreeSpaceFloor,
    metadata_copies: Option<u8>,
    create: bool,
) -> Result<OpenedStore> {
    let place = url.to_string();
    if let StoreUrl::File(dir) = url
        && dir.is_dir()
    {
        // Read where it lies, before `FsStore::open` makes `tmp/` and `refs/`.
        super::layout::check(&FsStore::unopened(dir), &place, false).await?;
    }
    let opened = open_backend(url, s3, min_free, metadata_copies, create).await?;
    let store = opened.blobstore();
    let checked = super::layout::check(&*store, &place, create).await?;
    if let (Some(cause), Some(notes)) = (&checked.damage, store.damage()) {
        notes.note(
            super::layout::LAYOUT_KEY,
            super::damage::Scope::Store,
            cause,
        );
    }
    if create && let Err(e) = super::refs::ensure_copy(&*store).await {
        tracing::warn!(error = %e, "refs/root.copy not written; written again by the next commit or fsck");
    }
    Ok(opened)
}

/// The backend of [`open`], before the layout check.
async fn open_backend(
    url: &StoreUrl,
    s3: &S3Settings,
    min_free: FreeSpaceFloor,
    metadata_copies: Option<u8>,
    create: bool,
) -> Result<OpenedStore> {
    match url {
        StoreUrl::File(dir) => {
            if !create && !dir.is_dir() {
                return Err(StoreError::Io(std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    format!("data directory {} does not exist", dir.display()),
                )));
            }
            let fs = FsStore::open(dir).map_err(|e| {
                StoreError::Io(std::io::Error::other(format!(
                    "opening data directory {}: {e}",
                    dir.display()
                )))
            })?;
            Ok(OpenedStore::Fs(
                fs.with_min_free_space(min_free).with_metadata_copies(
                    metadata_copies.unwrap_or(super::fs::DEFAULT_METADATA_COPIES),
                ),
            ))
        }
        StoreUrl::S3 { bucket, prefix } => {
            let settings = S3Settings {
                bucket: bucket.clone(),
                prefix: prefix.clone(),
                metadata_copies: metadata_copies.unwrap_or(s3.metadata_copies),
                ..s3.clone()
            };
            Ok(OpenedStore::S3(S3Store::open(&settings).await?))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        let s3 = |b: &str, p: &str| StoreUrl::S3 {
            bucket: b.into(),
            prefix: p.into(),
        };
        assert_eq!("s3://airlock".parse(), Ok(s3("airlock", "")));
        assert_eq!("s3://airlock/".parse(), Ok(s3("airlock", "")));
        assert_eq!("s3://airlock/site/a".parse(), Ok(s3("airlock", "site/a/")));
        assert_eq!(
            "file:///var/lib/airlock".parse(),
            Ok(StoreUrl::File("/var/lib/airlock".into()))
        );
        assert_eq!("data".parse(), Ok(StoreUrl::File("data".into())));
        for bad in [
            "s3://",
            "s3://Up/x",
            "s3://b/../x",
            "gs://b/x",
            "file://rel",
            "",
        ] {
            assert!(bad.parse::<StoreUrl>().is_err(), "{bad}");
        }
    }
}
