//! `airlock gc`: mark and sweep over a live store (DESIGN.md "Garbage
//! collection"), safe while `serve`, `import` and pushes run.
//!
//! Mark (nothing is removed yet), everything into one set of digests:
//! 1. every generation the [`Retention`] keeps, walked with
//!    [`StateStore::walk`] (documents, manifests and their children,
//!    linked blobs) plus the blobs each room document keeps ([`rooms`]);
//! 2. pushed-blob links (`links/`) younger than the grace period;
//! 3. every blob listed by the journal of a live import (an import relies
//!    on blobs it found present);
//! 4. a second look once the walk is done: a root swapped meanwhile is
//!    walked too, links and journals made meanwhile are marked.
//!
//! Sweep: a blob (or document: they share `blobs/`) is a candidate when it
//! is unmarked, was last written before the mark started, and either is
//! older than the grace period or was listed by a failed or killed import's
//! journal (reclaimable at once: no root ever referenced it, or it would be
//! marked). Candidates are first moved to `gc-trash/` (a rename: readers see
//! them absent from then on), then a third look marks what a root swap,
//! link or journal made since the mark started names, and only the trashed
//! blobs still unmarked are deleted; the others go back. A push that mounts
//! an old unreferenced blob or an import that found it present therefore
//! either is seen by the third look or finds the blob already absent (mount
//! falls back to an upload, import writes it from the bundle): no race
//! window is left between the last look and the delete. Then: links older
//! than the grace period, journals of finished imports, `tmp/` files no
//! live writer holds, stacks scratch files older than the grace period. A
//! blob written during the mark phase is never swept (its mtime is after
//! the mark's start). A GC killed between trash and settle leaves
//! `gc-trash/`: the next run puts it back before it marks.
//!
//! Memory: the marked set (one digest per reachable object) and one
//! directory of the `blobs/<alg>/<2 hex>/` fan-out at a time.
//!
//! A walk that meets a missing or corrupt document or manifest stops GC
//! before anything is swept (what it would have reached is unknown): run
//! `airlock fsck`, then `airlock rollback` or re-import.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, Result, bail};

use super::{Retention, kept_generations, rooms};
use crate::bundle::journal::{self, Journal};
use crate::digest::Digest;
use crate::state::{Reached, StateDoc, StateStore};
use crate::store::{self, fs::FsStore};

/// What `gc` does.
#[derive(Debug, Clone, Copy)]
pub struct GcOptions {
    /// Which generations are kept.
    pub retention: Retention,
    /// Unreferenced blobs, links and scratch files younger than this are kept.
    pub grace: Duration,
    /// Report what would be removed, remove nothing.
    pub dry_run: bool,
}

impl Default for GcOptions {
    fn default() -> Self {
        GcOptions {
            retention: Retention::default(),
            grace: Duration::from_secs(3600),
            dry_run: false,
        }
    }
}

/// What a GC run removed (or, dry run, would remove). Sizes in bytes,
/// times in milliseconds.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct GcReport {
    /// Nothing was removed.
    pub dry_run: bool,
    /// The current generation when the mark started.
    pub generation: u64,
    /// Generations kept by the retention policy.
    pub generations_kept: usize,
    /// Distinct digests marked reachable.
    pub marked: usize,
    /// Blobs and documents kept although unmarked (younger than the grace period).
    pub blobs_in_grace: u64,
    /// Blobs and documents removed.
    pub blobs_removed: u64,
    /// Of those, blobs left by failed or killed imports (removed without grace).
    pub failed_import_blobs_removed: u64,
    /// Bytes freed by removing blobs and documents.
    pub blob_bytes_freed: u64,
    /// Candidates put back by the third look: named meanwhile by a root
    /// swap, a pushed-blob link (a mount) or a live import's journal.
    pub blobs_put_back: u64,
    /// Pushed-blob links removed.
    pub links_removed: u64,
    /// Journals of finished imports removed.
    pub journals_removed: u64,
    /// Stale `tmp/` and stacks scratch files removed.
    pub tmp_files_removed: u64,
    /// Bytes freed by those.
    pub tmp_bytes_freed: u64,
    /// All bytes freed.
    pub bytes_freed: u64,
    /// Mark phase duration.
    pub mark_ms: u64,
    /// Sweep phase duration.
    pub sweep_ms: u64,
}

