//! Reading OCI image-spec v1.1 and Docker schema 2 manifests for what they
//! reference (image-spec "Image Manifest", "Image Index", "Descriptors",
//! "Image Layout").
//!
//! Owns: media type constants and the walk from a manifest to its children
//! (config, layers, child manifests, subject). Never rewrites a manifest:
//! bytes are stored and served exactly as received; they are parsed only to
//! be read. Parsing uses the `oci-spec` crate's image-spec types
//! ([`spec::ImageManifest`], [`spec::ImageIndex`], [`spec::Descriptor`],
//! [`spec::MediaType`], [`spec::OciLayout`]); [`Manifest`] and
//! [`Descriptor`] are airlock's read-only view of them, with airlock's own
//! [`Digest`] (sha256/sha512 only) and media types kept as the strings given.
//!
//! Tolerance (what registries meet in the wild), and where it differs from
//! oci-spec on its own:
//! - unknown fields are ignored (serde's default in oci-spec too);
//! - Docker schema 2 manifests and manifest lists have the same shape as
//!   the OCI types and are read with them; any media type string is kept
//!   (oci-spec's `MediaType::Other`);
//! - a document that is neither an image manifest nor an index (no
//!   `config`, no `manifests`, e.g. the withdrawn
//!   `application/vnd.oci.artifact.manifest.v1+json` or a custom type) has
//!   no oci-spec type: only its `subject`, `artifactType` and `annotations`
//!   are read (distribution-spec lets a registry store any manifest type);
//! - oci-spec reads a platform's `os.version` under the wrong key
//!   (`os_version`, oci-spec 0.10): airlock matches platforms on os,
//!   architecture and variant only, so nothing depends on it.

use std::collections::BTreeMap;

pub use oci_spec::image as spec;
use oci_spec::image::{MediaType, ToDockerV2S2};

use crate::digest::Digest;

/// `application/vnd.oci.image.manifest.v1+json` (`spec::MediaType::ImageManifest`)
pub const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
/// `application/vnd.oci.image.index.v1+json` (`spec::MediaType::ImageIndex`)
pub const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
/// `application/vnd.docker.distribution.manifest.v2+json`
pub const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";
/// `application/vnd.docker.distribution.manifest.list.v2+json`
pub const DOCKER_LIST: &str = "application/vnd.docker.distribution.manifest.list.v2+json";
/// Annotation naming a tag in an OCI image layout's `index.json`.
pub const REF_NAME: &str = spec::ANNOTATION_REF_NAME;
/// Largest manifest airlock accepts, in bytes (distribution-spec: SHOULD accept ≥ 4 MB).
pub const MAX_MANIFEST_SIZE: u64 = 4 * 1024 * 1024;

/// True for the four manifest media types a registry serves as manifests.
pub fn is_manifest_type(media_type: &str) -> bool {
    is_index_type(media_type) || is_image_type(media_type)
}

/// True for an image index or Docker manifest list.
pub fn is_index_type(media_type: &str) -> bool {
    docker_or_oci(media_type, MediaType::ImageIndex)
}

/// True for an image manifest or Docker schema 2 manifest.
fn is_image_type(media_type: &str) -> bool {
    docker_or_oci(media_type, MediaType::ImageManifest)
}

/// True when `media_type` is `oci`'s string or its Docker schema 2 twin.
fn docker_or_oci(media_type: &str, oci: MediaType) -> bool {
    media_type == oci.as_ref() || oci.to_docker_v2s2().is_ok_and(|d| d == media_type)
}

/// A content descriptor (image-spec "Descriptors"), read from
/// [`spec::Descriptor`]; `urls` and `data` are not kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Descriptor {
    /// Media type of the referenced content, as given.
    pub media_type: String,
    /// Digest of the referenced content.
    pub digest: Digest,
    /// Size in bytes.
    pub size: u64,
    /// Annotations, sorted by key.
    pub annotations: Option<BTreeMap<String, String>>,
    /// Artifact type (image-spec v1.1).
    pub artifact_type: Option<String>,
    /// Platform of an index entry.
    pub platform: Option<spec::Platform>,
}

/// Why bytes are not an acceptable manifest.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid manifest: {0}")]
pub struct ManifestError(pub String);

