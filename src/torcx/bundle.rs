//! Addons in bundles: the `[[addon]]` and `[[torcx_contents]]` tables of the
//! mirror config, their entries in the signed bundle document, and what
//! import makes of them.
//!
//! Owns: checking addon archives and vendor contents when a bundle is
//! created (fail early, on the connected side) and again when it is imported
//! (from the blobstore, after the pipeline verified their sha256), and the
//! one [`Op::Document`] that records them in the same commit as the import.
//! Never writes the tar and never verifies bundle signatures (`bundle` does).
//! The archives travel as ordinary `blobs/sha256/<hex>` entries listed in the
//! signed document, so import verifies them like any blob.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow, bail};
use tokio::io::AsyncReadExt;

use super::archive;
use super::format::{AddonFormat, Envelope, REMOTE_CONTENTS_V1, RemoteContents, check_token};
use super::table::{self, Build, Target, TorcxDoc, VendorContents};
use crate::bundle::format::BlobEntry;
use crate::digest::Digest;
use crate::state::{DocumentChange, Op};
use crate::store::{Blobstore, blob_key};

/// Largest vendor contents document accepted, in bytes.
const MAX_VENDOR_CONTENTS: u64 = 4 << 20;

/// One `[[addon]]` of the mirror config:
///
/// ```toml
/// [[addon]]
/// remote = "com.example.mirror"
/// name = "docker"
/// version = "19.03"
/// format = "tgz"                            # or "squashfs"
/// source = "./addons/docker:19.03.torcx.tgz"
/// boards = ["amd64-usr"]
/// os_versions = ["3033.2.0", "3033.2.1"]    # the OS releases it is built for
/// default_for = ["3033.2.0"]                # where it is the defaultVersion
/// ```
/// A relative `source` is resolved against the config file's directory.
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AddonSource {
    /// The remote that serves it.
    pub remote: String,
    /// Addon name.
    pub name: String,
    /// Version.
    pub version: String,
    /// Archive format.
    pub format: AddonFormat,
    /// Archive file.
    pub source: PathBuf,
    /// Boards it is built for; at least one.
    pub boards: Vec<String>,
    /// OS versions it is built for; at least one.
    pub os_versions: Vec<String>,
    /// OS versions (of `os_versions`) where it is the default version.
    #[serde(default)]
    pub default_for: Vec<String>,
}

/// One `[[torcx_contents]]` of the mirror config: a vendor's signed
/// `torcx_remote_contents.json.asc`, served byte for byte for one remote,
/// board and OS version (its signature stays the vendor's).
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VendorSource {
    /// The remote that serves it.
    pub remote: String,
    /// Board.
    pub board: String,
    /// OS version.
    pub os_version: String,
    /// The `.asc` file.
    pub source: PathBuf,
}

/// An addon in the signed bundle document.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AddonEntry {
    /// The remote that serves it.
    pub remote: String,
    /// Addon name.
    pub name: String,
    /// Version.
    pub version: String,
    /// Archive format.
    pub format: AddonFormat,
    /// Boards it is built for.
    pub boards: Vec<String>,
    /// OS versions it is built for.
    pub os_versions: Vec<String>,
    /// OS versions where it is the default.
    #[serde(default)]
    pub default_for: Vec<String>,
    /// The archive's blob (listed in `blobs` or `required`).
    pub digest: Digest,
    /// Its size in bytes.
    pub size: u64,
}

/// Vendor contents in the signed bundle document.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VendorEntry {
    /// The remote that serves it.
    pub remote: String,
    /// Board.
    pub board: String,
    /// OS version.
    pub os_version: String,
    /// The document's blob.
    pub digest: Digest,
    /// Its size in bytes.
    pub size: u64,
}

impl AddonEntry {
    /// Checks names and lists (see [`check_token`]); a one-line cause.
    pub fn check(&self) -> Result<()> {
        let what = format!("addon {}:{}", self.name, self.version);
        check_token("remote", &self.remote).map_err(|e| anyhow!("{what}: {e}"))?;
        check_token("addon name", &self.name).map_err(|e| anyhow!("{what}: {e}"))?;
        check_token("version", &self.version).map_err(|e| anyhow!("{what}: {e}"))?;
        if self.boards.is_empty() || self.os_versions.is_empty() {
            bail!("{what}: needs at least one board and one OS version");
        }
        for b in &self.boards {
            check_token("board", b).map_err(|e| anyhow!("{what}: {e}"))?;
        }
        for v in &self.os_versions {
            check_token("OS version", v).map_err(|e| anyhow!("{what}: {e}"))?;
        }
        if let Some(d) = self
            .default_for
            .iter()
            .find(|d| !self.os_versions.contains(d))
        {
            bail!("{what}: default_for {d:?} is not one of its os_versions");
        }
        Ok(())
    }

