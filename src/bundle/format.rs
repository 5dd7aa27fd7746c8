//! Bundle format v1: the signed bundle document and the tar entry names.
//!
//! A bundle is a plain tar (DESIGN.md "Bundle format v1"):
//! 1. `airlock-bundle.json.asc`: an OpenPGP cleartext-signed [`BundleDoc`] (JSON),
//! 2. `oci-layout` and `index.json`: an OCI image layout (image-spec "Image Layout"),
//! 3. `blobs/<alg>/<hex>`: each carried blob once.
//!
//! The document may name system stack candidates ([`StackEntry`]): images
//! of the same bundle, recorded by import for an admin to promote.
//!
//! Nothing else may appear: any other path, any entry type but a regular file,
//! any duplicate, and any blob not listed in the signed document is refused.

use crate::digest::Digest;
use crate::names::{RepositoryName, Tag};
use crate::stacks::{ImageRef, StackName};

/// Name of the first tar entry.
pub const SIGNED_DOC: &str = "airlock-bundle.json.asc";
/// `oci-layout` entry name.
pub const OCI_LAYOUT: &str = "oci-layout";
/// `index.json` entry name.
pub const INDEX_JSON: &str = "index.json";
/// `format` field value of a v1 bundle document.
pub const FORMAT_V1: &str = "airlock-bundle/v1";
/// Largest signed document accepted, in bytes (bounds memory before verification).
pub const MAX_SIGNED_DOC: u64 = 64 * 1024 * 1024;
/// Largest `oci-layout` / `index.json` entry accepted, in bytes.
pub const MAX_LAYOUT_FILE: u64 = 16 * 1024 * 1024;

/// The signed bundle document.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BundleDoc {
    /// Always [`FORMAT_V1`].
    pub format: String,
    /// Random UUID of this bundle.
    pub id: String,
    /// Creation time, RFC 3339 UTC.
    pub created: String,
    /// When the bundle stops being importable, RFC 3339 UTC (after
    /// `created`; see [`super::freshness`]). Absent in bundles made before
    /// bundles carried one, which import as before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires: Option<String>,
    /// Who made it (`user@host`, airlock version, signing key fingerprint).
    pub creator: String,
    /// Images carried (or, for a delta, referred to).
    pub images: Vec<ImageEntry>,
    /// Digests of the layout files, so they are verified like blobs.
    pub layout: LayoutDigests,
    /// Every blob the tar carries, in tar order.
    pub blobs: Vec<BlobEntry>,
    /// Blobs a delta bundle leaves out: the importing store must hold them already.
    #[serde(default)]
    pub required: Vec<BlobEntry>,
    /// torcx addon archives carried (`[[addon]]`; their blobs are in `blobs` or `required`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub addons: Vec<crate::torcx::bundle::AddonEntry>,
    /// Vendor-signed torcx contents carried byte for byte (`[[torcx_contents]]`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub torcx_contents: Vec<crate::torcx::bundle::VendorEntry>,
    /// System stack candidates (`[[stack]]` in the mirror config): import
    /// records them; only an admin promotes them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stacks: Vec<StackEntry>,
    /// Vulnerability feeds carried (`[[feed]]`; their blobs are in `blobs`):
    /// import normalizes and records them ([`crate::sbom::feed`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub feeds: Vec<crate::sbom::feed::FeedEntry>,
}

/// A system stack candidate: images of this bundle, pinned by digest.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StackEntry {
    /// The stack name (e.g. `cflinuxfs4`).
    pub name: StackName,
    /// Its description.
    #[serde(default)]
    pub description: String,
    /// The rootfs image.
    pub image: ImageRef,
    /// Builders' build image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub build_image: Option<ImageRef>,
    /// Builders' run image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_image: Option<ImageRef>,
}

/// One image: a repository, its tags, and the root manifest (or index).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ImageEntry {
    /// Target repository.
    pub repository: RepositoryName,
    /// Tags to point at `digest`.
    pub tags: Vec<Tag>,
    /// Root manifest or index digest.
    pub digest: Digest,
    /// Its media type.
    #[serde(rename = "mediaType")]
    pub media_type: String,
    /// Its size in bytes.
    pub size: u64,
    /// Child manifests of the index `digest` that the bundle leaves out on
    /// purpose (`platforms`): import records the index whole without them,
    /// and the registry answers 404 for them. Empty for whole images.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub absent: Vec<Digest>,
}

