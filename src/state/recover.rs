//! Recovery without the damaged part (issue 24 §4): when the current
//! generation cannot be read whole (its state document, a page or a room
//! document is missing or corrupt), find the newest generation whose whole
//! tree verifies and make it current again, losing only what came after.
//!
//! Owns: rebuilding the history from the store itself (every state
//! document is a content-addressed blob; a damaged one cannot be followed
//! through its `parent`, so the blobs are scanned for state documents),
//! choosing the newest generation that verifies ([`StateStore::walk`] finds
//! no problem), and the new generation that restores it (parent: the
//! restored one, so history reads on from there). Never deletes anything:
//! damaged objects stay in `quarantine/` for a person to look at.

use anyhow::{Context, Result, bail};

use super::{STATE_KIND, StateDoc, StateStore, now_rfc3339};
use crate::digest::Digest;

/// State documents are small: blobs larger than this are not read by the scan.
const MAX_STATE_DOC: u64 = 256 << 10;

/// One generation found in the store.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Found {
    /// Its generation number.
    pub generation: u64,
    /// Its state document.
    pub digest: Digest,
    /// When it was committed.
    pub time: String,
    /// Why.
    pub reason: String,
}

/// What a recovery found and did.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Recovery {
    /// The generation `refs/root` named (`None`: unreadable).
    pub damaged_root: Option<String>,
    /// The newest generation whose whole tree verifies.
    pub restored: Found,
    /// Newer generations that cannot be restored (damaged, or built on a
    /// damaged one), found in the store: lost by the recovery.
    pub lost: Vec<Found>,
    /// Every generation lost: `lost`, and the current one when its state
    /// document cannot be read (so it is not among `lost`).
    pub lost_count: u64,
    /// Every tag change the lost generations had acknowledged (`created
    /// r/a:t3 -> 0123456789ab`, as `airlock history` lists them), from
    /// their changes documents: the one a lost generation's state document
    /// names, or, when that document is damaged, the one the scan found
    /// for its generation number ([`super::changes::ChangesDoc`]). A lost
    /// generation whose changes cannot be read is listed as such.
    pub lost_tags: Vec<String>,
    /// Only the root pointer was damaged (missing, unreadable, or naming
    /// no stored state document) and the newest generation found verifies:
    /// the root names it again, no new generation is made, nothing is lost.
    pub pointer: bool,
    /// The generation current after the recovery (`None`: a dry run).
    pub generation: Option<u64>,
}

impl std::fmt::Display for Recovery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.pointer {
            let root = self.damaged_root.as_deref().unwrap_or("missing");
            return match self.generation {
                Some(_) => write!(
                    f,
                    "refs/root ({root}) named no generation that verifies: it names generation {} ({}, {}) again, the newest, which verifies; nothing was lost",
                    self.restored.generation, self.restored.time, self.restored.digest
                ),
                None => write!(
                    f,
                    "refs/root ({root}) names no generation that verifies: would name generation {} ({}) again, the newest, which verifies; nothing would be lost",
                    self.restored.generation, self.restored.time
                ),
            };
        }
        if let Some(root) = &self.damaged_root
            && !self.lost.iter().any(|l| &l.digest.to_string() == root)
            && self.lost_count > self.lost.len() as u64
        {
            writeln!(
                f,
                "lost: the current generation ({root}): its state document cannot be read"
            )?;
        }
        for l in &self.lost {
            writeln!(
                f,
                "lost: generation {} ({}, {}): {}",
                l.generation, l.time, l.digest, l.reason
            )?;
        }
        for t in &self.lost_tags {
            writeln!(f, "lost tag change: {t}")?;
        }
        match self.generation {
            Some(g) => write!(
                f,
                "restored generation {} ({}) as generation {g}; {} newer generations lost ({} tag changes)",
                self.restored.generation,
                self.restored.time,
                self.lost_count,
                self.lost_tags.len()
            ),
            None => write!(
                f,
                "would restore generation {} ({}); {} newer generations would be lost ({} tag changes)",
                self.restored.generation,
                self.restored.time,
                self.lost_count,
                self.lost_tags.len()
            ),
        }
    }
}

