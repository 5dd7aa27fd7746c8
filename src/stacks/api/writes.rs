//! The writing side: cell reports, the admin actions (promote, rollout, rollback, state,
//! default) and custom-stack registration, each with a bounded JSON body.

use super::*;

/// Largest JSON body accepted.
pub(super) const MAX_BODY: usize = 64 * 1024;

pub(super) async fn json_body<T: serde::de::DeserializeOwned>(body: Body) -> Result<T> {
    let bytes = http_body_util::Limited::new(body, MAX_BODY)
        .collect()
        .await
        .map_err(|e| StackError::Invalid(format!("request body: {e}")))?
        .to_bytes();
    let bytes: &[u8] = if bytes.is_empty() { b"{}" } else { &bytes };
    serde_json::from_slice(bytes)
        .map_err(|e| StackError::Invalid(format!("request body: {e}")).into())
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ReportBody {
    pub(super) digest: Digest,
    #[serde(default)]
    pub(super) platform: Option<String>,
    #[serde(default)]
    pub(super) transfer: Option<cells::Transfer>,
}

pub(super) async fn report(
    ctx: &dyn Context,
    name: &StackName,
    cell: String,
    body: Body,
) -> Result<Response> {
    let b: ReportBody = json_body(body).await?;
    ctx.stacks().table(ctx.state()).await?.get(name)?;
    let r = CellReport {
        cell,
        digest: b.digest,
        platform: b.platform,
        time: now_rfc3339(),
        transfer: b.transfer,
    };
    ctx.stacks().release_lease(name, &r.cell);
    cells::record(&**ctx.state().blobstore(), name, &r).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RolloutBody {
    pub(super) percent: u8,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ReasonBody {
    #[serde(default)]
    pub(super) reason: Option<String>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct StateBody {
    pub(super) state: String,
    #[serde(default)]
    pub(super) reason: Option<String>,
}

/// Who an admin request is when no actor is in scope (the server's access
/// layer sets the authenticated user, see `state::audit`).
pub(super) const HTTP_ADMIN: &str = "admin (http)";

/// An admin action on `name`: the caller needs the admin permission on
/// every repository the stack names and, for a promotion, on those of the
/// images it promotes.
pub(super) async fn admin(
    ctx: &dyn Context,
    name: &StackName,
    action: Action,
    caller: &Caller<'_>,
    body: Body,
) -> Result<Response> {
    if !ctx.stacks().config.allow_admin {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "DENIED",
            "stack administration over HTTP is off: start airlock serve with --allow-admin ([stacks] allow_admin = true)",
        ));
    }
    let state = ctx.state();
    let who = crate::state::audit::current().map_or_else(|| HTTP_ADMIN.to_string(), |a| a.who);
    let who = who.as_str();
    let extra = match action {
        Action::Promote => {
            let mut req: PromoteRequest = json_body(body).await?;
            let named: Vec<String> = [
                Some(&req.image),
                req.build_image.as_ref(),
                req.run_image.as_ref(),
            ]
            .into_iter()
            .flatten()
            .map(|r| crate::stacks::image::repository_of(r))
            .collect();
            caller.named(name, Permission::Admin, &named)?;
            req.diff = crate::sbom::compare::promotion_diff(state, name, &req.image).await;
            let p = ops::promote(state, name, &req, who).await?;
            json!({ "promotion": p.promotion, "percent": p.percent, "generation": p.generation })
        }
        _ => return admin_action(ctx, name, action, who, body).await,
    };
    answer(ctx, name, extra).await
}

/// The rollout, rollback, state and default actions (authorized).
async fn admin_action(
    ctx: &dyn Context,
    name: &StackName,
    action: Action,
    who: &str,
    body: Body,
) -> Result<Response> {
    let state = ctx.state();
    let extra = match action {
        Action::Promote => json!({}),
        Action::Rollout => {
            let b: RolloutBody = json_body(body).await?;
            ops::rollout(state, name, b.percent, who).await?;
            json!({})
        }
        Action::Rollback => {
            let b: ReasonBody = json_body(body).await?;
            let reason = b.reason.unwrap_or_else(|| "rollback".into());
            let (to, _) = ops::rollback(state, name, &reason, who).await?;
            json!({ "promotion": to })
        }
        Action::State => {
            let b: StateBody = json_body(body).await?;
            let st: StackState = b.state.parse()?;
            ops::set_state(state, name, st, b.reason.as_deref().unwrap_or(""), who).await?;
            json!({})
        }
        Action::Default => {
            let _: ReasonBody = json_body(body).await?;
            ops::set_default(state, name, who).await?;
            json!({})
        }
    };
    answer(ctx, name, extra).await
}

/// The stack after an admin action, with the action's `result`.
async fn answer(ctx: &dyn Context, name: &StackName, extra: serde_json::Value) -> Result<Response> {
    let table = ctx.stacks().table(ctx.state()).await?;
    let stack = table.get(name)?;
    let mut v = stack.view(name, table.default.as_ref() == Some(name));
    if let (Some(o), Some(e)) = (v.as_object_mut(), extra.as_object()) {
        o.insert("result".into(), serde_json::Value::Object(e.clone()));
    }
    let mut res = axum::Json(v).into_response();
    warn(&mut res, name, stack);
    Ok(res)
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RegisterBody {
    pub(super) image: String,
    #[serde(default)]
    pub(super) description: String,
}

/// `POST /stacks/v1/<name>/register`: the caller (from the access layer's
/// audit scope) is an admin when it holds the admin role and the admin
/// routes are on (`allow_admin`); an anonymous caller is never a
/// registering user. The image must be in a repository the caller may read
/// (`repositories`, the user's repository prefixes).
pub(super) async fn register(
    ctx: &dyn Context,
    name: &StackName,
    repositories: &RepositoryScope,
    body: Body,
) -> Result<Response> {
    let b: RegisterBody = json_body(body).await?;
    let cfg = &ctx.stacks().config;
    let scope = crate::state::audit::current().unwrap_or_default();
    let admin = cfg.allow_admin && scope.admin;
    let actor = Actor {
        reader: admin || !matches!(scope.who.as_str(), "" | "anonymous" | crate::auth::OPEN_WHO),
        name: if scope.who.is_empty() {
            HTTP_ADMIN.into()
        } else {
            scope.who
        },
        admin,
    };
    let (image, c) = ops::register_custom(
        ctx.state(),
        name,
        &b.image,
        &b.description,
        &actor,
        cfg.custom_stacks,
        repositories,
    )
    .await?;
    Ok(axum::Json(json!({
        "name": name,
        "image": image,
        "custom": true,
        "generation": c.generation,
    }))
    .into_response())
}
