//! `airlock bundle create`: gathers the images a mirror config names into one
//! signed bundle (format v1), full or delta.
//!
//! Owns: the mirror config, reading OCI image layouts (`oci:PATH[:REF]`), the
//! walk from a root manifest to every blob, and writing the tar. Registry
//! sources (`docker://`) are pulled into the local cache by
//! [`super::source`] first, then copied from there like layout blobs. Never
//! rewrites a manifest, so digests never change. Every blob is hashed while it
//! is copied; a mismatch aborts and removes the partial output.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fs::File;
use std::io::{BufReader, Read, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow, bail};

use super::format::{
    BlobEntry, BundleDoc, FORMAT_V1, INDEX_JSON, ImageEntry, Inventory, LayoutDigests, OCI_LAYOUT,
    SIGNED_DOC, StackEntry, blob_path,
};
use super::sign::SigningKey;
use super::source::{self, RegistryConfig};
use super::volume::VolumeWriter;
use crate::digest::{Digest, HashingReader};
use crate::names::{RepositoryName, Tag};
use crate::oci::{self, Descriptor, Manifest};
use crate::stacks::{ImageRef, StackName};
use crate::state::{now_rfc3339, user_at_host};

/// The mirror config (TOML): `[[image]]` tables, and `[[stack]]` tables
/// naming system stack candidates among those images.
///
/// ```toml
/// [[image]]
/// source = "oci:./build/stack:latest"   # skopeo transport syntax; oci:PATH[:REF]
/// repository = "stacks/bookworm"
/// tags = ["latest", "2026.11"]
///
/// [[stack]]
/// name = "bookworm"
/// description = "Debian bookworm"
/// image = "stacks/bookworm:latest"      # REPOSITORY:TAG of an [[image]] above
/// ```
/// A relative `PATH` is resolved against the config file's directory.
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MirrorConfig {
    /// How long the bundle stays importable after it is made (`90s`,
    /// `12h`, `30d`; 30 days when absent; `bundle create --expires-in`
    /// overrides). A top-level key: before the first table.
    #[serde(default)]
    pub expires_in: Option<String>,
    /// Images to carry.
    #[serde(default)]
    pub image: Vec<ImageSource>,
    /// Per-registry TLS settings for `docker://` sources.
    #[serde(default)]
    pub registry: Vec<RegistryConfig>,
    /// torcx addon archives to carry (see [`crate::torcx::bundle::AddonSource`]).
    #[serde(default)]
    pub addon: Vec<crate::torcx::bundle::AddonSource>,
    /// Vendor-signed torcx contents to carry (see [`crate::torcx::bundle::VendorSource`]).
    #[serde(default)]
    pub torcx_contents: Vec<crate::torcx::bundle::VendorSource>,
    /// System stack candidates.
    #[serde(default)]
    pub stack: Vec<StackSource>,
    /// Vulnerability feeds to carry (see [`crate::sbom::feed::FeedSource`]).
    #[serde(default)]
    pub feed: Vec<crate::sbom::feed::FeedSource>,
}

/// One `[[stack]]` of the mirror config: a candidate for an admin to promote.
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StackSource {
    /// The stack name.
    pub name: StackName,
    /// Its description.
    #[serde(default)]
    pub description: String,
    /// The rootfs image: `REPOSITORY:TAG` of an `[[image]]` in this config.
    pub image: String,
    /// Builders' build image (`REPOSITORY:TAG` of an `[[image]]`), with `run_image`.
    #[serde(default)]
    pub build_image: Option<String>,
    /// Builders' run image, with `build_image`.
    #[serde(default)]
    pub run_image: Option<String>,
    /// Who must have signed the stack's images (`image`, `build_image`,
    /// `run_image`), checked as an `[[image]]`'s policy is and in addition
    /// to it ([`crate::signatures::Policy`]).
    #[serde(default)]
    pub policy: Option<crate::signatures::Policy>,
}

impl StackSource {
    /// Whether `REPOSITORY:TAG` is one of this stack's images.
    fn names(&self, reference: &str) -> bool {
        self.image == reference
            || self.build_image.as_deref() == Some(reference)
            || self.run_image.as_deref() == Some(reference)
    }
}

