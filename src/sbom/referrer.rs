//! The OCI artifact that carries an SBOM as a referrer of its image
//! (image-spec v1.1 "Guidelines for Artifact Usage", distribution-spec v1.1
//! "Listing Referrers"): an image manifest with `artifactType`
//! `application/spdx+json`, the empty config
//! (`application/vnd.oci.empty.v1+json`, `{}`), one layer holding the SPDX
//! JSON, and `subject` = the image manifest it describes. What oras, cosign
//! and syft's `attest` attach; `oras discover` lists it.

use std::collections::BTreeMap;

use crate::digest::Digest;
use crate::oci;

/// Media type of the empty config (image-spec "Guidance for an Empty Descriptor").
pub const EMPTY_MEDIA_TYPE: &str = "application/vnd.oci.empty.v1+json";
/// The empty config's content.
pub const EMPTY: &[u8] = b"{}";

/// One referrer artifact: its manifest and the blobs it names.
#[derive(Debug, Clone)]
pub struct Artifact {
    /// The manifest bytes (`application/vnd.oci.image.manifest.v1+json`).
    pub manifest: Vec<u8>,
    /// Its digest.
    pub digest: Digest,
    /// Blobs the manifest names: the empty config and the document.
    pub blobs: Vec<(Digest, Vec<u8>)>,
}

/// The artifact carrying `document` (media type `media_type`, e.g.
/// [`super::spdx::MEDIA_TYPE`]) for the image manifest `subject`
/// (`subject_media_type`, `subject_size` bytes), created at `created`.
pub fn artifact(
    document: Vec<u8>,
    media_type: &str,
    subject: &Digest,
    subject_media_type: &str,
    subject_size: u64,
    created: &str,
) -> Artifact {
    let doc_digest = Digest::sha256_of(&document);
    let empty = Digest::sha256_of(EMPTY);
    let manifest = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": oci::OCI_MANIFEST,
        "artifactType": media_type,
        "config": {"mediaType": EMPTY_MEDIA_TYPE, "digest": empty.to_string(), "size": EMPTY.len(), "data": "e30="},
        "layers": [{
            "mediaType": media_type,
            "digest": doc_digest.to_string(),
            "size": document.len(),
            "annotations": {"org.opencontainers.image.title": "sbom.spdx.json"},
        }],
        "subject": {"mediaType": subject_media_type, "digest": subject.to_string(), "size": subject_size},
        "annotations": BTreeMap::from([
            ("org.opencontainers.image.created", created),
            ("dev.airlock.sbom.generator", concat!("airlock ", env!("CARGO_PKG_VERSION"))),
        ]),
    });
    let manifest = serde_json::to_vec(&manifest).unwrap_or_default();
    Artifact {
        digest: Digest::sha256_of(&manifest),
        manifest,
        blobs: vec![(empty, EMPTY.to_vec()), (doc_digest, document)],
    }
}