/// Every state document the store holds, newest generation first (a scan
/// of `blobs/`, reading only blobs small enough to be one).
///
/// Errors: the store cannot be listed.
pub async fn scan(state: &StateStore) -> Result<Vec<(Digest, StateDoc)>> {
    Ok(scan_all(state).await?.0)
}

/// The changes documents found by a scan, by generation (several when
/// commits of one generation number lost their root race).
type ChangesFound = std::collections::BTreeMap<u64, Vec<super::Changes>>;

/// [`scan`], and every changes document ([`super::changes::ChangesDoc`])
/// found on the way.
async fn scan_all(state: &StateStore) -> Result<(Vec<(Digest, StateDoc)>, ChangesFound)> {
    let store = state.blobstore();
    let mut out = Vec::new();
    let mut changes = ChangesFound::new();
    for prefix in crate::store::fan_prefixes() {
        for m in store
            .list_meta(&prefix)
            .await
            .with_context(|| format!("listing {prefix}"))?
        {
            if m.size > MAX_STATE_DOC {
                continue;
            }
            let Some(digest) = crate::store::verify::blob_digest(&m.key) else {
                continue;
            };
            let Ok(bytes) = crate::store::get_verified(&**store, &digest).await else {
                continue;
            };
            if bytes.starts_with(b"{\"kind\":\"airlock.changes.v1\"") {
                if let Ok(c) = serde_json::from_slice::<super::changes::ChangesDoc>(&bytes) {
                    changes.entry(c.generation).or_default().push(c.changes);
                }
                continue;
            }
            if !bytes.starts_with(b"{\"kind\":\"airlock.state.v2\"") {
                continue;
            }
            if let Ok(doc) = serde_json::from_slice::<StateDoc>(&bytes)
                && doc.kind == STATE_KIND
            {
                out.push((digest, doc));
            }
        }
    }
    out.sort_by(|a, b| {
        b.1.generation
            .cmp(&a.1.generation)
            .then(b.1.time.cmp(&a.1.time))
    });
    Ok((out, changes))
}

fn found(d: &Digest, doc: &StateDoc) -> Found {
    Found {
        generation: doc.generation,
        digest: d.clone(),
        time: doc.time.clone(),
        reason: doc.reason.clone(),
    }
}

/// Whether the generation `digest` verifies whole: its document, every
/// page and manifest it reaches, and its room documents.
async fn verifies(state: &StateStore, digest: &Digest) -> Result<bool> {
    if !state.walk(digest, &mut |_| true).await?.is_empty() {
        return Ok(false);
    }
    let doc = state.state_doc(digest).await?;
    for d in doc.documents.values() {
        if crate::store::get_verified(&**state.blobstore(), d)
            .await
            .is_err()
        {
            return Ok(false);
        }
    }
    Ok(true)
}

/// The tag changes of generation `generation` as `history` lists them:
/// from the changes document its state document `doc` names when
/// readable, else from those the scan found for that generation number
/// (`found`); a line saying so when none can be read.
async fn lost_changes(
    state: &StateStore,
    generation: u64,
    doc: Option<&StateDoc>,
    found: &ChangesFound,
) -> Vec<String> {
    let lines = |c: &super::Changes| {
        let mut out: Vec<String> = c.tags.iter().map(ToString::to_string).collect();
        if c.more_tags > 0 {
            out.push(format!(
                "(generation {generation}: {} more tag changes, not listed)",
                c.more_tags
            ));
        }
        out
    };
    if let Some(doc) = doc {
        let Some(d) = &doc.changes else {
            return Vec::new(); // nothing listable changed
        };
        if let Ok(bytes) = crate::store::get_verified(&**state.blobstore(), d).await
            && let Ok(c) = serde_json::from_slice::<super::Changes>(&bytes)
        {
            return lines(&c);
        }
    }
    match found.get(&generation).map(Vec::as_slice) {
        Some([one]) => lines(one),
        Some(several) if !several.is_empty() => {
            let mut out = vec![format!(
                "(generation {generation}: {} records of its changes were found, one of them acknowledged; all are listed)",
                several.len()
            )];
            out.extend(several.iter().flat_map(lines));
            out
        }
        _ => vec![format!(
            "(generation {generation}: its record of changes cannot be read)"
        )],
    }
}

