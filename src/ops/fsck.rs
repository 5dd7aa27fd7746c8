//! `airlock fsck`: checks that the state can be read and that everything it
//! refers to is stored intact.
//!
//! Checks: `refs/root` parses; every generation still in history (the
//! current one and older ones not yet removed by GC) can be walked: each
//! document and manifest is read (verified against its digest: a corrupt
//! one is quarantined by the store) and parsed; every blob a repository,
//! manifest or room document names is present. With `deep`, every stored
//! blob is re-hashed, and one that does not match its digest is moved to
//! `quarantine/` so it is never served (a later import or push of the same
//! digest writes it anew). Every problem is reported, none stops the check;
//! problems met only in older generations are warnings.

use std::collections::HashSet;

use anyhow::Result;

use super::rooms;
use crate::digest::{Digest, Hasher};
use crate::state::{Reached, StateError, StateStore};
use crate::store::{self, Blobstore, StoreError, blob_key, copies, refs, verify};

/// One problem found.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Problem {
    /// `root`, `history`, `unreadable`, `missing`, `corrupt`.
    pub kind: &'static str,
    /// The object concerned (a digest, or `refs/root`).
    pub object: String,
    /// What is wrong, one line.
    pub detail: String,
    /// A stack's derived blob (rootfs, chunks, patch): `fsck --repair`
    /// makes it again from the stack image ([`crate::stacks::rederive`]).
    pub derived: bool,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}: {}", self.kind, self.object, self.detail)
    }
}

/// What `fsck` found.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct FsckReport {
    /// The current generation (0: empty store or unreadable root).
    pub generation: u64,
    /// Generations walked.
    pub generations_checked: usize,
    /// Distinct documents, manifests and blobs referred to.
    pub objects_checked: usize,
    /// Blobs re-hashed (`deep`).
    pub blobs_rehashed: u64,
    /// Blobs moved to quarantine by this run.
    pub quarantined: Vec<Digest>,
    /// Metadata objects of which one copy was damaged or missing and was
    /// written again from the other ([`crate::store::copies`]): nothing is
    /// lost, so these are not problems.
    pub repaired: Vec<Problem>,
    /// Every problem found in the current generation, or with stored blobs.
    pub problems: Vec<Problem>,
    /// Problems of older generations only (they matter only to a rollback
    /// to them, which refuses a generation it cannot restore).
    pub warnings: Vec<Problem>,
}

impl FsckReport {
    fn problem(&mut self, kind: &'static str, object: impl ToString, detail: impl ToString) {
        self.problems.push(Problem {
            kind,
            object: object.to_string(),
            detail: detail.to_string(),
            derived: false,
        });
    }

    fn repaired(&mut self, object: impl ToString, detail: impl ToString) {
        let object = object.to_string();
        if self.repaired.iter().any(|r| r.object == object) {
            return; // restored by a read, and then found so again
        }
        self.repaired.push(Problem {
            kind: "repaired",
            object,
            detail: detail.to_string(),
            derived: false,
        });
    }

    /// A problem with a stack's derived blob `digest`.
    fn derived(&mut self, kind: &'static str, digest: &Digest, detail: impl std::fmt::Display) {
        self.problems.push(Problem {
            kind,
            object: digest.to_string(),
            detail: format!(
                "a stack's derived blob (rootfs, chunks or patch) {detail}; airlock fsck --repair makes it again from the stack image"
            ),
            derived: true,
        });
    }

    /// Whether every problem is a stack's derived blob (what `fsck
    /// --repair` makes again, without restoring a generation).
    pub fn only_derived(&self) -> bool {
        self.problems.iter().all(|p| p.derived)
    }
}

