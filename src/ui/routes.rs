//! The console's routes: one page and one JSON document per view, the
//! admin forms, login and assets. Handlers are thin: read the query, call
//! one [`super::api`] function, answer with its JSON or its page.
//!
//! | page | JSON | shows |
//! | --- | --- | --- |
//! | `/ui/` | `/api/v1/overview` | store, generation, last import, GC, fsck, counts, health, recent events |
//! | `/ui/imports` | `/api/v1/imports?before=&limit=&all=` | generations (imports first), what each changed |
//! | `/ui/repositories` | `/api/v1/repositories?q=&after=&limit=` | repositories by name prefix |
//! | `/ui/repositories/NAME` | `/api/v1/repositories/NAME?after=&limit=&tag=` | tags, digests, media types, platforms, sizes, referrers, annotations, pull commands |
//! | `/ui/stacks` | `/api/v1/stacks` | every stack, its state and rollout |
//! | `/ui/stacks/NAME` | `/api/v1/stacks/NAME?lagging_after=&silent_after=&limit=` | promotions, rollout chart, lagging and silent cells |
//! | `/ui/torcx` | `/api/v1/torcx` | remotes, boards, OS versions, addon images |
//! | `/ui/operations` | `/api/v1/operations?quarantine_after=&limit=` | GC and fsck reports, quarantined blobs, users |
//!
//! Forms (admin, CSRF token, confirmation step): `POST /ui/stacks/NAME/
//! {promote,rollout,rollback,state}`, `POST /ui/imports/rollback`, `POST
//! /ui/operations/revoke`; `GET /api/v1/stacks/NAME/effect?
//! action=...` answers what such a change would do to the reporting cells.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, Uri};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Router};

use super::http::{self, UiError, Viewer};
use super::{Context, actions, api, assets, pages};
use crate::names::RepositoryName;
use crate::stacks::StackName;

type Ctx = State<Arc<dyn Context>>;
type Seen = axum::Extension<Viewer>;

/// Every console route, behind [`console`] (404 when `[ui]` is off).
pub fn router(ctx: Arc<dyn Context>) -> Router {
    Router::new()
        .route("/ui", get(|| async { http::redirect("/ui/") }))
        .route("/ui/", get(overview))
        .route(
            "/ui/login",
            get(pages::login::form).post(pages::login::submit),
        )
        .route("/ui/logout", post(pages::login::logout))
        .route("/ui/assets/{file}", get(assets::serve))
        .route("/ui/imports", get(imports))
        .route("/ui/imports/rollback", post(actions::state_rollback))
        .route("/ui/repositories", get(repositories))
        .route("/ui/repositories/{*name}", get(repository))
        .route("/ui/stacks", get(stacks))
        .route("/ui/stacks/{name}", get(stack))
        .route("/ui/stacks/{name}/promote", post(actions::stack_form::<0>))
        .route("/ui/stacks/{name}/rollout", post(actions::stack_form::<1>))
        .route("/ui/stacks/{name}/rollback", post(actions::stack_form::<2>))
        .route("/ui/stacks/{name}/state", post(actions::stack_form::<3>))
        .route("/ui/torcx", get(torcx))
        .route("/ui/operations", get(operations))
        .route("/ui/operations/revoke", post(actions::revoke_user))
        .route("/api/v1/overview", get(overview))
        .route("/api/v1/imports", get(imports))
        .route("/api/v1/repositories", get(repositories))
        .route("/api/v1/repositories/{*name}", get(repository))
        .route("/api/v1/stacks", get(stacks))
        .route("/api/v1/stacks/{name}", get(stack))
        .route("/api/v1/stacks/{name}/effect", get(actions::effect_handler))
        .route("/api/v1/torcx", get(torcx))
        .route("/api/v1/operations", get(operations))
        .route("/api/v1/session", get(session))
        .layer(axum::middleware::from_fn_with_state(ctx.clone(), console))
        .with_state(ctx)
}

use crate::server::access::is_page;