    fn targets(&self, versions: &[String]) -> std::collections::BTreeSet<Target> {
        self.boards
            .iter()
            .flat_map(|b| {
                versions.iter().map(move |v| Target {
                    board: b.clone(),
                    os_version: v.clone(),
                })
            })
            .collect()
    }
}

/// Checks vendor contents framing: an OpenPGP cleartext-signed
/// `torcx-remote-contents-v1` with nothing after the signature block
/// (the signature itself is the vendor's; hosts check it).
fn check_vendor_text(text: &str) -> Result<()> {
    let inner =
        crate::bundle::sign::unverified_text(text).map_err(|e| anyhow!("vendor contents: {e}"))?;
    let doc: Envelope<RemoteContents> = serde_json::from_str(&inner)
        .map_err(|e| anyhow!("vendor contents is not a torcx contents document: {e}"))?;
    if doc.kind != REMOTE_CONTENTS_V1 {
        bail!(
            "vendor contents has kind {:?}, expected {REMOTE_CONTENTS_V1}",
            doc.kind
        );
    }
    let end = "-----END PGP SIGNATURE-----";
    if !text.trim_end().ends_with(end) {
        bail!("vendor contents: data after the signature block (torcx refuses it)");
    }
    Ok(())
}

/// What `bundle create` carries for the torcx room.
#[derive(Debug, Default)]
pub struct Carried {
    /// Addon entries for the signed document.
    pub addons: Vec<AddonEntry>,
    /// Vendor contents entries for the signed document.
    pub vendor: Vec<VendorEntry>,
    /// The blobs to carry and where to read them.
    pub blobs: Vec<(BlobEntry, PathBuf)>,
}

/// Checks every `[[addon]]` archive and `[[torcx_contents]]` file (paths
/// relative to `base`) and returns what the bundle carries.
///
/// Errors: a one-line cause naming the source file.
pub fn resolve(addons: &[AddonSource], vendor: &[VendorSource], base: &Path) -> Result<Carried> {
    let mut out = Carried::default();
    for a in addons {
        let path = base.join(&a.source);
        let file = std::fs::File::open(&path).with_context(|| {
            format!("addon {}:{}: reading {}", a.name, a.version, path.display())
        })?;
        let info = archive::check(std::io::BufReader::with_capacity(1 << 20, file), a.format)
            .map_err(|e| anyhow!("addon {}:{} ({}): {e}", a.name, a.version, path.display()))?;
        let entry = AddonEntry {
            remote: a.remote.clone(),
            name: a.name.clone(),
            version: a.version.clone(),
            format: a.format,
            boards: a.boards.clone(),
            os_versions: a.os_versions.clone(),
            default_for: a.default_for.clone(),
            digest: info.sha256.clone(),
            size: info.size,
        };
        entry.check()?;
        out.blobs.push((
            BlobEntry {
                digest: info.sha256,
                size: info.size,
            },
            path,
        ));
        out.addons.push(entry);
    }
    for v in vendor {
        let path = base.join(&v.source);
        for (what, s) in [
            ("remote", &v.remote),
            ("board", &v.board),
            ("OS version", &v.os_version),
        ] {
            check_token(what, s).map_err(|e| anyhow!("torcx_contents {}: {e}", path.display()))?;
        }
        let bytes = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
        let text = String::from_utf8(bytes.clone())
            .map_err(|_| anyhow!("{}: not UTF-8", path.display()))?;
        check_vendor_text(&text).with_context(|| path.display().to_string())?;
        let digest = Digest::sha256_of(&bytes);
        out.vendor.push(VendorEntry {
            remote: v.remote.clone(),
            board: v.board.clone(),
            os_version: v.os_version.clone(),
            digest: digest.clone(),
            size: bytes.len() as u64,
        });
        out.blobs.push((
            BlobEntry {
                digest,
                size: bytes.len() as u64,
            },
            path,
        ));
    }
    Ok(out)
}