/// Checks the store of `state` (any backend); `deep` re-hashes every blob.
/// Errors: only a failing store (problems are in the report).
pub async fn run(state: &StateStore, deep: bool) -> Result<FsckReport> {
    let mut report = FsckReport::default();
    let store = &**state.blobstore();
    if let Some(cause) = store::layout::damage(store).await? {
        report.problem(
            "layout",
            store::layout::LAYOUT_KEY,
            format!("{cause}; airlock fsck --repair writes it again"),
        );
    }
    let root = match state.root_digest().await {
        Ok(root) => root,
        Err(e) => {
            report.problem(
                "root",
                refs::ROOT_KEY,
                format!("{e}; {}", copy_says(store).await?),
            );
            return Ok(report);
        }
    };
    if root.is_none()
        && let Some(copy) = refs::read_copy(store).await?
    {
        let names = copy.map_or_else(|t| format!("{t:?} (damaged too)"), |d| d.to_string());
        report.problem(
            "root",
            refs::ROOT_KEY,
            format!("refs/root is missing, its copy names {names}: the store is not empty; airlock fsck --repair points it at the newest generation that verifies"),
        );
        return Ok(report);
    }
    let (history, broken) = state.history_partial().await?;
    match &broken {
        Some(StateError::Store(StoreError::NotFound(_))) if !history.is_empty() => {}
        Some(e) if history.is_empty() => report.problem(
            "root",
            refs::ROOT_KEY,
            format!(
                "the state document it names cannot be read ({e}); {}",
                copy_says(store).await?
            ),
        ),
        Some(e) => report.problem("history", "state history", e),
        None => {}
    }
    if !history.is_empty() {
        match refs::ensure_copy(store).await {
            Ok(true) => report.repaired(
                refs::ROOT_COPY_KEY,
                "missing, damaged or behind refs/root; written again",
            ),
            Ok(false) => {}
            Err(e) => report.problem(
                "root",
                refs::ROOT_COPY_KEY,
                format!("cannot be written: {e}"),
            ),
        }
    }
    report.generation = history.first().map_or(0, |(_, d)| d.generation);
    let mut reached: HashSet<Digest> = HashSet::new();
    let mut blobs: Vec<Digest> = Vec::new();
    let mut documents: Vec<Digest> = Vec::new();
    let mut rooms_seen: HashSet<Digest> = HashSet::new();
    let mut chunk_maps: HashSet<Digest> = HashSet::new();
    let mut derived: HashSet<Digest> = HashSet::new();
    let mut sizes: std::collections::HashMap<Digest, u64> = Default::default();
    for (i, (digest, doc)) in history.iter().enumerate() {
        report.generations_checked += 1;
        let before = report.problems.len();
        let problems = state
            .walk(digest, &mut |r: Reached| {
                let fresh = reached.insert(r.digest().clone());
                match &r {
                    Reached::Blob(d) if fresh => blobs.push(d.clone()),
                    Reached::Document(d) if fresh => documents.push(d.clone()),
                    _ => {}
                }
                fresh
            })
            .await?;
        for p in problems {
            let kind = if p.cause.contains("not found") || p.cause.contains("missing") {
                "missing"
            } else {
                "unreadable"
            };
            report.problem(
                kind,
                &p.digest,
                format!("{} (generation {}): {}", p.what, doc.generation, p.cause),
            );
        }
        // The record of what it changed: nothing served reads it, but
        // `history` and a recovery's report do.
        if let Some(c) = &doc.changes
            && let Err(e) = state.changes_record(doc).await
        {
            report.problems.push(Problem {
                kind: "record",
                object: c.to_string(),
                detail: format!(
                    "the record of what generation {} changed cannot be read ({e}): history lists that generation without its tag changes; airlock fsck --repair records the loss in a new generation",
                    doc.generation
                ),
                derived: false,
            });
        }
        for (name, d) in &doc.documents {
            if !rooms_seen.insert(d.clone()) {
                continue;
            }
            match store::get_verified(&**state.blobstore(), d).await {
                Ok(bytes) => {
                    sizes.extend(rooms::recorded_sizes(name, &bytes));
                    match rooms::kept_blobs(
                        &**state.blobstore(),
                        name,
                        &bytes,
                        &mut chunk_maps,
                        true,
                    )
                    .await
                    {
                        Ok(list) => {
                            for b in list {
                                if rooms::derived(name) {
                                    derived.insert(b.clone());
                                }
                                if reached.insert(b.clone()) {
                                    blobs.push(b);
                                }
                            }
                        }
                        Err(e) => report.problem("unreadable", d, e),
                    }
                }
                Err(e) => report.problem("missing", d, format!("room document {name}: {e}")),
            }
        }
        if i > 0 {
            let old = report.problems.split_off(before);
            report.warnings.extend(old);
        }
    }
    documents.extend(rooms_seen.iter().cloned());
    check_copies(&**state.blobstore(), &documents, &mut report).await?;
    report.objects_checked = reached.len();
    let store = state.blobstore();
    for b in &blobs {
        let stored = store.stat(&blob_key(b)).await?;
        let quarantined = || async { store.stat(&verify::quarantine_key(b)).await };
        match (stored, derived.contains(b)) {
            (None, true) if quarantined().await?.is_some() => {
                report.derived("missing", b, "is quarantined (corrupt)")
            }
            (None, true) => report.derived("missing", b, "is missing from the store"),
            (None, false) if quarantined().await?.is_some() => report.problem(
                "missing",
                b,
                "referenced blob is quarantined (corrupt); re-import a bundle that carries it",
            ),
            (None, false) => {
                report.problem("missing", b, "referenced blob is missing from the store")
            }
            (Some(n), _) => match sizes.get(b) {
                Some(&want) if want != n => report.derived(
                    "corrupt",
                    b,
                    format!("is {n} bytes, its record says {want}"),
                ),
                _ => {}
            },
        }
    }
    if deep {
        rehash_all(&**state.blobstore(), &mut report).await?;
    }
    Ok(report)
}

