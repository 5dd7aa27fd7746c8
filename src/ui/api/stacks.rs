//! `GET /api/v1/stacks` (every stack, its state and rollout) and
//! `GET /api/v1/stacks/NAME` (the stack as `/stacks/v1/NAME` shows it, the
//! live rollout from the latest cell-report sample: cells per digest now
//! and over time, lagging and silent cells as paged lists, bytes moved;
//! and which admin actions the caller may take).

use std::sync::Arc;

use super::{Paged, Result, page_of};
use crate::digest::Digest;
use crate::stacks::cells::{self, StackStatus};
use crate::stacks::table::{Rollout, Stack, StackTable};
use crate::stacks::{StackName, StackState};
use crate::ui::Context;
use crate::ui::chart::Band;
use crate::ui::http::{UiError, Viewer};
use crate::ui::series::{Point, Sample};

/// What a cached [`StackStatus`] was computed from: the sample and every
/// part of the stack that decides what a cell should run.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct StatusKey {
    stack: String,
    seq: u64,
    rollout: Option<(u64, u8, Option<u64>)>,
    promotions: usize,
    state: &'static str,
}

/// Every stack.
#[derive(Debug, Clone, serde::Serialize)]
pub struct StackList {
    /// The default stack.
    pub default: Option<String>,
    /// System stacks by name.
    pub stacks: Vec<StackRow>,
    /// Custom stacks by name (`name`, `image`, `owner`).
    pub custom: Vec<serde_json::Value>,
}

/// One stack in the list.
#[derive(Debug, Clone, serde::Serialize)]
pub struct StackRow {
    /// The name.
    pub name: String,
    /// Cloud Controller's state.
    pub state: &'static str,
    /// Its description.
    pub description: String,
    /// Whether it is the default stack.
    pub default: bool,
    /// The rollout: promotion, percentage, previous promotion.
    pub rollout: Option<Rollout>,
    /// The promotion being rolled out's image.
    pub image: Option<String>,
    /// Cells at the last sample (`None`: not sampled yet).
    pub cells: Option<usize>,
    /// Of those, on the promotion being rolled out.
    pub on_latest: Option<usize>,
}

/// Which part of the lagging and silent lists to show.
#[derive(Debug, Clone, Default)]
pub struct Paging {
    /// Lagging cells after this id.
    pub lagging_after: Option<String>,
    /// Silent cells after this id.
    pub silent_after: Option<String>,
    /// Cells per list.
    pub limit: usize,
}

/// One stack's page.
#[derive(Debug, Clone, serde::Serialize)]
pub struct StackView {
    /// The name.
    pub name: String,
    /// The stack as `GET /stacks/v1/NAME` answers it (state, promotions,
    /// candidates, history, `active`, `default`).
    pub stack: serde_json::Value,
    /// The live rollout, once cells were sampled.
    pub live: Option<Live>,
    /// Cells not running what they should, sorted, paged.
    pub lagging: Paged<String>,
    /// Cells not heard from within the stale limit, sorted, paged.
    pub silent: Paged<String>,
    /// Samples, oldest first (the chart).
    pub series: Vec<Point>,
    /// The chart's bands, bottom up: the promotion being rolled out, the
    /// one the other cells keep, then any other digest reported.
    pub legend: Vec<Band>,
    /// Seconds between samples.
    pub sample_interval_secs: u64,
    /// Seconds after which a cell counts as silent.
    pub silent_after_secs: u64,
    /// What the caller may do.
    pub actions: Actions,
}

/// The rollout as the latest sample shows it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Live {
    /// When the reports were sampled, RFC 3339 UTC.
    pub sampled_at: String,
    /// Cells that reported.
    pub cells: usize,
    /// Cells per reported digest, biggest first.
    pub digests: Vec<DigestCount>,
    /// Cells on the promotion being rolled out.
    pub on_latest: usize,
    /// Lagging cells.
    pub lagging: usize,
    /// Silent cells.
    pub silent: usize,
    /// Rootfs bytes delivered to the cells now on the promotion being
    /// rolled out (each cell's platform's rootfs size).
    pub bytes_moved: u64,
}