/// Pins `REPOSITORY:TAG` to the digest of an image of this bundle.
fn pin_in(images: &[ImageEntry], reference: &str, stack: &StackName) -> Result<ImageRef> {
    let found = images.iter().find(|i| {
        i.tags
            .iter()
            .any(|t| format!("{}:{}", i.repository, t) == reference)
    });
    match found {
        Some(i) => Ok(ImageRef {
            repository: i.repository.clone(),
            digest: i.digest.clone(),
        }),
        None => bail!(
            "stack {stack}: image {reference:?} is not REPOSITORY:TAG of an [[image]] in this config"
        ),
    }
}

/// The stack candidates of `cfg`, pinned to the bundle's images.
fn stack_entries(cfg: &MirrorConfig, images: &[ImageEntry]) -> Result<Vec<StackEntry>> {
    cfg.stack
        .iter()
        .map(|s| {
            if s.build_image.is_some() != s.run_image.is_some() {
                bail!("stack {}: build_image and run_image go together", s.name);
            }
            let opt =
                |r: &Option<String>| r.as_deref().map(|r| pin_in(images, r, &s.name)).transpose();
            Ok(StackEntry {
                name: s.name.clone(),
                description: s.description.clone(),
                image: pin_in(images, &s.image, &s.name)?,
                build_image: opt(&s.build_image)?,
                run_image: opt(&s.run_image)?,
            })
        })
        .collect()
}

/// One `[[image]]` of the mirror config.
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ImageSource {
    /// Where to read it: `oci:PATH[:REF]` or `docker://HOST/REPO[:TAG|@DIGEST]`.
    pub source: String,
    /// Repository to serve it as.
    pub repository: RepositoryName,
    /// Tags to give it (with a source naming a tag or digest); for a
    /// `docker://HOST/REPO` source without one, the source tags to carry,
    /// each under its own name.
    #[serde(default)]
    pub tags: Vec<Tag>,
    /// `docker://HOST/REPO` only: carry the source tags this regular
    /// expression matches, each under its own name (instead of `tags`).
    #[serde(default)]
    pub tag_pattern: Option<String>,
    /// With `tag_pattern`: only the newest N matching tags (by version).
    #[serde(default)]
    pub max_tags: Option<usize>,
    /// `docker://` only: carry the image's referrers (signatures,
    /// attestations, SBOMs) too. Default `true`.
    #[serde(default)]
    pub referrers: Option<bool>,
    /// `docker://` only: of an index, carry only the children for these
    /// platforms (`OS/ARCH[/VARIANT]`), keeping the index bytes unchanged.
    #[serde(default)]
    pub platforms: Vec<String>,
    /// Attach an SPDX SBOM of each platform image as a referrer (default
    /// `true`; see [`crate::sbom::bundle`]).
    #[serde(default)]
    pub sbom: Option<bool>,
    /// Who must have signed the image (cosign keys; see
    /// [`crate::signatures::Policy`]); over its `[[registry]]`'s `policy`.
    /// The signatures are carried in the bundle.
    #[serde(default)]
    pub policy: Option<crate::signatures::Policy>,
}

impl MirrorConfig {
    /// Reads and checks a config file. Errors name the file and the cause.
    pub fn load(path: &Path) -> Result<MirrorConfig> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let cfg: MirrorConfig =
            toml::from_str(&text).map_err(|e| anyhow!("{}: {}", path.display(), e.message()))?;
        if cfg.image.is_empty()
            && cfg.addon.is_empty()
            && cfg.torcx_contents.is_empty()
            && cfg.feed.is_empty()
        {
            bail!(
                "{}: no [[image]], [[addon]] or [[feed]] entries",
                path.display()
            );
        }
        for img in &cfg.image {
            if img.tags.is_empty() && img.tag_pattern.is_none() {
                bail!("{}: image {} has no tags", path.display(), img.repository);
            }
        }
        Ok(cfg)
    }
}

