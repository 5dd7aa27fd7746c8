//! Reading stack images from the store: references, platforms, configs
//! (labels, environment) and layers.
//!
//! Owns: turning `REPO:TAG` / `REPO@DIGEST` into a pinned [`ImageRef`] held
//! by the registry, and walking an image (or index) to its platform
//! manifests. Never changes state.

use crate::digest::Digest;
use crate::names::{RepositoryName, Tag};
use crate::oci::{self, Manifest};
use crate::state::{Snapshot, StateStore};
use crate::store::{self, Blobstore};

use super::StackError;
use super::flatten::Layer;
use super::table::ImageRef;

/// The server's own platform as an OCI `os/architecture`: the default when
/// an image has several and the request names none.
pub fn native_platform() -> String {
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        "powerpc64" => "ppc64le",
        other => other,
    };
    format!("linux/{arch}")
}

/// `(REPO, Ok(TAG) or Err(DIGEST))` of `REPO@DIGEST`, `REPO:TAG` or `REPO`
/// (tag `latest`); a `:` before the last `/` is a registry port.
fn split_reference(reference: &str) -> (&str, Result<&str, &str>) {
    match reference.split_once('@') {
        Some((r, d)) => (r, Err(d)),
        None => {
            let slash = reference.rfind('/').map_or(0, |i| i + 1);
            match reference[slash..].rfind(':') {
                Some(i) => (&reference[..slash + i], Ok(&reference[slash + i + 1..])),
                None => (reference, Ok("latest")),
            }
        }
    }
}

/// The repository part of an image reference, as [`pin`] reads it (for
/// checking who may use it before it is resolved).
pub fn repository_of(reference: &str) -> String {
    split_reference(reference).0.to_string()
}

/// Pins `reference` (`REPO@DIGEST`, `REPO:TAG`, or `REPO` for `REPO:latest`)
/// to a manifest the registry holds in `snap`.
///
/// Errors: [`StackError::Invalid`] for a malformed reference,
/// [`StackError::NotFound`] when the repository, tag or manifest is unknown.
pub async fn pin(
    state: &StateStore,
    snap: &Snapshot,
    reference: &str,
) -> Result<ImageRef, StackError> {
    let bad = |why: &str| StackError::Invalid(format!("image {reference:?}: {why}"));
    let (repo, by) = split_reference(reference);
    let repository: RepositoryName = repo.parse().map_err(|_| bad("not a repository name"))?;
    let found = state
        .repository(snap, &repository)
        .await?
        .ok_or_else(|| StackError::NotFound(format!("repository {repository} not known")))?;
    let digest = match by {
        Err(d) => {
            let d: Digest = d.parse().map_err(|e| bad(&format!("{e}")))?;
            if found.manifest(&d).await?.is_none() {
                return Err(StackError::NotFound(format!(
                    "manifest {d} not known in {repository}"
                )));
            }
            d
        }
        Ok(t) => {
            let tag: Tag = t.parse().map_err(|_| bad("not a tag"))?;
            found.tag(&tag).await?.ok_or_else(|| {
                StackError::NotFound(format!("tag {tag} not known in {repository}"))
            })?
        }
    };
    Ok(ImageRef { repository, digest })
}

/// Where an image's manifests and configs are read from: the blobstore
/// (promotion, import) or the files `bundle create` gathered.
pub trait ImageSource: Sync {
    /// The bytes of a manifest or config, verified against `digest`.
    ///
    /// Errors: the blob is missing or does not match its digest.
    fn small(&self, digest: &Digest) -> impl Future<Output = Result<Vec<u8>, StackError>> + Send;
}

impl ImageSource for dyn Blobstore + '_ {
    async fn small(&self, digest: &Digest) -> Result<Vec<u8>, StackError> {
        Ok(store::get_verified(self, digest).await?)
    }
}

async fn read_manifest<S: ImageSource + ?Sized>(
    store: &S,
    digest: &Digest,
) -> Result<Manifest, StackError> {
    let bytes = store.small(digest).await?;
    Manifest::parse(&bytes).map_err(|e| StackError::Image(format!("manifest {digest}: {e}")))
}

/// One platform image of a stack image.
#[derive(Debug, Clone)]
pub struct PlatformImage {
    /// `os/architecture[/variant]`.
    pub platform: String,
    /// The image manifest digest.
    pub manifest: Digest,
    /// Its layers, bottom first, with diff_ids.
    pub layers: Vec<Layer>,
    /// The image config (`config.Labels`, `config.Env`, ...).
    pub config: serde_json::Value,
}

