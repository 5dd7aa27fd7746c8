//! `airlock import` and `airlock bundle verify`: the streaming import pipeline.
//!
//! Owns: reading a bundle tar once, front to back, in constant memory:
//! 1. the first entry must be the signed document; its signatures are
//!    verified against the admin's keyring, or the site's trust document
//!    (whose roles must let its signers bring in everything it touches:
//!    [`super::trust`]), before anything else is read;
//! 2. every later entry must be exactly `oci-layout`, `index.json` or a
//!    listed `blobs/<alg>/<hex>`, a regular file, seen once, of the listed size;
//!    each is hashed while it streams into the blobstore (a reader thread
//!    hashes while the async side writes) and committed only if it matches;
//! 3. when the tar ends, every listed blob must have been seen and every
//!    required (delta) blob must already be in the store;
//! 4. with a site signature policy, every image it covers must carry a
//!    cosign signature by one of its keys ([`upstream`]);
//! 5. the images' manifests are walked from the store and linked into their
//!    repositories, and the bundle's stack candidates recorded in the stack
//!    table, with one root swap.
//!
//! Any failure leaves the state root as it was. Before its first blob is
//! written an import records a journal ([`super::journal`]); blobs written
//! before a failure (or a kill) are unreferenced and `gc` reclaims them at
//! once through it.

use std::collections::{HashMap, HashSet};
use std::io::Read;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use bytes::Bytes;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;

use super::format::{
    BundleDoc, FORMAT_V1, INDEX_JSON, ImageEntry, MAX_LAYOUT_FILE, MAX_SIGNED_DOC, OCI_LAYOUT,
    SIGNED_DOC, parse_blob_path,
};
use super::trust::Verifier;
use crate::digest::{Digest, Hasher};
use crate::oci::{self, Manifest};
use crate::state::{ManifestInfo, Op, StateStore};
use crate::store::{self, Blobstore, ObjectWriter, blob_key};

mod buffers;
mod ops;
mod plan;
mod read;
mod reclaim;
mod repair;
mod upstream;
mod write;
use ops::*;
pub use plan::{AccessDenied, ImportOptions, Refused, TagPlan};
use read::*;
use write::*;

/// Bytes per chunk handed from the reader thread to the writer.
const CHUNK: usize = 1 << 20;

/// Chunks in flight between reader and writer (bounds memory: CHUNK × this,
/// plus the one being read and the one being written; [`buffers`]).
const IN_FLIGHT: usize = 8;

/// What an import did.
#[derive(Debug, Clone)]
pub struct ImportReport {
    /// The bundle's id.
    pub id: String,
    /// Images (repository + tags) linked.
    pub images: usize,
    /// Blobs written to the store.
    pub blobs_new: u64,
    /// Blobs already present (verified, not written).
    pub blobs_skipped: u64,
    /// Bytes written to the store.
    pub bytes_new: u64,
    /// Blob bytes read from the bundle.
    pub bytes_read: u64,
    /// The generation now current.
    pub generation: u64,
    /// False when the store already had everything (no new generation).
    pub changed: bool,
    /// Wall time.
    pub elapsed: Duration,
    /// The bundle's signed creation time (RFC 3339).
    pub created: String,
    /// Every tag the bundle sets: created, moved or unchanged.
    pub tags: Vec<TagPlan>,
    /// A dry run: verified and planned, nothing committed.
    pub dry_run: bool,
    /// The current generation was damaged: what the import restored
    /// before committing on top of it ([`ImportOptions::may_repair`]).
    pub repaired: Option<crate::state::recover::Recovery>,
}

impl std::fmt::Display for ImportReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let secs = self.elapsed.as_secs_f64().max(1e-6);
        if let Some(r) = &self.repaired {
            writeln!(f, "the current generation was damaged; {r}")?;
        }
        for t in &self.tags {
            writeln!(f, "{t}")?;
        }
        if self.dry_run {
            let n = |a: &str| self.tags.iter().filter(|t| t.action == a).count();
            return write!(
                f,
                "dry run: bundle {} (created {}) verified: {} images, {} blobs ({:.1} MB) read; would create {} tags, move {}, leave {} unchanged; nothing committed",
                self.id,
                self.created,
                self.images,
                self.blobs_new + self.blobs_skipped,
                self.bytes_read as f64 / 1e6,
                n("created"),
                n("moved"),
                n("unchanged")
            );
        }
        write!(
            f,
            "imported bundle {}: {} images, {} blobs new, {} skipped, {} written, {} read in {:.2} s ({}/s), generation {}{}",
            self.id,
            self.images,
            self.blobs_new,
            self.blobs_skipped,
            crate::config::format_size(self.bytes_new),
            crate::config::format_size(self.bytes_read),
            secs,
            crate::config::format_size((self.bytes_read as f64 / secs) as u64),
            self.generation,
            if self.changed { "" } else { " (no change)" }
        )
    }
}

