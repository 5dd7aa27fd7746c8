//! What cells report they installed, and the rollout status built from it.
//!
//! Owns: cell ids, the report objects and `stack status` (how many cells
//! run each digest, which lag behind what they should run, which were not
//! seen for a while) and its Prometheus gauges.
//!
//! Reports are observations, not decisions: they live outside the state
//! tree, one object per cell at `stacks/cells/<stack>/<hex of cell id>`
//! (`sha256-<hex of its SHA-256>` for ids over 127 characters, whose hex
//! would not fit a file name: [`report_name`]; overwritten by the cell's
//! next report), so thousands of cells
//! reporting never make thousands of generations. They are not part of
//! history or rollback.

use std::collections::BTreeMap;

use bytes::Bytes;

use super::StackError;
use super::table::{Stack, StackName};
use crate::digest::Digest;
use crate::store::{self, Blobstore};

/// A cell id: 1 to 253 characters of `[A-Za-z0-9._:@/-]` (a BOSH instance
/// `diego-cell/<uuid>`, a host name, a uuid).
pub fn check_cell_id(id: &str) -> Result<(), StackError> {
    let ok = !id.is_empty()
        && id.len() <= 253
        && id.bytes().all(|b| {
            b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'@' | b'/' | b'-')
        });
    if ok {
        Ok(())
    } else {
        Err(StackError::Invalid(format!(
            "invalid cell id {id:?}: 1 to 253 characters of [A-Za-z0-9._:@/-]"
        )))
    }
}

/// One cell's last report.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CellReport {
    /// The cell id.
    pub cell: String,
    /// The image manifest digest it installed.
    pub digest: Digest,
    /// Its platform, when it said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub platform: Option<String>,
    /// When airlock received the report, RFC 3339 UTC.
    pub time: String,
    /// How the cell got what it runs, when it said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transfer: Option<Transfer>,
}

/// How a cell got its rootfs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Method {
    /// Chunks it lacked, over the casync chunk store.
    Delta,
    /// The whole rootfs.tar.
    Full,
    /// Its previous rootfs again (a rollback): nothing downloaded.
    Swap,
}

/// What a cell moved to install its current rootfs (it keeps reporting it
/// while that rootfs stays installed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Transfer {
    /// How.
    pub method: Method,
    /// Bytes downloaded (index and compressed chunks, or the tar).
    pub bytes: u64,
    /// The rootfs size in bytes (what a full download moves).
    pub rootfs_size: u64,
}

/// Where `stack`'s reports are: `stacks/cells/<stack>/` (one object per
/// cell below it).
pub fn prefix(stack: &StackName) -> String {
    format!("stacks/cells/{stack}/")
}

/// Longest cell id whose report object is named by its hex (254 characters,
/// within the 255 bytes a file name may have on every Linux file system).
const HEX_NAMED: usize = 127;

/// The name of cell `id`'s report object below [`prefix`]: the hex of the
/// id, or for a longer id `sha256-<hex of its SHA-256>` (71 characters).
pub fn report_name(id: &str) -> String {
    if id.len() <= HEX_NAMED {
        hex::encode(id.as_bytes())
    } else {
        format!(
            "sha256-{}",
            crate::digest::Digest::sha256_of(id.as_bytes()).hex()
        )
    }
}

/// Stores `report` for `stack`, replacing the cell's previous one.
pub async fn record(
    store: &dyn Blobstore,
    stack: &StackName,
    report: &CellReport,
) -> Result<(), StackError> {
    check_cell_id(&report.cell)?;
    let key = format!("{}{}", prefix(stack), report_name(&report.cell));
    let bytes = serde_json::to_vec(report).map_err(anyhow::Error::from)?;
    let mut w = store.writer(&key).await?;
    w.write(Bytes::from(bytes)).await?;
    w.commit().await?;
    Ok(())
}