/// What the root's copy says, for a damaged root's problem.
async fn copy_says(store: &dyn Blobstore) -> Result<String> {
    Ok(match refs::read_copy(store).await? {
        None => "its copy refs/root.copy is absent".into(),
        Some(Ok(d)) => format!("its copy refs/root.copy names {d}"),
        Some(Err(t)) => format!("its copy refs/root.copy is damaged too ({t:?})"),
    })
}

/// On a store that keeps metadata copies, makes sure every metadata
/// object in `documents` has a good second copy (writing it from the
/// verified object when missing or damaged); then reports, as repaired,
/// those and every object this process's reads restored from its copy.
/// Errors: the store failed.
async fn check_copies(
    store: &dyn Blobstore,
    documents: &[Digest],
    report: &mut FsckReport,
) -> Result<()> {
    if store.metadata_copies() >= 2 {
        let mut blobs = Vec::with_capacity(documents.len());
        let mut seen = std::collections::HashSet::new();
        for d in documents.iter().filter(|d| seen.insert(*d)) {
            // A document that cannot be read is already a problem.
            if let Ok(bytes) = store::get_verified(store, d).await {
                blobs.push((d.clone(), bytes::Bytes::from(bytes)));
            }
        }
        let states = copies::ensure(store, &blobs).await?;
        for ((d, _), state) in blobs.iter().zip(states) {
            match state {
                copies::CopyState::Good => {}
                copies::CopyState::Written => {
                    report.repaired(d, "its second copy was missing; written again")
                }
                copies::CopyState::Rewritten => {
                    report.repaired(d, "its second copy was damaged; written again")
                }
            }
        }
    }
    let pulls = crate::state::pulls::check_objects(store).await?;
    for (key, what) in pulls.repaired {
        report.repaired(key, what);
    }
    for (key, cause) in pulls.damaged {
        report.problem(
            "damaged",
            key,
            format!("{cause}; remove it to let gc go on without these pulls"),
        );
    }
    for r in store.repairs().map(|r| r.take()).unwrap_or_default() {
        report.repaired(
            r.object,
            format!(
                "metadata object was damaged ({}); restored from its second copy",
                r.cause
            ),
        );
    }
    Ok(())
}

/// Re-hashes every object under `blobs/`, one fan-out listing at a time;
/// quarantines the ones that do not match their key.
async fn rehash_all(store: &dyn Blobstore, report: &mut FsckReport) -> Result<()> {
    for prefix in crate::store::fan_prefixes() {
        for m in store.list_meta(&prefix).await? {
            let Some(digest) = verify::blob_digest(&m.key) else {
                report.problem("unreadable", &m.key, "not a blob name");
                continue;
            };
            let actual = match rehash(store, &m.key, &digest).await {
                Ok(actual) => actual,
                Err(StoreError::NotFound(_)) => continue,
                Err(e) => return Err(e.into()),
            };
            report.blobs_rehashed += 1;
            if actual.as_ref() == Some(&digest) {
                continue;
            }
            let detail = match verify::settle_quarantine(store, &digest).await {
                Ok(true) => {
                    report.quarantined.push(digest.clone());
                    "content does not match its digest; moved to quarantine/".to_string()
                }
                Ok(false) => continue,
                Err(e) => format!("content does not match its digest; quarantine failed: {e}"),
            };
            tracing::error!(%digest, actual = ?actual, "fsck: corrupt blob");
            report.problem("corrupt", &digest, detail);
        }
    }
    Ok(())
}

/// The digest of the content at `key`, read whole through the store;
/// `None` when the store's own verified read found it corrupt (and began
/// to quarantine it). Errors: `NotFound` (gone meanwhile), the store failed.
async fn rehash(
    store: &dyn Blobstore,
    key: &str,
    digest: &Digest,
) -> std::result::Result<Option<Digest>, StoreError> {
    use tokio::io::AsyncReadExt;
    let mut r = match store.read(key, None).await {
        Ok(r) => r,
        Err(StoreError::Corrupt(_)) => return Ok(None),
        Err(e) => return Err(e),
    };
    let mut h = Hasher::new(digest.algorithm());
    let mut buf = vec![0u8; 1 << 20];
    loop {
        match r.read(&mut buf).await {
            Ok(0) => return Ok(Some(h.finish())),
            Ok(n) => h.update(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::InvalidData => return Ok(None),
            Err(e) => return Err(e.into()),
        }
    }
}
