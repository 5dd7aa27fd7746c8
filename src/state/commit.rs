//! Group commit: every change of one process goes through one committer,
//! which applies a batch of queued changes to the current snapshot and swaps
//! `refs/root` once for all of them (DESIGN.md "Group commit").
//!
//! Owns: the queue of pending changes, leader election (the first waiter to
//! take the commit lock drains the queue; the others wait for their answer),
//! applying each change all-or-nothing on top of the changes before it in
//! the batch, writing the changed pages and documents and the new
//! [`StateDoc`] (pages bottom-up, the state document last, all made durable
//! before the root swap), and retrying after a compare-and-swap race lost to another process (S3
//! replicas, a CLI import while the server runs) with jittered exponential
//! backoff. Never decides what a change means: [`Op::apply`] does.
//!
//! A batch runs in a task of its own, so a caller that goes away (an HTTP
//! client hanging up) never cancels the commits of the others in its batch.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use super::changes::{Changes, TagChange};
use super::ops::Edit;
use super::page::{self, Delta};
use super::{
    Commit, Op, Result, STATE_KIND, Snapshot, StateDoc, StateError, StateStore, Table, now_rfc3339,
};
use crate::digest::Digest;
use crate::names::RepositoryName;
use crate::store::StoreError;

/// Most changes applied in one root swap.
const MAX_BATCH: usize = 512;
/// How long a batch keeps retrying while other processes win the race:
/// past it the batch's changes fail with [`StateError::Contention`] (HTTP
/// 503 with `Retry-After`). Real races end in milliseconds; a server that
/// refuses every conditional write is detected on its first refusal
/// (`store::s3`), so this bound is only reached under a storm of writers.
pub const RETRY_DEADLINE: Duration = Duration::from_secs(30);
/// Ceiling of the backoff after the first, second, ... lost race: each
/// sleep is uniform in `[0, ceiling]` ("full jitter"), the ceiling
/// doubling from [`BACKOFF_MIN`] to [`BACKOFF_MAX`]. The first retry comes
/// at once, while the winner is still answering its batch, which keeps
/// replicas fair: a loser that slept longer than the winner's next batch
/// would lose again and again.
const BACKOFF_MIN: Duration = Duration::from_millis(2);
const BACKOFF_MAX: Duration = Duration::from_millis(100);
/// Longest `reason` recorded for a batched generation, in bytes.
const MAX_REASON: usize = 2000;

/// One queued change and where its answer goes.
struct Pending {
    reason: String,
    who: String,
    address: Option<String>,
    ops: Vec<Op>,
    reply: oneshot::Sender<Result<Commit>>,
    /// When the change was queued (for the commit timings logged at debug).
    queued: Instant,
}

/// The committer's queue, shared by every clone of a [`StateStore`].
#[derive(Default)]
pub(super) struct Queue {
    pending: Mutex<Vec<Pending>>,
    lock: Arc<tokio::sync::Mutex<()>>,
    /// The other writers of the store, as this one sees them.
    pub(super) turns: super::turns::Turns,
}

/// Changes applied on top of a snapshot, not yet written: per repository
/// the keys changed in its tree, and named documents (`None`: removed).
struct Working {
    /// The snapshot's repository table (its root page).
    table: Digest,
    /// Each repository's root page in `table`, as looked up (`None`: absent).
    bases: BTreeMap<RepositoryName, Option<Digest>>,
    /// Changed keys per repository.
    repos: BTreeMap<RepositoryName, Delta>,
    documents: BTreeMap<String, Option<Vec<u8>>>,
}

/// How one commit attempt ended.
enum Attempt {
    /// The root was swapped (or nothing changed): each change's answer.
    Landed(Vec<Result<Commit>>),
    /// Another process swapped the root first; the attempt's state
    /// document (generation, digest), if it wrote one.
    Lost(Option<(u64, Digest)>),
}

/// What [`StateStore::write`] stored: the new state's digest, the state,
/// and the blobs it found stored already.
type Written = (Digest, StateDoc, Vec<(Digest, bytes::Bytes)>);