/// Options of `bundle create`.
pub struct CreateOptions<'a> {
    /// The mirror config file.
    pub config: &'a Path,
    /// Signing keys (at least one): the document and the volume list carry a
    /// signature by each, in this order ([`super::sign::clearsign_all`]).
    pub keys: &'a [&'a SigningKey],
    /// Output path (with volumes: `OUT.000`, `OUT.001`, ...).
    pub out: &'a Path,
    /// Split into volumes of at most this many bytes.
    pub volume_size: Option<u64>,
    /// Blobs the destination already holds: left out and listed as required.
    pub have: Option<&'a Inventory>,
    /// Cache for `docker://` sources (default [`source::default_cache_dir`]).
    pub cache: Option<&'a Path>,
    /// How long the bundle stays importable (over the mirror config's
    /// `expires_in`).
    pub expires_in: Option<std::time::Duration>,
}

/// What `create` wrote.
#[derive(Debug)]
pub struct Created {
    /// The signed document.
    pub doc: BundleDoc,
    /// Files written, in order.
    pub files: Vec<PathBuf>,
    /// Total bytes written.
    pub bytes: u64,
    /// Registry traffic, when any source was `docker://`.
    pub pulled: Option<PullSummary>,
    /// Stack candidates checked for flattenability.
    pub checked: Vec<crate::stacks::candidates::Checked>,
    /// The signed volume list (`OUT.volumes.asc`), when split into volumes.
    pub volume_list: Option<PathBuf>,
}

/// What the registry sources cost (`bundle create --json`).
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct PullSummary {
    /// HTTP requests sent to registries (retries and token requests included).
    pub requests: u64,
    /// Manifest and blob bytes downloaded.
    pub bytes_downloaded: u64,
    /// Blobs and manifests taken from the cache instead.
    pub cache_hits: u64,
    /// Retries after a failure.
    pub retries: u64,
}

/// An image resolved from its layout: root descriptor and every blob, with where to read it.
struct Resolved {
    entry: ImageEntry,
    /// Referrers of the image: entries with no tags, so import links them.
    referrers: Vec<ImageEntry>,
    blobs: Vec<(BlobEntry, PathBuf)>,
}

/// Splits `oci:PATH[:REF]` like skopeo (at the first `:` after the path).
fn parse_source(source: &str, base: &Path) -> Result<(PathBuf, Option<String>)> {
    let rest = source.strip_prefix("oci:").ok_or_else(|| {
        anyhow!("source {source:?}: supported transports are oci:PATH[:REF] and docker://HOST/REPO[:TAG|@DIGEST]")
    })?;
    let (path, reference) = match rest.split_once(':') {
        Some((p, r)) => (p, Some(r.to_string())),
        None => (rest, None),
    };
    if path.is_empty() {
        bail!("source {source:?}: empty path");
    }
    Ok((base.join(path), reference))
}

fn layout_blob(layout: &Path, d: &Digest) -> PathBuf {
    layout
        .join("blobs")
        .join(d.algorithm().name())
        .join(d.hex())
}

/// Reads a small blob from a layout, checking digest and size.
fn read_small(layout: &Path, desc: &Descriptor) -> Result<Vec<u8>> {
    if desc.size > oci::MAX_MANIFEST_SIZE {
        bail!(
            "manifest {} is {} bytes, over the 4 MiB limit",
            desc.digest,
            desc.size
        );
    }
    let path = layout_blob(layout, &desc.digest);
    let bytes = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
    let mut h = HashingReader::new(&bytes[..], desc.digest.algorithm());
    std::io::copy(&mut h, &mut std::io::sink())?;
    h.verify(&desc.digest, desc.size)
        .with_context(|| format!("layout blob {}", path.display()))?;
    Ok(bytes)
}

