//! `GET /api/v1/overview`: the store, the current generation, the last
//! import, the last GC and fsck, counts, health and recent events.

use super::imports::{self, GenerationView};
use super::{EventView, Result};
use crate::ui::http::{UiError, Viewer};
use crate::ui::{Context, StoreInfo};

/// Repositories counted at most (beyond it the count says "at least").
const COUNT_CAP: usize = 10_000;

/// The overview.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Overview {
    /// The blobstore and the space of its file system (filesystem only).
    pub store: StoreView,
    /// The current generation (0: empty store).
    pub generation: u64,
    /// The current generation's summary.
    pub current: Option<GenerationView>,
    /// The newest generation made by an import (within the last
    /// generations still in history).
    pub last_import: Option<GenerationView>,
    /// The newest bundle imported, by its creation time
    /// ([`crate::bundle::freshness`]).
    pub newest_bundle: Option<crate::bundle::freshness::Newest>,
    /// The site's trust document, as [`crate::bundle::trust::TrustDoc::summary`]
    /// says (`None`: the site has none; its import keyring decides).
    pub trust: Option<String>,
    /// The last `airlock gc` (CLI or the server's periodic one).
    pub last_gc: Option<crate::ops::reports::LastReport>,
    /// The last `airlock fsck`.
    pub last_fsck: Option<crate::ops::reports::LastReport>,
    /// How much there is.
    pub counts: Counts,
    /// Whether the state reads, and what needs a look.
    pub health: Health,
    /// The newest events (promotions, rollbacks, state changes, imports).
    pub events: Vec<EventView>,
}

/// The blobstore.
#[derive(Debug, Clone, serde::Serialize)]
pub struct StoreView {
    /// Backend and location.
    #[serde(flatten)]
    pub info: StoreInfo,
    /// Size of the file system holding a filesystem store, in bytes.
    pub total_bytes: Option<u64>,
    /// Its free bytes (what airlock may still write).
    pub free_bytes: Option<u64>,
}

/// Counts of what the site holds.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Counts {
    /// Repositories (counted up to 10,000).
    pub repositories: usize,
    /// True when there are more than `repositories`.
    pub repositories_more: bool,
    /// System stacks.
    pub stacks: usize,
    /// Custom stacks.
    pub custom_stacks: usize,
    /// torcx remotes.
    pub torcx_remotes: usize,
    /// torcx addon builds over every remote.
    pub torcx_builds: usize,
    /// Configured users.
    pub users: usize,
    /// Token users.
    pub token_users: usize,
}

/// What needs an operator's look.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Health {
    /// The current state reads (what `/readyz` checks).
    pub ready: bool,
    /// One line per problem.
    pub problems: Vec<String>,
}

/// Builds the overview.
///
/// Errors: the store failed (a state that cannot be read is reported in
/// `health`, not as an error).
pub async fn build(ctx: &dyn Context, viewer: &Viewer) -> Result<Overview> {
    let console = ctx
        .console()
        .ok_or_else(|| UiError::not_found("console off"))?;
    let state = ctx.state();
    let store = state.blobstore();
    let mut health = Health {
        ready: true,
        problems: Vec::new(),
    };
    let snap = match state.snapshot().await {
        Ok(s) => Some(s),
        Err(e) => {
            health.ready = false;
            health
                .problems
                .push(format!("the current state cannot be read: {e}"));
            None
        }
    };
    let everything = viewer.admin_everywhere();
    let (total_bytes, free_bytes) = match &console.config.store.path {
        Some(p) if everything => match crate::store::space::usage(p) {
            Ok((free, total)) => (Some(total), Some(free)),
            Err(_) => (None, None),
        },
        _ => (None, None),
    };
    let mut counts = Counts::default();
    let table = ctx.stacks().table(state).await?;
    let (mut current, mut last_import) = (None, None);
    if let Some(snap) = &snap {
        let counted = match super::visible::sees_all(viewer) && everything {
            true => count(ctx, snap).await,
            false => count_for(ctx, viewer, &table, snap).await,
        };
        counts = counted.unwrap_or_else(|e| {
            health.ready = false;
            health
                .problems
                .push(format!("the state cannot be read: {}", e.message));
            Counts::default()
        });
        if let Some(d) = &snap.digest {
            let shown = |g: GenerationView| {
                super::visible::generation(viewer, &table, &g)
                    .then(|| super::visible::redact(viewer, g))
            };
            current = imports::generation(ctx, d).await.ok().and_then(shown);
            last_import = imports::last_import(ctx, d)
                .await
                .unwrap_or(None)
                .and_then(shown);
        }
    }
    let (last_gc, last_fsck) = match everything {
        true => (
            crate::ops::reports::last(&**store, "gc").await?,
            crate::ops::reports::last(&**store, "fsck").await?,
        ),
        false => (None, None),
    };
    if let Some(f) = &last_fsck {
        let n = f.report["problems"].as_array().map_or(0, Vec::len);
        if n > 0 {
            health
                .problems
                .push(format!("the last fsck ({}) found {n} problems", f.time));
        }
    }
    // Fresh or stale only of a state that reads (otherwise `health` says
    // so above).
    let freshness = match &snap {
        Some(snap) => crate::bundle::freshness::report(state, snap, ctx.max_staleness())
            .await
            .unwrap_or_default(),
        None => Default::default(),
    };
    health.problems.extend(freshness.stale);
    let trust = match &snap {
        Some(snap) => crate::bundle::trust::load(state, snap)
            .await
            .ok()
            .flatten()
            .map(|t| t.summary()),
        None => None,
    };
    if let Some(free) = free_bytes
        && everything
        && free < 1 << 30
    {
        health
            .problems
            .push(format!("the store has {free} bytes free"));
    }
    for (stack, s) in console.rollout.problems() {
        let readable = stack
            .parse::<crate::stacks::StackName>()
            .is_ok_and(|n| viewer.may_read_stack(&table, &n));
        if readable {
            health.problems.push(format!("stack {stack}: {s}"));
        }
    }
    let mut info = console.config.store.clone();
    if !everything {
        // The store's path is for those who may administer all of it.
        info.location = String::new();
    }
    Ok(Overview {
        store: StoreView {
            info,
            total_bytes,
            free_bytes,
        },
        generation: snap.as_ref().map_or(0, |s| s.generation()),
        current,
        last_import,
        newest_bundle: freshness.newest,
        trust,
        last_gc,
        last_fsck,
        counts,
        health,
        events: super::recent_events(&console.cache, &**store)
            .await?
            .iter()
            .filter(|e| super::visible::event(viewer, &table, e))
            .cloned()
            .collect(),
    })
}

