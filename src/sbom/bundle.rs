//! The connected side: what `bundle create` adds for this room.
//!
//! - An SBOM per platform image: the package inventory read from the
//!   image's layers in the source layout or cache, as an SPDX 2.3
//!   referrer ([`super::referrer`]) carried and signed like any referrer.
//!   An image whose source already carries an SPDX referrer for that
//!   manifest keeps it and gets none of ours; an image with neither a
//!   package database (a scratch or busybox image) gets
//!   none; `sbom = false` on an `[[image]]` turns it off.
//! - Each `[[feed]]`, packed into one blob ([`super::feed::pack`]).
//!
//! Generated blobs are written to a scratch directory the caller removes.

use std::collections::HashMap;
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow};

use super::feed::{FeedEntry, FeedSource, pack};
use super::inventory::Inventory;
use super::{referrer, spdx};
use crate::bundle::format::{BlobEntry, ImageEntry};
use crate::digest::Digest;
use crate::oci::{self, Manifest};
use crate::stacks::flatten::Layer;

/// What this room adds to a bundle.
#[derive(Debug, Default)]
pub struct Additions {
    /// SBOM referrers (untagged image entries).
    pub images: Vec<ImageEntry>,
    /// Their blobs and the feeds' blobs, with the files holding them.
    pub blobs: Vec<(BlobEntry, PathBuf)>,
    /// Feeds for the signed document.
    pub feeds: Vec<FeedEntry>,
}

fn read_blob(paths: &HashMap<Digest, PathBuf>, d: &Digest) -> Result<Vec<u8>> {
    let p = paths
        .get(d)
        .ok_or_else(|| anyhow!("blob {d} is not available locally"))?;
    let bytes = std::fs::read(p).with_context(|| format!("reading {}", p.display()))?;
    if &Digest::sha256_of(&bytes) != d && d.algorithm() == crate::digest::Algorithm::Sha256 {
        anyhow::bail!("{}: content does not hash to {d}", p.display());
    }
    Ok(bytes)
}

/// The platform image manifests of a root (itself, or an index's children
/// that name a platform and are available), with media type and size.
fn platform_manifests(
    root: &ImageEntry,
    paths: &HashMap<Digest, PathBuf>,
) -> Result<Vec<(Digest, String, u64)>> {
    if !oci::is_index_type(&root.media_type) {
        return Ok(vec![(
            root.digest.clone(),
            root.media_type.clone(),
            root.size,
        )]);
    }
    let index = Manifest::parse(&read_blob(paths, &root.digest)?)?;
    Ok(index
        .manifests
        .iter()
        .filter(|c| oci::is_manifest_type(&c.media_type) && !oci::is_index_type(&c.media_type))
        .filter(|c| c.platform_parts().is_some_and(|(os, _, _)| os != "unknown"))
        .filter(|c| paths.contains_key(&c.digest))
        .map(|c| (c.digest.clone(), c.media_type.clone(), c.size))
        .collect())
}

/// Subjects of SPDX referrers among `images` (those carried from upstream).
fn upstream_sboms(images: &[ImageEntry], paths: &HashMap<Digest, PathBuf>) -> Vec<Digest> {
    images
        .iter()
        .filter(|i| i.tags.is_empty())
        .filter_map(|i| Manifest::parse(&read_blob(paths, &i.digest).ok()?).ok())
        .filter(|m| m.referrer_artifact_type().as_deref() == Some(spdx::MEDIA_TYPE))
        .filter_map(|m| m.subject.map(|s| s.digest))
        .collect()
}

fn write_scratch(scratch: &Path, d: &Digest, bytes: &[u8]) -> Result<(BlobEntry, PathBuf)> {
    std::fs::create_dir_all(scratch)?;
    let p = scratch.join(d.hex());
    std::fs::write(&p, bytes).with_context(|| format!("writing {}", p.display()))?;
    Ok((
        BlobEntry {
            digest: d.clone(),
            size: bytes.len() as u64,
        },
        p,
    ))
}