/// Finds the root descriptor in a layout's index.json by ref name (or the only one).
fn find_root(layout: &Path, reference: Option<&str>) -> Result<Descriptor> {
    let index_path = layout.join(INDEX_JSON);
    let bytes =
        std::fs::read(&index_path).with_context(|| format!("reading {}", index_path.display()))?;
    let index = Manifest::parse(&bytes).with_context(|| index_path.display().to_string())?;
    let named = |d: &&Descriptor| {
        d.annotations
            .as_ref()
            .and_then(|a| a.get(oci::REF_NAME))
            .map(String::as_str)
            == reference
    };
    let found: Vec<&Descriptor> = match reference {
        Some(_) => index.manifests.iter().filter(named).collect(),
        None => index.manifests.iter().collect(),
    };
    match found.as_slice() {
        [one] => Ok((*one).clone()),
        [] => bail!(
            "{}: no image with ref name {:?}",
            layout.display(),
            reference.unwrap_or("")
        ),
        _ => bail!(
            "{}: {} images match; name one with oci:PATH:REF",
            layout.display(),
            found.len()
        ),
    }
}

/// The image with ref name `name` in the OCI layout of `source`
/// (`oci:PATH[:REF]`): (layout path, root descriptor); `None` when the
/// layout has no such ref name, or `source` is not a layout.
pub(super) fn find_root_named(
    source: &str,
    base: &Path,
    name: &str,
) -> Result<Option<(PathBuf, Descriptor)>> {
    if !source.starts_with("oci:") {
        return Ok(None);
    }
    let (layout, _) = parse_source(source, base)?;
    let index_path = layout.join(INDEX_JSON);
    let bytes =
        std::fs::read(&index_path).with_context(|| format!("reading {}", index_path.display()))?;
    let index = Manifest::parse(&bytes).with_context(|| index_path.display().to_string())?;
    let found = index.manifests.into_iter().find(|d| {
        d.annotations
            .as_ref()
            .and_then(|a| a.get(oci::REF_NAME))
            .is_some_and(|r| r == name)
    });
    Ok(found.map(|d| (layout, d)))
}

/// [`walk`] for the callers beside `create` (signature images).
pub(super) fn walk_layout(
    layout: &Path,
    root: &Descriptor,
    out: &mut Vec<(BlobEntry, PathBuf)>,
    seen: &mut HashSet<Digest>,
) -> Result<()> {
    walk(layout, root, out, seen)
}

/// Walks from `root` to every blob (child manifests, configs, layers), depth first, each once.
fn walk(
    layout: &Path,
    root: &Descriptor,
    out: &mut Vec<(BlobEntry, PathBuf)>,
    seen: &mut HashSet<Digest>,
) -> Result<()> {
    if !seen.insert(root.digest.clone()) {
        return Ok(());
    }
    let is_manifest = oci::is_manifest_type(&root.media_type);
    if is_manifest {
        let bytes = read_small(layout, root)?;
        // The one manifest rule (what import checks it by, with this type).
        let m = Manifest::read(&bytes, Some(&root.media_type))
            .with_context(|| format!("manifest {} ({})", root.digest, root.media_type))?;
        for child in m.manifests.iter().chain(m.blobs()) {
            walk(layout, child, out, seen)?;
        }
    }
    out.push((
        BlobEntry {
            digest: root.digest.clone(),
            size: root.size,
        },
        layout_blob(layout, &root.digest),
    ));
    Ok(())
}

fn resolve(
    img: &ImageSource,
    base: &Path,
    remote: Option<&mut source::Remote>,
    have: &HashSet<&Digest>,
    progress: &indicatif::ProgressBar,
) -> Result<Resolved> {
    if let Some(remote) = remote.filter(|_| source::is_registry(&img.source)) {
        let pulled = remote.pull(
            &img.source,
            img.referrers.unwrap_or(true),
            &img.platforms,
            have,
            progress,
        )?;
        return Ok(Resolved {
            referrers: pulled
                .referrers
                .into_iter()
                .map(|d| ImageEntry {
                    repository: img.repository.clone(),
                    tags: Vec::new(),
                    digest: d.digest,
                    media_type: d.media_type,
                    size: d.size,
                    absent: Vec::new(),
                })
                .collect(),
            entry: ImageEntry {
                repository: img.repository.clone(),
                tags: img.tags.clone(),
                digest: pulled.root.digest,
                media_type: pulled.root.media_type,
                size: pulled.root.size,
                absent: pulled.absent,
            },
            blobs: pulled.blobs,
        });
    }
    if !img.platforms.is_empty() {
        bail!("source {}: platforms needs a docker:// source", img.source);
    }
    let (layout, reference) = parse_source(&img.source, base)?;
    let root = find_root(&layout, reference.as_deref())
        .with_context(|| format!("source {}", img.source))?;
    if !oci::is_manifest_type(&root.media_type) {
        bail!(
            "source {}: root media type {} is not a manifest or index",
            img.source,
            root.media_type
        );
    }
    let mut blobs = Vec::new();
    walk(&layout, &root, &mut blobs, &mut HashSet::new())
        .with_context(|| format!("source {}", img.source))?;
    Ok(Resolved {
        referrers: Vec::new(),
        entry: ImageEntry {
            repository: img.repository.clone(),
            tags: img.tags.clone(),
            digest: root.digest,
            media_type: root.media_type,
            size: root.size,
            absent: Vec::new(),
        },
        blobs,
    })
}

