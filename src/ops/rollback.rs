//! `airlock rollback --to GEN`: the whole state back to an earlier
//! generation, as a new generation.
//!
//! Owns: writing a new [`StateDoc`] (generation = current + 1, parent = the
//! current one) that points at the old generation's repository table and
//! room documents, with the reason recorded in history, and swapping the
//! root to it (compare-and-swap, retried when another writer commits
//! first). Nothing is deleted, so a rollback is undone by another rollback
//! to the generation before it.

use anyhow::{Context, Result, bail};

use crate::digest::Digest;
use crate::state::{StateDoc, StateStore, now_rfc3339};
use crate::store;

/// What a rollback did.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct RolledBack {
    /// The generation restored.
    pub to: u64,
    /// The new generation (current + 1).
    pub generation: u64,
    /// Its `StateDoc` digest.
    pub digest: Digest,
}

/// Makes generation `to` current again as a new generation, recording
/// `reason` and `who`.
///
/// Works when the current generation is damaged too: the generations are
/// then found by scanning the store ([`crate::state::recover::scan`]).
///
/// Errors: `to` is the current generation or not in history (never existed,
/// or removed by GC); its documents cannot all be read (nothing changes);
/// the store failed; the root kept changing for 50 attempts.
pub async fn rollback(state: &StateStore, to: u64, reason: &str, who: &str) -> Result<RolledBack> {
    let store = state.blobstore();
    for _ in 0..50 {
        let Some(root) = store.read_root().await? else {
            bail!("the store is empty: nothing to roll back");
        };
        let (history, _) = state.history_partial().await?;
        let readable = history
            .first()
            .is_some_and(|(d, _)| d.to_string() == root.value);
        // A damaged current generation cannot be followed back: the
        // generations are found by scanning the store instead (issue 24 §4).
        let history = if readable {
            history
        } else {
            crate::state::recover::scan(state).await?
        };
        let newest = history.iter().map(|(_, d)| d.generation).max().unwrap_or(0);
        if readable && to == newest {
            bail!("generation {to} is already the current one");
        }
        let Some((target_digest, target)) = history.iter().find(|(_, d)| d.generation == to) else {
            bail!(
                "generation {to} is not in history (generations {}..={} are; older ones were removed by gc)",
                history.last().map_or(0, |(_, d)| d.generation),
                newest
            );
        };
        // The new generation's parent: the current one, or (damaged) the
        // one restored, so that history reads on from there.
        let parent = match history.first() {
            Some((d, _)) if readable => d.clone(),
            _ => target_digest.clone(),
        };
        let problems = state.walk(target_digest, &mut |_| true).await?;
        if let Some(p) = problems.first() {
            bail!(
                "generation {to} cannot be restored: {p} ({} problems)",
                problems.len()
            );
        }
        let text = if reason.is_empty() {
            format!("rollback to generation {to}")
        } else {
            format!("rollback to generation {to}: {reason}")
        };
        let actor = crate::state::audit::current();
        let doc = StateDoc {
            // The target's kind: it says how `repositories` is laid out.
            kind: target.kind.clone(),
            generation: newest + 1,
            parent: Some(parent),
            time: now_rfc3339(),
            reason: text,
            who: actor.as_ref().map_or_else(|| who.into(), |a| a.who.clone()),
            address: actor.and_then(|a| a.address),
            repositories: target.repositories.clone(),
            documents: target.documents.clone(),
            changes: None,
        };
        let bytes = serde_json::to_vec(&doc).context("serializing the state document")?;
        let digest = store::put_metadata(&**store, &bytes).await?;
        store.sync().await?;
        if store.swap_root(Some(&root), &digest.to_string()).await? {
            state.forget_root();
            tracing::info!(to, generation = doc.generation, %digest, "state rolled back");
            return Ok(RolledBack {
                to,
                generation: doc.generation,
                digest,
            });
        }
    }
    bail!("the state root kept changing; rollback gave up after 50 attempts")
}
