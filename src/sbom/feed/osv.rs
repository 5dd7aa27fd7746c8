//! OSV records (the OSV schema, ossf.github.io/osv-schema) of the Debian,
//! Ubuntu and Alpine ecosystems: validation and normalization into
//! [`Advisory`] lines. Fields airlock does not use are skipped; `id` and
//! `modified` are required (as the schema requires), and so are
//! `affected[].package.{ecosystem,name}` and each range's `type` and
//! `events`. Only `ECOSYSTEM` ranges are used (`SEMVER` and `GIT` do not
//! apply to distribution packages).

use anyhow::{Result, bail};

use super::advisory::{Advisory, Range, release_of_ecosystem};
use super::severity;

#[derive(serde::Deserialize)]
struct Record {
    id: String,
    modified: String,
    #[serde(default)]
    aliases: Vec<String>,
    #[serde(default)]
    withdrawn: Option<String>,
    #[serde(default)]
    summary: Option<String>,
    #[serde(default)]
    severity: Vec<Severity>,
    #[serde(default)]
    affected: Vec<Affected>,
    #[serde(default)]
    database_specific: Option<serde_json::Value>,
}

#[derive(serde::Deserialize)]
struct Severity {
    #[serde(rename = "type")]
    kind: String,
    score: String,
}

#[derive(serde::Deserialize)]
struct Affected {
    package: PackageRef,
    #[serde(default)]
    ranges: Vec<OsvRange>,
    #[serde(default)]
    versions: Vec<String>,
    #[serde(default)]
    severity: Vec<Severity>,
    #[serde(default)]
    ecosystem_specific: Option<serde_json::Value>,
    #[serde(default)]
    database_specific: Option<serde_json::Value>,
}

#[derive(serde::Deserialize)]
struct PackageRef {
    ecosystem: String,
    name: String,
}

#[derive(serde::Deserialize)]
struct OsvRange {
    #[serde(rename = "type")]
    kind: String,
    events: Vec<serde_json::Map<String, serde_json::Value>>,
}

/// The level from OSV `severity` entries and `*_specific` labels.
fn level(sev: &[Severity], labels: &[Option<&serde_json::Value>]) -> Option<&'static str> {
    let from_scores = sev.iter().find_map(|s| match s.kind.as_str() {
        "CVSS_V3" => severity::from_cvss3(&s.score),
        "Ubuntu" => severity::from_label(&s.score),
        _ => None,
    });
    from_scores.or_else(|| {
        labels.iter().flatten().find_map(|v| {
            ["severity", "urgency", "priority"]
                .iter()
                .find_map(|k| v[k].as_str().and_then(severity::from_label))
        })
    })
}

/// Longest version string of a range event, in bytes.
pub const MAX_VERSION: usize = 256;

/// A range event's version: 1 to [`MAX_VERSION`] bytes, no whitespace or
/// control characters (what no ecosystem's version syntax admits: dpkg,
/// apk and semver versions are printable ASCII without spaces).
fn check_version(k: &str, v: &str) -> Result<()> {
    if v.is_empty() || v.len() > MAX_VERSION {
        bail!("range event {k}: version {v:?} is empty or over {MAX_VERSION} bytes");
    }
    if v.chars().any(|c| c.is_control() || c.is_whitespace()) {
        bail!(
            "range event {k}: version {:?} holds a control or space character",
            v.escape_default().to_string()
        );
    }
    Ok(())
}

/// Pairs `introduced`/`fixed`/`last_affected` events in order.
fn ranges(r: &OsvRange) -> Result<Vec<Range>> {
    let mut out: Vec<Range> = Vec::new();
    for e in &r.events {
        let (k, v) = e
            .iter()
            .next()
            .ok_or_else(|| anyhow::anyhow!("empty range event"))?;
        let v = v
            .as_str()
            .ok_or_else(|| anyhow::anyhow!("range event {k} is not a string"))?
            .to_string();
        check_version(k, &v)?;
        match k.as_str() {
            "introduced" => out.push(Range {
                introduced: v,
                fixed: None,
                last_affected: None,
            }),
            "fixed" | "last_affected" => {
                let Some(open) = out
                    .last_mut()
                    .filter(|r| r.fixed.is_none() && r.last_affected.is_none())
                else {
                    bail!("range event {k} {v:?} without an introduced event before it");
                };
                if k == "fixed" {
                    open.fixed = Some(v);
                } else {
                    open.last_affected = Some(v);
                }
            }
            "limit" => {}
            other => bail!("unknown range event {other:?}"),
        }
    }
    Ok(out)
}

/// The date part (`YYYY-MM-DD`) of an RFC 3339 time, checked.
pub fn date_of(t: &str) -> Result<String> {
    let d = t.get(..10).unwrap_or("");
    if time::Date::parse(d, time::macros::format_description!("[year]-[month]-[day]")).is_err() {
        bail!("{t:?} is not an RFC 3339 time");
    }
    Ok(d.to_string())
}

/// Parses one OSV record (JSON) and calls `emit` with each advisory it
/// makes (withdrawn records and other ecosystems make none). Returns the
/// record's `modified` date. Errors: not JSON, not an OSV record, a
/// malformed range.
pub fn read_record(json: &[u8], emit: &mut dyn FnMut(Advisory) -> Result<()>) -> Result<String> {
    let r: Record =
        serde_json::from_slice(json).map_err(|e| anyhow::anyhow!("not an OSV record: {e}"))?;
    if r.id.is_empty() {
        bail!("OSV record with an empty id");
    }
    let date = date_of(&r.modified).map_err(|e| anyhow::anyhow!("{}: modified {e}", r.id))?;
    if r.withdrawn.is_some() {
        return Ok(date);
    }
    let summary = r.summary.as_ref().map(|s| s.chars().take(200).collect());
    for a in &r.affected {
        if release_of_ecosystem(&a.package.ecosystem).is_none() {
            continue;
        }
        let mut rs = Vec::new();
        for range in &a.ranges {
            let got = ranges(range).map_err(|e| anyhow::anyhow!("{}: {e}", r.id))?;
            if range.kind == "ECOSYSTEM" {
                rs.extend(got);
            }
        }
        if rs.is_empty() && a.versions.is_empty() {
            continue;
        }
        let sev = level(
            &a.severity,
            &[a.ecosystem_specific.as_ref(), a.database_specific.as_ref()],
        )
        .or_else(|| level(&r.severity, &[r.database_specific.as_ref()]))
        .unwrap_or("unknown");
        emit(Advisory {
            id: r.id.clone(),
            aliases: r.aliases.clone(),
            ecosystem: a.package.ecosystem.clone(),
            package: a.package.name.clone(),
            ranges: rs,
            versions: a.versions.clone(),
            severity: sev.into(),
            summary: summary.clone(),
        })?;
    }
    Ok(date)
}