/// Cells reporting one digest.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct DigestCount {
    /// The image or platform manifest digest reported.
    pub digest: Digest,
    /// How many cells report it.
    pub cells: usize,
    /// The promotion it belongs to, if any.
    pub promotion: Option<u64>,
    /// `active` (being rolled out), `previous` (what the others keep) or `other`.
    pub role: &'static str,
}

/// The admin actions the caller may take now.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Actions {
    /// False for readers, and while `[stacks] allow_admin` is off.
    pub allowed: bool,
    /// Why not, when not allowed.
    pub why_not: Option<String>,
    /// Percentages the rollout can widen to.
    pub widen_to: Vec<u8>,
    /// The promotion a rollback returns every cell to.
    pub rollback_to: Option<u64>,
    /// States it can be set to.
    pub states: Vec<&'static str>,
    /// Import candidates that can be promoted (`REPOSITORY@DIGEST`), newest first.
    pub candidates: Vec<String>,
    /// Whether a new promotion is possible (the last rollout is complete).
    pub can_promote: bool,
}

/// Every stack, with the last sample's counts.
///
/// Errors: the stack table cannot be read.
pub async fn list(ctx: &dyn Context, viewer: &Viewer) -> Result<StackList> {
    let console = ctx
        .console()
        .ok_or_else(|| UiError::not_found("console off"))?;
    let table = ctx.stacks().table(ctx.state()).await?;
    let mut stacks = Vec::new();
    for (name, s) in &table.stacks {
        if !viewer.may_read_stack(&table, name) {
            continue;
        }
        let status = match console.rollout.latest(name.as_str()) {
            Some(sample) => Some(status(ctx, name, s, &sample)?),
            None => None,
        };
        stacks.push(StackRow {
            name: name.to_string(),
            state: s.state.as_str(),
            description: s.description.clone(),
            default: table.default.as_ref() == Some(name),
            rollout: s.rollout,
            image: s.active().map(|p| p.image.to_string()),
            cells: status.as_ref().map(|st| st.cells),
            on_latest: status.as_ref().map(|st| st.on_latest),
        });
    }
    let custom = table
        .custom
        .iter()
        .filter(|(n, _)| viewer.may_read_stack(&table, n))
        .map(|(n, c)| serde_json::json!({ "name": n, "image": c.image, "owner": c.owner, "description": c.description }))
        .collect();
    Ok(StackList {
        default: table
            .default
            .as_ref()
            .filter(|d| viewer.may_read_stack(&table, d))
            .map(ToString::to_string),
        stacks,
        custom,
    })
}

/// The status of `stack` from `sample`, computed once per sample and
/// stack change.
pub fn status(
    ctx: &dyn Context,
    name: &StackName,
    stack: &Stack,
    sample: &Sample,
) -> Result<Arc<StackStatus>> {
    let console = ctx
        .console()
        .ok_or_else(|| UiError::not_found("console off"))?;
    let key = StatusKey {
        stack: name.to_string(),
        seq: sample.seq,
        rollout: stack.rollout.map(|r| (r.promotion, r.percent, r.previous)),
        promotions: stack.promotions.len(),
        state: stack.state.as_str(),
    };
    if let Some(s) = console.cache.statuses.get(&key) {
        return Ok(s);
    }
    let at = time::OffsetDateTime::from_unix_timestamp(sample.unix as i64)
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    let s = Arc::new(cells::status(
        name,
        stack,
        &sample.reports,
        at,
        ctx.stacks().config.stale_after,
    ));
    console.cache.statuses.put(key, s.clone());
    Ok(s)
}