/// Builds the layout's `index.json`: one descriptor per (image, tag), ref name `REPOSITORY:TAG`.
fn layout_index(images: &[ImageEntry]) -> Result<Vec<u8>> {
    let mut manifests = Vec::new();
    for img in images {
        for tag in &img.tags {
            let annotations = BTreeMap::from([(
                oci::REF_NAME.to_string(),
                format!("{}:{}", img.repository, tag),
            )]);
            let mut d = Descriptor::new(img.media_type.clone(), img.digest.clone(), img.size);
            d.annotations = Some(annotations);
            manifests.push(d);
        }
    }
    Ok(oci::layout_index(&manifests))
}

/// The ustar header of a regular file of `size` bytes, mode 0644, now.
pub(super) fn tar_header(size: u64) -> tar::Header {
    let mut h = tar::Header::new_ustar();
    h.set_size(size);
    h.set_mode(0o644);
    h.set_entry_type(tar::EntryType::Regular);
    h.set_mtime(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
    );
    h
}

/// Creates a bundle. On any error, removes every file it wrote.
pub fn create(opts: &CreateOptions<'_>, progress: &indicatif::ProgressBar) -> Result<Created> {
    // Generated blobs (SBOMs, packed feeds) wait here, beside the output,
    // until they are in the tar.
    let mut name = opts.out.file_name().unwrap_or_default().to_os_string();
    name.push(".airlock-tmp");
    let scratch = opts.out.with_file_name(name);
    let result = create_in(opts, &scratch, progress);
    let _ = std::fs::remove_dir_all(&scratch);
    result
}

