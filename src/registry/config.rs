//! What the operator switched on for the `/v2` API: writes, deletes, the
//! default mirror namespace, how long upload sessions live and how often
//! pulls are recorded.
//!
//! Owns: the typed registry configuration, built once in `main` and handed
//! to the router through `server::App`. Never read from globals or the
//! environment here.

use std::time::Duration;

/// Default lifetime of an upload session: 24 hours.
pub const DEFAULT_UPLOAD_EXPIRY: Duration = Duration::from_secs(24 * 60 * 60);

/// Registry switches (`airlock serve` flags).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegistryConfig {
    /// Serve the push endpoints (distribution-spec v1.1 "Push": end-4a/4b,
    /// end-5, end-6, end-7, end-11, end-13, upload cancel). Off: 405 `UNSUPPORTED`.
    pub allow_push: bool,
    /// Serve the content management endpoints (distribution-spec v1.1
    /// "Content Management": end-9, end-10). Off: 405 `UNSUPPORTED`.
    pub allow_delete: bool,
    /// Namespace tried for reads that carry no `ns=` query parameter when
    /// `<name>` itself does not exist (docker's `registry-mirrors`), e.g.
    /// `docker.io`: `GET /v2/library/busybox/...` then serves
    /// `docker.io/library/busybox`.
    pub mirror_namespace: Option<String>,
    /// Upload sessions older than this are refused and swept.
    pub upload_expiry: Duration,
    /// Caps on blob uploads (blob size, open sessions).
    pub uploads: super::uploads::UploadLimits,
    /// Most entries in one page of `tags/list` or `_catalog`; a larger or
    /// absent `n` is clamped to it and a `Link` names the next page.
    pub max_page: usize,
    /// Caps on one page of the referrers list (descriptors, bytes).
    pub referrers: super::referrers::ReferrersLimits,
    /// Immutable tag rules (Harbor's tag immutability):
    /// `REPOSITORY-PATTERN:TAG-PATTERN`, `*` within a path segment, `**`
    /// across. A matching tag may be created but never moved or deleted,
    /// by a push, an import or a delete (403 `DENIED`).
    pub immutable_tags: Vec<String>,
    /// Redirect mode: a blob GET answers 307 to a URL of the object store
    /// ([`crate::store::Blobstore::presigned_get`], S3 only) instead of
    /// streaming the blob through airlock. Off by default: inside an air gap
    /// clients often cannot reach the object store.
    pub blob_redirect: bool,
    /// How often the server writes the pulls it noted to the store
    /// ([`crate::state::pulls`], for `gc`'s `pulled_within_days`);
    /// zero: pulls are not recorded.
    pub pull_record_interval: Duration,
}

/// Default [`RegistryConfig::pull_record_interval`]: 60 seconds.
pub const DEFAULT_PULL_RECORD_INTERVAL: Duration = Duration::from_secs(60);

/// Default [`RegistryConfig::max_page`]: 1,000 entries.
pub const DEFAULT_MAX_PAGE: usize = 1000;

impl Default for RegistryConfig {
    /// Read-only, no mirror namespace, 24 h upload expiry, 1,000-entry
    /// pages, referrers pages of 1,000 descriptors / 4 MiB, pulls recorded
    /// every 60 s.
    fn default() -> RegistryConfig {
        RegistryConfig {
            allow_push: false,
            allow_delete: false,
            mirror_namespace: None,
            upload_expiry: DEFAULT_UPLOAD_EXPIRY,
            max_page: DEFAULT_MAX_PAGE,
            referrers: super::referrers::ReferrersLimits::default(),
            uploads: super::uploads::UploadLimits::default(),
            blob_redirect: false,
            immutable_tags: Vec::new(),
            pull_record_interval: DEFAULT_PULL_RECORD_INTERVAL,
        }
    }
}

impl RegistryConfig {
    /// Whether `repository:tag` matches an immutable tag rule.
    pub fn is_immutable(&self, repository: &crate::names::RepositoryName, tag: &str) -> bool {
        self.immutable_tags.iter().any(|rule| {
            let (repos, tags) = rule.rsplit_once(':').unwrap_or((rule.as_str(), "*"));
            crate::names::glob_match(repos, repository.as_str())
                && crate::names::glob_match(tags, tag)
        })
    }
}
