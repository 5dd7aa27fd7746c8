//! The console's admin forms: promote, widen, roll back and set the state
//! of a stack; roll the whole state back to a generation; revoke a token
//! user.
//!
//! Every form is checked the same way: the access layer enforces the
//! route's declaration first (`server::routes`: the admin role on every
//! repository of the stack, or on every repository for a whole-state
//! rollback or a revocation), then CSRF ([`super::http::check_csrf`]),
//! `[stacks] allow_admin` for stack changes (as `POST /stacks/v1/...`),
//! and for a promotion the admin role on the image's repository (named in
//! the form, so checked as it is read), then a first submission answers a confirmation
//! page naming the effect ("120 of 1,000 reporting cells will move back to
//! promotion 2 (sha256:2941…)"), computed by applying the change to a copy
//! of the stack table with the table's own rules and resolving every
//! reporting cell before and after. Only the confirmed submission changes
//! anything, by calling the very functions the CLI and `/stacks/v1` call
//! (`stacks::ops`, `ops::rollback`, `auth::tokens::revoke`), so the checks
//! and the audit record (who, from where, why) are theirs. The confirmation
//! carries what it was computed from (`expect`): if the stack or the state
//! changed meanwhile, nothing is done and the admin reviews again (409).

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Extension;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, Uri};
use axum::response::{IntoResponse, Response};

use super::api::stacks::may_administer;
use super::http::{self, UiError, Viewer};
use super::{Context, pages};
use crate::stacks::table::{PromotionInput, Stack, StackTable};
use crate::stacks::{ImageRef, StackName, StackState, ops};

type Ctx = State<Arc<dyn Context>>;
type Seen = axum::Extension<Viewer>;

/// A stack change asked for by a form or `/api/v1/stacks/NAME/effect`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// Widen the rollout to this percentage.
    Rollout(u8),
    /// Return every cell to the promotion the active one replaced.
    Rollback(String),
    /// Set Cloud Controller's state, with a reason.
    State(StackState, String),
    /// Promote this image to this percentage, with a reason.
    Promote(ImageRef, u8, String),
}

/// What a change would do to the cells that report.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Effect {
    /// `rollout`, `rollback`, `state` or `promote`.
    pub action: &'static str,
    /// Reporting cells that would run another promotion afterwards.
    pub moving: usize,
    /// Cells that report.
    pub reporting: usize,
    /// The promotion the moving cells go to (for a promotion: `None`, it
    /// gets its id when committed).
    pub to_promotion: Option<u64>,
    /// The image they go to.
    pub to_image: Option<ImageRef>,
    /// One sentence naming the effect.
    pub text: String,
    /// What the effect was computed from; a confirmed change is refused
    /// when the stack no longer matches it.
    pub expect: String,
}

/// `1,000`.
pub fn thousands(n: usize) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// `sha256:2941ab12cd34…`: the digest cut to 12 hex digits.
pub fn short(d: &crate::digest::Digest) -> String {
    let s = d.to_string();
    match s.split_once(':') {
        Some((alg, hex)) if hex.len() > 12 => format!("{alg}:{}…", &hex[..12]),
        _ => s,
    }
}

/// The fingerprint of a stack's rollout and state ([`Effect::expect`]).
pub fn fingerprint(stack: &Stack) -> String {
    match stack.rollout {
        Some(r) => format!(
            "{}:{}:{}:{}",
            r.promotion,
            r.percent,
            r.previous.map_or("-".into(), |p| p.to_string()),
            stack.state.as_str()
        ),
        None => format!("-:{}", stack.state.as_str()),
    }
}

/// The table after `change`, by the table's own rules.
///
/// Errors: what the real change would refuse (a narrowing rollout, nothing
/// to roll back to, an incomplete rollout before a promotion, ...).
fn apply(
    table: &StackTable,
    name: &StackName,
    change: &Change,
) -> Result<StackTable, crate::stacks::StackError> {
    let mut t = table.clone();
    let now = crate::state::now_rfc3339();
    match change {
        Change::Rollout(p) => t.widen(name, *p, &now, "preview")?,
        Change::Rollback(reason) => {
            t.rollback(name, reason, &now, "preview")?;
        }
        Change::State(s, reason) => t.set_state(name, *s, reason, &now, "preview")?,
        Change::Promote(image, percent, reason) => {
            let input = PromotionInput {
                image: image.clone(),
                rootfs: Vec::new(),
                build_image: None,
                run_image: None,
                stack_id: None,
                percent: *percent,
                max_in_flight: None,
                description: None,
                reason: reason.clone(),
                diff: None,
            };
            t.promote(name, &input, &now, "preview")?;
        }
    }
    Ok(t)
}