/// A copy of `e` for another waiter of the same failed batch (the error
/// types are not `Clone`; the kind of an I/O error is kept, so a full disk
/// stays recognisable).
fn duplicate(e: &StateError) -> StateError {
    match e {
        StateError::Store(StoreError::Io(io)) => StateError::Store(StoreError::Io(
            std::io::Error::new(io.kind(), io.to_string()),
        )),
        StateError::Store(StoreError::NotFound(k)) => {
            StateError::Store(StoreError::NotFound(k.clone()))
        }
        StateError::Store(StoreError::Unavailable(m)) => {
            StateError::Store(StoreError::Unavailable(m.clone()))
        }
        StateError::Corrupt { digest, cause } => StateError::Corrupt {
            digest: digest.clone(),
            cause: cause.clone(),
        },
        StateError::NotFound(m) => StateError::NotFound(m.clone()),
        StateError::Contention(n) => StateError::Contention(*n),
        other => StateError::Corrupt {
            digest: "(batch)".into(),
            cause: other.to_string(),
        },
    }
}

impl StateStore {
    /// Applies `ops` to the current state, all or nothing, and makes them
    /// visible with one root swap, shared with the other changes queued in
    /// this process at the same time (group commit).
    ///
    /// When the ops change nothing, no generation is written
    /// (`changed: false`). Errors from applying an op (e.g. deleting a tag
    /// that does not exist: [`StateError::NotFound`]) fail this change only;
    /// the others in the batch still land. A race lost to another process is
    /// retried on the new root with jittered backoff for up to
    /// [`RETRY_DEADLINE`] (30 s; [`StateError::Contention`] after that);
    /// store failures (among them a server that refuses a conditional
    /// write whose condition holds) fail every change of the batch. The
    /// state document of an attempt that lost is removed by this process;
    /// its pages, which another writer may have made too, are `gc`'s.
    ///
    /// Inside an HTTP request's [`super::audit::scope`] the scope's actor
    /// (user and client address) is recorded instead of `who`.
    pub async fn commit(&self, reason: &str, who: &str, ops: &[Op]) -> Result<Commit> {
        let actor = super::audit::current().unwrap_or_else(|| super::Actor {
            who: who.into(),
            address: None,
            admin: true,
        });
        let (reply, mut answer) = oneshot::channel();
        if let Ok(mut q) = self.queue.pending.lock() {
            q.push(Pending {
                reason: reason.into(),
                who: actor.who,
                address: actor.address,
                ops: ops.to_vec(),
                reply,
                queued: Instant::now(),
            });
        }
        loop {
            let guard = tokio::select! {
                biased;
                r = &mut answer => return r.unwrap_or_else(|_| Err(lost())),
                g = self.queue.lock.clone().lock_owned() => g,
            };
            if let Ok(r) = answer.try_recv() {
                return r;
            }
            // Another writer's turn first, when one is active; what is
            // queued meanwhile joins this batch.
            let (waited, fresh) = self.take_turns().await;
            if waited >= super::turns::POLL {
                tracing::debug!(
                    waited_us = waited.as_micros(),
                    "another writer's turn first"
                );
            }
            let batch: Vec<Pending> = match self.queue.pending.lock() {
                Ok(mut q) => {
                    let n = q.len().min(MAX_BATCH);
                    q.drain(..n).collect()
                }
                Err(_) => Vec::new(),
            };
            if batch.is_empty() {
                // Our change was taken by a batch that has not answered yet.
                drop(guard);
                return answer.await.unwrap_or_else(|_| Err(lost()));
            }
            let this = self.clone();
            let task = tokio::spawn(async move {
                this.commit_batch(batch, fresh).await;
                drop(guard);
            });
            if task.await.is_err() {
                tracing::error!("state commit task failed");
            }
        }
    }