/// `303` to the login form, coming back to `uri` after it.
pub fn login_redirect(uri: &Uri) -> Response {
    let next = uri
        .path_and_query()
        .map_or("/ui/", axum::http::uri::PathAndQuery::as_str);
    let next: String = form_urlencoded::byte_serialize(next.as_bytes()).collect();
    let mut res = http::redirect(&format!("/ui/login?next={next}"));
    http::secure(&mut res);
    res
}

/// The middleware of every console route: 404 when the console is off;
/// the [`Viewer`] (actor and scope from the access layer, the session from
/// its cookie; a page visit without one gets an anonymous session, so its
/// forms have a CSRF token); the security headers on every answer.
async fn console(State(ctx): Ctx, mut req: Request, next: Next) -> Response {
    let Some(ui) = ctx.console() else {
        return UiError::not_found("the console is off ([ui] enabled = false)").into_response();
    };
    let actor = crate::state::audit::current().unwrap_or_default();
    let scope = req
        .extensions()
        .get::<crate::registry::scope::RepositoryScope>()
        .cloned()
        .unwrap_or_default();
    let grant = req
        .extensions()
        .get::<crate::auth::Grant>()
        .cloned()
        .unwrap_or_else(|| anonymous_grant(&*ctx));
    let tls = req
        .extensions()
        .get::<crate::server::tls::OverTls>()
        .is_some();
    let store = ctx.state().blobstore().clone();
    let mut session = ui.sessions.open(&*store, req.headers(), tls).await;
    let mut cookie = None;
    let path = req.uri().path();
    if session.is_none() && is_page(path) && !path.starts_with("/ui/assets/") {
        match ui.sessions.start(&*store, None).await {
            Ok((s, c)) => {
                session = Some(s);
                cookie = Some(c);
            }
            Err(e) => return UiError::internal(e).into_response(),
        }
    }
    let viewer = Viewer {
        who: if actor.who.is_empty() {
            "anonymous".into()
        } else {
            actor.who
        },
        grant,
        open: ctx.policy().is_open(),
        scope,
        session,
        // HTTP/1.1 `Host`, else HTTP/2's `:authority` (in the URI).
        host: req
            .headers()
            .get(axum::http::header::HOST)
            .and_then(|h| h.to_str().ok())
            .map(str::to_string)
            .or_else(|| req.uri().authority().map(|a| a.as_str().to_string())),
    };
    req.extensions_mut().insert(viewer);
    let mut res = next.run(req).await;
    http::secure(&mut res);
    if tls {
        res.headers_mut().insert(
            axum::http::header::STRICT_TRANSPORT_SECURITY,
            axum::http::HeaderValue::from_static("max-age=31536000"),
        );
    }
    if let Some(c) = cookie
        && !res.headers().contains_key(axum::http::header::SET_COOKIE)
    {
        res.headers_mut().insert(axum::http::header::SET_COOKIE, c);
    }
    res
}

/// The grant of a request the access layer let through without one (a
/// public route such as the login form): everything when the server has
/// no users, else nothing but an anonymous caller's.
fn anonymous_grant(ctx: &dyn Context) -> crate::auth::Grant {
    let policy = ctx.policy();
    crate::auth::Grant::of(&policy, crate::auth::Principal::Anonymous)
}

/// The page of `model` for `/ui/...`, its JSON for `/api/v1/...`; an
/// error as a page or as `{"code","message"}` likewise.
fn answer<T: serde::Serialize>(
    uri: &Uri,
    viewer: &Viewer,
    model: Result<T, UiError>,
    page: impl FnOnce(&T) -> maud::Markup,
) -> Response {
    let html = is_page(uri.path());
    match (model, html) {
        (Ok(m), true) => pages::html(page(&m)),
        (Ok(m), false) => axum::Json(m).into_response(),
        (Err(e), true) => pages::error_page(viewer, &e),
        (Err(e), false) => e.into_response(),
    }
}

async fn overview(State(ctx): Ctx, seen: Seen, uri: Uri) -> Response {
    let model = api::overview::build(&*ctx, &seen).await;
    answer(&uri, &seen, model, |m| pages::overview::page(&seen, m))
}