/// Finds the newest generation whose whole tree verifies and (unless
/// `dry_run`) makes it current as a new generation, whatever `refs/root`
/// names; `who` is recorded. Without damage, nothing to do: `Ok(None)`.
///
/// Errors: no generation verifies; the store failed; another writer
/// changed the root meanwhile (run it again).
pub async fn recover(state: &StateStore, dry_run: bool, who: &str) -> Result<Option<Recovery>> {
    let store = state.blobstore();
    let root = store.read_root().await?;
    let current: Option<Digest> = root.as_ref().and_then(|r| r.value.parse().ok());
    if let Some(c) = &current
        && verifies(state, c).await.unwrap_or(false)
    {
        return Ok(None);
    }
    let copy = crate::store::refs::read_copy(&**store).await?;
    if root.is_none() && copy.is_none() {
        return Ok(None); // an empty store
    }
    let (all, changes) = scan_all(state).await?;
    let mut lost = Vec::new();
    let mut restored = None;
    for (d, doc) in &all {
        if verifies(state, d).await.unwrap_or(false) {
            restored = Some((d.clone(), doc.clone()));
            break;
        }
        lost.push((d.clone(), doc.clone()));
    }
    let Some((digest, doc)) = restored else {
        bail!(
            "no generation in the store verifies ({} state documents found): restore from a backup or re-import",
            all.len()
        );
    };
    // The current generation, when its state document is stored but
    // cannot be read (damaged, or quarantined), is not among those
    // scanned: it is lost too, and numbered after them. A root that names
    // no stored document (missing, flipped, unreadable) is a damaged
    // pointer, not a lost generation.
    let unread = match &current {
        Some(c) if !all.iter().any(|(d, _)| d == c) => {
            let key = crate::store::blob_key(c);
            store.stat(&key).await?.is_some()
                || store
                    .stat(&crate::store::verify::quarantine_key(c))
                    .await?
                    .is_some()
        }
        _ => false,
    };
    let newest = all.first().map_or(doc.generation, |(_, d)| d.generation) + u64::from(unread);
    let mut lost_tags = Vec::new();
    for (_, l) in &lost {
        lost_tags.extend(lost_changes(state, l.generation, Some(l), &changes).await);
    }
    if unread {
        lost_tags.extend(lost_changes(state, newest, None, &changes).await);
    }
    let pointer = lost.is_empty() && !unread;
    let mut recovery = Recovery {
        damaged_root: root.as_ref().map(|r| r.value.clone()),
        restored: found(&digest, &doc),
        lost_count: lost.len() as u64 + u64::from(unread),
        lost: lost.iter().map(|(d, l)| found(d, l)).collect(),
        lost_tags,
        pointer,
        generation: None,
    };
    if dry_run {
        return Ok(Some(recovery));
    }
    if pointer {
        // Nothing was lost: the root names the newest generation again.
        if !store.swap_root(root.as_ref(), &digest.to_string()).await? {
            bail!("another writer changed the state root meanwhile; run the recovery again");
        }
        state.forget_root();
        tracing::warn!(
            generation = doc.generation,
            "state root repaired: it names the newest generation again"
        );
        recovery.generation = Some(doc.generation);
        return Ok(Some(recovery));
    }
    let next = StateDoc {
        kind: doc.kind.clone(),
        generation: newest + 1,
        parent: Some(digest.clone()),
        time: now_rfc3339(),
        reason: format!(
            "recovered: restored generation {} ({} newer generations lost: damaged)",
            doc.generation, recovery.lost_count
        ),
        who: who.to_string(),
        address: None,
        repositories: doc.repositories.clone(),
        documents: doc.documents.clone(),
        changes: None,
    };
    let bytes = serde_json::to_vec(&next)?;
    let new_digest = crate::store::put_metadata(&**store, &bytes).await?;
    store.sync().await?;
    if !store
        .swap_root(root.as_ref(), &new_digest.to_string())
        .await?
    {
        bail!("another writer changed the state root meanwhile; run the recovery again");
    }
    state.forget_root();
    tracing::warn!(
        restored = doc.generation,
        generation = next.generation,
        lost = recovery.lost_count,
        "state recovered from a damaged generation"
    );
    recovery.generation = Some(next.generation);
    Ok(Some(recovery))
}
