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
    /// The tags the lost generations created, moved or removed
    /// (`repository:tag`), from their changes documents where readable.
    pub lost_tags: Vec<String>,
    /// The generation the recovery committed (`None`: a dry run).
    pub generation: Option<u64>,
}

impl std::fmt::Display for Recovery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(root) = &self.damaged_root
            && !self.lost.iter().any(|l| &l.digest.to_string() == root)
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
        if !self.lost_tags.is_empty() {
            writeln!(f, "lost tag changes: {}", self.lost_tags.join(", "))?;
        }
        match self.generation {
            Some(g) => write!(
                f,
                "restored generation {} ({}) as generation {g}; {} newer generations lost",
                self.restored.generation, self.restored.time, self.lost_count
            ),
            None => write!(
                f,
                "would restore generation {} ({}); {} newer generations would be lost",
                self.restored.generation, self.restored.time, self.lost_count
            ),
        }
    }
}

/// Every state document the store holds, newest generation first (a scan
/// of `blobs/`, reading only blobs small enough to be one).
///
/// Errors: the store cannot be listed.
pub async fn scan(state: &StateStore) -> Result<Vec<(Digest, StateDoc)>> {
    let store = state.blobstore();
    let mut out = Vec::new();
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
    Ok(out)
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

/// The tags the generation `digest` changed (`repository:tag`), from its
/// changes document; none when it has none or it cannot be read.
async fn changed_tags(state: &StateStore, digest: &Digest) -> Vec<String> {
    let Ok(doc) = state.state_doc(digest).await else {
        return Vec::new();
    };
    let Some(changes) = &doc.changes else {
        return Vec::new();
    };
    let Ok(bytes) = crate::store::get_verified(&**state.blobstore(), changes).await else {
        return vec![format!(
            "(generation {}: its changes document cannot be read)",
            doc.generation
        )];
    };
    match serde_json::from_slice::<super::Changes>(&bytes) {
        Ok(c) => c
            .tags
            .iter()
            .map(|t| format!("{}:{}", t.repository, t.tag))
            .collect(),
        Err(_) => Vec::new(),
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
    let all = scan(state).await?;
    let mut lost = Vec::new();
    let mut restored = None;
    for (d, doc) in &all {
        if verifies(state, d).await.unwrap_or(false) {
            restored = Some((d.clone(), doc.clone()));
            break;
        }
        lost.push(found(d, doc));
    }
    let Some((digest, doc)) = restored else {
        bail!(
            "no generation in the store verifies ({} state documents found): restore from a backup or re-import",
            all.len()
        );
    };
    // The current generation, when its state document cannot be read, is
    // not among those scanned: it is lost too, and numbered after them.
    let unread = root
        .as_ref()
        .is_some_and(|r| !all.iter().any(|(d, _)| d.to_string() == r.value));
    let newest = all.first().map_or(doc.generation, |(_, d)| d.generation) + u64::from(unread);
    let mut lost_tags = Vec::new();
    for l in &lost {
        lost_tags.extend(changed_tags(state, &l.digest).await);
    }
    let mut recovery = Recovery {
        damaged_root: root.as_ref().map(|r| r.value.clone()),
        restored: found(&digest, &doc),
        lost_count: lost.len() as u64 + u64::from(unread),
        lost,
        lost_tags,
        generation: None,
    };
    if dry_run {
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
    tracing::warn!(
        restored = doc.generation,
        generation = next.generation,
        lost = recovery.lost_count,
        "state recovered from a damaged generation"
    );
    recovery.generation = Some(next.generation);
    Ok(Some(recovery))
}
