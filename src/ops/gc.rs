//! `airlock gc`: mark and sweep over a live store (DESIGN.md "Garbage
//! collection"), safe while `serve`, `import` and pushes run, on every
//! backend (filesystem and S3) through the [`Blobstore`] interface, and
//! while other replicas on the same bucket push, import and collect.
//!
//! Mark (nothing is removed yet), everything into one set of digests:
//! 1. every generation the [`Retention`] keeps, walked with
//!    [`StateStore::walk`] (documents, manifests and their children,
//!    linked blobs) plus the blobs each room document keeps ([`rooms`]);
//! 2. pushed-blob links (`links/`) younger than the grace period;
//! 3. every blob listed by the journal of a live import (an import relies
//!    on blobs it found present);
//! 4. a second look once the walk is done: a root swapped meanwhile is
//!    walked too; every link and journal that was not there at the first
//!    look, or was rewritten since (another size or modification time),
//!    marks its blobs whatever its age. The looks compare listings, not
//!    clocks, so a replica or S3 server whose clock differs from ours
//!    cannot hide a new link from them.
//!
//! Sweep: a blob (or document: they share `blobs/`) is a candidate when it
//! is unmarked, was last written before the mark started, and either is
//! older than the grace period or was listed by a failed or killed import's
//! journal (reclaimable at once: no root ever referenced it, or it would be
//! marked). Candidates are first moved to this run's own
//! `gc-trash/<run>/` ([`trash`]; readers see them absent from then on),
//! then a third look marks what a root swap, link or journal made since
//! the mark started names, and only the trashed blobs still unmarked are
//! deleted; the others go back. Every writer names a blob before it relies
//! on it, or checks after naming it that it is still there: an import
//! writes its journal before its presence checks and writes; a push links
//! its blob, then checks it (a mount and a finished upload alike, falling
//! back to an upload or an error the client retries); a state commit
//! checks after its root swap the pages and documents (and a manifest
//! push its manifest) that it found stored and so did not write, and
//! writes again what vanished (`state::commit`); so a writer either
//! is seen by the third look or finds the blob absent: no race window is
//! left between the last look and the delete. Then: links older than the
//! grace period (unless rewritten meanwhile), journals of finished imports,
//! scratch (filesystem `tmp/` files no live writer holds, S3 multipart
//! uploads older than a day), stacks scratch files older than the grace
//! period. A GC killed between trash and settle leaves `gc-trash/`: the
//! next run puts every blob there back before it marks.
//!
//! S3: the move to and from `gc-trash/` is a `CopyObject` then a
//! `DeleteObject`. Killed between the two, both keys hold the same bytes
//! (content-addressed): the next run sees the blob present and drops the
//! trash copy. A push that rewrites a candidate between the copy and the
//! delete loses its write, but it links the blob next and checks it
//! afterwards: linked before the third look, the blob is put back;
//! after it, the push finds it absent and answers an error the client
//! retries. Each run has its own trash directory and settles only it, so
//! the periodic GCs of several replicas on one bucket never delete a blob
//! another run is still looking at (a run that starts puts every trashed
//! blob back, which is always safe). The grace period compares S3's
//! `LastModified` (the server's clock, whole seconds) with this host's
//! clock: keep the clocks in step (NTP) and the grace well above the skew.
//!
//! Memory: the marked set (one digest per reachable object), the links and
//! journals seen, and one `blobs/<alg>/<2 hex>/` fan-out listing at a time.
//!
//! A walk that meets a missing or corrupt document or manifest stops GC
//! before anything is swept (what it would have reached is unknown): run
//! `airlock fsck`, then `airlock rollback` or re-import.

mod trash;

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, Result, bail};
use futures_util::StreamExt;
use futures_util::future::BoxFuture;

use super::{Retention, kept_generations, rooms};
use crate::bundle::journal::{self, Journal};
use crate::digest::Digest;
use crate::state::{Reached, StateDoc, StateStore};
use crate::store::{self, Blobstore, ObjectMeta, OpenedStore};

/// What `gc` does.
#[derive(Debug, Clone)]
pub struct GcOptions {
    /// Which generations are kept.
    pub retention: Retention,
    /// What is removed from repositories first (untagged manifests, old
    /// tags: [`super::retention`]).
    pub rules: super::retention::Rules,
    /// Unreferenced blobs, links and scratch files younger than this are kept.
    pub grace: Duration,
    /// Report what would be removed, remove nothing.
    pub dry_run: bool,
}