/// Every report for `stack` (unreadable ones are skipped with a warning).
pub async fn reports(
    store: &dyn Blobstore,
    stack: &StackName,
) -> Result<Vec<CellReport>, StackError> {
    let mut out = Vec::new();
    for key in store.list(&prefix(stack)).await? {
        let bytes = match store::read_all(store, &key).await {
            Ok(b) => b,
            Err(crate::store::StoreError::NotFound(_)) => continue,
            Err(e) => return Err(e.into()),
        };
        match serde_json::from_slice(&bytes) {
            Ok(r) => out.push(r),
            Err(e) => tracing::warn!(%key, error = %e, "unreadable cell report skipped"),
        }
    }
    Ok(out)
}

/// The rollout status of one stack.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct StackStatus {
    /// The stack.
    pub stack: StackName,
    /// Its state.
    pub state: &'static str,
    /// The promotion being rolled out.
    pub promotion: Option<u64>,
    /// Its rollout percentage.
    pub percent: Option<u8>,
    /// Cells that reported.
    pub cells: usize,
    /// Reported digest → cells.
    pub digests: BTreeMap<Digest, usize>,
    /// Cells running the promotion being rolled out.
    pub on_latest: usize,
    /// Cells not running what they should (rolled in but not installed yet,
    /// or still on a digest nobody should run), sorted.
    pub lagging: Vec<String>,
    /// Cells whose last report is older than the stale limit, sorted.
    pub stale: Vec<String>,
    /// Bytes the cells on the promotion being rolled out downloaded to get it.
    pub bytes_moved: u64,
    /// Bytes they did not download (rootfs size minus what they moved).
    pub bytes_saved: u64,
    /// Cells on it that got it as a delta.
    pub delta_cells: usize,
}

fn parse_time(t: &str) -> Option<time::OffsetDateTime> {
    time::OffsetDateTime::parse(t, &time::format_description::well_known::Rfc3339).ok()
}

/// The digests a cell on `platform` (or any, when unknown) may report for a promotion.
fn matches(p: &super::table::Promotion, digest: &Digest, platform: Option<&str>) -> bool {
    if &p.image.digest == digest {
        return true;
    }
    match platform.and_then(|pl| p.rootfs.iter().find(|r| r.platform == pl)) {
        Some(r) => &r.manifest == digest,
        None => p.rootfs.iter().any(|r| &r.manifest == digest),
    }
}

/// The status of `stack` from `reports`, with reports older than
/// `stale_after` at `now` counted as stale.
pub fn status(
    name: &StackName,
    stack: &Stack,
    reports: &[CellReport],
    now: time::OffsetDateTime,
    stale_after: std::time::Duration,
) -> StackStatus {
    let mut s = StackStatus {
        stack: name.clone(),
        state: stack.state.as_str(),
        promotion: stack.rollout.map(|r| r.promotion),
        percent: stack.rollout.map(|r| r.percent),
        cells: reports.len(),
        digests: BTreeMap::new(),
        on_latest: 0,
        lagging: Vec::new(),
        stale: Vec::new(),
        bytes_moved: 0,
        bytes_saved: 0,
        delta_cells: 0,
    };
    let latest = stack.active();
    for r in reports {
        *s.digests.entry(r.digest.clone()).or_default() += 1;
        let platform = r.platform.as_deref();
        if latest.is_some_and(|p| matches(p, &r.digest, platform)) {
            s.on_latest += 1;
            if let Some(t) = r.transfer {
                s.bytes_moved += t.bytes;
                s.bytes_saved += t.rootfs_size.saturating_sub(t.bytes);
                s.delta_cells += usize::from(t.method == Method::Delta);
            }
        }
        let should = stack.resolve(name, &r.cell).map(|res| res.promotion);
        if should.is_some_and(|p| !matches(p, &r.digest, platform)) {
            s.lagging.push(r.cell.clone());
        }
        let age = parse_time(&r.time).map(|t| now - t);
        if age.is_none_or(|a| a > stale_after) {
            s.stale.push(r.cell.clone());
        }
    }
    s.lagging.sort();
    s.stale.sort();
    s
}

