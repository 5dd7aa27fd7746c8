//! The rollout over time: periodic samples of every stack's cell reports.
//!
//! Cell reports are one object per cell, replaced on each report
//! (`stacks::cells`), so they say where the fleet is, not where it was.
//! The console samples them every `[ui] sample_interval` and keeps, per
//! stack, one small document of the last [`MAX_POINTS`] samples outside
//! the state tree (like the reports: not history, not rolled back):
//! `ui/rollout/<stack>.json` ([`key`]), a [`Series`] of [`Point`]s (cells
//! per reported digest, lagging, silent, the rollout percentage). However
//! many cells report, a sample costs one read and at most one write per
//! stack. Replicas sharing a store each sample, and append only when the
//! newest point is older than most of an interval, so they do not add a
//! point each.
//!
//! Owns: the series document, the [`Sampler`] (the latest reports of each
//! stack in memory, re-reading only report objects whose size or
//! modification time changed, plus a full re-read every
//! [`FULL_READ_EVERY`] samples), and the overview's rollout problems.
//! Never changes a report or the stack table.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use bytes::Bytes;
use futures_util::StreamExt as _;

use super::Context;
use crate::digest::Digest;
use crate::stacks::StackError;
use crate::stacks::StackName;
use crate::stacks::cells::{self, CellReport, StackStatus};
use crate::store::{self, Blobstore, StoreError};

/// Samples kept per stack (a day at the default interval of a minute).
pub const MAX_POINTS: usize = 1440;

/// The `kind` of a [`Series`].
pub const KIND: &str = "airlock.ui.rollout.v1";

/// Every this many samples the reports are all read again (a report
/// rewritten within the same second with the same size is otherwise seen
/// at the next change only, on stores with whole-second times).
pub const FULL_READ_EVERY: u64 = 10;

/// Report objects read at once.
const READS_IN_FLIGHT: usize = 32;

/// The series document of `stack`.
pub fn key(stack: &StackName) -> String {
    format!("ui/rollout/{stack}.json")
}

/// One sample of a stack's cells.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Point {
    /// When, RFC 3339 UTC.
    pub time: String,
    /// The same, in Unix seconds.
    pub unix: u64,
    /// Cells that reported.
    pub cells: usize,
    /// Reported digest → cells.
    pub digests: BTreeMap<Digest, usize>,
    /// Cells running the promotion being rolled out.
    pub on_latest: usize,
    /// Cells not running what they should.
    pub lagging: usize,
    /// Cells whose last report is older than the stale limit.
    pub silent: usize,
    /// The promotion being rolled out.
    pub promotion: Option<u64>,
    /// Its percentage.
    pub percent: Option<u8>,
}

impl Point {
    /// The point of `status` taken at `unix`.
    pub fn of(status: &StackStatus, unix: u64) -> Point {
        let time = time::OffsetDateTime::from_unix_timestamp(unix as i64)
            .ok()
            .and_then(|t| {
                t.format(&time::format_description::well_known::Rfc3339)
                    .ok()
            })
            .unwrap_or_default();
        Point {
            time,
            unix,
            cells: status.cells,
            digests: status.digests.clone(),
            on_latest: status.on_latest,
            lagging: status.lagging.len(),
            silent: status.stale.len(),
            promotion: status.promotion,
            percent: status.percent,
        }
    }
}

/// The samples of one stack, oldest first.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Series {
    /// Always [`KIND`].
    pub kind: String,
    /// The stack.
    pub stack: String,
    /// At most [`MAX_POINTS`], oldest first.
    pub points: Vec<Point>,
}

/// The latest reports of one stack.
#[derive(Debug, Clone)]
pub struct Sample {
    /// Increases with every sample taken in this process.
    pub seq: u64,
    /// When, Unix seconds.
    pub unix: u64,
    /// Every cell's last report.
    pub reports: Arc<Vec<CellReport>>,
}

type Known = HashMap<String, (SystemTime, u64, CellReport)>;

/// What the sampler holds between samples.
#[derive(Default)]
pub struct Sampler {
    seq: AtomicU64,
    latest: Mutex<HashMap<String, Arc<Sample>>>,
    known: Mutex<HashMap<String, Known>>,
    series: Mutex<HashMap<String, Arc<Series>>>,
    problems: Mutex<Vec<(String, String)>>,
}

impl Sampler {
    /// The latest sample of `stack`, if one was taken.
    pub fn latest(&self, stack: &str) -> Option<Arc<Sample>> {
        self.latest.lock().ok()?.get(stack).cloned()
    }

    /// The series of `stack` as last read or written.
    pub fn series(&self, stack: &str) -> Option<Arc<Series>> {
        self.series.lock().ok()?.get(stack).cloned()
    }

    /// `(stack, problem)` for every stack with lagging or silent cells at
    /// the last sample.
    pub fn problems(&self) -> Vec<(String, String)> {
        self.problems.lock().map(|p| p.clone()).unwrap_or_default()
    }