/// Checks that no `repository:tag` is claimed by two different images (the
/// same digest twice is fine): one signed bundle must mean one thing, and
/// its OCI layout and its import must agree on what a tag names.
///
/// Errors: the first conflict, naming the tag and both digests.
pub fn check_tags(images: &[ImageEntry]) -> Result<(), String> {
    let mut claimed: std::collections::HashMap<(&RepositoryName, &Tag), &Digest> =
        std::collections::HashMap::new();
    for img in images {
        for tag in &img.tags {
            match claimed.insert((&img.repository, tag), &img.digest) {
                Some(other) if other != &img.digest => {
                    return Err(format!(
                        "{}:{tag} is claimed by two images, {other} and {}",
                        img.repository, img.digest
                    ));
                }
                _ => {}
            }
        }
    }
    Ok(())
}

/// Digest of `oci-layout` and `index.json`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LayoutDigests {
    /// Digest of the `oci-layout` entry.
    #[serde(rename = "oci-layout")]
    pub oci_layout: Digest,
    /// Digest of the `index.json` entry.
    #[serde(rename = "index.json")]
    pub index_json: Digest,
}

/// A blob: digest and size in bytes.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BlobEntry {
    /// Content digest.
    pub digest: Digest,
    /// Size in bytes.
    pub size: u64,
}

/// The tar path of a blob: `blobs/<alg>/<hex>`.
pub fn blob_path(digest: &Digest) -> String {
    format!("blobs/{}/{}", digest.algorithm().name(), digest.hex())
}

/// The blob a tar path names, if it is exactly `blobs/<alg>/<hex>` with a valid digest.
pub fn parse_blob_path(path: &str) -> Option<Digest> {
    let rest = path.strip_prefix("blobs/")?;
    let (alg, hex) = rest.split_once('/')?;
    let d: Digest = format!("{alg}:{hex}").parse().ok()?;
    (blob_path(&d) == path).then_some(d)
}

/// The inventory a disconnected store writes for delta bundles (`airlock inventory`).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Inventory {
    /// Always `airlock-inventory/v1`.
    pub format: String,
    /// Every blob the store holds.
    pub blobs: Vec<Digest>,
}

/// `format` of an [`Inventory`].
pub const INVENTORY_V1: &str = "airlock-inventory/v1";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tag_names_one_digest() {
        let img = |tag: &str, d: &[u8]| ImageEntry {
            repository: "b/conflict".parse().unwrap(),
            tags: vec![tag.parse().unwrap()],
            digest: Digest::sha256_of(d),
            media_type: crate::oci::OCI_MANIFEST.into(),
            size: 1,
            absent: Vec::new(),
        };
        assert_eq!(check_tags(&[img("v1", b"a"), img("v1", b"a")]), Ok(()));
        assert_eq!(check_tags(&[img("v1", b"a"), img("v2", b"b")]), Ok(()));
        let err = check_tags(&[img("v1", b"a"), img("v1", b"b")]).unwrap_err();
        assert!(
            err.starts_with("b/conflict:v1 is claimed by two images"),
            "{err}"
        );
        assert!(err.contains(&Digest::sha256_of(b"b").to_string()), "{err}");
    }

    #[test]
    fn blob_paths_round_trip_and_reject_tricks() {
        let d = Digest::sha256_of(b"x");
        assert_eq!(parse_blob_path(&blob_path(&d)), Some(d.clone()));
        assert_eq!(
            parse_blob_path(&format!("./blobs/sha256/{}", d.hex())),
            None
        );
        assert_eq!(parse_blob_path(&format!("blobs/sha256/{}/", d.hex())), None);
        assert_eq!(
            parse_blob_path(&format!("blobs/sha256/../{}", d.hex())),
            None
        );
        assert_eq!(parse_blob_path("blobs/md5/abc"), None);
    }
}