/// The stack `name` with its live rollout and the caller's actions.
///
/// Errors: 404 for an unknown stack; the table cannot be read.
pub async fn show(
    ctx: &dyn Context,
    viewer: &Viewer,
    name: &StackName,
    paging: &Paging,
) -> Result<StackView> {
    let console = ctx
        .console()
        .ok_or_else(|| UiError::not_found("console off"))?;
    let table = ctx.stacks().table(ctx.state()).await?;
    let stack = table.get(name)?;
    let sample = console.rollout.latest(name.as_str());
    let status = match &sample {
        Some(s) => Some(status(ctx, name, stack, s)?),
        None => None,
    };
    let live = match (&sample, &status) {
        (Some(sample), Some(st)) => Some(live(stack, sample, st)),
        _ => None,
    };
    let empty: Vec<String> = Vec::new();
    let lagging = status.as_ref().map_or(&empty, |s| &s.lagging);
    let silent = status.as_ref().map_or(&empty, |s| &s.stale);
    let series = console
        .rollout
        .series(name.as_str())
        .map(|s| s.points.clone())
        .unwrap_or_default();
    let legend = legend(stack, &series, live.as_ref());
    Ok(StackView {
        legend,
        name: name.to_string(),
        stack: stack.view(name, table.default.as_ref() == Some(name)),
        live,
        lagging: page_of(lagging, paging.lagging_after.as_deref(), paging.limit),
        silent: page_of(silent, paging.silent_after.as_deref(), paging.limit),
        series,
        sample_interval_secs: console.config.sample_interval.as_secs(),
        silent_after_secs: ctx.stacks().config.stale_after.as_secs(),
        actions: actions(ctx, viewer, &table, name, stack),
    })
}

/// The promotion of `stack` whose image or a platform manifest is `d`.
fn promotion_of(stack: &Stack, d: &Digest) -> Option<u64> {
    stack
        .promotions
        .iter()
        .rev()
        .find(|p| &p.image.digest == d || p.rootfs.iter().any(|r| &r.manifest == d))
        .map(|p| p.id)
}

/// `active`, `previous` or `other`: what promotion `p` is to the rollout.
fn role(stack: &Stack, p: Option<u64>) -> &'static str {
    match (stack.rollout, p) {
        (Some(r), Some(p)) if r.promotion == p => "active",
        (Some(r), Some(p)) if r.previous == Some(p) => "previous",
        _ => "other",
    }
}

/// Bands of every digest in `series` and `live`: the active promotion's,
/// the previous one's, then up to three others (the rest joins the last).
fn legend(stack: &Stack, series: &[Point], live: Option<&Live>) -> Vec<Band> {
    let mut seen: std::collections::BTreeSet<Digest> = series
        .iter()
        .flat_map(|p| p.digests.keys().cloned())
        .collect();
    seen.extend(
        live.iter()
            .flat_map(|l| l.digests.iter().map(|d| d.digest.clone())),
    );
    let mut active = Vec::new();
    let mut previous = Vec::new();
    let mut others: Vec<Band> = Vec::new();
    for d in seen {
        let p = promotion_of(stack, &d);
        match role(stack, p) {
            "active" => active.push(d),
            "previous" => previous.push(d),
            _ if others.len() < 3 => others.push(Band {
                class: format!("other-{}", others.len()),
                label: match p {
                    Some(id) => format!("promotion {id} ({})", crate::ui::actions::short(&d)),
                    None => crate::ui::actions::short(&d),
                },
                digests: vec![d],
            }),
            _ => {
                if let Some(last) = others.last_mut() {
                    last.digests.push(d);
                    last.label = "other digests".into();
                }
            }
        }
    }
    let r = stack.rollout;
    let mut out = Vec::new();
    if !active.is_empty() {
        out.push(Band {
            digests: active,
            class: "active".into(),
            label: format!("promotion {} (rolling out)", r.map_or(0, |r| r.promotion)),
        });
    }
    if !previous.is_empty() {
        out.push(Band {
            digests: previous,
            class: "previous".into(),
            label: format!(
                "promotion {} (kept by the others)",
                r.and_then(|r| r.previous).unwrap_or(0)
            ),
        });
    }
    out.extend(others);
    out
}