    /// Every report of `stack`, reading only objects that changed since
    /// the last sample (all of them every [`FULL_READ_EVERY`] samples, or
    /// on a store that cannot list modification times).
    async fn reports(
        &self,
        store: &dyn Blobstore,
        stack: &StackName,
        full: bool,
    ) -> Result<Vec<CellReport>, StackError> {
        let metas = match store.list_meta(&cells::prefix(stack)).await {
            Ok(m) => m,
            Err(StoreError::Io(e)) if e.kind() == std::io::ErrorKind::Unsupported => {
                return cells::reports(store, stack).await;
            }
            Err(e) => return Err(e.into()),
        };
        let mut known = match self.known.lock() {
            Ok(mut k) if !full => k.remove(stack.as_str()).unwrap_or_default(),
            _ => Known::new(),
        };
        let mut next = Known::with_capacity(metas.len());
        let mut changed = Vec::new();
        for m in metas {
            match known.remove(&m.key) {
                Some((t, size, r)) if t == m.modified && size == m.size => {
                    next.insert(m.key, (t, size, r));
                }
                _ => changed.push(m),
            }
        }
        let mut reads = futures_util::stream::iter(changed.into_iter().map(|m| async move {
            let r = store::read_all(store, &m.key).await;
            (m, r)
        }))
        .buffer_unordered(READS_IN_FLIGHT);
        while let Some((m, r)) = reads.next().await {
            let bytes = match r {
                Ok(b) => b,
                Err(StoreError::NotFound(_)) => continue,
                Err(e) => return Err(e.into()),
            };
            match serde_json::from_slice::<CellReport>(&bytes) {
                Ok(r) => {
                    next.insert(m.key, (m.modified, m.size, r));
                }
                Err(e) => {
                    tracing::warn!(key = %m.key, error = %e, "unreadable cell report skipped")
                }
            }
        }
        let mut out: Vec<CellReport> = next.values().map(|(_, _, r)| r.clone()).collect();
        out.sort_by(|a, b| a.cell.cmp(&b.cell));
        if let Ok(mut k) = self.known.lock() {
            k.insert(stack.to_string(), next);
        }
        Ok(out)
    }
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Takes one sample of every stack: reads its reports (what changed), keeps
/// them in memory for the console's pages, and appends a [`Point`] to its
/// series document when the newest one is older than 80 % of the interval
/// (so replicas sharing the store do not each add one).
///
/// Errors: the stack table cannot be read; a stack whose reports or series
/// cannot be read or written is logged and skipped.
pub async fn sample_all(ctx: &dyn Context) -> Result<(), StackError> {
    let Some(console) = ctx.console() else {
        return Ok(());
    };
    let sampler = &console.rollout;
    let state = ctx.state();
    let store = state.blobstore();
    let table = ctx.stacks().table(state).await?;
    let stale_after = ctx.stacks().config.stale_after;
    let started = std::time::Instant::now();
    let seq = sampler.seq.fetch_add(1, Ordering::Relaxed) + 1;
    let interval = console.config.sample_interval.as_secs();
    let mut problems = Vec::new();
    for (name, stack) in &table.stacks {
        let reports = match sampler
            .reports(&**store, name, seq % FULL_READ_EVERY == 0)
            .await
        {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(stack = %name, error = %e, "console: cell reports cannot be read");
                continue;
            }
        };
        let now = time::OffsetDateTime::now_utc();
        let unix = unix_now();
        let status = cells::status(name, stack, &reports, now, stale_after);
        let (lagging, silent) = (status.lagging.len(), status.stale.len());
        if lagging > 0 || silent > 0 {
            problems.push((
                name.to_string(),
                format!("{lagging} cells lagging, {silent} silent"),
            ));
        }
        let sample = Arc::new(Sample {
            seq,
            unix,
            reports: Arc::new(reports),
        });
        if let Ok(mut l) = sampler.latest.lock() {
            l.insert(name.to_string(), sample);
        }
        match append(&**store, name, Point::of(&status, unix), interval).await {
            Ok(series) => {
                if let Ok(mut s) = sampler.series.lock() {
                    s.insert(name.to_string(), Arc::new(series));
                }
            }
            Err(e) => {
                tracing::warn!(stack = %name, error = %e, "console: rollout series not written")
            }
        }
    }
    if let Ok(mut l) = sampler.latest.lock() {
        l.retain(|n, _| table.stacks.keys().any(|k| k.as_str() == n));
    }
    if let Ok(mut p) = sampler.problems.lock() {
        *p = problems;
    }
    tracing::debug!(
        stacks = table.stacks.len(),
        ms = started.elapsed().as_secs_f64() * 1000.0,
        "console: cell reports sampled"
    );
    Ok(())
}

/// The series of `stack` in the store (empty when there is none yet, or
/// when it does not parse: it is rebuilt from the next sample on).
///
/// Errors: the store failed.
pub async fn read(store: &dyn Blobstore, stack: &StackName) -> Result<Series, StoreError> {
    let empty = Series {
        kind: KIND.into(),
        stack: stack.to_string(),
        points: Vec::new(),
    };
    match store::read_all(store, &key(stack)).await {
        Ok(b) => Ok(serde_json::from_slice(&b).unwrap_or_else(|e| {
            tracing::warn!(stack = %stack, error = %e, "console: unreadable rollout series replaced");
            empty
        })),
        Err(StoreError::NotFound(_)) => Ok(empty),
        Err(e) => Err(e),
    }
}

/// Adds `point` to `stack`'s series unless its newest point is younger than
/// 80 % of `interval_secs`; keeps the newest [`MAX_POINTS`]. Returns the
/// series as stored.
async fn append(
    store: &dyn Blobstore,
    stack: &StackName,
    point: Point,
    interval_secs: u64,
) -> Result<Series, StoreError> {
    let mut series = read(store, stack).await?;
    let due = series
        .points
        .last()
        .is_none_or(|p| point.unix.saturating_sub(p.unix) * 5 >= interval_secs * 4);
    if !due {
        return Ok(series);
    }
    series.points.push(point);
    let over = series.points.len().saturating_sub(MAX_POINTS);
    series.points.drain(..over);
    let bytes = serde_json::to_vec(&series).map_err(|e| StoreError::Io(e.into()))?;
    let mut w = store.writer(&key(stack)).await?;
    w.write(Bytes::from(bytes)).await?;
    w.commit().await?;
    Ok(series)
}
