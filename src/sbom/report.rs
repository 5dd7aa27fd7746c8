//! What users see: vulnerability reports of an image or a stack (CLI
//! `airlock vulns`, `GET /api/v1/vulns`), the lifecycle reason ("fixes
//! CVE-..."), feed ages, and the per-stack severity gauges of `/metrics`.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, OnceLock};

use anyhow::{Result, anyhow};

use super::feed::import::load as load_feeds;
use super::feed::table::{FeedTable, age_days, age_line, today};
use super::scan::{Finding, counts, scan};
use super::site::{ImageInventory, Origin, image_inventories};
use crate::stacks::lifecycle::Lifecycle;
use crate::stacks::{ImageRef, StackName, image};
use crate::state::StateStore;

/// One feed as reports show it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct FeedInfo {
    /// The feed's name.
    pub name: String,
    /// `osv` or `debian-tracker`.
    pub format: String,
    /// `YYYY-MM-DD`.
    pub date: String,
    /// Whole days since `date`.
    pub age_days: Option<i64>,
    /// "data from 2026-11-28, 3 days old".
    pub age: String,
}

/// The feeds of `table`.
pub fn feeds(table: &FeedTable) -> Vec<FeedInfo> {
    let t = today();
    table
        .feeds
        .iter()
        .map(|(n, r)| FeedInfo {
            name: n.clone(),
            format: r.format.clone(),
            date: r.date.clone(),
            age_days: age_days(&r.date, t),
            age: age_line(&r.date, t),
        })
        .collect()
}

/// One platform image's findings.
#[derive(Debug, Clone, serde::Serialize)]
pub struct PlatformReport {
    /// `os/architecture`.
    pub platform: String,
    /// The platform manifest.
    pub manifest: crate::digest::Digest,
    /// `PRETTY_NAME` or `ID VERSION_ID`.
    pub os: String,
    /// Packages in the inventory.
    pub packages: usize,
    /// `attached` SBOM referrer or `layers`.
    pub inventory: Origin,
    /// Findings per severity.
    pub counts: BTreeMap<&'static str, u64>,
    /// Findings, worst first.
    pub vulnerabilities: Vec<Finding>,
}

/// A report of an image (or a stack's active promotion).
#[derive(Debug, Clone, serde::Serialize)]
pub struct VulnReport {
    /// The image.
    pub image: ImageRef,
    /// The stack, when asked by stack name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stack: Option<StackName>,
    /// Its promotion, when asked by stack name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub promotion: Option<u64>,
    /// The feeds used, with their age.
    pub feeds: Vec<FeedInfo>,
    /// One per platform image.
    pub platforms: Vec<PlatformReport>,
}

/// Resolves `target`: the name of a promoted stack (its active promotion),
/// else `REPO:TAG` / `REPO@DIGEST` held by the registry.
/// Errors: neither a known stack nor a held image.
pub async fn resolve(
    state: &StateStore,
    target: &str,
) -> Result<(ImageRef, Option<(StackName, u64)>)> {
    let table = crate::stacks::ops::load(state).await?;
    if let Ok(name) = target.parse::<StackName>()
        && let Some(active) = table.stacks.get(&name).and_then(|s| s.active())
    {
        return Ok((active.image.clone(), Some((name, active.id))));
    }
    let snap = state.snapshot().await?;
    let pinned = image::pin(state, &snap, target)
        .await
        .map_err(|e| anyhow!("{target:?} is not a promoted stack, and as an image: {e}"))?;
    Ok((pinned, None))
}

async fn platform_report(
    state: &StateStore,
    table: &FeedTable,
    inv: ImageInventory,
) -> Result<PlatformReport> {
    let vulnerabilities = scan(state, table, None, &inv.inventory).await?;
    Ok(PlatformReport {
        platform: inv.platform,
        manifest: inv.manifest,
        os: inv.inventory.os_name(),
        packages: inv.inventory.packages.len(),
        inventory: inv.origin,
        counts: counts(&vulnerabilities),
        vulnerabilities,
    })
}

/// The report for `target` (see [`resolve`]).
pub async fn vulns(state: &StateStore, target: &str) -> Result<VulnReport> {
    let (image, stack) = resolve(state, target).await?;
    let table = load_feeds(state).await?;
    let mut platforms = Vec::new();
    for inv in image_inventories(state, &image).await? {
        platforms.push(platform_report(state, &table, inv).await?);
    }
    Ok(VulnReport {
        image,
        stack: stack.as_ref().map(|(n, _)| n.clone()),
        promotion: stack.map(|(_, p)| p),
        feeds: feeds(&table),
        platforms,
    })
}

/// The ids of findings per platform of `image`.
async fn ids_by_platform(
    state: &StateStore,
    table: &FeedTable,
    image: &ImageRef,
) -> Result<HashMap<String, Vec<String>>> {
    let mut out = HashMap::new();
    for inv in image_inventories(state, image).await? {
        let f = scan(state, table, None, &inv.inventory).await?;
        out.insert(inv.platform, f.into_iter().map(|f| f.id).collect());
    }
    Ok(out)
}

