//! The referrers API (distribution-spec v1.1 "Listing Referrers", end-12a,
//! end-12b).
//!
//! Owns: building the image index of the manifests whose `subject` is a
//! given digest. Each descriptor carries the referrer's media type, digest,
//! size, `artifactType` (its `artifactType`, else its config media type;
//! absent for an index without one) and its `annotations`, read from the
//! stored manifest. Never changes state.
//!
//! Always 200 while the digest is valid: an unknown subject or repository
//! gives an empty index (the spec forbids 404 here). Descriptors are sorted
//! by digest and paged as the spec allows ("the registry MAY paginate ...
//! with a `Link` header", RFC 8288): a page holds at most
//! [`ReferrersLimits::max_descriptors`] descriptors (a smaller `n` query
//! parameter lowers it) and at most [`ReferrersLimits::max_bytes`] of JSON
//! (a single larger descriptor still gets a page of its own), and `Link:
//! </v2/<name>/referrers/<digest>?n=<n>&last=<digest>[&artifactType=..]>;
//! rel="next"` names the next page while descriptors remain. The list is
//! read from the repository's referrers index a page at a time, never by
//! reading every manifest.

use std::collections::BTreeMap;

use serde::Serialize;

use super::discovery::Paging;
use super::errors::{ErrorCode, RegistryError, Result};
use super::responses::ReferrersResponse;
use crate::digest::Digest;
use crate::names::RepositoryName;
use crate::oci::OCI_INDEX;
use crate::state::StateStore;
use crate::store;

/// One entry of the referrers index.
#[derive(Debug, Serialize)]
pub struct ReferrerDescriptor {
    /// The referrer's media type.
    #[serde(rename = "mediaType")]
    pub media_type: String,
    /// Its digest.
    pub digest: Digest,
    /// Its size in bytes.
    pub size: u64,
    /// Its artifact type.
    #[serde(rename = "artifactType", skip_serializing_if = "Option::is_none")]
    pub artifact_type: Option<String>,
    /// Its annotations.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub annotations: Option<BTreeMap<String, String>>,
}

#[derive(serde::Deserialize)]
struct Annotated {
    annotations: Option<BTreeMap<String, String>>,
}

/// Caps on one page of the referrers list (`airlock serve
/// --max-referrers-page`, `--max-referrers-page-bytes`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReferrersLimits {
    /// Most descriptors in one page.
    pub max_descriptors: usize,
    /// Most bytes of JSON in one page.
    pub max_bytes: usize,
}

impl Default for ReferrersLimits {
    /// 1,000 descriptors and 4 MiB per page.
    fn default() -> ReferrersLimits {
        ReferrersLimits {
            max_descriptors: 1000,
            max_bytes: 4 * 1024 * 1024,
        }
    }
}

/// Referrers read from the index at a time.
const SCAN: usize = 256;

/// GET `/v2/<name>/referrers/<digest>[?artifactType=<type>][&n=<n>][&last=<digest>]`.
///
/// `paging.last` is the last referrer digest of the previous page
/// (exclusive); `paging.n` is already clamped to `limits.max_descriptors`.
///
/// Errors: 400 `DIGEST_INVALID` when `last` is not a digest; otherwise only
/// internal ones (store failures); a bad subject digest is refused with
/// 400 `DIGEST_INVALID` by the route parser.
pub async fn referrers(
    state: &StateStore,
    name: &RepositoryName,
    subject: &Digest,
    artifact_type: Option<&str>,
    paging: &Paging,
    limits: ReferrersLimits,
) -> Result<ReferrersResponse> {
    let mut cursor: Option<Digest> = match &paging.last {
        Some(l) => Some(l.parse().map_err(|_| {
            RegistryError::new(ErrorCode::DigestInvalid, serde_json::json!({ "last": l }))
        })?),
        None => None,
    };
    let mut body =
        format!(r#"{{"schemaVersion":2,"mediaType":"{OCI_INDEX}","manifests":["#).into_bytes();
    let mut count = 0;
    let mut last_sent: Option<Digest> = None;
    let mut more = false;
    let snap = state.snapshot().await?;
    if let Some(repo) = state.repository(&snap, name).await?
        && paging.n > 0
    {
        'scan: loop {
            let batch = repo.referrers(subject, cursor.as_ref(), SCAN).await?;
            let done = batch.len() < SCAN;
            for (digest, info) in batch {
                cursor = Some(digest.clone());
                if artifact_type.is_some_and(|t| info.artifact_type.as_deref() != Some(t)) {
                    continue;
                }
                if count == paging.n {
                    more = true;
                    break 'scan;
                }
                let entry = descriptor(state, digest.clone(), &info).await?;
                if count > 0 && body.len() + 1 + entry.len() + 2 > limits.max_bytes {
                    more = true;
                    break 'scan;
                }
                if count > 0 {
                    body.push(b',');
                }
                body.extend_from_slice(&entry);
                count += 1;
                last_sent = Some(digest);
            }
            if done {
                break;
            }
        }
    }
    body.extend_from_slice(b"]}");
    let next = match (more, last_sent) {
        (true, Some(last)) => {
            let mut url = format!("/v2/{name}/referrers/{subject}?n={}&last={last}", paging.n);
            if let Some(t) = artifact_type {
                url.push_str("&artifactType=");
                url.extend(form_urlencoded::byte_serialize(t.as_bytes()));
            }
            Some(url)
        }
        _ => None,
    };
    Ok(ReferrersResponse {
        body,
        filtered: artifact_type.is_some(),
        next,
    })
}

/// The JSON of one referrer's descriptor, with the annotations of the
/// stored manifest (none when it cannot be read, which is logged).
async fn descriptor(
    state: &StateStore,
    digest: Digest,
    info: &crate::state::ManifestInfo,
) -> Result<Vec<u8>> {
    let annotations = match store::get_verified(&**state.blobstore(), &digest).await {
        Ok(bytes) => serde_json::from_slice::<Annotated>(&bytes)
            .ok()
            .and_then(|a| a.annotations),
        Err(e) => {
            tracing::warn!(%digest, error = %e, "cannot read a referrer's annotations");
            None
        }
    };
    let d = ReferrerDescriptor {
        media_type: info.media_type.clone(),
        digest,
        size: info.size,
        artifact_type: info.artifact_type.clone(),
        annotations,
    };
    serde_json::to_vec(&d).map_err(|e| super::errors::RegistryError::Internal(e.to_string()))
}