/// The SBOM referrer of one platform manifest, or `None` when the image
/// has no package database and no `os-release`.
fn sbom_of(
    repo: &str,
    (manifest, media_type, size): &(Digest, String, u64),
    paths: &HashMap<Digest, PathBuf>,
    scratch: &Path,
    out: &mut Additions,
) -> Result<bool> {
    let m = Manifest::parse(&read_blob(paths, manifest)?)?;
    let Some(config_desc) = &m.config else {
        return Ok(false);
    };
    let config: serde_json::Value =
        serde_json::from_slice(&read_blob(paths, &config_desc.digest)?)?;
    let layers = crate::stacks::image::layers_of(&m, &config);
    let mut open = |l: &Layer| -> Result<Box<dyn Read>> {
        let p = paths
            .get(&l.digest)
            .ok_or_else(|| anyhow!("layer {} is not available locally", l.digest))?;
        Ok(Box::new(
            File::open(p).with_context(|| format!("opening {}", p.display()))?,
        ))
    };
    let inv =
        Inventory::read(&layers, &mut open).with_context(|| format!("image {repo}@{manifest}"))?;
    if inv.packages.is_empty() {
        return Ok(false);
    }
    let subject = spdx::Subject {
        name: repo.to_string(),
        manifest: manifest.clone(),
        created: config["created"]
            .as_str()
            .map_or_else(crate::state::now_rfc3339, str::to_string),
    };
    let doc = spdx::to_bytes(&spdx::document(&inv, &subject));
    let a = referrer::artifact(
        doc,
        spdx::MEDIA_TYPE,
        manifest,
        media_type,
        *size,
        &subject.created,
    );
    for (d, bytes) in &a.blobs {
        out.blobs.push(write_scratch(scratch, d, bytes)?);
    }
    out.blobs
        .push(write_scratch(scratch, &a.digest, &a.manifest)?);
    out.images.push(ImageEntry {
        repository: repo.parse()?,
        tags: Vec::new(),
        digest: a.digest,
        media_type: oci::OCI_MANIFEST.into(),
        size: a.manifest.len() as u64,
        absent: Vec::new(),
    });
    Ok(true)
}

/// SBOM referrers for the tagged `images` (except `skip`ped repositories)
/// and the packed `feeds`. `paths` maps every blob available locally to
/// its file; `base` is the config's directory; `scratch` receives the
/// generated blobs. An image whose packages cannot be read (layers that
/// are not tars, or not at hand) gets no SBOM and a warning. Errors: a
/// root manifest that does not parse, a malformed feed.
pub fn additions(
    images: &[ImageEntry],
    skip: &dyn Fn(&ImageEntry) -> bool,
    paths: &HashMap<Digest, PathBuf>,
    feeds: &[FeedSource],
    base: &Path,
    scratch: &Path,
    progress: &indicatif::ProgressBar,
) -> Result<Additions> {
    let mut out = Additions::default();
    let upstream = upstream_sboms(images, paths);
    let mut done = std::collections::HashSet::new();
    for img in images.iter().filter(|i| !i.tags.is_empty() && !skip(i)) {
        let platforms = match platform_manifests(img, paths) {
            Ok(p) => p,
            Err(e) => {
                // A delta bundle's index the other side has is not at hand.
                tracing::warn!(image = %img.repository, cause = %format!("{e:#}"), "no SBOM for this image: its manifests are not at hand");
                continue;
            }
        };
        for pm in platforms {
            if upstream.contains(&pm.0) || !done.insert((img.repository.clone(), pm.0.clone())) {
                continue;
            }
            progress.set_message(format!("SBOM of {}@{}", img.repository, pm.0));
            // An SBOM is an addition: an image whose layers are not tars
            // (an OCI artifact, a layer this side cannot read) crosses
            // without one, and the bundle says so in the log.
            match sbom_of(img.repository.as_str(), &pm, paths, scratch, &mut out) {
                Ok(true) => {
                    tracing::info!(image = %img.repository, manifest = %pm.0, "SBOM attached")
                }
                Ok(false) => {}
                Err(e) => tracing::warn!(
                    image = %img.repository,
                    manifest = %pm.0,
                    cause = %format!("{e:#}"),
                    "no SBOM for this image: its packages could not be read"
                ),
            }
        }
    }
    for f in feeds {
        progress.set_message(format!("feed {}", f.name));
        let p = pack::pack(f, base, scratch)?;
        out.blobs.push((
            BlobEntry {
                digest: p.entry.digest.clone(),
                size: p.entry.size,
            },
            p.path,
        ));
        out.feeds.push(p.entry);
    }
    Ok(out)
}