/// What a restage onto the active promotion fixes for a `superseded`
/// digest: advisories affecting the superseded image and not the active
/// one (same platform), and the reason line
/// `superseded (restage required: fixes CVE-2026-1234, ...; data from ...)`.
/// `None` for other statuses, and when no feed is imported.
pub async fn lifecycle_reason(
    state: &StateStore,
    l: &Lifecycle,
) -> Result<Option<(String, Vec<String>)>> {
    let (Some(stack), Some(p), true) = (&l.stack, l.promotion, l.status == "superseded") else {
        return Ok(None);
    };
    let table = crate::stacks::ops::load(state).await?;
    let s = table.get(stack)?;
    let (Some(old), Some(new)) = (s.promotion(p), s.active()) else {
        return Ok(None);
    };
    let feeds_table = load_feeds(state).await?;
    if feeds_table.feeds.is_empty() {
        return Ok(None);
    }
    let before = ids_by_platform(state, &feeds_table, &old.image).await?;
    let after = ids_by_platform(state, &feeds_table, &new.image).await?;
    let mut fixes = std::collections::BTreeSet::new();
    for (platform, ids) in &before {
        let still: std::collections::HashSet<&String> =
            after.get(platform).into_iter().flatten().collect();
        fixes.extend(ids.iter().filter(|i| !still.contains(i)).cloned());
    }
    let fixes: Vec<String> = fixes.into_iter().collect();
    let ages: Vec<String> = feeds(&feeds_table)
        .into_iter()
        .map(|f| format!("{}: {}", f.name, f.age))
        .collect();
    let listed = if fixes.is_empty() {
        "no known vulnerability fixed".to_string()
    } else if fixes.len() > 10 {
        format!(
            "fixes {} and {} more",
            fixes[..10].join(", "),
            fixes.len() - 10
        )
    } else {
        format!("fixes {}", fixes.join(", "))
    };
    Ok(Some((
        format!(
            "superseded (restage required: {listed}; {})",
            ages.join("; ")
        ),
        fixes,
    )))
}

/// `l` as JSON (`GET /stacks/v1/lifecycle/<digest>`, `stack lifecycle
/// --json`), with `reason` and `fixes` when [`lifecycle_reason`] has them
/// (a failure to compute them is logged and leaves them out).
pub async fn lifecycle_json(state: &StateStore, l: &Lifecycle) -> serde_json::Value {
    let mut v = serde_json::to_value(l).unwrap_or_default();
    match lifecycle_reason(state, l).await {
        Ok(Some((reason, fixes))) => {
            v["reason"] = reason.into();
            v["fixes"] = fixes.into();
        }
        Ok(None) => {}
        Err(e) => tracing::warn!(error = %format!("{e:#}"), "lifecycle reason not computed"),
    }
    v
}

type GaugeKey = (crate::digest::Digest, Vec<crate::digest::Digest>);

fn gauge_cache() -> &'static Mutex<HashMap<GaugeKey, BTreeMap<&'static str, u64>>> {
    static C: OnceLock<Mutex<HashMap<GaugeKey, BTreeMap<&'static str, u64>>>> = OnceLock::new();
    C.get_or_init(Default::default)
}

/// Sets `airlock_stack_vulnerabilities{stack,severity}` for every stack's
/// active promotion (all platforms together), matching only when the image
/// or the feeds changed since the last call. Errors are logged.
pub async fn refresh_metrics(state: &StateStore) {
    let run = async {
        let table = crate::stacks::ops::load(state).await?;
        let feeds_table = load_feeds(state).await?;
        let feed_ids: Vec<_> = feeds_table
            .feeds
            .values()
            .map(|r| r.advisories.digest.clone())
            .collect();
        let gauges = &crate::metrics::global().stack_vulnerabilities;
        gauges.clear();
        for (name, s) in &table.stacks {
            let Some(active) = s.active() else { continue };
            let key = (active.image.digest.clone(), feed_ids.clone());
            let cached = gauge_cache().lock().ok().and_then(|c| c.get(&key).cloned());
            let c = match cached {
                Some(c) => c,
                None => {
                    let mut all = Vec::new();
                    for inv in image_inventories(state, &active.image).await? {
                        all.extend(scan(state, &feeds_table, None, &inv.inventory).await?);
                    }
                    let c = counts(&all);
                    if let Ok(mut cache) = gauge_cache().lock() {
                        if cache.len() > 256 {
                            cache.clear();
                        }
                        cache.insert(key, c.clone());
                    }
                    c
                }
            };
            for (severity, n) in c {
                gauges
                    .get_or_create(&crate::metrics::StackSeverityLabels {
                        stack: name.to_string(),
                        severity,
                    })
                    .set(n as i64);
            }
        }
        anyhow::Ok(())
    };
    if let Err(e) = run.await {
        tracing::warn!(error = %format!("{e:#}"), "stack vulnerability gauges not refreshed");
    }
}