/// Messages from the reader thread to the writer.
enum Msg {
    /// The verified document; the reader waits for the set of blobs already present.
    Doc(Box<BundleDoc>, oneshot::Sender<HashSet<Digest>>),
    /// A new blob starts.
    Begin(Digest),
    /// Bytes of the current blob.
    Chunk(Bytes),
    /// The current blob is complete and verified.
    End,
    /// A blob already present was read and verified (bytes).
    Skipped(u64),
}

/// Imports one bundle stream into `state`, committing with one root swap,
/// under `opts` (dry run, downgrade override, immutable tags, the
/// importer's repositories).
/// Errors: one-line causes; the root is unchanged on any error, and the
/// blobs the import wrote are removed again (also after a dry run).
pub async fn import(
    state: &StateStore,
    verifier: Verifier,
    reader: Box<dyn Read + Send>,
    who: &str,
    progress: indicatif::ProgressBar,
    opts: &ImportOptions,
) -> Result<ImportReport> {
    let start = Instant::now();
    let store = state.blobstore().clone();
    let journal = store::journal_key(&uuid::Uuid::new_v4().to_string());
    let root_before = state.root_digest().await?;
    let mut written = Written::default();
    let result = import_journaled(
        state,
        &journal,
        verifier,
        reader,
        who,
        progress,
        opts,
        &mut written,
    )
    .await;
    let committed = matches!(&result, Ok((_, _, Some(_), _)));
    if committed {
        if let Err(e) = store.delete(&journal).await {
            tracing::warn!(error = %e, %journal, "import journal not removed (gc removes it)");
        }
    } else {
        // Refused, failed or a dry run: `gc` frees what it wrote at once.
        // A rename needs no free space; a journal left as it was is
        // recognised by its dead process.
        let failed = super::journal::failed_key(&journal);
        match store.rename(&journal, &failed).await {
            Ok(()) | Err(store::StoreError::NotFound(_)) => {}
            Err(e) => tracing::warn!(error = %e, %journal, "import journal not marked failed"),
        }
        // And what it wrote goes now, when nothing else relies on it.
        let removed =
            reclaim::reclaim(state, &written.committed, root_before.as_ref(), &journal).await;
        if removed == written.committed.len()
            && let Err(e) = store.delete(&failed).await
        {
            tracing::debug!(error = %e, "failed import journal left to gc");
        }
    }
    if !opts.dry_run {
        crate::metrics::global().import_done(
            result.is_ok(),
            result.as_ref().map_or(0, |_| written.bytes_new),
        );
    }
    let (doc, tags, commit, repaired) = result?;
    let (generation, changed) = match &commit {
        Some(c) => (c.generation, c.changed),
        None => (state.snapshot().await?.generation(), false),
    };
    Ok(ImportReport {
        id: doc.id,
        created: doc.created,
        images: doc.images.len(),
        blobs_new: written.new,
        blobs_skipped: written.skipped,
        bytes_new: written.bytes_new,
        bytes_read: written.bytes_read,
        generation,
        changed,
        elapsed: start.elapsed(),
        tags,
        dry_run: opts.dry_run,
        repaired,
    })
}

/// What [`import_journaled`] did: the verified document, the tag plan, the
/// commit (`None` for a dry run) and the repair made before it.
type Imported = (
    BundleDoc,
    Vec<TagPlan>,
    Option<crate::state::Commit>,
    Option<crate::state::recover::Recovery>,
);