fn live(stack: &Stack, sample: &Sample, st: &StackStatus) -> Live {
    let mut digests: Vec<DigestCount> = st
        .digests
        .iter()
        .map(|(d, n)| {
            let promotion = promotion_of(stack, d);
            DigestCount {
                digest: d.clone(),
                cells: *n,
                promotion,
                role: role(stack, promotion),
            }
        })
        .collect();
    digests.sort_by(|a, b| b.cells.cmp(&a.cells).then(a.digest.cmp(&b.digest)));
    let bytes_moved = match stack.active() {
        Some(p) => sample
            .reports
            .iter()
            .filter_map(|r| {
                let platform = r.platform.as_deref();
                if p.image.digest == r.digest {
                    p.rootfs_for(platform).map(|f| f.size)
                } else {
                    p.rootfs
                        .iter()
                        .find(|f| f.manifest == r.digest)
                        .map(|f| f.size)
                }
            })
            .sum(),
        None => 0,
    };
    let sampled_at = Point::of(st, sample.unix).time;
    Live {
        sampled_at,
        cells: st.cells,
        digests,
        on_latest: st.on_latest,
        lagging: st.lagging.len(),
        silent: st.stale.len(),
        bytes_moved,
    }
}

/// Whether stacks may be changed from the console (`[stacks]
/// allow_admin`), and why not. Who may is the access layer's to decide.
pub fn may_administer(ctx: &dyn Context) -> std::result::Result<(), String> {
    if !ctx.stacks().config.allow_admin {
        return Err("stack administration over HTTP is off ([stacks] allow_admin = false)".into());
    }
    Ok(())
}

/// The forms the stack page offers: none unless the viewer may administer
/// this stack (the admin role on every repository of its images, as the
/// access layer decides the forms' routes) and `allow_admin` is on.
fn actions(
    ctx: &dyn Context,
    viewer: &Viewer,
    table: &StackTable,
    name: &StackName,
    stack: &Stack,
) -> Actions {
    let why = if !viewer
        .grant
        .allows(crate::auth::Permission::Admin, &table.repositories(name))
    {
        Err(format!("{} may not administer stack {name}", viewer.who))
    } else {
        may_administer(ctx)
    };
    if let Err(why) = why {
        return Actions {
            why_not: Some(why),
            ..Actions::default()
        };
    }
    let r = stack.rollout;
    let widen_to = match r {
        Some(r) if r.previous.is_some() && r.percent < 100 => [1u8, 5, 10, 25, 50, 100]
            .into_iter()
            .filter(|p| *p > r.percent)
            .collect(),
        _ => Vec::new(),
    };
    let rollback_to = stack.active().and_then(|p| p.replaces);
    let can_promote = r.is_none_or(|r| r.percent == 100 || r.previous.is_none());
    let active = stack.active().map(|p| p.image.digest.clone());
    let mut candidates: Vec<String> = Vec::new();
    for c in stack.candidates.iter().rev() {
        let s = c.image.to_string();
        let repo = c.image.repository.to_string();
        if Some(&c.image.digest) != active.as_ref()
            && !candidates.contains(&s)
            && viewer
                .grant
                .allows(crate::auth::Permission::Admin, &[repo.as_str()])
        {
            candidates.push(s);
        }
    }
    Actions {
        allowed: true,
        why_not: None,
        widen_to,
        rollback_to,
        states: [
            StackState::Active,
            StackState::Deprecated,
            StackState::Restricted,
            StackState::Disabled,
        ]
        .into_iter()
        .filter(|s| *s != stack.state)
        .map(StackState::as_str)
        .collect(),
        candidates,
        can_promote,
    }
}
