//! Stack diffs between images held by the registry: `airlock stack diff
//! FROM TO`, `airlock stack diff NAME` (the promotion the active one
//! replaced vs the active one), and the diff `stack promote` shows before
//! it acts and keeps with the promotion. Platform images are paired by
//! platform (a single-platform pair is paired whatever it says).

use anyhow::{Result, anyhow};

use super::diff::{StackDiff, diff};
use super::site::{ImageInventory, image_inventories};
use crate::digest::Digest;
use crate::stacks::{ImageRef, StackName, image};
use crate::state::StateStore;

/// The diff of one platform.
#[derive(Debug, Clone, serde::Serialize)]
pub struct PlatformDiff {
    /// `os/architecture`.
    pub platform: String,
    /// The platform manifest before.
    pub from_manifest: Digest,
    /// The platform manifest after.
    pub to_manifest: Digest,
    /// The system before and after (`PRETTY_NAME`).
    pub os: (String, String),
    /// The changes.
    #[serde(flatten)]
    pub diff: StackDiff,
}

/// What changes from one image to another.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ImageDiff {
    /// The image before.
    pub from: ImageRef,
    /// The image after.
    pub to: ImageRef,
    /// Per platform present in both.
    pub platforms: Vec<PlatformDiff>,
    /// Platforms only in `from` or only in `to`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unpaired: Vec<String>,
}

impl ImageDiff {
    /// The text the CLI prints.
    pub fn text(&self) -> String {
        let mut out = format!("{} -> {}\n", self.from, self.to);
        for p in &self.platforms {
            let os = if p.os.0 == p.os.1 {
                p.os.1.clone()
            } else {
                format!("{} -> {}", p.os.0, p.os.1)
            };
            out.push_str(&format!("{} ({os}): {}", p.platform, p.diff.text()));
        }
        for u in &self.unpaired {
            out.push_str(&format!("{u}: only in one image\n"));
        }
        out
    }
}

fn pair(
    a: Vec<ImageInventory>,
    b: Vec<ImageInventory>,
) -> (Vec<(ImageInventory, ImageInventory)>, Vec<String>) {
    if a.len() == 1 && b.len() == 1 {
        let (x, y) = (a.into_iter().next(), b.into_iter().next());
        return (x.zip(y).into_iter().collect(), Vec::new());
    }
    let mut unpaired = Vec::new();
    let mut pairs = Vec::new();
    let mut rest = b;
    for x in a {
        match rest.iter().position(|y| y.platform == x.platform) {
            Some(i) => pairs.push((x, rest.remove(i))),
            None => unpaired.push(x.platform),
        }
    }
    unpaired.extend(rest.into_iter().map(|y| y.platform));
    (pairs, unpaired)
}

/// The diff from image `from` to image `to`.
pub async fn images(state: &StateStore, from: &ImageRef, to: &ImageRef) -> Result<ImageDiff> {
    let (a, b) = (
        image_inventories(state, from).await?,
        image_inventories(state, to).await?,
    );
    let (pairs, unpaired) = pair(a, b);
    Ok(ImageDiff {
        from: from.clone(),
        to: to.clone(),
        platforms: pairs
            .into_iter()
            .map(|(x, y)| PlatformDiff {
                platform: y.platform.clone(),
                from_manifest: x.manifest.clone(),
                to_manifest: y.manifest.clone(),
                os: (x.inventory.os_name(), y.inventory.os_name()),
                diff: diff(&x.inventory, &y.inventory),
            })
            .collect(),
        unpaired,
    })
}

/// Pins `REPO:TAG` / `REPO@DIGEST`.
pub async fn pin(state: &StateStore, reference: &str) -> Result<ImageRef> {
    let snap = state.snapshot().await?;
    Ok(image::pin(state, &snap, reference).await?)
}

/// The diff of stack `name`: the promotion the active one replaced (else
/// the one before it) vs the active one. Errors: an unknown stack, one
/// with fewer than two promotions.
pub async fn stack(state: &StateStore, name: &StackName) -> Result<ImageDiff> {
    let table = crate::stacks::ops::load(state).await?;
    let s = table.get(name)?;
    let active = s
        .active()
        .ok_or_else(|| anyhow!("stack {name} has no active promotion"))?;
    let previous = active
        .replaces
        .and_then(|id| s.promotion(id))
        .or_else(|| s.promotions.iter().rev().find(|p| p.id < active.id))
        .ok_or_else(|| anyhow!("stack {name} has a single promotion: nothing to compare"))?;
    images(state, &previous.image, &active.image).await
}

/// The diff from stack `name`'s active promotion to `image` (what
/// promoting `image` would change); `None` when the stack has no active
/// promotion or an inventory cannot be read (logged).
pub async fn promotion(state: &StateStore, name: &StackName, image: &str) -> Option<ImageDiff> {
    let run = async {
        let table = crate::stacks::ops::load(state).await?;
        let Some(active) = table.stacks.get(name).and_then(|s| s.active()) else {
            return Ok(None);
        };
        let to = pin(state, image).await?;
        anyhow::Ok(Some(images(state, &active.image, &to).await?))
    };
    match run.await {
        Ok(v) => v,
        Err(e) => {
            tracing::warn!(stack = %name, error = %format!("{e:#}"), "stack diff not computed");
            None
        }
    }
}

/// [`promotion`] as JSON (what is kept with the promotion and sent in the
/// `stack.promoted` event).
pub async fn promotion_diff(
    state: &StateStore,
    name: &StackName,
    image: &str,
) -> Option<serde_json::Value> {
    let d = promotion(state, name, image).await?;
    serde_json::to_value(&d).ok()
}