/// Reads an addon blob from the store and checks it as an archive of `format`.
async fn check_stored(
    store: &std::sync::Arc<dyn Blobstore>,
    digest: &Digest,
    format: AddonFormat,
) -> Result<archive::ArchiveInfo> {
    let reader = store.read(&blob_key(digest), None).await.with_context(|| {
        format!("addon blob {digest} is neither in the bundle nor in the store")
    })?;
    tokio::task::spawn_blocking(move || {
        let sync = tokio_util::io::SyncIoBridge::new(reader);
        archive::check(std::io::BufReader::with_capacity(1 << 20, sync), format)
    })
    .await
    .map_err(|e| anyhow!("archive check failed: {e}"))?
    .map_err(|e| anyhow!("{e}"))
}

/// The op recording a verified bundle's addons and vendor contents in the
/// `torcx` document, after checking that each is listed in the document's
/// `blobs` or `required` with the same size and checking each archive as
/// stored (sha256 and size equal to the signed entry, then
/// [`archive::check`]); `None` when the bundle carries none.
///
/// Errors: a one-line cause naming the addon; nothing is recorded.
pub async fn import_op(
    store: &std::sync::Arc<dyn Blobstore>,
    doc: &crate::bundle::format::BundleDoc,
    allow_downgrade: bool,
) -> Result<Option<Op>> {
    let (addons, vendor) = (&doc.addons, &doc.torcx_contents);
    if addons.is_empty() && vendor.is_empty() {
        return Ok(None);
    }
    let listed = |d: &Digest, size: u64| {
        doc.blobs
            .iter()
            .chain(&doc.required)
            .any(|b| &b.digest == d && b.size == size)
    };
    for (d, size) in addons
        .iter()
        .map(|a| (&a.digest, a.size))
        .chain(vendor.iter().map(|v| (&v.digest, v.size)))
    {
        if !listed(d, size) {
            bail!(
                "torcx entry {d} ({size} bytes) is not listed in the bundle's blobs or required blobs"
            );
        }
    }
    let mut builds = Vec::new();
    for a in addons {
        a.check()?;
        let what = format!("addon {}:{}.torcx.{}", a.name, a.version, a.format);
        let info = check_stored(store, &a.digest, a.format)
            .await
            .with_context(|| what.clone())?;
        if info.sha256 != a.digest || info.size != a.size {
            bail!("{what}: stored archive does not match the signed entry");
        }
        builds.push((
            a.remote.clone(),
            Build {
                name: a.name.clone(),
                version: a.version.clone(),
                format: a.format,
                sha256: info.sha256,
                sha512: info.sha512,
                size: info.size,
                targets: a.targets(&a.os_versions),
                default_for: a.targets(&a.default_for),
            },
        ));
    }
    let mut vendors = Vec::new();
    for v in vendor {
        for (what, s) in [
            ("remote", &v.remote),
            ("board", &v.board),
            ("OS version", &v.os_version),
        ] {
            check_token(what, s).map_err(|e| anyhow!("torcx_contents: {e}"))?;
        }
        if v.size > MAX_VENDOR_CONTENTS {
            bail!("torcx_contents: {} bytes, over the 4 MiB limit", v.size);
        }
        let mut bytes = Vec::new();
        store
            .read(&blob_key(&v.digest), None)
            .await?
            .read_to_end(&mut bytes)
            .await?;
        if Digest::sha256_of(&bytes) != v.digest {
            bail!("torcx_contents {}: stored bytes do not match", v.digest);
        }
        let text = String::from_utf8(bytes).map_err(|_| anyhow!("torcx_contents: not UTF-8"))?;
        check_vendor_text(&text)?;
        vendors.push((
            v.remote.clone(),
            VendorContents {
                target: Target {
                    board: v.board.clone(),
                    os_version: v.os_version.clone(),
                },
                digest: v.digest.clone(),
                size: v.size,
                bundle_created: Some(doc.created.clone()),
            },
        ));
    }
    Ok(Some(Op::Document {
        name: super::DOCUMENT.into(),
        change: DocumentChange::json(move |cur: Option<TorcxDoc>| {
            let mut doc = cur.unwrap_or_default();
            for (remote, b) in &builds {
                table::record_build(&mut doc, remote, b.clone());
            }
            for (remote, v) in &vendors {
                table::record_vendor(&mut doc, remote, v.clone(), allow_downgrade)
                    .map_err(crate::state::StateError::Rejected)?;
            }
            Ok(Some(doc))
        }),
    }))
}
