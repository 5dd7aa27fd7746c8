//! Matching an [`Inventory`] against imported feeds: which advisories
//! affect which installed packages, with each ecosystem's own version
//! ordering ([`super::version`]).
//!
//! Debian, Ubuntu and Alpine advisories name source packages, so a binary
//! package is matched by its source (`Source:`, apk origin) and its source
//! version. Each feed's advisory blob is streamed line by line (memory:
//! the inventory and the findings, never the feed).

use std::collections::{BTreeMap, HashMap};
use std::io::BufRead;

use anyhow::Result;

use super::feed::advisory::{Advisory, packaging_of, release_of_ecosystem, release_of_os};
use super::feed::table::FeedTable;
use super::inventory::{Inventory, Package};
use crate::state::StateStore;

/// One vulnerability of one source package.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Finding {
    /// The id shown: a CVE id when the advisory is or names one.
    pub id: String,
    /// The advisory's own id (`DSA-5555-1`), when it differs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub advisory: Option<String>,
    /// The source package.
    pub source: String,
    /// The installed binary packages built from it.
    pub packages: Vec<String>,
    /// The installed (source) version.
    pub installed: String,
    /// The version that fixes it, when the feed names one.
    pub fixed: Option<String>,
    /// `critical`, `high`, `medium`, `low`, `negligible` or `unknown`.
    pub severity: String,
    /// One line about it, when the feed has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
    /// The feed it comes from.
    pub feed: String,
}

/// Findings per severity level (every level present, zero included).
pub fn counts(findings: &[Finding]) -> BTreeMap<&'static str, u64> {
    let mut out: BTreeMap<&'static str, u64> = super::feed::severity::LEVELS
        .iter()
        .map(|l| (*l, 0))
        .collect();
    for f in findings {
        let level = super::feed::severity::LEVELS
            .iter()
            .find(|l| **l == f.severity)
            .copied()
            .unwrap_or("unknown");
        *out.entry(level).or_default() += 1;
    }
    out
}

/// Matches the advisory lines of `reader` (feed `feed`) against `inv`,
/// adding to `out` (one finding per id and source package).
/// Errors: a line that is not an advisory, I/O.
pub fn scan_lines(
    reader: impl BufRead,
    feed: &str,
    inv: &Inventory,
    out: &mut Vec<Finding>,
) -> Result<()> {
    let Some(release) = release_of_os(&inv.os) else {
        return Ok(());
    };
    let packaging = packaging_of(&release.0);
    let mut by_source: HashMap<&str, Vec<&Package>> = HashMap::new();
    for p in inv.packages.iter().filter(|p| p.packaging == packaging) {
        by_source.entry(p.source_name()).or_default().push(p);
    }
    let mut seen: HashMap<(String, String), usize> = out
        .iter()
        .enumerate()
        .map(|(i, f)| ((f.id.clone(), f.source.clone()), i))
        .collect();
    // A cheap look at the package name before parsing the whole line.
    #[derive(serde::Deserialize)]
    struct Head<'a> {
        #[serde(borrow)]
        pkg: std::borrow::Cow<'a, str>,
    }
    for line in reader.lines() {
        let line = line?;
        let head: Head<'_> = serde_json::from_str(&line)?;
        let Some(pkgs) = by_source.get(head.pkg.as_ref()) else {
            continue;
        };
        let a: Advisory = serde_json::from_str(&line)?;
        let Some(rel) = release_of_ecosystem(&a.ecosystem) else {
            continue;
        };
        if rel.0 != release.0 || (rel.1 != "*" && rel.1 != release.1) {
            continue;
        }
        // Binary packages of one source may differ in version (partial upgrades).
        for p in pkgs {
            let version = p.source_version();
            if !a.affects(packaging, version) {
                continue;
            }
            let key = (a.cve_or_id().to_string(), a.package.clone());
            if let Some(&i) = seen.get(&key) {
                if !out[i].packages.contains(&p.name) {
                    out[i].packages.push(p.name.clone());
                }
                continue;
            }
            seen.insert(key.clone(), out.len());
            out.push(Finding {
                id: key.0,
                advisory: (a.id != a.cve_or_id()).then(|| a.id.clone()),
                source: a.package.clone(),
                packages: vec![p.name.clone()],
                installed: version.to_string(),
                fixed: a.fixed_for(packaging, version).map(str::to_string),
                severity: a.severity.clone(),
                summary: a.summary.clone(),
                feed: feed.to_string(),
            });
        }
    }
    Ok(())
}

/// Matches `inv` against the feeds of `table` (only `names` when given),
/// sorted by severity (worst first), then id.
/// Errors: a feed blob missing or unreadable.
pub async fn scan(
    state: &StateStore,
    table: &FeedTable,
    names: Option<&[String]>,
    inv: &Inventory,
) -> Result<Vec<Finding>> {
    let store = state.blobstore().clone();
    let feeds: Vec<(String, crate::digest::Digest)> = table
        .feeds
        .iter()
        .filter(|(n, _)| names.is_none_or(|ns| ns.contains(n)))
        .map(|(n, r)| (n.clone(), r.advisories.digest.clone()))
        .collect();
    let inv = inv.clone();
    let handle = tokio::runtime::Handle::current();
    let mut out = tokio::task::spawn_blocking(move || -> Result<Vec<Finding>> {
        let mut out = Vec::new();
        for (name, digest) in feeds {
            let r = super::blobio::reader(&store, &handle, &digest)?;
            scan_lines(r, &name, &inv, &mut out)?;
        }
        Ok(out)
    })
    .await
    .map_err(|e| anyhow::anyhow!("matching failed: {e}"))??;
    let rank = |s: &str| {
        super::feed::severity::LEVELS
            .iter()
            .position(|l| *l == s)
            .unwrap_or(9)
    };
    out.sort_by(|a, b| {
        rank(&a.severity)
            .cmp(&rank(&b.severity))
            .then_with(|| a.id.cmp(&b.id))
    });
    Ok(out)
}