impl std::fmt::Display for GcReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}{} blobs removed ({} from failed imports), {} links, {} journals, {} temporary files; {:.1} MB freed; {} kept in grace, {} put back; {} reachable in {} generations (mark {} ms, sweep {} ms)",
            if self.dry_run {
                "dry run: would remove: "
            } else {
                ""
            },
            self.blobs_removed,
            self.failed_import_blobs_removed,
            self.links_removed,
            self.journals_removed,
            self.tmp_files_removed,
            self.bytes_freed as f64 / 1e6,
            self.blobs_in_grace,
            self.blobs_put_back,
            self.marked,
            self.generations_kept,
            self.mark_ms,
            self.sweep_ms,
        )
    }
}

/// The mark phase's result.
#[derive(Default)]
struct Marks {
    /// Every digest reached.
    reached: HashSet<Digest>,
    /// Documents and manifests already descended into.
    descended: HashSet<Digest>,
    /// Room documents already read.
    rooms: HashSet<Digest>,
    /// Blobs listed by dead import journals.
    failed: HashSet<Digest>,
    /// Journals of finished (dead) imports.
    dead_journals: Vec<PathBuf>,
    /// Links past the grace period.
    old_links: Vec<PathBuf>,
}

impl Marks {
    /// Marks one generation. Problems in the current one (`strict`) stop
    /// GC; in an older one they are logged (what it cannot reach, it could
    /// not restore either: rollback refuses it).
    async fn generation(
        &mut self,
        state: &StateStore,
        digest: &Digest,
        doc: &StateDoc,
        strict: bool,
    ) -> Result<()> {
        let (reached, descended) = (&mut self.reached, &mut self.descended);
        let problems = state
            .walk(digest, &mut |r: Reached| {
                let fresh = reached.insert(r.digest().clone());
                match r {
                    Reached::Blob(_) => fresh,
                    Reached::Document(d) | Reached::Manifest(d) => descended.insert(d),
                }
            })
            .await?;
        if let Some(p) = problems.first()
            && !strict
        {
            tracing::warn!(generation = doc.generation, problem = %p, count = problems.len(), "gc: older generation damaged; marking what it reaches");
        } else if let Some(p) = problems.first() {
            bail!(
                "generation {}: {p} ({} problems); nothing swept: run `airlock fsck`",
                doc.generation,
                problems.len()
            );
        }
        for (name, d) in &doc.documents {
            if !self.rooms.insert(d.clone()) {
                continue;
            }
            let bytes = store::get_verified(&**state.blobstore(), d)
                .await
                .with_context(|| format!("room document {name} {d}"))?;
            let blobs = rooms::room_blobs(name, &bytes).map_err(anyhow::Error::msg)?;
            self.reached.extend(blobs);
        }
        Ok(())
    }

    /// Marks what appeared since `mark_start`: a new root's generation,
    /// links and journals written since.
    async fn look_again(
        &mut self,
        fs: &FsStore,
        state: &StateStore,
        cutoff: SystemTime,
        mark_start: SystemTime,
    ) -> Result<()> {
        if let Some(now) = state.root_digest().await?
            && !self.descended.contains(&now)
        {
            let doc = state.state_doc(&now).await?;
            self.generation(state, &now, &doc, true).await?;
        }
        self.links(fs.dir(), cutoff, Some(mark_start))?;
        self.journals(fs, Some(mark_start)).await
    }

    /// Links: young ones mark their blob, old ones are swept (only those
    /// modified since `since`, on the second look).
    fn links(&mut self, dir: &Path, cutoff: SystemTime, since: Option<SystemTime>) -> Result<()> {
        for (path, mtime) in files_under(&dir.join("links"))? {
            let Some(digest) = link_digest(&path) else {
                continue;
            };
            if since.is_some_and(|s| mtime < s) {
                continue;
            }
            if mtime >= cutoff {
                self.reached.insert(digest);
            } else if since.is_none() {
                self.old_links.push(path);
            }
        }
        Ok(())
    }

    /// Journals: a live import's blobs are marked; a dead one's are freed at once.
    async fn journals(&mut self, fs: &FsStore, since: Option<SystemTime>) -> Result<()> {
        for (path, mtime) in files_under(&fs.dir().join(journal::PREFIX))? {
            if since.is_some_and(|s| mtime < s) {
                continue;
            }
            let Some(key) = key_of(fs.dir(), &path) else {
                continue;
            };
            let Some(j) = Journal::get(fs, &key).await else {
                continue;
            };
            if (journal::is_failed_key(&key) || j.is_dead()) && since.is_none() {
                self.failed.extend(j.blobs);
                self.dead_journals.push(path);
            } else {
                self.reached.extend(j.blobs);
            }
        }
        Ok(())
    }
}

/// The blob a link file names: `links/<repo>/_blobs/<alg>-<hex>`.
fn link_digest(path: &Path) -> Option<Digest> {
    let name = path.file_name()?.to_str()?;
    let (alg, hex) = name.split_once('-')?;
    format!("{alg}:{hex}").parse().ok()
}

