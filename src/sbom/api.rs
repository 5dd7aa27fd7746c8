//! `GET /api/v1/vulns`: vulnerability reports as JSON for scripts and the
//! web console.
//!
//! | request | answer |
//! | --- | --- |
//! | `GET /api/v1/vulns?image=REPO:TAG` (or `REPO@DIGEST`) | [`super::report::VulnReport`] of the image |
//! | `GET /api/v1/vulns?stack=NAME` | the report of the stack's active promotion |
//! | `GET /api/v1/vulns?digest=D` | the lifecycle of `D` with `reason` and `fixes` (what a restage fixes) |
//! | `GET /api/v1/vulns` | the imported feeds with their dates and ages |
//!
//! Errors: `{"code","message"}`: 400 `INVALID` (no or several of
//! image/stack/digest, a malformed digest), 404 `NOT_FOUND` (unknown
//! image or stack), 403 `DENIED` (the image, or an image the stack
//! names, is in a repository the user may not pull: [`crate::auth::Grant`]),
//! 500 `INTERNAL`. Readers may ask (the access layer treats `/api/v1` as it
//! treats reads). Thin: each request is one call of [`super::report`].

use std::sync::Arc;

use axum::Router;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::json;

use crate::auth::Grant;
use crate::state::StateStore;

/// What the router needs from the composition root.
pub trait Context: Send + Sync + 'static {
    /// The state to read.
    fn state(&self) -> &StateStore;
}

/// The query of `GET /api/v1/vulns`.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VulnsQuery {
    /// `REPO:TAG` or `REPO@DIGEST`.
    pub image: Option<String>,
    /// A stack name.
    pub stack: Option<String>,
    /// A digest for its lifecycle.
    pub digest: Option<String>,
}

fn error(status: StatusCode, code: &str, message: String) -> Response {
    (
        status,
        axum::Json(json!({"code": code, "message": message})),
    )
        .into_response()
}

fn failed(e: anyhow::Error) -> Response {
    let message = format!("{e:#}");
    let not_found = e.chain().any(|c| {
        matches!(
            c.downcast_ref::<crate::stacks::StackError>(),
            Some(crate::stacks::StackError::NotFound(_) | crate::stacks::StackError::Invalid(_))
        )
    }) || message.contains("is not a promoted stack");
    if not_found {
        error(StatusCode::NOT_FOUND, "NOT_FOUND", message)
    } else if let Some(secs) = crate::store::retry_after_in(&e) {
        let mut res = error(StatusCode::SERVICE_UNAVAILABLE, "UNAVAILABLE", message);
        res.headers_mut()
            .insert(axum::http::header::RETRY_AFTER, secs.into());
        res
    } else {
        error(StatusCode::INTERNAL_SERVER_ERROR, "INTERNAL", message)
    }
}

/// 403 unless `grant` may pull every repository of `repos`.
fn check(grant: &Grant, what: &str, repos: &[String]) -> Result<(), Box<Response>> {
    if grant.allows(crate::auth::Permission::Pull, repos) {
        return Ok(());
    }
    Err(Box::new(error(
        StatusCode::FORBIDDEN,
        "DENIED",
        format!(
            "{what} names repositories outside this user's: {}",
            repos.join(", ")
        ),
    )))
}

/// The repositories the stack `name` names (none for an unknown stack:
/// the report then answers 404).
async fn stack_repositories(state: &StateStore, name: &str) -> Vec<String> {
    let (Ok(name), Ok(table)) = (
        name.parse::<crate::stacks::StackName>(),
        crate::stacks::ops::load(state).await,
    ) else {
        return Vec::new();
    };
    table.repositories(&name)
}

async fn vulns<C: Context>(
    State(app): State<Arc<C>>,
    grant: Option<axum::Extension<Grant>>,
    q: Result<Query<VulnsQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let grant = grant.map(|g| g.0).unwrap_or_default();
    let Ok(Query(q)) = q else {
        return error(
            StatusCode::BAD_REQUEST,
            "INVALID",
            "query: image=, stack= or digest=".into(),
        );
    };
    let state = app.state();
    match (q.image, q.stack, q.digest) {
        (None, None, None) => match super::feed::import::load(state).await {
            Ok(t) => axum::Json(json!({"feeds": super::report::feeds(&t)})).into_response(),
            Err(e) => failed(e),
        },
        (Some(t), None, None) | (None, Some(t), None) => {
            let repos = match super::report::resolve(state, &t).await {
                Ok((image, Some((name, _)))) => {
                    let mut r = stack_repositories(state, name.as_str()).await;
                    r.push(image.repository.to_string());
                    r
                }
                Ok((image, None)) => vec![image.repository.to_string()],
                Err(e) => return failed(e),
            };
            if let Err(denied) = check(&grant, &t, &repos) {
                return *denied;
            }
            match super::report::vulns(state, &t).await {
                Ok(r) => axum::Json(r).into_response(),
                Err(e) => failed(e),
            }
        }
        (None, None, Some(d)) => {
            let Ok(digest) = d.parse::<crate::digest::Digest>() else {
                return error(
                    StatusCode::BAD_REQUEST,
                    "INVALID",
                    format!("{d:?} is not a digest"),
                );
            };
            let table = match crate::stacks::ops::load(state).await {
                Ok(t) => t,
                Err(e) => return failed(e.into()),
            };
            let l = crate::stacks::lifecycle::lifecycle(&table, &digest);
            if let Some(stack) = &l.stack
                && let Err(denied) = check(&grant, stack.as_str(), &table.repositories(stack))
            {
                return *denied;
            }
            match super::report::lifecycle_reason(state, &l).await {
                Ok(r) => {
                    let mut v = serde_json::to_value(&l).unwrap_or_default();
                    if let Some((reason, fixes)) = r {
                        v["reason"] = reason.into();
                        v["fixes"] = fixes.into();
                    }
                    axum::Json(v).into_response()
                }
                Err(e) => failed(e),
            }
        }
        _ => error(
            StatusCode::BAD_REQUEST,
            "INVALID",
            "give one of image=, stack= or digest=".into(),
        ),
    }
}

/// The `/api/v1/vulns` route.
pub fn router<C: Context>(app: Arc<C>) -> Router {
    Router::new()
        .route("/api/v1/vulns", get(vulns::<C>))
        .with_state(app)
}