async fn imports(State(ctx): Ctx, seen: Seen, uri: Uri) -> Response {
    let q = http::query(&uri);
    let model = async {
        let before = match q.get("before") {
            Some(b) => Some(
                b.parse::<u64>()
                    .map_err(|_| UiError::invalid("before must be a generation number"))?,
            ),
            None => None,
        };
        let all = q.get("all").is_some_and(|v| v == "1" || v == "true");
        api::imports::build(&*ctx, &seen, before, http::limit(&q, 25, 200)?, all).await
    }
    .await;
    answer(&uri, &seen, model, |m| pages::imports::page(&seen, m))
}

async fn repositories(State(ctx): Ctx, seen: Seen, uri: Uri) -> Response {
    let q = http::query(&uri);
    let model = async {
        let limit = http::limit(&q, 50, 1000)?;
        api::repos::list(&*ctx, &seen, q.get("q"), q.get("after"), limit).await
    }
    .await;
    answer(&uri, &seen, model, |m| pages::repos::list(&seen, m))
}

// The handlers of named pages take the names the access layer parsed (its
// request extensions: `server::routes::Params::hand_on`), never the path.

async fn repository(
    State(ctx): Ctx,
    seen: Seen,
    uri: Uri,
    Extension(name): Extension<RepositoryName>,
) -> Response {
    let q = http::query(&uri);
    let model = async {
        let limit = http::limit(&q, 50, 1000)?;
        let page = api::repos::Paging {
            after: q.get("after").cloned(),
            limit,
            tag: q.get("tag").cloned(),
        };
        api::repos::show(&*ctx, &seen, &name, &page).await
    }
    .await;
    answer(&uri, &seen, model, |m| pages::repos::show(&seen, m))
}

async fn stacks(State(ctx): Ctx, seen: Seen, uri: Uri) -> Response {
    let model = api::stacks::list(&*ctx, &seen).await;
    answer(&uri, &seen, model, |m| pages::stacks::list(&seen, m))
}

async fn stack(
    State(ctx): Ctx,
    seen: Seen,
    uri: Uri,
    Extension(name): Extension<StackName>,
) -> Response {
    let q = http::query(&uri);
    let model = async {
        let paging = api::stacks::Paging {
            lagging_after: q.get("lagging_after").cloned(),
            silent_after: q.get("silent_after").cloned(),
            limit: http::limit(&q, 50, 1000)?,
        };
        api::stacks::show(&*ctx, &seen, &name, &paging).await
    }
    .await;
    let done = q.get("done").cloned();
    answer(&uri, &seen, model, |m| {
        pages::stacks::show(&seen, m, done.as_deref())
    })
}

async fn torcx(State(ctx): Ctx, seen: Seen, uri: Uri) -> Response {
    let model = api::torcx::build(&*ctx, &seen).await;
    answer(&uri, &seen, model, |m| pages::torcx::page(&seen, m))
}

async fn operations(State(ctx): Ctx, seen: Seen, uri: Uri) -> Response {
    let q = http::query(&uri);
    let model = async {
        let limit = http::limit(&q, 50, 1000)?;
        api::operations::build(&*ctx, &seen, q.get("quarantine_after"), limit).await
    }
    .await;
    let done = q.get("done").cloned();
    answer(&uri, &seen, model, |m| {
        pages::operations::page(&seen, m, done.as_deref())
    })
}

/// `GET /api/v1/session`: who the console thinks the caller is.
async fn session(seen: Seen) -> Response {
    axum::Json(serde_json::json!({
        "who": seen.who,
        "admin": seen.admin(),
        "open": seen.open,
        "logged_in": seen.logged_in(),
    }))
    .into_response()
}

/// A form's fields after the CSRF check ([`http::check_csrf`]).
///
/// Errors: not a form (400), cross-site or without the token (403).
pub(super) async fn checked_form(
    seen: &Viewer,
    headers: &HeaderMap,
    body: Body,
) -> Result<std::collections::BTreeMap<String, String>, UiError> {
    let form = http::form(headers, body).await?;
    http::check_csrf(seen, headers, &form)?;
    Ok(form)
}