fn key_of(root: &Path, path: &Path) -> Option<String> {
    Some(path.strip_prefix(root).ok()?.to_str()?.to_string())
}

/// Every regular file below `dir` with its mtime (absent: none).
fn files_under(dir: &Path) -> Result<Vec<(PathBuf, SystemTime)>> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let entries = match std::fs::read_dir(&d) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e).with_context(|| format!("listing {}", d.display())),
        };
        for entry in entries.flatten() {
            let Ok(meta) = entry.metadata() else { continue };
            if meta.is_dir() {
                stack.push(entry.path());
            } else if meta.is_file() {
                out.push((
                    entry.path(),
                    meta.modified().unwrap_or(SystemTime::UNIX_EPOCH),
                ));
            }
        }
    }
    Ok(out)
}

/// Removes `path` (unless `dry_run`); returns its size when it was there.
fn remove(path: &Path, dry_run: bool) -> Option<u64> {
    let size = std::fs::metadata(path).ok()?.len();
    if dry_run || std::fs::remove_file(path).is_ok() {
        Some(size)
    } else {
        None
    }
}

/// Runs one GC over `fs` (whose state is `state`) and counts it in the
/// metrics. Errors: the history or a kept generation cannot be read, or a
/// file cannot be listed; nothing was swept when the mark failed.
pub async fn run(fs: &FsStore, state: &StateStore, opts: &GcOptions) -> Result<GcReport> {
    let result = run_inner(fs, state, opts).await;
    let m = crate::metrics::global();
    let outcome = if result.is_ok() { "ok" } else { "failed" };
    m.gc_runs
        .get_or_create(&crate::metrics::OutcomeLabels { outcome })
        .inc();
    if let Ok(r) = &result
        && !r.dry_run
    {
        m.gc_freed_bytes.inc_by(r.bytes_freed);
    }
    result
}

async fn run_inner(fs: &FsStore, state: &StateStore, opts: &GcOptions) -> Result<GcReport> {
    let started = Instant::now();
    let mark_start = SystemTime::now();
    let cutoff = mark_start - opts.grace;
    let mut report = GcReport {
        dry_run: opts.dry_run,
        ..GcReport::default()
    };
    let mut marks = Marks::default();
    if !opts.dry_run {
        restore_trash(fs.dir())?;
    }
    let kept = kept_generations(state, opts.retention).await?;
    report.generation = kept.first().map_or(0, |(_, d)| d.generation);
    report.generations_kept = kept.len();
    for (i, (digest, doc)) in kept.iter().enumerate() {
        marks.generation(state, digest, doc, i == 0).await?;
    }
    marks.links(fs.dir(), cutoff, None)?;
    marks.journals(fs, None).await?;
    // Second look: a root swapped, links and journals written during the mark.
    marks.look_again(fs, state, cutoff, mark_start).await?;
    report.marked = marks.reached.len();
    report.mark_ms = started.elapsed().as_millis() as u64;

    let sweep_started = Instant::now();
    sweep_blobs(
        fs.dir(),
        &marks,
        mark_start,
        cutoff,
        opts.dry_run,
        &mut report,
    )?;
    if !opts.dry_run {
        failpoint_after_trash().await;
        // Third look, after the candidates left `blobs/`: whatever names
        // one of them now keeps it.
        marks.look_again(fs, state, cutoff, mark_start).await?;
        settle_trash(fs.dir(), &marks, &mut report)?;
    }
    for path in &marks.old_links {
        if remove(path, opts.dry_run).is_some() {
            report.links_removed += 1;
        }
    }
    for path in &marks.dead_journals {
        if remove(path, opts.dry_run).is_some() {
            report.journals_removed += 1;
        }
    }
    let (files, bytes) = fs.sweep_tmp(crate::store::fs::TMP_MIN_AGE, !opts.dry_run)?;
    report.tmp_files_removed += files;
    report.tmp_bytes_freed += bytes;
    for (path, mtime) in files_under(&fs.dir().join("stacks/scratch"))? {
        if mtime < cutoff
            && let Some(n) = remove(&path, opts.dry_run)
        {
            report.tmp_files_removed += 1;
            report.tmp_bytes_freed += n;
        }
    }
    report.bytes_freed = report.blob_bytes_freed + report.tmp_bytes_freed;
    report.sweep_ms = sweep_started.elapsed().as_millis() as u64;
    tracing::info!(
        removed = report.blobs_removed,
        bytes = report.bytes_freed,
        dry_run = opts.dry_run,
        "gc done"
    );
    Ok(report)
}