impl Descriptor {
    /// A descriptor with no annotations, artifact type or platform.
    pub fn new(media_type: impl Into<String>, digest: Digest, size: u64) -> Descriptor {
        Descriptor {
            media_type: media_type.into(),
            digest,
            size,
            annotations: None,
            artifact_type: None,
            platform: None,
        }
    }

    /// The `os/architecture[/variant]` of an index entry, if it has a platform.
    pub fn platform_parts(&self) -> Option<(String, String, Option<&str>)> {
        let p = self.platform.as_ref()?;
        Some((
            p.os().to_string(),
            p.architecture().to_string(),
            p.variant().as_deref(),
        ))
    }

    /// The oci-spec descriptor with the same fields (for writing an image layout).
    pub fn to_spec(&self) -> spec::Descriptor {
        let digest = spec::Digest::try_from(self.digest.to_string())
            .expect("an airlock digest is a valid OCI digest");
        let mut d = spec::Descriptor::new(self.media_type.as_str().into(), self.size, digest);
        d.set_annotations(
            self.annotations
                .as_ref()
                .map(|a| a.iter().map(|(k, v)| (k.clone(), v.clone())).collect()),
        );
        d.set_artifact_type(self.artifact_type.as_deref().map(MediaType::from));
        d.set_platform(self.platform.clone());
        d
    }
}

impl TryFrom<&spec::Descriptor> for Descriptor {
    type Error = ManifestError;

    /// Errors: a digest whose algorithm airlock does not store (sha256 and
    /// sha512 only), or that is malformed.
    fn try_from(d: &spec::Descriptor) -> Result<Descriptor, ManifestError> {
        let digest = d
            .digest()
            .as_ref()
            .parse::<Digest>()
            .map_err(|e| ManifestError(format!("descriptor digest {}: {e}", d.digest())))?;
        Ok(Descriptor {
            media_type: d.media_type().to_string(),
            digest,
            size: d.size(),
            annotations: sorted(d.annotations()),
            artifact_type: d.artifact_type().as_ref().map(MediaType::to_string),
            platform: d.platform().clone(),
        })
    }
}

/// The parts of a manifest or index that name other content.
#[derive(Debug, Clone, Default)]
pub struct Manifest {
    /// `schemaVersion` (always 2 once parsed).
    pub schema_version: Option<u32>,
    /// The document's own `mediaType` field, if present.
    pub media_type: Option<String>,
    /// `artifactType` (image-spec v1.1).
    pub artifact_type: Option<String>,
    /// Image manifest: the config.
    pub config: Option<Descriptor>,
    /// Image manifest: the layers (also artifact blobs).
    pub layers: Vec<Descriptor>,
    /// Index: the child manifests.
    pub manifests: Vec<Descriptor>,
    /// The manifest this one refers to (referrers API).
    pub subject: Option<Descriptor>,
    /// Annotations, sorted by key.
    pub annotations: Option<BTreeMap<String, String>>,
    /// True when read as an image index (or Docker manifest list).
    index: bool,
}

/// The fields read first, to pick the oci-spec type to read the rest with.
#[derive(serde::Deserialize)]
struct Probe {
    #[serde(rename = "schemaVersion")]
    schema_version: Option<u32>,
    #[serde(rename = "mediaType")]
    media_type: Option<String>,
    manifests: Option<serde::de::IgnoredAny>,
    config: Option<serde::de::IgnoredAny>,
}

impl Probe {
    /// The probe of `bytes`. Errors: not JSON, or `schemaVersion` not 2.
    fn read(bytes: &[u8]) -> Result<Probe, ManifestError> {
        let probe: Probe = serde_json::from_slice(bytes).map_err(json_error)?;
        if probe.schema_version != Some(2) {
            return Err(ManifestError("schemaVersion must be 2".into()));
        }
        Ok(probe)
    }
}

/// A manifest that is neither an image manifest nor an index: oci-spec has
/// no type for it, and distribution-spec lets a registry store it; only
/// what the referrers API needs is read.
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct OtherManifest {
    artifact_type: Option<String>,
    subject: Option<spec::Descriptor>,
    annotations: Option<std::collections::HashMap<String, String>>,
}