    /// Commits `batch` with one root swap and answers each change; the
    /// first attempt starts from `fresh` when given (just read).
    async fn commit_batch(&self, batch: Vec<Pending>, mut fresh: Option<Arc<Snapshot>>) {
        let started = Instant::now();
        let queued_us = batch
            .iter()
            .map(|p| started.duration_since(p.queued).as_micros())
            .max()
            .unwrap_or(0);
        let mut backoff = BACKOFF_MIN;
        let mut attempts = 0;
        loop {
            attempts += 1;
            match self.try_batch(&batch, fresh.take()).await {
                Ok(Attempt::Landed(results)) => {
                    self.pages.forget_superseded();
                    tracing::debug!(
                        changes = batch.len(),
                        queued_us,
                        commit_us = started.elapsed().as_micros(),
                        attempts,
                        "state batch committed"
                    );
                    for (p, r) in batch.into_iter().zip(results) {
                        let _ = p.reply.send(r);
                    }
                    // Answered first; before the next batch looks for markers.
                    self.queue.turns.withdraw(&*self.store).await;
                    return;
                }
                Ok(Attempt::Lost(lost)) => {
                    if let Some((generation, digest)) = lost {
                        // Beside the retry: it need not wait for this.
                        let this = self.clone();
                        tokio::spawn(async move { this.remove_lost(generation, &digest).await });
                    }
                    if started.elapsed() >= RETRY_DEADLINE {
                        tracing::warn!(
                            attempts,
                            changes = batch.len(),
                            "state root kept changing; batch gave up"
                        );
                        for p in batch {
                            let _ = p.reply.send(Err(StateError::Contention(attempts)));
                        }
                        return;
                    }
                    // The marker is out before the retry (it may land at once).
                    tokio::join!(
                        self.queue.turns.lost(&*self.store),
                        tokio::time::sleep(backoff.mul_f64(rand::random::<f64>()))
                    );
                    backoff = (backoff * 2).min(BACKOFF_MAX);
                    tracing::debug!(attempts, "lost root compare-and-swap race; retrying");
                }
                Err(e) => {
                    tracing::warn!(error = %e, changes = batch.len(), "state commit failed");
                    for p in batch {
                        let _ = p.reply.send(Err(duplicate(&e)));
                    }
                    return;
                }
            }
        }
    }

    /// Before a new batch: reads the root and, beside it, whether another
    /// writer waits for its turn ([`super::turns`]); while one waits or
    /// was active and the root is still the one this writer set last,
    /// reads the root again every [`super::turns::POLL`] (a conditional
    /// read) until it changes, for at most the limit
    /// [`super::turns::Turns::yield_on`] gives. Returns how long it waited
    /// and the root as last read (the next attempt's; `None` when it could
    /// not be read: the attempt reads it and says why).
    async fn take_turns(&self) -> (Duration, Option<Arc<Snapshot>>) {
        let started = Instant::now();
        let mut polled = false;
        loop {
            let (snap, marker) = tokio::join!(
                self.snapshot_now(),
                self.store.version(super::turns::WAITING_KEY)
            );
            let Ok(snap) = snap else {
                return (started.elapsed(), None);
            };
            let root = snap.root.as_ref().map(|r| r.value.as_str());
            self.queue.turns.read(root, marker.ok().flatten());
            let waited = started.elapsed();
            match self.queue.turns.yield_on() {
                Some((mine, _)) if root != Some(mine.as_str()) => {
                    if polled {
                        self.queue.turns.took(waited);
                    }
                    return (waited, Some(snap));
                }
                Some((_, limit)) if waited < limit => {}
                Some(_) => {
                    self.queue.turns.idle();
                    return (waited, Some(snap));
                }
                None => return (waited, Some(snap)),
            }
            if !polled {
                self.queue.turns.waited();
            }
            tokio::time::sleep(super::turns::POLL).await;
            polled = true;
        }
    }

