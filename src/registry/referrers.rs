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
//! by digest; no paging (the whole list is one page, so no `Link`).

use std::collections::BTreeMap;

use serde::Serialize;

use super::errors::Result;
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

#[derive(Serialize)]
struct Index {
    #[serde(rename = "schemaVersion")]
    schema_version: u32,
    #[serde(rename = "mediaType")]
    media_type: &'static str,
    manifests: Vec<ReferrerDescriptor>,
}

#[derive(serde::Deserialize)]
struct Annotated {
    annotations: Option<BTreeMap<String, String>>,
}

/// GET `/v2/<name>/referrers/<digest>[?artifactType=<type>]`.
///
/// Errors: only internal ones (store failures); a bad digest is refused
/// with 400 `DIGEST_INVALID` by the route parser.
pub async fn referrers(
    state: &StateStore,
    name: &RepositoryName,
    subject: &Digest,
    artifact_type: Option<&str>,
) -> Result<ReferrersResponse> {
    let snap = state.snapshot().await?;
    let mut manifests = Vec::new();
    if let Some(repo) = state.repository(&snap, name).await? {
        for (digest, info) in &repo.manifests {
            if info.subject.as_ref() != Some(subject) {
                continue;
            }
            if artifact_type.is_some_and(|t| info.artifact_type.as_deref() != Some(t)) {
                continue;
            }
            let annotations = match store::get_verified(&**state.blobstore(), digest).await {
                Ok(bytes) => serde_json::from_slice::<Annotated>(&bytes)
                    .ok()
                    .and_then(|a| a.annotations),
                Err(e) => {
                    tracing::warn!(%digest, error = %e, "cannot read a referrer's annotations");
                    None
                }
            };
            manifests.push(ReferrerDescriptor {
                media_type: info.media_type.clone(),
                digest: digest.clone(),
                size: info.size,
                artifact_type: info.artifact_type.clone(),
                annotations,
            });
        }
    }
    let index = Index {
        schema_version: 2,
        media_type: OCI_INDEX,
        manifests,
    };
    let body = serde_json::to_vec(&index)
        .map_err(|e| super::errors::RegistryError::Internal(e.to_string()))?;
    Ok(ReferrersResponse {
        body,
        filtered: artifact_type.is_some(),
    })
}