impl Default for GcOptions {
    fn default() -> Self {
        GcOptions {
            retention: Retention::default(),
            rules: super::retention::Rules::default(),
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
    /// What the retention rules removed (or would remove), each with why.
    pub retention: Vec<super::retention::Removal>,
    /// Dry run: the tags a `keep_tags` rule looked at and keeps, each with
    /// why (empty otherwise).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub retention_kept: Vec<super::retention::Kept>,
    /// The generation the retention commit made, if it made one.
    pub retention_generation: Option<u64>,
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
    /// Unpacked second copies of an earlier release removed with their
    /// blobs ([`crate::store::copies::copy_key`]).
    pub copies_removed: u64,
    /// Copy packs removed: none of their blobs is reached, or their
    /// reached blobs were carried into a new pack
    /// ([`crate::store::copies::pack::sweep`]).
    pub copy_packs_removed: u64,
    /// Live copies carried out of partly dead packs into a new one.
    pub copies_carried: u64,
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
        for k in &self.retention_kept {
            writeln!(f, "would keep {k}")?;
        }
        for r in &self.retention {
            writeln!(
                f,
                "{}{r}",
                if self.dry_run {
                    "would remove "
                } else {
                    "removed "
                }
            )?;
        }
        write!(
            f,
            "{}{} blobs removed ({} from failed imports), {} links, {} journals, {} temporary files, {} copy packs ({} copies carried); {} freed; {} kept in grace, {} put back; {} reachable in {} generations (mark {} ms, sweep {} ms)",
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
            self.copy_packs_removed + self.copies_removed,
            self.copies_carried,
            crate::config::format_size(self.bytes_freed),
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
    /// Chunk maps already read (`rooms::kept_blobs`).
    chunk_maps: HashSet<Digest>,
    /// Blobs listed by dead import journals.
    failed: HashSet<Digest>,
    /// Journals of finished (dead) imports.
    dead_journals: Vec<String>,
    /// Links past the grace period.
    old_links: Vec<String>,
    /// Links and journals of the first look, with (size, modification time).
    seen: HashMap<String, (u64, SystemTime)>,
    /// Links written or rewritten since the first look.
    changed_links: HashSet<String>,
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
            let blobs = rooms::kept_blobs(
                &**state.blobstore(),
                name,
                &bytes,
                &mut self.chunk_maps,
                false,
            )
            .await
            .map_err(anyhow::Error::msg)?;
            self.reached.extend(blobs);
        }
        Ok(())
    }

    /// Marks what appeared since the first look: a new root's generation,
    /// links and journals new or rewritten since.
    async fn look_again(&mut self, state: &StateStore, cutoff: SystemTime) -> Result<()> {
        if let Some(now) = state.root_digest().await?
            && !self.descended.contains(&now)
        {
            let doc = state.state_doc(&now).await?;
            self.generation(state, &now, &doc, true).await?;
        }
        let store = &**state.blobstore();
        self.links(store, cutoff, false).await?;
        self.journals(store, false).await
    }

    /// Whether `m` is new or rewritten since the first look (recording it
    /// at the first look).
    fn changed(&mut self, m: &ObjectMeta, first: bool) -> bool {
        let now = (m.size, m.modified);
        if first {
            self.seen.insert(m.key.clone(), now);
            return true;
        }
        self.seen.get(&m.key) != Some(&now)
    }

    /// Links: young ones mark their blob, old ones are swept; on a later
    /// look, every link new or rewritten since the first marks its blob.
    async fn links(
        &mut self,
        store: &dyn Blobstore,
        cutoff: SystemTime,
        first: bool,
    ) -> Result<()> {
        let links = store.list_meta("links/").await.context("listing links/")?;
        for m in links {
            let Some(digest) = store::link_digest(&m.key) else {
                continue;
            };
            if !self.changed(&m, first) {
                continue;
            }
            if !first {
                self.changed_links.insert(m.key);
                self.reached.insert(digest);
            } else if m.modified >= cutoff {
                self.reached.insert(digest);
            } else {
                self.old_links.push(m.key);
            }
        }
        Ok(())
    }

    /// Journals: a live import's blobs are marked; a dead one's are freed
    /// at once (first look only: a journal new or rewritten since marks).
    async fn journals(&mut self, store: &dyn Blobstore, first: bool) -> Result<()> {
        let journals = store
            .list_meta(journal::PREFIX)
            .await
            .context("listing imports/")?;
        for m in journals {
            if !self.changed(&m, first) {
                continue;
            }
            let Some(j) = Journal::get(store, &m.key).await else {
                continue;
            };
            if (journal::is_failed_key(&m.key) || j.is_dead()) && first {
                self.failed.extend(j.blobs);
                self.dead_journals.push(m.key);
            } else {
                self.reached.extend(j.blobs);
            }
        }
        Ok(())
    }
}

/// Runs one GC over the store `opened` (whose state is `state`) and counts
/// it in the metrics. Errors: the history or a kept generation cannot be
/// read, or the store cannot be listed; nothing was swept when the mark
/// failed.
pub async fn run(opened: &OpenedStore, state: &StateStore, opts: &GcOptions) -> Result<GcReport> {
    let result = run_inner(opened, state, opts).await;
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

async fn run_inner(opened: &OpenedStore, state: &StateStore, opts: &GcOptions) -> Result<GcReport> {
    let store = &**state.blobstore();
    let started = Instant::now();
    let mark_start = SystemTime::now();
    let cutoff = mark_start - opts.grace;
    let mut report = GcReport {
        dry_run: opts.dry_run,
        ..GcReport::default()
    };
    let mut marks = Marks::default();
    if !opts.dry_run {
        trash::restore(store).await?;
    }
    if opts.rules.active() {
        let plan = super::retention::plan(state, &opts.rules, mark_start).await?;
        report.retention = plan.removals;
        if opts.dry_run {
            report.retention_kept = plan.kept;
        }
        if !opts.dry_run {
            let who =
                crate::state::audit::current().map_or_else(crate::state::user_at_host, |a| a.who);
            report.retention_generation =
                super::retention::apply(state, &report.retention, &who).await?;
        }
    }
    let kept = kept_generations(state, opts.retention).await?;
    report.generation = kept.first().map_or(0, |(_, d)| d.generation);
    report.generations_kept = kept.len();
    for (i, (digest, doc)) in kept.iter().enumerate() {
        marks.generation(state, digest, doc, i == 0).await?;
    }
    marks.links(store, cutoff, true).await?;
    marks.journals(store, true).await?;
    // Second look: a root swapped, links and journals written during the mark.
    marks.look_again(state, cutoff).await?;
    report.marked = marks.reached.len();
    report.mark_ms = started.elapsed().as_millis() as u64;

    let sweep_started = Instant::now();
    let run = trash::Run::new();
    let failed_young = sweep_blobs(
        store,
        &run,
        &marks,
        mark_start,
        cutoff,
        opts.dry_run,
        &mut report,
    )
    .await?;
    if !opts.dry_run {
        failpoint_after_trash().await;
        // Third look, after the candidates left `blobs/`: whatever names
        // one of them now keeps it.
        marks.look_again(state, cutoff).await?;
        run.settle(store, &marks.reached, &failed_young, &mut report)
            .await?;
    }
    for key in &marks.old_links {
        // A link rewritten since the first look (a mount) is young again.
        if !marks.changed_links.contains(key) && remove(store, key, opts.dry_run).await?.is_some() {
            report.links_removed += 1;
        }
    }
    report.copies_removed = sweep_copies(store, &marks, cutoff, opts.dry_run).await?;
    let live = |d: &Digest| marks.reached.contains(d);
    let packs = store::copies::pack::sweep(store, &live, cutoff, opts.dry_run)
        .await
        .context("sweeping copies/packs/")?;
    report.copy_packs_removed = packs.packs;
    report.copies_carried = packs.carried;
    report.tmp_bytes_freed += packs.bytes;
    for key in &marks.dead_journals {
        if remove(store, key, opts.dry_run).await?.is_some() {
            report.journals_removed += 1;
        }
    }
    sweep_scratch(opened, opts.dry_run, &mut report).await;
    for m in store.list_meta("stacks/scratch/").await? {
        if m.modified < cutoff && remove(store, &m.key, opts.dry_run).await?.is_some() {
            report.tmp_files_removed += 1;
            report.tmp_bytes_freed += m.size;
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

/// Removes `key` (unless `dry_run`); its size when it was there.
async fn remove(store: &dyn Blobstore, key: &str, dry_run: bool) -> Result<Option<u64>> {
    let Some(size) = store.stat(key).await? else {
        return Ok(None);
    };
    if !dry_run {
        store.delete(key).await?;
    }
    Ok(Some(size))
}

/// Removes what killed writers left: filesystem `tmp/` files no live writer
/// holds, S3 multipart uploads older than a day (counted as files, their
/// size unknown). A failure is logged: some S3 servers cannot list uploads.
async fn sweep_scratch(opened: &OpenedStore, dry_run: bool, report: &mut GcReport) {
    match opened {
        OpenedStore::Fs(fs) => match fs.sweep_tmp(store::fs::TMP_MIN_AGE, !dry_run) {
            Ok((files, bytes)) => {
                report.tmp_files_removed += files;
                report.tmp_bytes_freed += bytes;
            }
            Err(e) => tracing::warn!(error = %e, "gc: cannot sweep tmp/"),
        },
        OpenedStore::S3(_) if dry_run => {}
        OpenedStore::S3(s3) => match s3.sweep_multipart(store::s3::MULTIPART_MIN_AGE).await {
            Ok(n) => report.tmp_files_removed += n,
            Err(e) => tracing::warn!(error = %e, "gc: cannot sweep S3 multipart uploads"),
        },
    }
}

/// Sweeps `blobs/<alg>/<2 hex>/` one fan-out listing at a time: moves the
/// candidates to the run's trash (dry run: counts them). Returns the
/// candidates that only a failed import's journal made reclaimable within
/// the grace period (counted when deleted).
async fn sweep_blobs(
    store: &dyn Blobstore,
    run: &trash::Run,
    marks: &Marks,
    mark_start: SystemTime,
    cutoff: SystemTime,
    dry_run: bool,
    report: &mut GcReport,
) -> Result<HashSet<Digest>> {
    let mut failed_young = HashSet::new();
    let mut candidates = Vec::new();
    for prefix in crate::store::fan_prefixes() {
        let listed = store
            .list_meta(&prefix)
            .await
            .with_context(|| format!("listing {prefix}"))?;
        for m in listed {
            let Some(digest) = store::verify::blob_digest(&m.key) else {
                continue;
            };
            if marks.reached.contains(&digest) || m.modified >= mark_start {
                continue;
            }
            let failed = marks.failed.contains(&digest);
            if m.modified >= cutoff && !failed {
                report.blobs_in_grace += 1;
                continue;
            }
            let young = m.modified >= cutoff;
            if dry_run {
                report.blobs_removed += 1;
                report.blob_bytes_freed += m.size;
                report.failed_import_blobs_removed += u64::from(young);
            } else {
                candidates.push((m.key, digest, young));
            }
        }
        // The moves of one fan-out prefix side by side: each is a blocking
        // `rename(2)` on the filesystem and a copy and a delete on S3.
        // (Boxed futures, not a `map` closure: the spawned periodic GC
        // needs a `Send` future, which rustc cannot prove through one.)
        let moves: Vec<BoxFuture<'_, Result<Option<Digest>>>> = candidates
            .drain(..)
            .map(|(key, digest, young)| -> BoxFuture<'_, _> {
                Box::pin(async move {
                    let taken = run.take(store, &key, &digest).await?;
                    Ok((taken && young).then_some(digest))
                })
            })
            .collect();
        let mut moves = futures_util::stream::iter(moves).buffer_unordered(trash::PARALLEL);
        while let Some(moved) = moves.next().await {
            failed_young.extend(moved?);
        }
    }
    Ok(failed_young)
}

/// Removes the second copies ([`crate::store::copies`]) of blobs that are
/// gone from `blobs/` and not reached (after the third look), last
/// written before `cutoff`. A copy whose blob a commit wrote again
/// meanwhile stays. Returns how many were (dry run: would be) removed.
async fn sweep_copies(
    store: &dyn Blobstore,
    marks: &Marks,
    cutoff: SystemTime,
    dry_run: bool,
) -> Result<u64> {
    let mut removed = 0;
    for m in store
        .list_meta(store::copies::COPIES_PREFIX)
        .await
        .context("listing copies/")?
    {
        let Some(digest) = store::copies::copy_digest(&m.key) else {
            continue;
        };
        if marks.reached.contains(&digest) || m.modified >= cutoff {
            continue;
        }
        let gone = store.stat(&store::blob_key(&digest)).await?.is_none();
        if gone && remove(store, &m.key, dry_run).await?.is_some() {
            removed += 1;
        }
    }
    Ok(removed)
}

/// `AIRLOCK_FAILPOINT=gc:after_trash=kill` (the process kills itself,
/// as `kill -9` would) or `gc:after_trash=sleep:SECS` (it waits), once the
/// candidates are in `gc-trash/` and before the third look; for tests only.
async fn failpoint_after_trash() {
    match crate::failpoint::value("gc:after_trash").as_deref() {
        Some("kill") => crate::failpoint::crash_here(),
        Some(v) => {
            if let Some(secs) = v.strip_prefix("sleep:").and_then(|n| n.parse().ok()) {
                tokio::time::sleep(Duration::from_secs(secs)).await;
            }
        }
        None => {}
    }
}

/// Runs GC every `interval` inside `serve` (first run after one interval)
/// while this process holds the gc's lease (`held`, [`super::lease`]): of
/// the replicas of a bucket one collects (concurrent runs would be safe,
/// see the module docs, but do the work twice). Failures are logged and
/// retried at the next tick.
pub fn spawn_periodic(
    opened: OpenedStore,
    state: StateStore,
    opts: GcOptions,
    interval: Duration,
    held: super::lease::Held,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
        loop {
            tick.tick().await;
            if !held.now() {
                tracing::debug!("periodic gc: another replica holds the lease");
                continue;
            }
            match run(&opened, &state, &opts).await {
                Ok(r) => {
                    tracing::info!(report = %r, "periodic gc");
                    super::reports::record_logged(&**state.blobstore(), "gc", "serve", &r).await;
                }
                Err(e) => tracing::warn!(error = %format!("{e:#}"), "periodic gc failed"),
            }
        }
    })
}