/// What `change` of stack `name` would do to the cells of the latest sample.
///
/// Errors: the change would be refused (its own error), the stack is unknown.
pub fn effect(
    ctx: &dyn Context,
    table: &StackTable,
    name: &StackName,
    change: &Change,
) -> Result<Effect, UiError> {
    let before = table.get(name)?;
    let after_table = apply(table, name, change)?;
    let after = after_table.get(name)?;
    let reports = ctx
        .console()
        .and_then(|c| c.rollout.latest(name.as_str()))
        .map(|s| s.reports.clone())
        .unwrap_or_default();
    let mut moving = 0;
    let mut to: Option<u64> = None;
    for r in reports.iter() {
        let b = before.resolve(name, &r.cell).map(|x| x.promotion.id);
        let a = after.resolve(name, &r.cell).map(|x| x.promotion.id);
        if a != b {
            moving += 1;
            to = a;
        }
    }
    let reporting = reports.len();
    let (m, n) = (thousands(moving), thousands(reporting));
    let to_promotion = match change {
        Change::Rollout(_) | Change::Promote(..) => after.rollout.map(|r| r.promotion),
        Change::Rollback(_) => after.rollout.map(|r| r.promotion),
        Change::State(..) => None,
    }
    .or(to);
    let to_image = to_promotion
        .and_then(|id| after.promotion(id))
        .map(|p| p.image.clone());
    let img = to_image
        .as_ref()
        .map_or_else(String::new, |i| short(&i.digest));
    let (action, text) = match change {
        Change::Rollout(p) => (
            "rollout",
            format!(
                "{m} of {n} reporting cells will move to promotion {} ({img}); the rollout widens from {} % to {p} %.",
                to_promotion.unwrap_or(0),
                before.rollout.map_or(0, |r| r.percent)
            ),
        ),
        Change::Rollback(_) => (
            "rollback",
            format!(
                "{m} of {n} reporting cells will move back to promotion {} ({img}); promotion {} is marked rolled back and every cell runs promotion {}.",
                to_promotion.unwrap_or(0),
                before.rollout.map_or(0, |r| r.promotion),
                to_promotion.unwrap_or(0)
            ),
        ),
        Change::State(s, _) => (
            "state",
            format!(
                "No cell moves ({n} reporting); stack {name} becomes {} ({}).",
                s.as_str(),
                s.meaning()
            ),
        ),
        Change::Promote(image, p, _) => (
            "promote",
            format!(
                "{m} of {n} reporting cells will move to {} ({p} % of cells; a first promotion goes to every cell); the others keep what they run.",
                short(&image.digest)
            ),
        ),
    };
    Ok(Effect {
        action,
        moving,
        reporting,
        to_promotion: if matches!(change, Change::Promote(..)) {
            None
        } else {
            to_promotion
        },
        to_image: if let Change::Promote(i, ..) = change {
            Some(i.clone())
        } else {
            to_image
        },
        text,
        expect: fingerprint(before),
    })
}

fn percent(v: Option<&String>) -> Result<u8, UiError> {
    v.and_then(|p| p.parse::<u8>().ok())
        .filter(|p| *p <= 100)
        .ok_or_else(|| UiError::invalid("percent must be 0 to 100"))
}