/// The counts of `snap` that a caller limited to some repositories may
/// see: the repositories, stacks and torcx remotes they may read; no
/// users. Not cached (it depends on the caller).
async fn count_for(
    ctx: &dyn Context,
    viewer: &Viewer,
    table: &crate::stacks::table::StackTable,
    snap: &crate::state::Snapshot,
) -> Result<Counts> {
    let state = ctx.state();
    let mut counts = Counts::default();
    let mut last: Option<String> = None;
    let mut seen = 0;
    loop {
        let page = state.repositories(snap, last.as_deref(), 1000).await?;
        seen += page.len();
        counts.repositories += page.iter().filter(|n| viewer.may_read(n.as_str())).count();
        if page.len() < 1000 {
            break;
        }
        if seen >= COUNT_CAP {
            counts.repositories_more = true;
            break;
        }
        last = page.last().map(|n| n.as_str().to_string());
    }
    counts.stacks = table
        .stacks
        .keys()
        .filter(|n| viewer.may_read_stack(table, n))
        .count();
    counts.custom_stacks = table
        .custom
        .keys()
        .filter(|n| viewer.may_read_stack(table, n))
        .count();
    let torcx = state
        .document::<crate::torcx::table::TorcxDoc>(snap, crate::torcx::DOCUMENT)
        .await?
        .unwrap_or_default();
    let remotes: Vec<_> = torcx
        .remotes
        .iter()
        .filter(|(n, _)| viewer.may_read(&format!("torcx/{n}")))
        .collect();
    counts.torcx_remotes = remotes.len();
    counts.torcx_builds = remotes.iter().map(|(_, r)| r.builds.len()).sum();
    Ok(counts)
}

/// The counts of `snap`, computed once per state document.
async fn count(ctx: &dyn Context, snap: &crate::state::Snapshot) -> Result<Counts> {
    let cache = &ctx
        .console()
        .ok_or_else(|| UiError::not_found("console off"))?
        .cache;
    let Some(digest) = snap.digest.clone() else {
        return Ok(Counts::default());
    };
    if let Ok(c) = cache.counts.lock()
        && let Some((d, counts)) = c.as_ref()
        && *d == digest
    {
        return Ok(counts.clone());
    }
    let state = ctx.state();
    let mut counts = Counts {
        users: ctx.policy().user_count(),
        ..Counts::default()
    };
    let mut last: Option<String> = None;
    loop {
        let page = state.repositories(snap, last.as_deref(), 1000).await?;
        counts.repositories += page.len();
        if page.len() < 1000 {
            break;
        }
        if counts.repositories >= COUNT_CAP {
            counts.repositories_more = true;
            break;
        }
        last = page.last().map(|n| n.as_str().to_string());
    }
    let table = ctx.stacks().table(state).await?;
    counts.stacks = table.stacks.len();
    counts.custom_stacks = table.custom.len();
    let torcx = state
        .document::<crate::torcx::table::TorcxDoc>(snap, crate::torcx::DOCUMENT)
        .await?
        .unwrap_or_default();
    counts.torcx_remotes = torcx.remotes.len();
    counts.torcx_builds = torcx.remotes.values().map(|r| r.builds.len()).sum();
    counts.token_users = crate::auth::tokens::list(state)
        .await
        .map_or(0, |t| t.users.len());
    if let Ok(mut c) = cache.counts.lock() {
        *c = Some((digest, counts.clone()));
    }
    Ok(counts)
}