fn label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Prometheus text-format gauges for `statuses` (one `# HELP`/`# TYPE`
/// per metric): `airlock_stack_cells{stack,digest}`,
/// `airlock_stack_cells_on_latest{stack}`, `airlock_stack_cells_lagging{stack}`,
/// `airlock_stack_cells_stale{stack}`, `airlock_stack_rollout_bytes_moved{stack}`,
/// `airlock_stack_rollout_bytes_saved{stack}`, `airlock_stack_rollout_percent{stack,promotion}`,
/// `airlock_stack_state{stack,state}` (1 for the current state).
pub fn gauges(statuses: &[StackStatus]) -> String {
    let mut out = String::new();
    let mut metric = |name: &str, help: &str, rows: Vec<(String, String)>| {
        out.push_str(&format!("# HELP {name} {help}\n# TYPE {name} gauge\n"));
        for (labels, value) in rows {
            out.push_str(&format!("{name}{{{labels}}} {value}\n"));
        }
    };
    let st = |s: &StackStatus| format!("stack=\"{}\"", label(s.stack.as_str()));
    metric(
        "airlock_stack_cells",
        "Cells whose last report names this digest.",
        statuses
            .iter()
            .flat_map(|s| {
                s.digests
                    .iter()
                    .map(move |(d, n)| (format!("{},digest=\"{d}\"", st(s)), n.to_string()))
            })
            .collect(),
    );
    metric(
        "airlock_stack_cells_on_latest",
        "Cells running the promotion being rolled out.",
        statuses
            .iter()
            .map(|s| (st(s), s.on_latest.to_string()))
            .collect(),
    );
    metric(
        "airlock_stack_cells_lagging",
        "Cells not running the digest they should.",
        statuses
            .iter()
            .map(|s| (st(s), s.lagging.len().to_string()))
            .collect(),
    );
    metric(
        "airlock_stack_cells_stale",
        "Cells whose last report is older than the stale limit.",
        statuses
            .iter()
            .map(|s| (st(s), s.stale.len().to_string()))
            .collect(),
    );
    metric(
        "airlock_stack_rollout_bytes_moved",
        "Bytes the cells on the promotion being rolled out downloaded to get it.",
        statuses
            .iter()
            .map(|s| (st(s), s.bytes_moved.to_string()))
            .collect(),
    );
    metric(
        "airlock_stack_rollout_bytes_saved",
        "Bytes those cells did not download thanks to deltas (rootfs size minus bytes moved).",
        statuses
            .iter()
            .map(|s| (st(s), s.bytes_saved.to_string()))
            .collect(),
    );
    metric(
        "airlock_stack_rollout_percent",
        "Rollout percentage of the promotion being rolled out.",
        statuses
            .iter()
            .filter_map(|s| {
                Some((
                    format!("{},promotion=\"{}\"", st(s), s.promotion?),
                    s.percent?.to_string(),
                ))
            })
            .collect(),
    );
    metric(
        "airlock_stack_state",
        "1 for the stack's current Cloud Controller state.",
        statuses
            .iter()
            .map(|s| (format!("{},state=\"{}\"", st(s), s.state), "1".into()))
            .collect(),
    );
    out
}

/// Status of every stack in `table`, for [`gauges`] (the server's `/metrics`).
pub async fn all_statuses(
    store: &dyn Blobstore,
    table: &super::table::StackTable,
    stale_after: std::time::Duration,
) -> Result<Vec<StackStatus>, StackError> {
    let now = time::OffsetDateTime::now_utc();
    let mut out = Vec::new();
    for (name, stack) in &table.stacks {
        let r = reports(store, name).await?;
        out.push(status(name, stack, &r, now, stale_after));
    }
    Ok(out)
}

/// The Prometheus text of every stack's gauges in the current state (what
/// a `/metrics` route serves; see [`gauges`]).
pub async fn metrics(
    state: &crate::state::StateStore,
    stale_after: std::time::Duration,
) -> Result<String, StackError> {
    let table = super::ops::load(state).await?;
    let statuses = all_statuses(&**state.blobstore(), &table, stale_after).await?;
    Ok(gauges(&statuses))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_valid_cell_id_names_a_report_that_fits_a_file_name() {
        for n in [1, 127, 128, 200, 253] {
            let id = "a".repeat(n);
            check_cell_id(&id).unwrap();
            let name = report_name(&id);
            assert!(name.len() <= 254, "{n}: {}", name.len());
        }
        assert_eq!(report_name("c1"), "6331");
        assert_ne!(report_name(&"a".repeat(200)), report_name(&"a".repeat(201)));
    }
}