/// The change a form or query asks for (`action` from the path); an image
/// named for a promotion must be in a repository where `seen` may do
/// `permission` (checked before it is resolved, so nothing about it leaks).
async fn change_of(
    ctx: &dyn Context,
    seen: &Viewer,
    permission: crate::auth::Permission,
    action: &str,
    f: &BTreeMap<String, String>,
) -> Result<Change, UiError> {
    let reason = f.get("reason").cloned().unwrap_or_default();
    Ok(match action {
        "rollout" => Change::Rollout(percent(f.get("percent"))?),
        "rollback" => Change::Rollback(if reason.is_empty() {
            "rollback from the console".into()
        } else {
            reason
        }),
        "state" => Change::State(
            f.get("state")
                .map_or("", String::as_str)
                .parse::<StackState>()?,
            reason,
        ),
        "promote" => {
            let state = ctx.state();
            let snap = state.snapshot().await?;
            let image = f.get("image").map_or("", String::as_str);
            let repo = crate::stacks::image::repository_of(image);
            if !seen.grant.allows(permission, &[repo.as_str()]) {
                return Err(UiError::denied(format!(
                    "{} may not use images of repository {repo}",
                    seen.who
                )));
            }
            let pinned = crate::stacks::image::pin(state, &snap, image).await?;
            Change::Promote(pinned, percent(f.get("percent"))?, reason)
        }
        other => return Err(UiError::not_found(format!("no stack action {other:?}"))),
    })
}

/// `GET /api/v1/stacks/NAME/effect?action=rollout&percent=50` (also
/// `rollback`, `state&state=DEPRECATED`, `promote&image=REF&percent=10`):
/// what the change would do, without doing it.
pub async fn effect_route(
    ctx: &dyn Context,
    seen: &Viewer,
    name: &StackName,
    uri: &Uri,
) -> Result<Effect, UiError> {
    let q = http::query(uri);
    let action = q.get("action").map_or("", String::as_str);
    let change = change_of(ctx, seen, crate::auth::Permission::Pull, action, &q).await?;
    let table = ctx.stacks().table(ctx.state()).await?;
    effect(ctx, &table, name, &change)
}

/// The handler of [`effect_route`] (the stack as the access layer parsed it).
pub async fn effect_handler(
    State(ctx): Ctx,
    seen: Seen,
    Extension(name): Extension<StackName>,
    uri: Uri,
) -> Response {
    match effect_route(&*ctx, &seen, &name, &uri).await {
        Ok(e) => axum::Json(e).into_response(),
        Err(e) => e.into_response(),
    }
}

fn fail(seen: &Viewer, e: UiError) -> Response {
    pages::error_page(seen, &e)
}

/// The actions of the stack forms, in the order of their indexes
/// ([`stack_form`]'s `ACTION`): `POST /ui/stacks/NAME/<action>`.
pub const STACK_ACTIONS: [&str; 4] = ["promote", "rollout", "rollback", "state"];

/// `POST /ui/stacks/NAME/<STACK_ACTIONS[ACTION]>` (each action its own
/// route row), the stack as the access layer parsed it.
pub async fn stack_form<const ACTION: usize>(
    State(ctx): Ctx,
    seen: Seen,
    Extension(name): Extension<StackName>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let action = STACK_ACTIONS[ACTION];
    match stack_action_inner(&*ctx, &seen, &name, action, &headers, body).await {
        Ok(res) => res,
        Err(e) => fail(&seen, e),
    }
}

async fn stack_action_inner(
    ctx: &dyn Context,
    seen: &Viewer,
    name: &StackName,
    action: &str,
    headers: &HeaderMap,
    body: Body,
) -> Result<Response, UiError> {
    let form = super::routes::checked_form(seen, headers, body).await?;
    may_administer(ctx).map_err(UiError::denied)?;
    let change = change_of(ctx, seen, crate::auth::Permission::Admin, action, &form).await?;
    let state = ctx.state();
    let table = ctx.stacks().table(state).await?;
    let eff = effect(ctx, &table, name, &change)?;
    let back = format!("/ui/stacks/{name}");
    if form.get("confirm").map(String::as_str) != Some("yes") {
        let mut fields = form.clone();
        fields.remove("csrf");
        fields.remove("confirm");
        fields.insert("expect".into(), eff.expect.clone());
        let title = format!("{} stack {name}", eff.action);
        let url = format!("/ui/stacks/{name}/{action}");
        return Ok(pages::html(pages::confirm(
            seen, &title, &eff.text, &url, &fields, &back,
        )));
    }
    if form.get("expect") != Some(&eff.expect) {
        return Err(UiError::conflict(format!(
            "stack {name} changed since you confirmed (its rollout is now {}); nothing was changed: review the change again",
            eff.expect
        )));
    }
    let who = seen.who.as_str();
    match change {
        Change::Rollout(p) => {
            ops::rollout(state, name, p, who).await?;
        }
        Change::Rollback(reason) => {
            ops::rollback(state, name, &reason, who).await?;
        }
        Change::State(s, reason) => {
            ops::set_state(state, name, s, &reason, who).await?;
        }
        Change::Promote(image, p, reason) => {
            let req = ops::PromoteRequest {
                image: image.to_string(),
                rollout: Some(p),
                reason: (!reason.is_empty()).then_some(reason),
                ..ops::PromoteRequest::default()
            };
            ops::promote(state, name, &req, who).await?;
        }
    }
    Ok(http::redirect(&format!("{back}?done={}", eff.action)))
}