fn create_in(
    opts: &CreateOptions<'_>,
    scratch: &Path,
    progress: &indicatif::ProgressBar,
) -> Result<Created> {
    let cfg = MirrorConfig::load(opts.config)?;
    let base = opts.config.parent().unwrap_or(Path::new("."));
    let have: HashSet<&Digest> = opts
        .have
        .map(|h| h.blobs.iter().collect())
        .unwrap_or_default();

    let mut images = Vec::new();
    let mut carried: Vec<(BlobEntry, PathBuf)> = Vec::new();
    let mut required: BTreeSet<(Digest, u64)> = BTreeSet::new();
    let mut seen = HashSet::new();
    // Every blob gathered, carried or not, for the stack candidates' check.
    let mut local = crate::stacks::candidates::LocalBlobs::default();
    let mut no_sbom: HashSet<RepositoryName> = HashSet::new();
    let mut remote = if cfg.image.iter().any(|i| source::is_registry(&i.source)) {
        let dir = match opts.cache {
            Some(d) => d.to_path_buf(),
            None => source::default_cache_dir()?,
        };
        Some(source::Remote::new(&cfg.registry, base, &dir)?)
    } else {
        None
    };
    for img in &cfg.image {
        let selected = source::expand(
            &img.source,
            &img.tags,
            img.tag_pattern.as_deref(),
            img.max_tags,
            remote.as_mut(),
        )?;
        for (src, tags) in selected {
            let one = ImageSource {
                source: src,
                tags,
                ..img.clone()
            };
            let r = resolve(&one, base, remote.as_mut(), &have, progress)?;
            if img.sbom == Some(false) {
                no_sbom.insert(img.repository.clone());
            }
            let mut blobs = r.blobs;
            // Every policy covering the image must hold: its own (or its
            // registry's), and each of the stacks it is an image of.
            let policies = super::signed::policy_for(&one, &cfg.registry)
                .into_iter()
                .chain(
                    cfg.stack
                        .iter()
                        .filter(|s| {
                            one.tags
                                .iter()
                                .any(|t| s.names(&format!("{}:{t}", one.repository)))
                        })
                        .filter_map(|s| s.policy.as_ref()),
                );
            let mut signatures_carried = HashSet::new();
            for policy in policies {
                progress.set_message(format!("checking signatures of {}", one.source));
                let signed = super::signed::check_image(
                    &one,
                    &r.entry,
                    &blobs,
                    &r.referrers,
                    policy,
                    base,
                    remote.as_mut(),
                    progress,
                )?;
                for c in signed {
                    if signatures_carried.insert(c.entry.digest.clone()) {
                        images.push(c.entry);
                        blobs.extend(c.blobs);
                    }
                }
            }
            images.push(r.entry);
            images.extend(r.referrers);
            for (blob, path) in blobs {
                local.0.insert(blob.digest.clone(), path.clone());
                if have.contains(&blob.digest) {
                    required.insert((blob.digest, blob.size));
                } else if seen.insert(blob.digest.clone()) {
                    carried.push((blob, path));
                }
            }
        }
    }
    // The SBOMs read the layers at hand (a blob the other side has may not be).
    let at_hand: HashMap<Digest, PathBuf> = local
        .0
        .iter()
        .filter(|(_, p)| p.exists())
        .map(|(d, p)| (d.clone(), p.clone()))
        .collect();
    let added = crate::sbom::bundle::additions(
        &images,
        &|i| no_sbom.contains(&i.repository),
        &at_hand,
        &cfg.feed,
        base,
        scratch,
        progress,
    )?;
    images.extend(added.images);
    for (blob, path) in added.blobs {
        local.0.insert(blob.digest.clone(), path.clone());
        if have.contains(&blob.digest) {
            required.insert((blob.digest, blob.size));
        } else if seen.insert(blob.digest.clone()) {
            carried.push((blob, path));
        }
    }
    super::format::check_tags(&images).map_err(|e| anyhow!("{}: {e}", opts.config.display()))?;
    let torcx = crate::torcx::bundle::resolve(&cfg.addon, &cfg.torcx_contents, base)?;
    for (blob, path) in torcx.blobs {
        if have.contains(&blob.digest) {
            required.insert((blob.digest, blob.size));
        } else if seen.insert(blob.digest.clone()) {
            carried.push((blob, path));
        }
    }
    let stacks = stack_entries(&cfg, &images)?;
    let oci_layout = oci::layout_header();
    let index_json = layout_index(&images)?;
    let expires_in = match (opts.expires_in, &cfg.expires_in) {
        (Some(d), _) => d,
        (None, Some(text)) => crate::ops::parse_positive_duration(text)
            .map_err(|e| anyhow!("{}: expires_in: {e}", opts.config.display()))?,
        (None, None) => super::freshness::DEFAULT_EXPIRES_IN,
    };
    let created = now_rfc3339();
    let expires = super::freshness::expires_at(&created, expires_in).map_err(|e| anyhow!(e))?;
    let doc = BundleDoc {
        format: FORMAT_V1.into(),
        id: uuid::Uuid::new_v4().to_string(),
        created,
        expires: Some(expires),
        creator: format!(
            "{} (airlock {}, key {})",
            user_at_host(),
            env!("CARGO_PKG_VERSION"),
            opts.keys
                .iter()
                .map(|k| k.fingerprint())
                .collect::<Vec<_>>()
                .join(", ")
        ),
        images,
        layout: LayoutDigests {
            oci_layout: Digest::sha256_of(&oci_layout),
            index_json: Digest::sha256_of(&index_json),
        },
        blobs: carried.iter().map(|(b, _)| b.clone()).collect(),
        required: required
            .into_iter()
            .map(|(digest, size)| BlobEntry { digest, size })
            .collect(),
        addons: torcx.addons,
        torcx_contents: torcx.vendor,
        stacks,
        feeds: added.feeds,
    };
    progress.set_message("checking stack candidates");
    let checked = check_candidates(&local, &doc)?;
    let mut text = serde_json::to_string_pretty(&doc)?;
    text.push('\n');
    let signed = super::sign::clearsign_all(opts.keys, &text)?;

    let pulled = remote.as_ref().map(|r| {
        let s = r.stats();
        let get = |a: &std::sync::atomic::AtomicU64| a.load(std::sync::atomic::Ordering::Relaxed);
        PullSummary {
            requests: get(&s.http.requests),
            bytes_downloaded: get(&s.bytes),
            cache_hits: get(&s.cache_hits),
            retries: get(&s.http.retries),
        }
    });
    let total: u64 = carried.iter().map(|(b, _)| b.size).sum();
    progress.set_message("writing bundle");
    progress.set_position(0);
    progress.set_length(total);
    let mut out = VolumeWriter::create(opts.out, opts.volume_size)?;
    let result = write_tar(
        &mut out,
        &signed,
        &oci_layout,
        &index_json,
        &carried,
        progress,
    );
    let written = result
        .and_then(|()| out.finish())
        .and_then(|(files, bytes)| {
            let list = match out.volume_list(&doc.id) {
                Some(list) => {
                    let path = super::volume_list::list_path(opts.out);
                    list.write(&path, opts.keys)?;
                    Some(path)
                }
                None => None,
            };
            Ok((files, bytes, list))
        });
    match written {
        Ok((files, bytes, volume_list)) => Ok(Created {
            doc,
            files,
            bytes,
            pulled,
            checked,
            volume_list,
        }),
        Err(e) => {
            out.remove_all();
            Err(e)
        }
    }
}

