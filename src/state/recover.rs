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
    /// A recovery at the grain of the damage: what each damaged
    /// repository or room document of the current generation was set back
    /// to (the rest of the generation kept as it was). Empty for a whole
    /// generation restored.
    pub grafted: Vec<Grafted>,
    /// The generation current after the recovery (`None`: a dry run).
    pub generation: Option<u64>,
}

impl std::fmt::Display for Recovery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if !self.grafted.is_empty() {
            for g in &self.grafted {
                match g.from_generation {
                    Some(n) => writeln!(f, "damaged: {}: set back to generation {n}'s", g.what)?,
                    None => writeln!(
                        f,
                        "damaged: {}: removed (no earlier version verifies)",
                        g.what
                    )?,
                }
            }
            for t in &self.lost_tags {
                writeln!(f, "lost tag change: {t}")?;
            }
            let done = match self.generation {
                Some(g) => format!("recorded as generation {g}"),
                None => "would be recorded as a new generation".into(),
            };
            return write!(
                f,
                "repaired at the grain of the damage: {} parts set back, everything else of generation {} kept; {} tag changes lost; {done}",
                self.grafted.len(),
                self.restored.generation,
                self.lost_tags.len()
            );
        }
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

/// One damaged part of the current generation and what a recovery at the
/// grain of the damage set it back to.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Grafted {
    /// `repository a/b` or `document stacks`.
    pub what: String,
    /// The generation whose version it now has (`None`: none verifies or
    /// it did not exist before: removed).
    pub from_generation: Option<u64>,
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
    // A readable state document with damage below it: set back only the
    // damaged repositories and room documents.
    if let (Some(root), Some(c)) = (&root, &current)
        && let Ok(doc) = state.state_doc(c).await
        && let Some(r) = graft(state, root, c, &doc, dry_run, who).await?
    {
        return Ok(Some(r));
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
        if all.is_empty() {
            // Nothing to restore and nothing a commit could build on: an
            // import refuses a root that names nothing, so say what is left.
            bail!(
                "no state document is stored: refs/root names nothing this store ever held; move refs/root aside to start the store empty (nothing is lost), or restore from a backup"
            );
        }
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
        grafted: Vec::new(),
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

/// Records damage that costs no generation (the current generation's
/// record of what it changed, both copies damaged) as a new generation
/// with the same tree, whose reason says what was lost: the damage then
/// belongs to an older generation (`fsck` warns, `history` says so), as
/// `zpool clear` acknowledges an error. Returns the new generation.
///
/// Errors: the store is empty or its current generation cannot be read;
/// another writer changed the root meanwhile (run it again); the store
/// failed.
pub async fn restate(state: &StateStore, reason: &str, who: &str) -> Result<u64> {
    let store = state.blobstore();
    let Some(root) = store.read_root().await? else {
        bail!("the store is empty");
    };
    let digest: Digest = root.value.parse().context("refs/root")?;
    let doc = state.state_doc(&digest).await?;
    let next = StateDoc {
        generation: doc.generation + 1,
        parent: Some(digest),
        time: now_rfc3339(),
        reason: reason.to_string(),
        who: who.to_string(),
        address: None,
        changes: None,
        ..doc
    };
    let bytes = serde_json::to_vec(&next)?;
    let new_digest = crate::store::put_metadata(&**store, &bytes).await?;
    store.sync().await?;
    if !store
        .swap_root(Some(&root), &new_digest.to_string())
        .await?
    {
        bail!("another writer changed the state root meanwhile; run the repair again");
    }
    state.forget_root();
    tracing::warn!(
        generation = next.generation,
        reason,
        "damage recorded as a new generation"
    );
    Ok(next.generation)
}

/// A repository or room document of the current generation that does not
/// read whole, and the version it is set back to.
struct Part {
    what: String,
    /// The repository, or `None` for a room document.
    repository: Option<crate::names::RepositoryName>,
    /// The room document's name.
    document: Option<String>,
    /// Its root page (repository) or digest (document) in the current
    /// generation.
    damaged: Digest,
    /// What it is set back to: (generation, digest), `None`: removed.
    to: Option<(u64, Digest)>,
    resolved: bool,
}

/// Recovery at the grain of the damage (issue 61 §5): when the state
/// document `current` (gen N, the root's) reads and its repository table
/// lists, each repository whose tree does not read whole and each room
/// document that does not read is set back to its newest earlier version
/// that does (or removed, when none does or it did not exist before), and
/// everything else of generation N is kept, as a new generation. The tag
/// changes lost are the damaged repositories' changes since the version
/// kept, from the generations' changes documents. `None` when the damage
/// is elsewhere (the table), or nothing is damaged there.
///
/// Errors: the store failed; another writer changed the root meanwhile.
async fn graft(
    state: &StateStore,
    root: &crate::store::RootVersion,
    current: &Digest,
    doc: &StateDoc,
    dry_run: bool,
    who: &str,
) -> Result<Option<Recovery>> {
    let table = match state
        .pages
        .range(&doc.repositories, "", "\u{10ffff}", usize::MAX)
        .await
    {
        Ok(t) => t,
        Err(_) => return Ok(None), // the table itself: a whole generation
    };
    let mut parts = Vec::new();
    for (name, value) in &table {
        let (Ok(name), Ok(page)) = (
            name.parse::<crate::names::RepositoryName>(),
            super::page::digest_value(value),
        ) else {
            return Ok(None);
        };
        if !state.repository_verifies(&name, &page).await? {
            parts.push(Part {
                what: format!("repository {name}"),
                repository: Some(name),
                document: None,
                damaged: page,
                to: None,
                resolved: false,
            });
        }
    }
    for (name, d) in &doc.documents {
        if crate::store::get_verified(&**state.blobstore(), d)
            .await
            .is_err()
        {
            parts.push(Part {
                what: format!("document {name}"),
                repository: None,
                document: Some(name.clone()),
                damaged: d.clone(),
                to: None,
                resolved: false,
            });
        }
    }
    if parts.is_empty() {
        return Ok(None);
    }
    // Back through the generations (by parent) for each part's newest
    // earlier version that reads whole.
    let mut lost_generations: Vec<StateDoc> = vec![doc.clone()];
    let mut next = doc.parent.clone();
    while let Some(d) = next.take() {
        if parts.iter().all(|p| p.resolved) {
            break;
        }
        let Ok(older) = state.state_doc(&d).await else {
            break;
        };
        for p in parts.iter_mut().filter(|p| !p.resolved) {
            let found = match (&p.repository, &p.document) {
                (Some(name), _) => {
                    match state.pages.get(&older.repositories, name.as_str()).await {
                        Ok(Some(v)) => super::page::digest_value(&v).ok(),
                        Ok(None) => {
                            p.resolved = true; // it did not exist then
                            continue;
                        }
                        Err(_) => continue,
                    }
                }
                (None, Some(name)) => match older.documents.get(name) {
                    Some(d) => Some(d.clone()),
                    None => {
                        p.resolved = true;
                        continue;
                    }
                },
                (None, None) => None,
            };
            let Some(v) = found.filter(|v| *v != p.damaged) else {
                continue;
            };
            let whole = match (&p.repository, &p.document) {
                (Some(name), _) => state.repository_verifies(name, &v).await?,
                _ => crate::store::get_verified(&**state.blobstore(), &v)
                    .await
                    .is_ok(),
            };
            if whole {
                p.to = Some((older.generation, v));
                p.resolved = true;
            }
        }
        if !parts.iter().all(|p| p.resolved) {
            lost_generations.push(older.clone());
        }
        next = older.parent.clone();
    }
    // The tag changes lost: each damaged repository's since the version kept.
    let mut lost_tags = Vec::new();
    let mut gens: Vec<&StateDoc> = lost_generations.iter().collect();
    gens.sort_by_key(|d| d.generation);
    for g in gens {
        let changes = match state.changes_record(g).await {
            Ok(Some(c)) => c,
            Ok(None) => continue,
            Err(_) => {
                lost_tags.push(format!(
                    "(generation {}: its record of changes cannot be read)",
                    g.generation
                ));
                continue;
            }
        };
        for p in &parts {
            let since = p.to.as_ref().map_or(0, |(n, _)| *n);
            if g.generation <= since {
                continue;
            }
            match (&p.repository, &p.document) {
                (Some(name), _) => lost_tags.extend(
                    changes
                        .tags
                        .iter()
                        .filter(|t| &t.repository == name)
                        .map(ToString::to_string),
                ),
                (None, Some(name)) if changes.documents.contains(name) => lost_tags.push(format!(
                    "document {name} changed in generation {}",
                    g.generation
                )),
                _ => {}
            }
        }
    }
    let mut recovery = Recovery {
        damaged_root: None,
        restored: found(current, doc),
        lost: Vec::new(),
        lost_count: 0,
        lost_tags,
        pointer: false,
        grafted: parts
            .iter()
            .map(|p| Grafted {
                what: p.what.clone(),
                from_generation: p.to.as_ref().map(|(n, _)| *n),
            })
            .collect(),
        generation: None,
    };
    if dry_run {
        return Ok(Some(recovery));
    }
    let mut delta = super::page::Delta::new();
    let mut documents = doc.documents.clone();
    for p in &parts {
        match (&p.repository, &p.document) {
            (Some(name), _) => {
                let v =
                    p.to.as_ref()
                        .map(|(_, d)| super::page::string_value(&d.to_string()));
                delta.insert(name.to_string(), v);
            }
            (None, Some(name)) => match &p.to {
                Some((_, d)) => {
                    documents.insert(name.clone(), d.clone());
                }
                None => {
                    documents.remove(name);
                }
            },
            (None, None) => {}
        }
    }
    let table = match state.pages.apply(Some(&doc.repositories), &delta).await? {
        Some(t) => t,
        None => state.pages.empty().await?,
    };
    let set_back: Vec<String> = recovery
        .grafted
        .iter()
        .map(|g| match g.from_generation {
            Some(n) => format!("{} to generation {n}'s", g.what),
            None => format!("{} removed", g.what),
        })
        .collect();
    let next = StateDoc {
        kind: doc.kind.clone(),
        generation: doc.generation + 1,
        parent: Some(current.clone()),
        time: now_rfc3339(),
        reason: format!(
            "recovered: damaged {} ({} tag changes lost)",
            set_back.join(", "),
            recovery.lost_tags.len()
        ),
        who: who.to_string(),
        address: None,
        repositories: table.clone(),
        documents,
        changes: None,
    };
    let bytes = serde_json::to_vec(&next)?;
    let new_digest = Digest::sha256_of(&bytes);
    state
        .pages
        .flush(
            &[table],
            vec![(new_digest.clone(), bytes::Bytes::from(bytes))],
        )
        .await?;
    store_sync(state).await?;
    if !state
        .blobstore()
        .swap_root(Some(root), &new_digest.to_string())
        .await?
    {
        bail!("another writer changed the state root meanwhile; run the recovery again");
    }
    state.forget_root();
    tracing::warn!(
        generation = next.generation,
        parts = parts.len(),
        "state recovered at the grain of the damage"
    );
    recovery.generation = Some(next.generation);
    Ok(Some(recovery))
}

async fn store_sync(state: &StateStore) -> Result<()> {
    state.blobstore().sync().await?;
    Ok(())
}
