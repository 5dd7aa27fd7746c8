//! Stack candidates of a bundle, checked for flattenability before they cross
//! the air gap (`bundle create`) and again when they arrive (import), so that
//! `stack promote` never meets an image it cannot flatten.
//!
//! Owns: which images are candidates — every `[[stack]]` image of the mirror
//! config (the bundle's `stacks`), and every other tagged image whose config
//! carries the Cloud Native Buildpacks stack label
//! ([`super::kpack::STACK_ID_LABEL`]) — and reading each layer of each of
//! their platform images with every check flattening makes
//! ([`super::flatten::check_stored`], [`super::flatten::check_layer_file`]),
//! each layer once. Never writes anything.
//!
//! A layer the source does not hold (a delta bundle's required blob, already
//! at the destination) is not read: it was checked when it arrived.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;

use futures_util::StreamExt as _;

use super::StackError;
use super::flatten::{self, Layer};
use super::image::{self, ImageSource, PlatformImage};
use super::kpack::{self, STACK_ID_LABEL};
use super::table::ImageRef;
use crate::bundle::format::BundleDoc;
use crate::digest::{Digest, HashingReader};
use crate::store::{Blobstore, blob_key};

/// Images whose manifests and configs are read at once when looking for the stack label.
const READ_AHEAD: usize = 16;

/// Where the candidates' blobs are read: an image source that can also
/// check a layer.
pub trait CandidateSource: ImageSource {
    /// Checks that `layer` flattens; `Ok(false)` when the source does not
    /// hold the layer (nothing to read).
    ///
    /// Errors: what flattening would refuse in this layer.
    fn check_layer(&self, layer: &Layer) -> impl Future<Output = anyhow::Result<bool>> + Send;
}

/// The blobstore, at import.
pub struct Stored(pub Arc<dyn Blobstore>);

impl ImageSource for Stored {
    async fn small(&self, digest: &Digest) -> Result<Vec<u8>, StackError> {
        self.0.small(digest).await
    }
}

impl CandidateSource for Stored {
    async fn check_layer(&self, layer: &Layer) -> anyhow::Result<bool> {
        if self.0.stat(&blob_key(&layer.digest)).await?.is_none() {
            return Ok(false);
        }
        flatten::check_stored(self.0.clone(), layer.clone()).await?;
        Ok(true)
    }
}

/// The files `bundle create` gathered (OCI layouts, the registry cache), by digest.
#[derive(Debug, Default)]
pub struct LocalBlobs(pub HashMap<Digest, PathBuf>);

impl ImageSource for LocalBlobs {
    async fn small(&self, digest: &Digest) -> Result<Vec<u8>, StackError> {
        let path = self.0.get(digest).ok_or_else(|| {
            StackError::NotFound(format!("blob {digest} is not at hand (a required blob)"))
        })?;
        let bytes = std::fs::read(path)
            .map_err(|e| StackError::NotFound(format!("blob {digest}: {}: {e}", path.display())))?;
        let mut h = HashingReader::new(&bytes[..], digest.algorithm());
        std::io::copy(&mut h, &mut std::io::sink()).map_err(anyhow::Error::from)?;
        h.verify(digest, bytes.len() as u64)
            .map_err(|e| StackError::Image(format!("{}: {e}", path.display())))?;
        Ok(bytes)
    }
}

impl CandidateSource for LocalBlobs {
    async fn check_layer(&self, layer: &Layer) -> anyhow::Result<bool> {
        match self.0.get(&layer.digest) {
            Some(path) if path.exists() => {
                flatten::check_layer_file(path, layer)?;
                Ok(true)
            }
            _ => Ok(false),
        }
    }
}

/// One image that was checked, for the summary of `bundle create`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Checked {
    /// `stack NAME` or `labelled REPOSITORY` (carries the stack label).
    pub why: String,
    /// The image.
    pub image: ImageRef,
    /// Its platforms.
    pub platforms: Vec<String>,
    /// Layers read (a layer shared with an earlier image counts once).
    pub layers: usize,
}