/// `POST /ui/imports/rollback` (`to`, `reason`): the whole state back to
/// generation `to`, as `airlock rollback --to` does (admin).
pub async fn state_rollback(
    State(ctx): Ctx,
    seen: Seen,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let run = async {
        let form = super::routes::checked_form(&seen, &headers, body).await?;
        let to: u64 = form
            .get("to")
            .and_then(|t| t.parse().ok())
            .ok_or_else(|| UiError::invalid("to must be a generation number"))?;
        let state = ctx.state();
        let snap = state.snapshot().await?;
        let current = snap.generation();
        let reason = form.get("reason").cloned().unwrap_or_default();
        if form.get("confirm").map(String::as_str) != Some("yes") {
            let text = format!(
                "The whole state (repositories, tags, stacks, torcx, token users) goes back to generation {to} as a new generation {}; generations {}..={current} stay in history and can be restored the same way.",
                current + 1,
                to + 1
            );
            let mut fields = BTreeMap::new();
            fields.insert("to".to_string(), to.to_string());
            fields.insert("reason".to_string(), reason);
            fields.insert("expect".to_string(), current.to_string());
            return Ok(pages::html(pages::confirm(
                &seen,
                &format!("roll back to generation {to}"),
                &text,
                "/ui/imports/rollback",
                &fields,
                "/ui/imports",
            )));
        }
        if form.get("expect") != Some(&current.to_string()) {
            return Err(UiError::conflict(format!(
                "the state changed since you confirmed (generation {current} now); nothing was changed: review again"
            )));
        }
        crate::ops::rollback::rollback(state, to, &reason, &seen.who)
            .await
            .map_err(|e| UiError::conflict(format!("{e:#}")))?;
        state.forget_root();
        Ok(http::redirect("/ui/imports?all=1"))
    };
    run.await.unwrap_or_else(|e| fail(&seen, e))
}

/// `POST /ui/operations/revoke` (`user`): revokes a token user (admin).
pub async fn revoke_user(State(ctx): Ctx, seen: Seen, headers: HeaderMap, body: Body) -> Response {
    let run = async {
        let form = super::routes::checked_form(&seen, &headers, body).await?;
        let name = form.get("user").cloned().unwrap_or_default();
        let table = crate::auth::tokens::list(ctx.state())
            .await
            .map_err(UiError::internal)?;
        let user = table
            .users
            .get(&name)
            .ok_or_else(|| UiError::not_found(format!("no token user {name:?}")))?;
        if form.get("confirm").map(String::as_str) != Some("yes") {
            let text = format!(
                "Token user {name} ({}) can no longer log in: whatever uses its token gets 401 from now on.",
                user.purpose
            );
            let mut fields = BTreeMap::new();
            fields.insert("user".to_string(), name.clone());
            return Ok(pages::html(pages::confirm(
                &seen,
                &format!("revoke token user {name}"),
                &text,
                "/ui/operations/revoke",
                &fields,
                "/ui/operations",
            )));
        }
        crate::auth::tokens::revoke(ctx.state(), &name, &seen.who)
            .await
            .map_err(|e| UiError::conflict(e.to_string()))?;
        Ok(http::redirect("/ui/operations?done=revoked"))
    };
    run.await.unwrap_or_else(|e| fail(&seen, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_and_digests_for_people() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(120), "120");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(1234567), "1,234,567");
        let d = crate::digest::Digest::sha256_of(b"x");
        let s = short(&d);
        assert!(s.starts_with("sha256:") && s.ends_with('…'));
        assert_eq!(s.chars().count(), "sha256:".len() + 13);
    }
}