    /// One attempt: [`Attempt::Lost`] when another process swapped the
    /// root first.
    async fn try_batch(&self, batch: &[Pending], fresh: Option<Arc<Snapshot>>) -> Result<Attempt> {
        let t0 = Instant::now();
        let snap = match fresh {
            Some(snap) => snap,
            None => self.snapshot_now().await?,
        };
        self.pages.discard();
        let table = match snap.table()? {
            Table::Empty => self.pages.empty().await?,
            Table::Paged(d) => d,
        };
        let mut work = Working {
            table,
            bases: BTreeMap::new(),
            repos: BTreeMap::new(),
            documents: BTreeMap::new(),
        };
        let mut outcomes = Vec::with_capacity(batch.len());
        for p in batch {
            outcomes.push(self.apply(&snap, &mut work, &p.ops).await);
        }
        let landed: Vec<&Pending> = batch
            .iter()
            .zip(&outcomes)
            .filter(|(_, o)| matches!(o, Ok((true, _))))
            .map(|(p, _)| p)
            .collect();
        let mut changes = Changes::default();
        for (_, c) in outcomes.iter().flatten() {
            changes.extend(c.clone());
        }
        let (reason, who, address) = describe(&landed);
        let t1 = Instant::now();
        let written = self
            .write(&snap, &work, &reason, &who, address, &changes)
            .await?;
        let t2 = Instant::now();
        // A change whose edits and documents came out equal to what was
        // there (a re-import) changed nothing when the batch wrote nothing.
        let wrote = written.is_some();
        let generation = match written {
            None => snap.generation(),
            Some((digest, state, present)) => {
                // `swap_root` makes what was written durable before the new
                // root is (filesystem: the directories waiting for sync).
                let Some(root) = self
                    .store
                    .swap_root_versioned(snap.root.as_ref(), &digest.to_string())
                    .await?
                else {
                    return Ok(Attempt::Lost(Some((state.generation, digest))));
                };
                self.queue.turns.landed(&root.value);
                self.rewrite_vanished(present).await?;
                tracing::info!(generation = state.generation, %digest, changes = landed.len(), reason, who, address = state.address.as_deref().unwrap_or("-"), "state root swapped");
                tracing::debug!(
                    apply_us = (t1 - t0).as_micros(),
                    write_us = (t2 - t1).as_micros(),
                    swap_us = t2.elapsed().as_micros(),
                    "state commit phases"
                );
                let generation = state.generation;
                // Read-your-writes: the new root is this process's view at once.
                self.roots.install(Snapshot {
                    root: Some(root),
                    digest: Some(digest),
                    state: Some(state),
                });
                generation
            }
        };
        Ok(Attempt::Landed(
            outcomes
                .into_iter()
                .map(|o| {
                    o.map(|(changed, changes)| Commit {
                        generation,
                        changed: changed && wrote,
                        changes: if changed && wrote {
                            changes
                        } else {
                            Changes::default()
                        },
                    })
                })
                .collect(),
        ))
    }

    /// Applies `ops` to `work` (the changes so far on top of `snap`), all or
    /// nothing: on an error `work` is left as it was. Returns whether the
    /// ops changed anything, and what (tags as edited, documents).
    async fn apply(
        &self,
        snap: &Snapshot,
        work: &mut Working,
        ops: &[Op],
    ) -> Result<(bool, Changes)> {
        let mut trial: BTreeMap<RepositoryName, Delta> = BTreeMap::new();
        let mut trial_docs = BTreeMap::new();
        let mut before_docs = BTreeMap::new();
        for op in ops {
            match op {
                Op::Document { name, change } => {
                    if !trial_docs.contains_key(name) {
                        let current = match work.documents.get(name) {
                            Some(v) => v.clone(),
                            None => self.document_bytes(snap, name).await?,
                        };
                        before_docs.insert(name.clone(), current.clone());
                        trial_docs.insert(name.clone(), current);
                    }
                    let slot: &mut Option<Vec<u8>> = trial_docs
                        .get_mut(name)
                        .ok_or_else(|| StateError::NotFound(name.clone()))?;
                    *slot = change.apply(slot.as_deref())?;
                }
                _ => {
                    let Some(name) = op.repository() else {
                        continue;
                    };
                    if !work.bases.contains_key(name) {
                        let base = match self.pages.get(&work.table, name.as_str()).await? {
                            Some(v) => Some(page::digest_value(&v)?),
                            None => None,
                        };
                        work.bases.insert(name.clone(), base);
                    }
                    let mut ed = Edit {
                        pages: &self.pages,
                        base: work.bases.get(name).and_then(Option::as_ref),
                        batch: work.repos.get(name),
                        change: trial.entry(name.clone()).or_default(),
                    };
                    op.apply(&mut ed).await?;
                }
            }
        }
        let changed = trial.values().any(|d| !d.is_empty()) || trial_docs != before_docs;
        let mut changes = Changes::default();
        for (name, delta) in &trial {
            changes.extend(self.tag_changes(work, name, delta).await?);
        }
        changes.documents = trial_docs
            .iter()
            .filter(|(n, v)| before_docs.get(*n) != Some(*v))
            .map(|(n, _)| n.clone())
            .collect();
        for (name, delta) in trial {
            work.repos.entry(name).or_default().extend(delta);
        }
        work.documents.extend(trial_docs);
        Ok((changed, changes))
    }

