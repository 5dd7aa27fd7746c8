//! `bundle create`'s side of upstream signatures ([`crate::signatures`]):
//! for an image under a `policy` (its own, or its `[[registry]]`'s), the
//! signature image cosign tags `sha256-<hex>.sig` is read from the same
//! source (registry or OCI layout), checked, and carried in the bundle
//! under that tag in the image's repository, so the site checks it again
//! and cosign finds it where it looks. An image that fails is refused
//! with one line naming the image, the keys and what was found; nothing
//! is written.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow};

use super::create::{ImageSource, find_root_named, walk_layout};
use super::format::{BlobEntry, ImageEntry};
use super::source::{self, RegistryConfig};
use crate::digest::Digest;
use crate::names::Tag;
use crate::signatures::{self, MAX_PAYLOAD, Policy, Signatures};

/// A signature image to carry: its entry (tagged `sha256-<hex>.sig`) and
/// its blobs with the files they are in.
pub(super) struct Carried {
    /// The image entry.
    pub entry: ImageEntry,
    /// Manifest, config and payloads.
    pub blobs: Vec<(BlobEntry, PathBuf)>,
}

/// The policy that covers `img`: its own, else its registry host's.
pub(super) fn policy_for<'a>(
    img: &'a ImageSource,
    registries: &'a [RegistryConfig],
) -> Option<&'a Policy> {
    img.policy.as_ref().or_else(|| {
        let host = source::parse_registry_ref(&img.source).ok()?.host;
        registries
            .iter()
            .find(|r| r.host == host)
            .and_then(|r| r.policy.as_ref())
    })
}

/// Checks `entry` (resolved from `img`, whose files are in `blobs`, with
/// the referrers `referrers` carried too) against `policy` and returns the
/// signature images to carry. Errors: one line,
/// `REPOSITORY:TAG (DIGEST): CAUSE`.
#[allow(clippy::too_many_arguments)]
pub(super) fn check_image(
    img: &ImageSource,
    entry: &ImageEntry,
    blobs: &[(BlobEntry, PathBuf)],
    referrers: &[ImageEntry],
    policy: &Policy,
    base: &Path,
    mut remote: Option<&mut source::Remote>,
    progress: &indicatif::ProgressBar,
) -> Result<Vec<Carried>> {
    let name = format!(
        "{}:{} ({})",
        entry.repository,
        entry
            .tags
            .first()
            .map(|t| t.to_string())
            .unwrap_or_default(),
        entry.digest
    );
    let signers = policy
        .load(base)
        .with_context(|| format!("{name}: policy"))?;
    let root = file_of(blobs, &entry.digest)?;
    let manifest = read_limited(&root, crate::oci::MAX_MANIFEST_SIZE)?;
    let wanted = signatures::policy::to_sign(
        &entry.digest,
        &manifest,
        policy.each_platform,
        &entry.absent,
    )?;
    let mut carried = Vec::new();
    for digest in wanted {
        let found = match remote.as_deref_mut() {
            Some(r) if source::is_registry(&img.source) => {
                from_registry(img, &digest, r, progress)?
            }
            _ => from_layout(img, &digest, base)?,
        };
        let sigs = signatures::Found {
            simple: found.as_ref().map(read_signatures).transpose()?,
            bundles: bundles_of(&digest, referrers, blobs)?,
        };
        let which = if digest == entry.digest {
            name.clone()
        } else {
            format!("{name}, platform manifest {digest}")
        };
        signatures::check(&digest, &signers, &sigs).map_err(|e| anyhow!("{which}: {e}"))?;
        if let Some(c) = found {
            carried.push(c);
        }
    }
    Ok(carried)
}

