//! Site side: the feeds of an imported bundle, each read from the store
//! (the import pipeline already verified its digest against the signed
//! document), normalized in bounded memory into a blob of advisory lines,
//! and recorded in the `vulnfeeds` document in the import's own commit. A
//! malformed feed fails the import (nothing is committed). After the
//! commit, [`FeedImport::notify`] sends `stack.vulnerable` for every
//! promoted stack the new data makes affected by advisories it was not
//! affected by before.

use std::io::Write;

use anyhow::{Context, Result};

use super::table::{BlobRef, DOC_NAME, FeedRecord, FeedTable};
use super::{FeedEntry, normalize};
use crate::state::{DocumentChange, Op, StateStore};

/// The feeds of one import, ready to commit.
pub struct FeedImport {
    /// The table before the import.
    before: FeedTable,
    /// The records to put, by name.
    records: Vec<(String, FeedRecord)>,
}

/// Normalizes `entry`'s blob into an advisories blob; returns its record.
async fn one(state: &StateStore, entry: &FeedEntry, bundle: &str) -> Result<FeedRecord> {
    let store = state.blobstore().clone();
    let handle = tokio::runtime::Handle::current();
    let (format, digest) = (entry.format, entry.digest.clone());
    let src = store.clone();
    let (stats, adv_digest, adv_size) =
        crate::sbom::blobio::write_blob(store, move |out: &mut dyn Write| {
            let reader = crate::sbom::blobio::reader(&src, &handle, &digest)?;
            normalize(format, reader, &mut |a| {
                serde_json::to_writer(&mut *out, &a)?;
                out.write_all(b"\n")?;
                Ok(())
            })
        })
        .await
        .with_context(|| format!("feed {} refused", entry.name))?;
    let date = match (&stats.newest, entry.format) {
        (Some(d), super::Format::Osv) if d > &entry.date => d.clone(),
        _ => entry.date.clone(),
    };
    Ok(FeedRecord {
        format: entry.format.as_str().into(),
        date,
        source: BlobRef {
            digest: entry.digest.clone(),
            size: entry.size,
        },
        advisories: BlobRef {
            digest: adv_digest,
            size: adv_size,
        },
        count: stats.advisories,
        bundle: bundle.to_string(),
        imported: crate::state::now_rfc3339(),
    })
}

/// Reads and normalizes every feed of the bundle `bundle` (`feeds`).
/// Errors: a malformed feed (named), a store failure.
pub async fn prepare(state: &StateStore, bundle: &str, feeds: &[FeedEntry]) -> Result<FeedImport> {
    let before = load(state).await?;
    let mut records = Vec::new();
    for f in feeds {
        records.push((f.name.clone(), one(state, f, bundle).await?));
    }
    Ok(FeedImport { before, records })
}

/// The feed table in the current state.
pub async fn load(state: &StateStore) -> Result<FeedTable> {
    let snap = state.snapshot().await?;
    Ok(state
        .document::<FeedTable>(&snap, DOC_NAME)
        .await?
        .unwrap_or_default())
}

impl FeedImport {
    /// The op recording the feeds (none when the bundle carries none). A
    /// feed older than the one held under its name does not replace it.
    pub fn ops(&self) -> Vec<Op> {
        if self.records.is_empty() {
            return Vec::new();
        }
        let records = self.records.clone();
        vec![Op::Document {
            name: DOC_NAME.into(),
            change: DocumentChange::json(move |current: Option<FeedTable>| {
                let mut t = current.unwrap_or_default();
                for (name, r) in &records {
                    match t.feeds.get(name) {
                        Some(held) if held.date > r.date => {
                            tracing::warn!(feed = %name, held = %held.date, carried = %r.date, "older feed not imported");
                        }
                        _ => {
                            t.feeds.insert(name.clone(), r.clone());
                        }
                    }
                }
                Ok(Some(t))
            }),
        }]
    }

    /// After the commit of `generation`: one `stack.vulnerable` event per
    /// promoted stack that advisories of the new feeds affect and the
    /// feeds held before did not. Failures are logged, never returned.
    pub async fn notify(&self, state: &StateStore, generation: u64, who: &str) {
        if self.records.is_empty() {
            return;
        }
        if let Err(e) = self.notify_inner(state, generation, who).await {
            tracing::warn!(error = %format!("{e:#}"), "vulnerability events after a feed import not sent");
        }
    }

    async fn notify_inner(&self, state: &StateStore, generation: u64, who: &str) -> Result<()> {
        let after = load(state).await?;
        let names: Vec<String> = self.records.iter().map(|(n, _)| n.clone()).collect();
        let table = crate::stacks::ops::load(state).await?;
        for (stack, s) in &table.stacks {
            let Some(active) = s.active() else { continue };
            let inv = crate::sbom::site::image_inventories(state, &active.image).await?;
            let mut new_ids = std::collections::BTreeSet::new();
            let mut findings = Vec::new();
            for one in &inv {
                let inv = &one.inventory;
                let now = crate::sbom::scan::scan(state, &after, Some(&names), inv).await?;
                let was = crate::sbom::scan::scan(state, &self.before, Some(&names), inv).await?;
                let old: std::collections::HashSet<_> = was.iter().map(|f| f.id.clone()).collect();
                for f in now {
                    if !old.contains(&f.id) && new_ids.insert(f.id.clone()) {
                        findings.push(f);
                    }
                }
            }
            if findings.is_empty() {
                continue;
            }
            crate::events::emit_logged(
                &**state.blobstore(),
                "stack.vulnerable",
                generation,
                who,
                serde_json::json!({
                    "stack": stack,
                    "promotion": active.id,
                    "image": active.image,
                    "feeds": names,
                    "new": findings.iter().map(|f| &f.id).collect::<Vec<_>>(),
                    "counts": crate::sbom::scan::counts(&findings),
                }),
            )
            .await;
        }
        Ok(())
    }
}
