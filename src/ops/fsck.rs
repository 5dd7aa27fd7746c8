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
use crate::store::{self, StoreError, blob_key, fs::FsStore, verify};

/// One problem found.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Problem {
    /// `root`, `history`, `unreadable`, `missing`, `corrupt`.
    pub kind: &'static str,
    /// The object concerned (a digest, or `refs/root`).
    pub object: String,
    /// What is wrong, one line.
    pub detail: String,
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
        });
    }
}

/// Checks the store `fs` (whose state is `state`); `deep` re-hashes every blob.
/// Errors: only a failing store (problems are in the report).
pub async fn run(fs: &FsStore, state: &StateStore, deep: bool) -> Result<FsckReport> {
    let mut report = FsckReport::default();
    if let Err(e) = state.root_digest().await {
        report.problem("root", "refs/root", e);
        return Ok(report);
    }
    let (history, broken) = state.history_partial().await?;
    match &broken {
        Some(StateError::Store(StoreError::NotFound(_))) if !history.is_empty() => {}
        Some(e) => report.problem("history", "state history", e),
        None => {}
    }
    report.generation = history.first().map_or(0, |(_, d)| d.generation);
    let mut reached: HashSet<Digest> = HashSet::new();
    let mut blobs: Vec<Digest> = Vec::new();
    let mut rooms_seen: HashSet<Digest> = HashSet::new();
    for (i, (digest, doc)) in history.iter().enumerate() {
        report.generations_checked += 1;
        let before = report.problems.len();
        let problems = state
            .walk(digest, &mut |r: Reached| {
                let fresh = reached.insert(r.digest().clone());
                if fresh && let Reached::Blob(d) = &r {
                    blobs.push(d.clone());
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
        for (name, d) in &doc.documents {
            if !rooms_seen.insert(d.clone()) {
                continue;
            }
            match store::get_verified(&**state.blobstore(), d).await {
                Ok(bytes) => match rooms::room_blobs(name, &bytes) {
                    Ok(list) => {
                        for b in list {
                            if reached.insert(b.clone()) {
                                blobs.push(b);
                            }
                        }
                    }
                    Err(e) => report.problem("unreadable", d, e),
                },
                Err(e) => report.problem("missing", d, format!("room document {name}: {e}")),
            }
        }
        if i > 0 {
            let old = report.problems.split_off(before);
            report.warnings.extend(old);
        }
    }
    report.objects_checked = reached.len();
    let store = state.blobstore();
    for b in &blobs {
        if store.stat(&blob_key(b)).await?.is_none() {
            let quarantined = store.stat(&verify::quarantine_key(b)).await?.is_some();
            let detail = if quarantined {
                "referenced blob is quarantined (corrupt); re-import a bundle that carries it"
            } else {
                "referenced blob is missing from the store"
            };
            report.problem("missing", b, detail);
        }
    }
    if deep {
        rehash_all(fs, &mut report).await?;
    }
    Ok(report)
}

/// Re-hashes every file under `blobs/`; quarantines the ones that do not match.
async fn rehash_all(fs: &FsStore, report: &mut FsckReport) -> Result<()> {
    use crate::store::Blobstore;
    for (alg_name, fan) in super::fan_dirs(fs.dir())? {
        for (digest, entry) in super::blob_entries(&alg_name, &fan)? {
            let Some(digest) = digest else {
                report.problem("unreadable", entry.path().display(), "not a blob name");
                continue;
            };
            let path = entry.path();
            let alg = digest.algorithm();
            let actual = tokio::task::spawn_blocking(move || -> std::io::Result<Digest> {
                use std::io::Read;
                let mut f = std::fs::File::open(&path)?;
                let mut h = Hasher::new(alg);
                let mut buf = vec![0u8; 1 << 20];
                loop {
                    let n = f.read(&mut buf)?;
                    if n == 0 {
                        return Ok(h.finish());
                    }
                    h.update(&buf[..n]);
                }
            })
            .await?;
            let actual = match actual {
                Ok(a) => a,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e.into()),
            };
            report.blobs_rehashed += 1;
            if actual != digest {
                let moved = fs
                    .rename(&blob_key(&digest), &verify::quarantine_key(&digest))
                    .await;
                let detail = match moved {
                    Ok(()) => {
                        report.quarantined.push(digest.clone());
                        format!("content hashes to {actual}; moved to quarantine/")
                    }
                    Err(StoreError::NotFound(_)) => continue,
                    Err(e) => format!("content hashes to {actual}; quarantine failed: {e}"),
                };
                tracing::error!(%digest, %actual, "fsck: corrupt blob");
                report.problem("corrupt", &digest, detail);
            }
        }
    }
    Ok(())
}