/// Sweeps `blobs/<alg>/<2 hex>/<hex>` one fan-out directory at a time.
fn sweep_blobs(
    root: &Path,
    marks: &Marks,
    mark_start: SystemTime,
    cutoff: SystemTime,
    dry_run: bool,
    report: &mut GcReport,
) -> Result<()> {
    let trash = root.join(TRASH);
    for (alg_name, fan) in super::fan_dirs(root).context("listing blobs/")? {
        for (digest, entry) in super::blob_entries(&alg_name, &fan)? {
            let Some(digest) = digest else {
                continue;
            };
            if marks.reached.contains(&digest) {
                continue;
            }
            let Ok(meta) = entry.metadata() else { continue };
            let mtime = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
            if mtime >= mark_start {
                continue;
            }
            let failed = marks.failed.contains(&digest);
            if mtime >= cutoff && !failed {
                report.blobs_in_grace += 1;
                continue;
            }
            if failed && mtime >= cutoff {
                report.failed_import_blobs_removed += 1;
            }
            if dry_run {
                report.blobs_removed += 1;
                report.blob_bytes_freed += meta.len();
                continue;
            }
            let trashed = trash.join(trash_name(&digest));
            std::fs::create_dir_all(&trash).context("creating gc-trash/")?;
            match std::fs::rename(entry.path(), &trashed) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e).context("moving a blob to gc-trash/"),
            }
        }
    }
    Ok(())
}

/// `AIRLOCK_FAILPOINT=gc:after_trash=kill` (the process kills itself,
/// as `kill -9` would) or `gc:after_trash=sleep:SECS` (it waits), once the
/// candidates are in `gc-trash/` and before the third look; for tests only.
async fn failpoint_after_trash() {
    let Ok(fp) = std::env::var("AIRLOCK_FAILPOINT") else {
        return;
    };
    match fp.strip_prefix("gc:after_trash=") {
        Some("kill") => {
            tracing::warn!("AIRLOCK_FAILPOINT reached: killing this process");
            // SAFETY: sending a signal to our own process has no memory-safety preconditions.
            unsafe {
                libc::kill(libc::getpid(), libc::SIGKILL);
            }
        }
        Some(v) => {
            if let Some(secs) = v.strip_prefix("sleep:").and_then(|n| n.parse().ok()) {
                tokio::time::sleep(Duration::from_secs(secs)).await;
            }
        }
        None => {}
    }
}

/// Where candidates wait for the third look (same filesystem as `blobs/`).
const TRASH: &str = "gc-trash";

/// The file name of `digest` in `gc-trash/`: `<alg>-<hex>`.
fn trash_name(digest: &Digest) -> String {
    format!("{}-{}", digest.algorithm().name(), digest.hex())
}

/// After the third look: deletes trashed blobs still unmarked, puts the
/// marked ones back (unless the blob was written again meanwhile).
fn settle_trash(root: &Path, marks: &Marks, report: &mut GcReport) -> Result<()> {
    for (path, _) in files_under(&root.join(TRASH))? {
        let Some(digest) = link_digest(&path) else {
            continue;
        };
        if marks.reached.contains(&digest) {
            put_back(root, &path, &digest)?;
            report.blobs_put_back += 1;
        } else if let Some(n) = remove(&path, false) {
            report.blobs_removed += 1;
            report.blob_bytes_freed += n;
        }
    }
    Ok(())
}

/// Puts every blob a killed GC left in `gc-trash/` back, so this run
/// decides about it afresh.
fn restore_trash(root: &Path) -> Result<()> {
    for (path, _) in files_under(&root.join(TRASH))? {
        match link_digest(&path) {
            Some(digest) => put_back(root, &path, &digest)?,
            None => {
                remove(&path, false);
            }
        }
    }
    Ok(())
}

/// Moves a trashed blob back to its key, or drops it when the key holds
/// the blob again (written by a push or import meanwhile: same content).
fn put_back(root: &Path, trashed: &Path, digest: &Digest) -> Result<()> {
    let target = root.join(store::blob_key(digest));
    if target.exists() {
        remove(trashed, false);
        return Ok(());
    }
    if let Some(parent) = target.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::rename(trashed, &target)
        .with_context(|| format!("putting {digest} back from gc-trash/"))
}

/// Runs GC every `interval` inside `serve` (first run after one interval);
/// failures are logged and retried at the next tick.
pub fn spawn_periodic(
    fs: FsStore,
    state: StateStore,
    opts: GcOptions,
    interval: Duration,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
        loop {
            tick.tick().await;
            match run(&fs, &state, &opts).await {
                Ok(r) => tracing::info!(report = %r, "periodic gc"),
                Err(e) => tracing::warn!(error = %format!("{e:#}"), "periodic gc failed"),
            }
        }
    })
}