/// Checks every stack candidate of `doc` (see the module docs); returns
/// what was checked.
///
/// Errors: [`StackError::Image`] naming the candidate, its platform and the
/// layer that would not flatten ("stack candidate bar (stacks/bar@sha256:…,
/// linux/amd64) cannot be flattened into a rootfs: layer sha256:…: tar entry
/// etc/old/file cut off at byte 3 of 700"); a `[[stack]]` image that
/// cannot be read.
pub async fn check_bundle<S: CandidateSource>(
    src: &S,
    doc: &BundleDoc,
) -> Result<Vec<Checked>, StackError> {
    let absent = |d: &Digest| absent(doc, d);
    let mut done: HashSet<Digest> = HashSet::new();
    let mut out = Vec::new();
    let mut named: HashSet<&Digest> = HashSet::new();
    for s in &doc.stacks {
        named.insert(&s.image.digest);
        let platforms = image::platforms_except(src, &s.image, absent(&s.image.digest)).await?;
        let what = format!("stack candidate {}", s.name);
        out.push(check_image(src, &what, &s.image, &platforms, &mut done).await?);
    }
    // The other tagged images' manifests and configs, read a few at a time
    // (one round trip each on S3).
    let others: Vec<_> = doc
        .images
        .iter()
        .filter(|i| !i.tags.is_empty() && !named.contains(&i.digest))
        .map(|img| ImageRef {
            repository: img.repository.clone(),
            digest: img.digest.clone(),
        })
        .collect();
    let read = futures_util::stream::iter(others)
        .map(|r| {
            let absent = absent(&r.digest).to_vec();
            async move {
                let platforms = image::platforms_except(src, &r, &absent).await;
                (r, platforms)
            }
        })
        .buffered(READ_AHEAD)
        .collect::<Vec<_>>()
        .await;
    let mut seen: HashSet<Digest> = HashSet::new();
    for (r, platforms) in read {
        // Not readable as an image (an artifact, a non-JSON config): not a stack.
        let Ok(platforms) = platforms else {
            continue;
        };
        if !seen.insert(r.digest.clone()) {
            continue;
        }
        let labelled: Vec<PlatformImage> = platforms
            .into_iter()
            .filter(|p| image::labels(&p.config).contains_key(STACK_ID_LABEL))
            .collect();
        if labelled.is_empty() {
            continue;
        }
        let what = format!("image {} (label {STACK_ID_LABEL})", r.repository);
        out.push(check_image(src, &what, &r, &labelled, &mut done).await?);
    }
    Ok(out)
}

/// The platform manifests of image `digest` that `doc` does not carry (a
/// delta bundle's: already at the destination).
fn absent<'a>(doc: &'a BundleDoc, digest: &Digest) -> &'a [Digest] {
    doc.images
        .iter()
        .find(|i| &i.digest == digest)
        .map_or(&[][..], |i| &i.absent[..])
}

/// Checks the build and run images of every stack candidate of `doc` that
/// has them as kpack does ([`kpack::check`]), so that `stack promote` of
/// it is not refused after the bundle crossed (`bundle create`; import
/// leaves it to the promotion). Platforms the source does not hold (a
/// delta bundle's) were checked when they arrived.
///
/// Errors: [`StackError::Image`] naming the candidate, with kpack's
/// reasons; an image that cannot be read.
pub async fn check_builders<S: CandidateSource>(
    src: &S,
    doc: &BundleDoc,
) -> Result<(), StackError> {
    let absent = |d: &Digest| absent(doc, d);
    for s in &doc.stacks {
        let (Some(build), Some(run)) = (&s.build_image, &s.run_image) else {
            continue;
        };
        let b = image::platforms_except(src, build, absent(&build.digest)).await?;
        let r = image::platforms_except(src, run, absent(&run.digest)).await?;
        if b.is_empty() || r.is_empty() {
            continue;
        }
        let id = kpack::check(None, &b, &r).map_err(|e| {
            StackError::Image(format!(
                "stack candidate {}: kpack would refuse its build and run images: {e}",
                s.name
            ))
        })?;
        tracing::info!(stack = %s.name, id, build = %build, run = %run, "stack candidate's builder images: kpack accepts them");
    }
    Ok(())
}

async fn check_image<S: CandidateSource>(
    src: &S,
    what: &str,
    image: &ImageRef,
    platforms: &[PlatformImage],
    done: &mut HashSet<Digest>,
) -> Result<Checked, StackError> {
    let mut checked = Checked {
        why: what.to_string(),
        image: image.clone(),
        platforms: Vec::new(),
        layers: 0,
    };
    for p in platforms {
        for layer in &p.layers {
            if done.contains(&layer.digest) {
                continue;
            }
            match src.check_layer(layer).await {
                Ok(read) => checked.layers += usize::from(read),
                Err(e) => {
                    return Err(StackError::Image(format!(
                        "{what} ({image}, {}) cannot be flattened into a rootfs: {e:#}",
                        p.platform
                    )));
                }
            }
            done.insert(layer.digest.clone());
        }
        checked.platforms.push(p.platform.clone());
    }
    tracing::info!(image = %image, platforms = ?checked.platforms, layers = checked.layers, "{what}: flattens");
    Ok(checked)
}