fn platform_string(os: &str, arch: &str, variant: Option<&str>) -> String {
    match variant {
        Some(v) if !v.is_empty() => format!("{os}/{arch}/{v}"),
        _ => format!("{os}/{arch}"),
    }
}

/// Reads the image manifest `digest` (verified): its config and layers;
/// the platform is the config's `os/architecture[/variant]`.
///
/// Errors: the manifest or its config missing, corrupt or not parsing.
pub async fn platform_image<S: ImageSource + ?Sized>(
    store: &S,
    digest: &Digest,
) -> Result<PlatformImage, StackError> {
    let m = read_manifest(store, digest).await?;
    let config_desc = m
        .config
        .as_ref()
        .ok_or_else(|| StackError::Image(format!("manifest {digest} has no config")))?;
    let config_bytes = store.small(&config_desc.digest).await?;
    let config: serde_json::Value = serde_json::from_slice(&config_bytes)
        .map_err(|e| StackError::Image(format!("config {}: {e}", config_desc.digest)))?;
    let layers = layers_of(&m, &config);
    let platform = platform_string(
        config["os"].as_str().unwrap_or("linux"),
        config["architecture"].as_str().unwrap_or("unknown"),
        config["variant"].as_str(),
    );
    Ok(PlatformImage {
        platform,
        manifest: digest.clone(),
        layers,
        config,
    })
}

/// The layers of image manifest `m`, bottom first, each with its diff_id
/// from the image `config` (`rootfs.diff_ids`, by position) when it has one.
pub fn layers_of(m: &Manifest, config: &serde_json::Value) -> Vec<Layer> {
    let diff_ids: Vec<Option<Digest>> = config["rootfs"]["diff_ids"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|d| d.as_str().and_then(|s| s.parse().ok()))
                .collect()
        })
        .unwrap_or_default();
    m.layers
        .iter()
        .enumerate()
        .map(|(i, l)| Layer {
            media_type: l.media_type.clone(),
            digest: l.digest.clone(),
            size: l.size,
            diff_id: diff_ids.get(i).cloned().flatten(),
        })
        .collect()
}

/// Every platform image of `image`: the image itself, or each image
/// manifest of an index that names a platform (attestation manifests,
/// `unknown/unknown`, are left out).
///
/// Errors: a manifest or config missing from the store or not parsing.
pub async fn platforms<S: ImageSource + ?Sized>(
    store: &S,
    image: &ImageRef,
) -> Result<Vec<PlatformImage>, StackError> {
    platforms_except(store, image, &[]).await
}

/// [`platforms`], leaving out the children of an index listed in `absent`
/// (platforms a bundle chose not to carry); empty when all of them were
/// left out.
pub async fn platforms_except<S: ImageSource + ?Sized>(
    store: &S,
    image: &ImageRef,
    absent: &[Digest],
) -> Result<Vec<PlatformImage>, StackError> {
    let root = read_manifest(store, &image.digest).await?;
    let is_index = root.effective_media_type().is_some_and(oci::is_index_type);
    if !is_index {
        return Ok(vec![platform_image(store, &image.digest).await?]);
    }
    let mut out = Vec::new();
    let mut left_out = false;
    for child in &root.manifests {
        if !oci::is_manifest_type(&child.media_type) || oci::is_index_type(&child.media_type) {
            continue;
        }
        if absent.contains(&child.digest) {
            left_out = true;
            continue;
        }
        let parts = child.platform_parts();
        let os = parts.as_ref().map_or("unknown", |(os, _, _)| os.as_str());
        if os == "unknown" {
            continue;
        }
        let mut img = platform_image(store, &child.digest).await?;
        if let Some((os, arch, variant)) = &parts {
            img.platform = platform_string(os, arch, *variant);
        }
        out.push(img);
    }
    if out.is_empty() && !left_out {
        return Err(StackError::Image(format!(
            "index {} names no platform image",
            image.digest
        )));
    }
    Ok(out)
}

/// The image config's labels.
pub fn labels(config: &serde_json::Value) -> std::collections::BTreeMap<String, String> {
    config["config"]["Labels"]
        .as_object()
        .map(|o| {
            o.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

/// The value of `NAME` in the image config's `Env`.
pub fn env<'a>(config: &'a serde_json::Value, name: &str) -> Option<&'a str> {
    config["config"]["Env"].as_array()?.iter().find_map(|e| {
        let (k, v) = e.as_str()?.split_once('=')?;
        (k == name).then_some(v)
    })
}
