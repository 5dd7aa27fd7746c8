//! The site side of SBOMs: an image's inventories, from the SPDX referrer
//! attached to each platform manifest when there is one (ours or one made
//! upstream), else read from its layers (and kept in a small in-process
//! cache: a manifest never changes); and attaching a generated SPDX
//! document as a referrer (one root swap).

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use anyhow::{Context, Result, anyhow};

use super::inventory::Inventory;
use super::referrer;
use super::spdx::{self, Subject};
use crate::digest::Digest;
use crate::names::RepositoryName;
use crate::oci::{self, Manifest};
use crate::stacks::ImageRef;
use crate::stacks::image::{self, PlatformImage};
use crate::state::{ManifestInfo, Op, Snapshot, StateStore};
use crate::store;

/// Where an inventory came from.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Origin {
    /// An SPDX referrer attached to the manifest (its digest).
    Attached(Digest),
    /// Read from the image's layers now.
    Layers,
}

/// The inventory of one platform image.
#[derive(Debug, Clone)]
pub struct ImageInventory {
    /// `os/architecture[/variant]`.
    pub platform: String,
    /// The platform image manifest.
    pub manifest: Digest,
    /// What is installed.
    pub inventory: Inventory,
    /// Where it came from.
    pub origin: Origin,
    /// The image config's `created`, if any.
    pub created: Option<String>,
}

/// Most generated inventories kept in memory.
const CACHE: usize = 256;

fn cache() -> &'static Mutex<HashMap<Digest, Inventory>> {
    static C: OnceLock<Mutex<HashMap<Digest, Inventory>>> = OnceLock::new();
    C.get_or_init(|| Mutex::new(HashMap::new()))
}

/// The SPDX referrer attached to `manifest` in `repo`, if any: (referrer
/// digest, document bytes). The newest by digest order wins when several are.
pub async fn attached(
    state: &StateStore,
    snap: &Snapshot,
    repo: &RepositoryName,
    manifest: &Digest,
) -> Result<Option<(Digest, Vec<u8>)>> {
    let Some(r) = state.repository(snap, repo).await? else {
        return Ok(None);
    };
    let store = state.blobstore();
    for (d, info) in r.referrers(manifest, None, 1000).await? {
        if info.artifact_type.as_deref() != Some(spdx::MEDIA_TYPE) {
            continue;
        }
        let bytes = store::get_verified(&**store, &d).await?;
        let m = Manifest::parse(&bytes).map_err(|e| anyhow!("referrer {d}: {e}"))?;
        if let Some(layer) = m.layers.iter().find(|l| l.media_type == spdx::MEDIA_TYPE) {
            let doc = store::get_verified(&**store, &layer.digest)
                .await
                .with_context(|| format!("SBOM of referrer {d}"))?;
            return Ok(Some((d, doc)));
        }
    }
    Ok(None)
}

/// The inventory of one platform image.
pub async fn platform_inventory(
    state: &StateStore,
    snap: &Snapshot,
    repo: &RepositoryName,
    p: &PlatformImage,
) -> Result<ImageInventory> {
    let created = p.config["created"].as_str().map(str::to_string);
    let base = |inventory, origin| ImageInventory {
        platform: p.platform.clone(),
        manifest: p.manifest.clone(),
        inventory,
        origin,
        created: created.clone(),
    };
    if let Some((d, doc)) = attached(state, snap, repo, &p.manifest).await? {
        let inv = spdx::read(&doc).with_context(|| format!("SBOM referrer {d}"))?;
        return Ok(base(inv, Origin::Attached(d)));
    }
    if let Some(inv) = cache()
        .lock()
        .ok()
        .and_then(|c| c.get(&p.manifest).cloned())
    {
        return Ok(base(inv, Origin::Layers));
    }
    let inv = Inventory::read_stored(state.blobstore().clone(), p.layers.clone())
        .await
        .with_context(|| {
            format!(
                "reading the package database of {} ({})",
                p.manifest, p.platform
            )
        })?;
    if let Ok(mut c) = cache().lock() {
        if c.len() >= CACHE {
            c.clear();
        }
        c.insert(p.manifest.clone(), inv.clone());
    }
    Ok(base(inv, Origin::Layers))
}

/// The inventories of every platform image of `image`.
pub async fn image_inventories(
    state: &StateStore,
    image: &ImageRef,
) -> Result<Vec<ImageInventory>> {
    let snap = state.snapshot().await?;
    let mut out = Vec::new();
    for p in image::platforms(&**state.blobstore(), image).await? {
        out.push(platform_inventory(state, &snap, &image.repository, &p).await?);
    }
    Ok(out)
}

/// The SPDX subject of a platform image of `repo`.
pub fn subject(repo: &RepositoryName, inv: &ImageInventory) -> Subject {
    Subject {
        name: repo.to_string(),
        manifest: inv.manifest.clone(),
        created: inv
            .created
            .clone()
            .unwrap_or_else(crate::state::now_rfc3339),
    }
}

/// Attaches a generated SPDX referrer to every platform manifest of
/// `image` that has none (one root swap for all); returns the referrer
/// digests made (empty when each already had one).
pub async fn attach(state: &StateStore, image: &ImageRef, who: &str) -> Result<Vec<Digest>> {
    let snap = state.snapshot().await?;
    let repo = &image.repository;
    let r = state
        .repository(&snap, repo)
        .await?
        .ok_or_else(|| anyhow!("repository {repo} not known"))?;
    let mut ops = Vec::new();
    let mut made = Vec::new();
    let store = state.blobstore();
    for inv in image_inventories(state, image).await? {
        if inv.origin != Origin::Layers {
            continue;
        }
        let info = r
            .manifest(&inv.manifest)
            .await?
            .ok_or_else(|| anyhow!("manifest {} not known in {repo}", inv.manifest))?;
        let s = subject(repo, &inv);
        let doc = spdx::to_bytes(&spdx::document(&inv.inventory, &s));
        let a = referrer::artifact(
            doc,
            spdx::MEDIA_TYPE,
            &inv.manifest,
            &info.media_type,
            info.size,
            &s.created,
        );
        let mut blobs = Vec::new();
        for (d, bytes) in &a.blobs {
            store::put_digested(&**store, d, bytes::Bytes::copy_from_slice(bytes)).await?;
            blobs.push((d.clone(), bytes.len() as u64));
        }
        store::put_digested(
            &**store,
            &a.digest,
            bytes::Bytes::copy_from_slice(&a.manifest),
        )
        .await?;
        ops.push(Op::LinkBlobs {
            repo: repo.clone(),
            blobs,
        });
        ops.push(Op::PutManifest {
            repo: repo.clone(),
            digest: a.digest.clone(),
            info: ManifestInfo {
                media_type: oci::OCI_MANIFEST.into(),
                size: a.manifest.len() as u64,
                subject: Some(inv.manifest.clone()),
                artifact_type: Some(spdx::MEDIA_TYPE.into()),
            },
            tags: Vec::new(),
            guard: Default::default(),
        });
        made.push(a.digest);
    }
    if !ops.is_empty() {
        state
            .commit(&format!("attach SBOM to {image}"), who, &ops)
            .await?;
    }
    Ok(made)
}