/// Checks the bundle's stack candidates from the gathered files: that
/// they flatten ([`crate::stacks::candidates::check_bundle`]) and that
/// kpack accepts their build and run images
/// ([`crate::stacks::candidates::check_builders`]).
fn check_candidates(
    local: &crate::stacks::candidates::LocalBlobs,
    doc: &BundleDoc,
) -> Result<Vec<crate::stacks::candidates::Checked>> {
    let check = async {
        let checked = crate::stacks::candidates::check_bundle(local, doc).await?;
        crate::stacks::candidates::check_builders(local, doc).await?;
        Ok::<_, crate::stacks::StackError>(checked)
    };
    let checked = match tokio::runtime::Handle::try_current() {
        Ok(h) => h.block_on(check),
        Err(_) => tokio::runtime::Builder::new_current_thread()
            .build()?
            .block_on(check),
    };
    Ok(checked?)
}

fn write_tar(
    out: &mut VolumeWriter,
    signed: &str,
    oci_layout: &[u8],
    index_json: &[u8],
    carried: &[(BlobEntry, PathBuf)],
    progress: &indicatif::ProgressBar,
) -> Result<()> {
    let mut tar = tar::Builder::new(out);
    for (name, bytes) in [
        (SIGNED_DOC, signed.as_bytes()),
        (OCI_LAYOUT, oci_layout),
        (INDEX_JSON, index_json),
    ] {
        tar.append_data(&mut tar_header(bytes.len() as u64), name, bytes)?;
    }
    for (blob, path) in carried {
        let file = File::open(path).with_context(|| {
            format!(
                "blob {} missing from layout: {}",
                blob.digest,
                path.display()
            )
        })?;
        let actual = file.metadata()?.len();
        if actual != blob.size {
            bail!(
                "blob {}: descriptor says {} bytes, {} has {}",
                blob.digest,
                blob.size,
                path.display(),
                actual
            );
        }
        let mut reader = HashingReader::new(
            BufReader::with_capacity(1 << 20, file),
            blob.digest.algorithm(),
        );
        {
            let counted = progress.wrap_read(&mut reader).take(blob.size);
            tar.append_data(&mut tar_header(blob.size), blob_path(&blob.digest), counted)?;
        }
        reader
            .verify(&blob.digest, blob.size)
            .with_context(|| format!("layout blob {}", path.display()))?;
    }
    tar.into_inner()?.flush()?;
    Ok(())
}