/// The import proper, under the journal `journal`; what it writes is
/// counted in `written`. The commit is `None` for a dry run. Damage to
/// the current generation met while planning or committing is repaired
/// once ([`repair`]) and the plan and commit run again.
#[allow(clippy::too_many_arguments)]
async fn import_journaled(
    state: &StateStore,
    journal: &str,
    verifier: Verifier,
    reader: Box<dyn Read + Send>,
    who: &str,
    progress: indicatif::ProgressBar,
    opts: &ImportOptions,
    written: &mut Written,
) -> Result<Imported> {
    let store = state.blobstore().clone();
    let check = |doc: &BundleDoc| plan::check_access(doc, opts);
    let trust_version = verifier.document().map(|d| d.version);
    let doc = run_pipeline(
        Some(store.clone()),
        Some(journal),
        verifier,
        reader,
        progress,
        &check,
        written,
    )
    .await?;
    crate::stacks::candidates::check_bundle(
        &crate::stacks::candidates::Stored(store.clone()),
        &doc,
    )
    .await?;
    upstream::check(&*store, &doc, &opts.signature_policy).await?;
    let mut repaired = None;
    let (tags, commit, feeds) = loop {
        match plan_and_commit(state, &doc, who, opts, trust_version).await {
            Err(e) if repaired.is_none() && repair::is_damage(&e) => {
                repaired = Some(repair::repair(state, opts, who, e).await?);
            }
            other => break other?,
        }
    };
    let Some(commit) = commit else {
        return Ok((doc, tags, None, repaired));
    };
    if !commit.changed {
        // Nothing changed: nothing to tell a webhook, nothing written.
        return Ok((doc, tags, Some(commit), repaired));
    }
    feeds.notify(state, commit.generation, who).await;
    let w = &*written;
    crate::events::emit_logged(
        &*store,
        "import.completed",
        commit.generation,
        who,
        serde_json::json!({
            "bundle": doc.id,
            "created": doc.created,
            "images": doc.images.iter().map(|i| &i.repository).collect::<Vec<_>>(),
            "stacks": doc.stacks.iter().map(|s| &s.name).collect::<Vec<_>>(),
            "tags": commit.changes.tags,
            "blobs_new": w.new,
            "bytes_new": w.bytes_new,
            "changed": commit.changed,
        }),
    )
    .await;
    Ok((doc, tags, Some(commit), repaired))
}

/// Plans the tags of `doc` and commits its images, torcx contents, feeds
/// and stack candidates on the current generation (the commit is `None`
/// for a dry run), refused when the site's trust document is no longer
/// `trust_version` (the one `doc` was checked against); the feeds
/// imported, to notify about once committed.
async fn plan_and_commit(
    state: &StateStore,
    doc: &BundleDoc,
    who: &str,
    opts: &ImportOptions,
    trust_version: Option<u64>,
) -> Result<(
    Vec<TagPlan>,
    Option<crate::state::Commit>,
    crate::sbom::feed::import::FeedImport,
)> {
    let store = state.blobstore().clone();
    let tags = plan::plan_tags(state, doc, opts).await?;
    let mark = plan::bundle_mark(doc)?;
    let guard = plan::guard(opts, &mark);
    let mut ops = Vec::new();
    for img in &doc.images {
        ops.extend(image_ops(&*store, img, &guard).await?);
    }
    ops.extend(crate::torcx::bundle::import_op(&store, doc, opts.allow_downgrade.is_some()).await?);
    let feeds = crate::sbom::feed::import::prepare(state, &doc.id, &doc.feeds).await?;
    ops.extend(feeds.ops());
    if !doc.stacks.is_empty() {
        ops.push(stack_candidates(doc, who, opts.allow_downgrade.is_some())?);
    }
    let expired = plan::check_expiry(doc, opts)?;
    ops.push(crate::bundle::freshness::record_op(
        doc,
        std::time::SystemTime::now(),
    ));
    ops.push(crate::bundle::trust::guard_op(trust_version));
    if opts.dry_run {
        return Ok((tags, None, feeds));
    }
    let mut reason = format!("import bundle {}", doc.id);
    if let Some(why) = &opts.allow_downgrade
        && tags.iter().any(|t| t.downgrade.is_some())
    {
        reason.push_str(&format!(" (downgrade allowed: {why})"));
    }
    if let (true, Some(why), Some(at)) = (expired, &opts.allow_expired, &doc.expires) {
        reason.push_str(&format!(" (expired at {at}, allowed: {why})"));
    }
    let commit = state
        .commit(&reason, who, &ops)
        .await
        .map_err(|e| match e {
            crate::state::StateError::Rejected(why) => anyhow!(plan::Refused(why)),
            e => e.into(),
        })?;
    Ok((tags, Some(commit), feeds))
}

/// Verifies a bundle without a store: signatures (and, with a trust
/// document, its roles), every entry, every digest.
/// Returns the verified document.
pub async fn verify(
    verifier: Verifier,
    reader: Box<dyn Read + Send>,
    progress: indicatif::ProgressBar,
) -> Result<BundleDoc> {
    run_pipeline(
        None,
        None,
        verifier,
        reader,
        progress,
        &|_| Ok(()),
        &mut Written::default(),
    )
    .await
}

/// Reads the signed document of a bundle WITHOUT verifying its signature (`bundle inspect`).
pub fn inspect(reader: impl Read) -> Result<BundleDoc> {
    let mut archive = tar::Archive::new(reader);
    let armored = read_signed_doc(&mut archive.entries()?.raw(true))?;
    let text = super::sign::unverified_text(&armored)?;
    Ok(serde_json::from_str(&text)?)
}