/// The signature image of `digest` from the registry `img` names, pulled
/// into the cache; `None` when the registry has no such tag.
fn from_registry(
    img: &ImageSource,
    digest: &Digest,
    remote: &mut source::Remote,
    progress: &indicatif::ProgressBar,
) -> Result<Option<Carried>> {
    let r = source::parse_registry_ref(&img.source)?;
    let tag = signatures::signature_tag(digest);
    let src = format!("docker://{}/{}:{tag}", r.host, r.repository);
    let pulled = match remote.pull(&src, false, &[], &HashSet::new(), progress) {
        Ok(p) => p,
        Err(e)
            if e.chain()
                .any(|c| c.is::<source::registry::ManifestNotFound>()) =>
        {
            return Ok(None);
        }
        Err(e) => return Err(e),
    };
    Ok(Some(Carried {
        entry: sig_entry(
            img,
            &tag,
            pulled.root.digest,
            pulled.root.media_type,
            pulled.root.size,
        )?,
        blobs: pulled.blobs,
    }))
}

/// The signature image of `digest` from the OCI layout `img` names (ref
/// name `sha256-<hex>.sig`, as `skopeo copy` of the signature tag into
/// the layout leaves it); `None` when the layout has none.
fn from_layout(img: &ImageSource, digest: &Digest, base: &Path) -> Result<Option<Carried>> {
    let tag = signatures::signature_tag(digest);
    let Some((layout, root)) = find_root_named(&img.source, base, &tag)? else {
        return Ok(None);
    };
    let mut blobs = Vec::new();
    walk_layout(&layout, &root, &mut blobs, &mut HashSet::new())?;
    Ok(Some(Carried {
        entry: sig_entry(img, &tag, root.digest, root.media_type, root.size)?,
        blobs,
    }))
}

fn sig_entry(
    img: &ImageSource,
    tag: &str,
    digest: Digest,
    media_type: String,
    size: u64,
) -> Result<ImageEntry> {
    Ok(ImageEntry {
        repository: img.repository.clone(),
        tags: vec![Tag::try_from(tag.to_string()).map_err(|e| anyhow!("{tag}: {e}"))?],
        digest,
        media_type,
        size,
        absent: Vec::new(),
    })
}

/// The sigstore bundles of the referrers of `digest` among `referrers`
/// (their files in `blobs`; [`signatures::sigstore`]).
fn bundles_of(
    digest: &Digest,
    referrers: &[ImageEntry],
    blobs: &[(BlobEntry, PathBuf)],
) -> Result<Vec<Vec<u8>>> {
    let mut out = Vec::new();
    for r in referrers {
        let bytes = read_limited(&file_of(blobs, &r.digest)?, crate::oci::MAX_MANIFEST_SIZE)?;
        for l in signatures::sigstore::bundle_layers(&bytes, digest) {
            out.push(read_limited(
                &file_of(blobs, &l.digest)?,
                signatures::sigstore::MAX_BUNDLE,
            )?);
        }
    }
    Ok(out)
}

/// The manifest and payloads of a signature image, from its files.
fn read_signatures(c: &Carried) -> Result<Signatures> {
    let manifest = read_limited(
        &file_of(&c.blobs, &c.entry.digest)?,
        crate::oci::MAX_MANIFEST_SIZE,
    )?;
    let mut payloads = BTreeMap::new();
    for l in signatures::payload_layers(&manifest)
        .with_context(|| format!("signature image {}", c.entry.digest))?
    {
        let bytes = read_limited(&file_of(&c.blobs, &l.digest)?, MAX_PAYLOAD)?;
        payloads.insert(l.digest, bytes);
    }
    Ok(Signatures { manifest, payloads })
}

fn file_of(blobs: &[(BlobEntry, PathBuf)], digest: &Digest) -> Result<PathBuf> {
    blobs
        .iter()
        .find(|(b, _)| &b.digest == digest)
        .map(|(_, p)| p.clone())
        .ok_or_else(|| anyhow!("blob {digest} was not gathered"))
}

/// A file of at most `max` bytes (manifests and payloads, already hashed
/// when they were gathered).
fn read_limited(path: &Path, max: u64) -> Result<Vec<u8>> {
    use std::io::Read;
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .with_context(|| format!("reading {}", path.display()))?
        .take(max + 1)
        .read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max {
        anyhow::bail!("{}: more than {max} bytes", path.display());
    }
    Ok(bytes)
}