    /// The tags `delta` (one change's edits to `name`) sets or removes,
    /// against what `work` (the batch so far, then the snapshot) had.
    async fn tag_changes(
        &self,
        work: &Working,
        name: &RepositoryName,
        delta: &Delta,
    ) -> Result<Changes> {
        let mut changes = Changes::default();
        let base = work.bases.get(name).and_then(Option::as_ref);
        let batch = work.repos.get(name);
        let bounds = (
            std::ops::Bound::Included("t/"),
            std::ops::Bound::Excluded("t/\u{7f}"),
        );
        for (key, value) in delta.range::<str, _>(bounds) {
            let old = match batch.and_then(|b| b.get(key)) {
                Some(v) => v.clone(),
                None => match base {
                    Some(root) => self.pages.get(root, key).await?,
                    None => None,
                },
            };
            let digest = |v: &Option<page::Value>| -> Result<Option<Digest>> {
                v.as_ref().map(|v| page::digest_value(v)).transpose()
            };
            let (old, new) = (digest(&old)?, digest(value)?);
            if old != new {
                changes.extend(Changes {
                    tags: vec![TagChange {
                        repository: name.clone(),
                        tag: key[2..].to_string(),
                        old,
                        new,
                    }],
                    ..Changes::default()
                });
            }
        }
        Ok(changes)
    }

    async fn document_bytes(&self, snap: &Snapshot, name: &str) -> Result<Option<Vec<u8>>> {
        match snap.state.as_ref().and_then(|s| s.documents.get(name)) {
            Some(d) => Ok(Some(self.document_blob(d).await?.to_vec())),
            None => Ok(None),
        }
    }

    /// After a lost race: removes the state document `digest` (generation
    /// `generation`) the attempt wrote, when the store's root is another
    /// document of the same generation. Then it can never be named: a
    /// swap to it expected the root it was made on, which is gone, and
    /// roots never repeat (generations grow). When the root moved further
    /// (or is that very document, written alike by another process) it is
    /// left to `gc`. Pages and the changes document are left to `gc` too:
    /// another writer may have made the same ones and named them.
    /// Best effort: a failure is logged and changes nothing.
    async fn remove_lost(&self, generation: u64, digest: &Digest) {
        let snap = match self.snapshot_now().await {
            Ok(s) => s,
            Err(e) => {
                tracing::debug!(error = %e, "reading the root after a lost race");
                return;
            }
        };
        if snap.generation() != generation || snap.digest.as_ref() == Some(digest) {
            return;
        }
        let key = crate::store::blob_key(digest);
        match self.store.delete(&key).await {
            Ok(()) => tracing::debug!(%digest, "removed the state document of a lost race"),
            Err(e) => {
                tracing::warn!(%digest, error = %e, "removing the state document of a lost race")
            }
        }
    }

    /// After the root swap: writes again each blob of `present` (pages and
    /// documents the batch found stored, so did not write) that is gone.
    ///
    /// The GC race: such a blob may have been unreferenced when the batch
    /// found it (a document set back to an earlier value, a page equal to
    /// one of a generation no longer kept), so a concurrent `gc` could move
    /// it to its trash, and delete it after its last look, before this
    /// swap named it again. A `gc` that looks after the swap keeps it (its
    /// third look walks the new root and puts it back); one that looked
    /// before has removed it by now or never will: this check, after the
    /// naming, finds it absent and restores it from the batch's bytes, as
    /// a push checks its blob after linking it (`ops::gc`). In between, a
    /// reader of the new root may find it absent (the same answer as for
    /// a blob being moved by `gc`). Most batches find nothing present: no
    /// round trip then.
    ///
    /// Errors: the store failed (the new root is in place; `airlock fsck`
    /// names what it misses).
    async fn rewrite_vanished(&self, present: Vec<(Digest, bytes::Bytes)>) -> Result<()> {
        if present.is_empty() {
            return Ok(());
        }
        let n = present.len();
        let still = self.store.put_blobs(present).await?;
        if still.len() < n {
            tracing::warn!(
                rewritten = n - still.len(),
                "state blobs removed by a concurrent gc before the root swap named them again: written again"
            );
            self.store.sync().await?;
        }
        Ok(())
    }

