//! Reading OCI image-spec v1.1 and Docker schema 2 manifests for what they
//! reference (image-spec "Image Manifest", "Image Index", "Descriptors").
//!
//! Owns: media type constants and the walk from a manifest to its children
//! (config, layers, child manifests, subject). Never rewrites a manifest:
//! bytes are stored and served exactly as received.

use std::collections::BTreeMap;

use crate::digest::Digest;

/// `application/vnd.oci.image.manifest.v1+json`
pub const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
/// `application/vnd.oci.image.index.v1+json`
pub const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
/// `application/vnd.docker.distribution.manifest.v2+json`
pub const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";
/// `application/vnd.docker.distribution.manifest.list.v2+json`
pub const DOCKER_LIST: &str = "application/vnd.docker.distribution.manifest.list.v2+json";
/// Annotation naming a tag in an OCI image layout's `index.json`.
pub const REF_NAME: &str = "org.opencontainers.image.ref.name";
/// Largest manifest airlock accepts, in bytes (distribution-spec: SHOULD accept ≥ 4 MB).
pub const MAX_MANIFEST_SIZE: u64 = 4 * 1024 * 1024;

/// True for the four manifest media types a registry serves as manifests.
pub fn is_manifest_type(media_type: &str) -> bool {
    matches!(
        media_type,
        OCI_MANIFEST | OCI_INDEX | DOCKER_MANIFEST | DOCKER_LIST
    )
}

/// True for an image index or Docker manifest list.
pub fn is_index_type(media_type: &str) -> bool {
    matches!(media_type, OCI_INDEX | DOCKER_LIST)
}

/// A content descriptor (image-spec "Descriptors"); unknown fields are ignored.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Descriptor {
    /// Media type of the referenced content.
    #[serde(rename = "mediaType")]
    pub media_type: String,
    /// Digest of the referenced content.
    pub digest: Digest,
    /// Size in bytes.
    pub size: u64,
    /// Annotations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<BTreeMap<String, String>>,
    /// Artifact type (image-spec v1.1).
    #[serde(
        rename = "artifactType",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub artifact_type: Option<String>,
    /// Platform of an index entry, kept as given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub platform: Option<serde_json::Value>,
}

/// The parts of a manifest or index that name other content.
#[derive(Debug, Clone, Default, serde::Deserialize)]
pub struct Manifest {
    /// `schemaVersion` (must be 2).
    #[serde(rename = "schemaVersion")]
    pub schema_version: Option<u32>,
    /// The document's own `mediaType` field, if present.
    #[serde(rename = "mediaType")]
    pub media_type: Option<String>,
    /// `artifactType` (image-spec v1.1).
    #[serde(rename = "artifactType")]
    pub artifact_type: Option<String>,
    /// Image manifest: the config.
    pub config: Option<Descriptor>,
    /// Image manifest: the layers (also artifact blobs).
    #[serde(default)]
    pub layers: Vec<Descriptor>,
    /// Index: the child manifests.
    #[serde(default)]
    pub manifests: Vec<Descriptor>,
    /// The manifest this one refers to (referrers API).
    pub subject: Option<Descriptor>,
    /// Annotations.
    pub annotations: Option<BTreeMap<String, String>>,
}

/// Why bytes are not an acceptable manifest.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid manifest: {0}")]
pub struct ManifestError(pub String);

impl Manifest {
    /// Parses `bytes` as a manifest or index. Errors: not JSON, not an object
    /// with `schemaVersion` 2, or a descriptor with an invalid digest.
    pub fn parse(bytes: &[u8]) -> Result<Manifest, ManifestError> {
        let m: Manifest =
            serde_json::from_slice(bytes).map_err(|e| ManifestError(e.to_string()))?;
        if m.schema_version != Some(2) {
            return Err(ManifestError("schemaVersion must be 2".into()));
        }
        Ok(m)
    }

    /// The media type: the `mediaType` field, else inferred from the shape
    /// (`manifests` → OCI index, `config` → OCI manifest).
    pub fn effective_media_type(&self) -> Option<&str> {
        if let Some(mt) = &self.media_type {
            return Some(mt);
        }
        if !self.manifests.is_empty() {
            Some(OCI_INDEX)
        } else if self.config.is_some() {
            Some(OCI_MANIFEST)
        } else {
            None
        }
    }

    /// Blobs referenced (config and layers), in document order.
    pub fn blobs(&self) -> impl Iterator<Item = &Descriptor> {
        self.config.iter().chain(self.layers.iter())
    }

    /// The referrers `artifactType`: `artifactType`, else the config media type.
    pub fn referrer_artifact_type(&self) -> Option<String> {
        self.artifact_type
            .clone()
            .or_else(|| self.config.as_ref().map(|c| c.media_type.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_index_and_manifest() {
        let d = Digest::sha256_of(b"x");
        let idx = format!(
            r#"{{"schemaVersion":2,"manifests":[{{"mediaType":"{OCI_MANIFEST}","digest":"{d}","size":1,"platform":{{"os":"linux","architecture":"arm64"}}}}]}}"#
        );
        let m = Manifest::parse(idx.as_bytes()).unwrap();
        assert_eq!(m.effective_media_type(), Some(OCI_INDEX));
        assert_eq!(m.manifests[0].digest, d);
        assert!(Manifest::parse(b"{\"schemaVersion\":1}").is_err());
        assert!(Manifest::parse(b"[]").is_err());
        let bad =
            r#"{"schemaVersion":2,"config":{"mediaType":"x","digest":"sha256:../x","size":1}}"#;
        assert!(Manifest::parse(bad.as_bytes()).is_err());
    }
}
