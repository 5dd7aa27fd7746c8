//! `GET /api/v1/torcx`: every torcx remote with its boards, OS versions,
//! addon images (name, version, format, hashes, size, targets, where it is
//! the default) and deprecations, as the `torcx` state document holds them.

use std::collections::BTreeSet;

use super::Result;
use crate::torcx::table::{Build, Deprecation, Target};
use crate::ui::Context;

/// Every remote.
#[derive(Debug, Clone, serde::Serialize)]
pub struct TorcxView {
    /// By name.
    pub remotes: Vec<RemoteView>,
}

/// One remote.
#[derive(Debug, Clone, serde::Serialize)]
pub struct RemoteView {
    /// The remote's name.
    pub name: String,
    /// Boards any build is for, sorted.
    pub boards: Vec<String>,
    /// Board × OS version pairs served, sorted; with whether vendor-signed
    /// contents are carried for it.
    pub targets: Vec<TargetView>,
    /// Addon builds, sorted by name and version.
    pub images: Vec<Build>,
    /// Versions withdrawn from some OS version on.
    pub deprecations: Vec<Deprecation>,
}

/// One board and OS version.
#[derive(Debug, Clone, serde::Serialize)]
pub struct TargetView {
    /// Board and OS version.
    #[serde(flatten)]
    pub target: Target,
    /// Addon builds offered there (not withdrawn).
    pub offered: usize,
    /// Whether the vendor's own signed contents are served there.
    pub vendor: bool,
}

/// The torcx document of the current state: the remotes `viewer` may read
/// (`torcx/<remote>`).
///
/// Errors: the state cannot be read.
pub async fn build(ctx: &dyn Context, viewer: &crate::ui::http::Viewer) -> Result<TorcxView> {
    let state = ctx.state();
    let snap = state.snapshot().await?;
    let doc = state
        .document::<crate::torcx::table::TorcxDoc>(&snap, crate::torcx::DOCUMENT)
        .await?
        .unwrap_or_default();
    let remotes = doc
        .remotes
        .iter()
        .filter(|(name, _)| viewer.may_read(&format!("torcx/{name}")))
        .map(|(name, r)| {
            let mut targets: BTreeSet<Target> = r
                .builds
                .iter()
                .flat_map(|b| b.targets.iter().cloned())
                .collect();
            targets.extend(r.vendor.iter().map(|v| v.target.clone()));
            RemoteView {
                name: name.clone(),
                boards: targets
                    .iter()
                    .map(|t| t.board.clone())
                    .collect::<BTreeSet<_>>()
                    .into_iter()
                    .collect(),
                targets: targets
                    .iter()
                    .map(|t| TargetView {
                        offered: r.offered(t).count(),
                        vendor: r.vendor_for(t).is_some(),
                        target: t.clone(),
                    })
                    .collect(),
                images: r.builds.clone(),
                deprecations: r.deprecations.clone(),
            }
        })
        .collect();
    Ok(TorcxView { remotes })
}