    /// Writes the documents `work` changed and the new [`StateDoc`] on top
    /// of `snap`; `None` when nothing changed; else the new state's digest,
    /// the state, and the blobs found stored already ([`Self::rewrite_vanished`]).
    async fn write(
        &self,
        snap: &Snapshot,
        work: &Working,
        reason: &str,
        who: &str,
        address: Option<String>,
        changes: &Changes,
    ) -> Result<Option<Written>> {
        let mut table_delta = Delta::new();
        let mut roots = Vec::new();
        for (name, delta) in &work.repos {
            let base = work.bases.get(name).and_then(Option::as_ref);
            let root = self.pages.apply(base, delta).await?;
            if root.as_ref() != base {
                let value = root.as_ref().map(|d| page::string_value(&d.to_string()));
                table_delta.insert(name.to_string(), value);
                roots.extend(root);
            }
        }
        let table = match self.pages.apply(Some(&work.table), &table_delta).await? {
            Some(root) => root,
            None => self.pages.empty().await?,
        };
        roots.push(table.clone());
        let old_documents = snap
            .state
            .as_ref()
            .map(|s| s.documents.clone())
            .unwrap_or_default();
        let mut documents = old_documents.clone();
        let mut blobs = Vec::new();
        for (name, bytes) in &work.documents {
            match bytes {
                Some(b) => {
                    let digest = Digest::sha256_of(b);
                    blobs.push((digest.clone(), bytes::Bytes::from(b.clone())));
                    documents.insert(name.clone(), digest);
                }
                None => {
                    documents.remove(name);
                }
            }
        }
        if table == work.table && documents == old_documents {
            return Ok(None);
        }
        let changes = if changes.is_empty() {
            None
        } else {
            let doc = super::changes::ChangesDoc {
                kind: super::changes::CHANGES_KIND.into(),
                generation: snap.generation() + 1,
                changes: changes.clone(),
            };
            let bytes = serde_json::to_vec(&doc).map_err(|e| StateError::Corrupt {
                digest: "(changes)".into(),
                cause: e.to_string(),
            })?;
            let digest = Digest::sha256_of(&bytes);
            blobs.push((digest.clone(), bytes::Bytes::from(bytes)));
            Some(digest)
        };
        let state = StateDoc {
            kind: STATE_KIND.into(),
            generation: snap.generation() + 1,
            parent: snap.digest.clone(),
            time: now_rfc3339(),
            reason: reason.into(),
            who: who.into(),
            address,
            repositories: table,
            documents,
            changes,
        };
        // Pages, documents and the state document are stored as one batch;
        // none is reachable before the root swap, which waits for all of them.
        let bytes = serde_json::to_vec(&state).map_err(|e| StateError::Corrupt {
            digest: "(new state)".into(),
            cause: e.to_string(),
        })?;
        let digest = Digest::sha256_of(&bytes);
        blobs.push((digest.clone(), bytes::Bytes::from(bytes)));
        let present = self.pages.flush(&roots, blobs).await?;
        Ok(Some((digest, state, present)))
    }
}

/// `reason`, `who` and `address` of a generation made of `landed` changes:
/// the change's own for one; for several, `N changes: r1; r2; ...` (at most
/// [`MAX_REASON`] bytes) and the distinct `who`s and addresses joined by `, `.
fn describe(landed: &[&Pending]) -> (String, String, Option<String>) {
    match landed {
        [] => (String::new(), String::new(), None),
        [one] => (one.reason.clone(), one.who.clone(), one.address.clone()),
        many => {
            let mut reason = format!("{} changes: ", many.len());
            for (i, p) in many.iter().enumerate() {
                let sep = if i == 0 { "" } else { "; " };
                if reason.len() + sep.len() + p.reason.len() > MAX_REASON {
                    reason.push_str("; ...");
                    break;
                }
                reason.push_str(sep);
                reason.push_str(&p.reason);
            }
            let mut whos: Vec<&str> = many.iter().map(|p| p.who.as_str()).collect();
            whos.sort_unstable();
            whos.dedup();
            let mut addrs: Vec<&str> = many.iter().filter_map(|p| p.address.as_deref()).collect();
            addrs.sort_unstable();
            addrs.dedup();
            let address = (!addrs.is_empty()).then(|| addrs.join(", "));
            (reason, whos.join(", "), address)
        }
    }
}

fn lost() -> StateError {
    StateError::Corrupt {
        digest: "(commit)".into(),
        cause: "the state committer stopped before answering".into(),
    }
}