fn sorted(
    a: &Option<std::collections::HashMap<String, String>>,
) -> Option<BTreeMap<String, String>> {
    a.as_ref()
        .map(|a| a.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
}

fn read_all(ds: &[spec::Descriptor]) -> Result<Vec<Descriptor>, ManifestError> {
    ds.iter().map(Descriptor::try_from).collect()
}

fn read_opt(d: &Option<spec::Descriptor>) -> Result<Option<Descriptor>, ManifestError> {
    d.as_ref().map(Descriptor::try_from).transpose()
}

fn json_error(e: serde_json::Error) -> ManifestError {
    ManifestError(e.to_string())
}

impl Manifest {
    /// The one reading of a manifest as a registry records it: what the
    /// registry accepts on a push (`registry::push`), what an import
    /// records, and what every later reader of a recorded manifest (the
    /// reachability walk of `gc`, `fsck`, `rollback`, recovery and backup)
    /// reads, so that nothing is accepted that they cannot read.
    ///
    /// `media_type` is the type it is recorded with (the push's
    /// `Content-Type`, normalized), `None` for a manifest reached without
    /// a record (an index child or `subject` no repository records), read
    /// as the body declares itself ([`Manifest::parse`], else as below).
    /// - One of the four manifest and index types ([`is_manifest_type`]):
    ///   read as that type ([`Manifest::parse_typed`]: an index must have
    ///   `manifests`, an image manifest `config` and `layers`,
    ///   `schemaVersion` 2), and its `mediaType` field, when present, must
    ///   be that type.
    /// - Any other type (artifact manifests, custom types; distribution-spec
    ///   lets a registry store them as given): a JSON object whose
    ///   `mediaType` field, if it names one of the four types, is that type
    ///   (else the body would pass for a manifest it was not checked as);
    ///   what it names is read as [`Manifest::parse`] reads it, else only
    ///   its `subject`, `artifactType` and `annotations` (which must be
    ///   well-formed when present).
    ///
    /// Errors: [`ManifestError`] naming what does not hold.
    pub fn read(bytes: &[u8], media_type: Option<&str>) -> Result<Manifest, ManifestError> {
        if let Some(t) = media_type.filter(|t| is_manifest_type(t)) {
            let m = Self::parse_typed(bytes, t)?;
            if let Some(field) = &m.media_type
                && field != t
            {
                return Err(ManifestError(format!(
                    "mediaType {field} differs from the media type {t}"
                )));
            }
            return Ok(m);
        }
        #[derive(serde::Deserialize)]
        struct Field {
            #[serde(rename = "mediaType")]
            media_type: Option<serde_json::Value>,
        }
        let field: Field = serde_json::from_slice(bytes).map_err(json_error)?;
        // serde also reads a struct from an array: only an object is one.
        if bytes.trim_ascii_start().first() != Some(&b'{') {
            return Err(ManifestError("not a JSON object".into()));
        }
        if let (Some(t), Some(serde_json::Value::String(declared))) =
            (media_type, &field.media_type)
            && is_manifest_type(declared)
        {
            return Err(ManifestError(format!(
                "mediaType {declared} differs from the media type {t}"
            )));
        }
        let declared = match field.media_type {
            Some(serde_json::Value::String(t)) => Some(t),
            _ => None,
        };
        Self::parse(bytes).or_else(|_| Self::parse_other(bytes, declared))
    }

    /// Parses `bytes` as an image manifest ([`spec::ImageManifest`]), an
    /// index ([`spec::ImageIndex`]) or another manifest type. The kind is
    /// the `mediaType` field when it names one, else the shape (`manifests`
    /// → index, `config` → image manifest).
    ///
    /// Errors: not JSON, not an object with `schemaVersion` 2, a required
    /// field missing (image manifest: `config`, `layers`; index:
    /// `manifests`; descriptor: `mediaType`, `digest`, `size`; platform:
    /// `os`, `architecture`), or a digest airlock cannot store.
    pub fn parse(bytes: &[u8]) -> Result<Manifest, ManifestError> {
        let probe = Probe::read(bytes)?;
        let declared = probe.media_type.as_deref();
        let index = match declared {
            Some(t) if is_index_type(t) => true,
            Some(t) if is_image_type(t) => false,
            _ if probe.manifests.is_some() => true,
            _ if probe.config.is_some() => false,
            _ => return Self::parse_other(bytes, probe.media_type),
        };
        let read = Self::parse_as(bytes, index, probe.media_type.clone());
        match declared {
            // A type of its own shaped like an image or index: read what is
            // readable rather than refuse what the registry may store.
            Some(t) if !is_manifest_type(t) => {
                read.or_else(|_| Self::parse_other(bytes, probe.media_type))
            }
            _ => read,
        }
    }

    /// Reads `bytes` as the manifest type `media_type` says it is (one of
    /// the four types of [`is_manifest_type`]): an index or manifest list
    /// must have `manifests`, an image manifest `config` and `layers`,
    /// whatever else the body holds (image-spec "Image Index Property
    /// Descriptions", "Image Manifest Property Descriptions"), and
    /// `schemaVersion` must be 2. What a registry checks against the
    /// `Content-Type` a manifest is pushed with, where [`Manifest::parse`]
    /// goes by the body alone.
    ///
    /// Errors: not JSON, not that type's shape, or a bad descriptor.
    pub fn parse_typed(bytes: &[u8], media_type: &str) -> Result<Manifest, ManifestError> {
        let probe = Probe::read(bytes)?;
        Self::parse_as(bytes, is_index_type(media_type), probe.media_type)
    }

    /// Reads `bytes` as an index (`index`) or an image manifest.
    fn parse_as(
        bytes: &[u8],
        index: bool,
        media_type: Option<String>,
    ) -> Result<Manifest, ManifestError> {
        if index {
            let i: spec::ImageIndex = serde_json::from_slice(bytes).map_err(json_error)?;
            Ok(Manifest {
                schema_version: Some(i.schema_version()),
                media_type,
                artifact_type: i.artifact_type().as_ref().map(MediaType::to_string),
                manifests: read_all(i.manifests())?,
                subject: read_opt(i.subject())?,
                annotations: sorted(i.annotations()),
                index: true,
                ..Manifest::default()
            })
        } else {
            let m: spec::ImageManifest = serde_json::from_slice(bytes).map_err(json_error)?;
            Ok(Manifest {
                schema_version: Some(m.schema_version()),
                media_type,
                artifact_type: m.artifact_type().as_ref().map(MediaType::to_string),
                config: Some(Descriptor::try_from(m.config())?),
                layers: read_all(m.layers())?,
                subject: read_opt(m.subject())?,
                annotations: sorted(m.annotations()),
                ..Manifest::default()
            })
        }
    }

    fn parse_other(bytes: &[u8], media_type: Option<String>) -> Result<Manifest, ManifestError> {
        let o: OtherManifest = serde_json::from_slice(bytes).map_err(json_error)?;
        Ok(Manifest {
            schema_version: Some(2),
            media_type,
            artifact_type: o.artifact_type,
            subject: read_opt(&o.subject)?,
            annotations: sorted(&o.annotations),
            ..Manifest::default()
        })
    }

    /// The media type: the `mediaType` field, else inferred from the shape
    /// (an index → OCI index, a `config` → OCI manifest).
    pub fn effective_media_type(&self) -> Option<&str> {
        if let Some(mt) = &self.media_type {
            return Some(mt);
        }
        if self.index {
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

/// The bytes of an image layout's `oci-layout` file (image-spec "Image
/// Layout", version 1.0.0), written with [`spec::OciLayout`].
pub fn layout_header() -> Vec<u8> {
    let layout = spec::OciLayoutBuilder::default()
        .image_layout_version("1.0.0")
        .build()
        .expect("every field is set");
    serde_json::to_vec(&layout).expect("an OciLayout serializes")
}

/// The bytes of an image layout's `index.json` listing `manifests`
/// (pretty-printed), written with [`spec::ImageIndex`].
pub fn layout_index(manifests: &[Descriptor]) -> Vec<u8> {
    let index = spec::ImageIndexBuilder::default()
        .schema_version(spec::SCHEMA_VERSION)
        .media_type(MediaType::ImageIndex)
        .manifests(
            manifests
                .iter()
                .map(Descriptor::to_spec)
                .collect::<Vec<_>>(),
        )
        .build()
        .expect("every required field is set");
    serde_json::to_vec_pretty(&index).expect("an ImageIndex serializes")
}

#[cfg(test)]
mod tests;
