//! The access layer: one middleware in front of every route that enforces
//! the route's declaration in [`super::routes::ROUTES`] (who may do what,
//! on which resources) before any handler runs.
//!
//! Owns: finding the principal of a request (a verified client
//! certificate's CN/SAN that names a user, else, on the console's paths, a
//! console session ([`ConsoleSessions`]), else HTTP Basic credentials, else
//! anonymous), failed-login throttling per client address and per (user,
//! address) (429 `TOOMANYREQUESTS` with `Retry-After`), resolving what a
//! route touches (a repository, every image of a stack, a cell, the stack
//! of a digest or of a chunk, a torcx remote, every repository) and asking
//! [`crate::auth::Grant::allows`] about it, the answers of
//! distribution-spec "Authentication": 401 `UNAUTHORIZED` with
//! `WWW-Authenticate: Basic realm="airlock"` (docker, containerd, podman
//! and skopeo then send credentials) and 403 `DENIED` for a known user
//! without the permission, 404 for a request no route declares (405 with
//! `Allow` for an undeclared method), the per-user upload-session and
//! upload-byte caps (413 `DENIED` past `max_upload_bytes_per_user`: a body
//! is counted chunk by chunk as the registry reads it), the caller's
//! [`crate::auth::Grant`] and repository scope handed to the rooms as
//! request extensions (lists filter with them; resources named only in a
//! body are checked with the grant as they are read), the path's typed
//! names ([`routes::Params`], the one parse of the request:
//! [`routes::find`], or the listener's [`Matched`]) checked and handed on
//! to the handler as request extensions, a name that does not parse
//! refused before anything else ([`Found::Invalid`]), and the audit actor:
//! every request that may change state runs inside [`audit::scope`] with
//! the user and the client address. Registry reads (`GET`/`HEAD` under
//! `/v2/`) with no users configured skip all of it (the hot path of pulls).
//! Never imports the console: the console sits on top of this layer and
//! hands it its sessions through [`ConsoleSessions`].

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use axum::extract::Request;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use futures_util::StreamExt as _;
use futures_util::future::BoxFuture;
use serde_json::json;

use super::App;
use super::routes::{self, Found, Need, Params, Switch, Touches};
use super::tls::ClientCertNames;
use super::trace::ClientAddr;
use crate::auth::{self, Grant, Permission, Principal};
use crate::names::RepositoryName;
use crate::registry::errors::{ErrorCode, RegistryError};
use crate::registry::responses::{API_VERSION, DOCKER_DISTRIBUTION_API_VERSION};
use crate::registry::routes::Route as RegistryRoute;
use crate::registry::scope::RepositoryScope;
use crate::registry::uploads::Uploader;
use crate::stacks::StackName;
use crate::stacks::api::Route as StacksRoute;
use crate::state::{Actor, StateStore, audit};

/// What the console gives the access layer: who a session cookie names,
/// and where an anonymous visitor of a page goes. Implemented by the
/// console (`ui::Console`); the access layer never imports it.
pub trait ConsoleSessions: Send + Sync {
    /// The user the request's session cookie names, as configured now
    /// (`None`: no valid logged-in session for this listener, or the user
    /// is gone or changed since login). `tls`: the request came over TLS.
    fn user<'a>(
        &'a self,
        policy: &'a auth::Policy,
        state: &'a StateStore,
        headers: &'a HeaderMap,
        tls: bool,
    ) -> BoxFuture<'a, Option<auth::User>>;

    /// The answer to an anonymous visitor of a console page: the login form.
    fn login_redirect(&self, uri: &Uri) -> Response;
}

/// Whether `path` is one of the console's (the only paths a session
/// cookie counts on).
pub fn is_console_path(path: &str) -> bool {
    path == "/ui" || path.starts_with("/ui/") || path == "/api/v1" || path.starts_with("/api/v1/")
}

/// What a route touches: the permission, and the typed names the path
/// holds ([`routes::Params`], the one parse of the request: the same
/// values go on to the handler).
struct Target<'a> {
    permission: Permission,
    touches: Touches,
    anonymous: bool,
    params: &'a Params,
    /// The repository a registry write goes to (`?ns=` applied), else the
    /// path's.
    repo: Option<RepositoryName>,
}

impl Target<'_> {
    fn stack(&self) -> Option<&StackName> {
        self.params.stack()
    }

    fn cell(&self) -> Option<&str> {
        match self.params {
            Params::Stacks(StacksRoute::Cell(_, id)) => Some(id),
            _ => None,
        }
    }

    fn digest(&self) -> Option<&crate::digest::Digest> {
        match self.params {
            Params::Stacks(StacksRoute::Lifecycle(d)) => Some(d),
            _ => None,
        }
    }

    fn chunk(&self) -> Option<&crate::chunks::ChunkId> {
        match self.params {
            Params::Stacks(StacksRoute::Chunk(id)) => Some(id),
            _ => None,
        }
    }

    fn remote(&self) -> Option<&str> {
        match self.params {
            Params::Torcx(f) => Some(&f.remote),
            _ => None,
        }
    }
}

/// Middleware (see `super::front`): enforces the route's declaration, then
/// runs the request as its actor, with the caller's [`Grant`] and
/// [`RepositoryScope`] as request extensions.
///
/// A registry read with no users configured skips all of it: `next`'s own
/// future is returned, with nothing around it; every other request runs
/// in a boxed future (its size stays out of the pulls' futures).
pub fn check<F>(
    app: Arc<App>,
    req: Request,
    next: impl FnOnce(Request) -> F,
) -> futures_util::future::Either<F, std::pin::Pin<Box<impl Future<Output = Response>>>>
where
    F: Future<Output = Response>,
{
    use futures_util::future::Either;
    if app.auth.load().is_open() && registry_read(&req) {
        // A registry read never commits: no actor to record (and no client
        // address to format on the hot path of pulls).
        return Either::Left(next(req));
    }
    Either::Right(Box::pin(check_declared(app, req, next)))
}

/// [`check`] of a request that is not an open registry read.
async fn check_declared<F>(app: Arc<App>, req: Request, next: impl FnOnce(Request) -> F) -> Response
where
    F: Future<Output = Response>,
{
    let client = req.extensions().get::<ClientAddr>().map(|c| c.0);
    let policy = app.auth.load();
    let mut req = req;
    // The listener may have read the route already (a request with a body:
    // its pace depends on the endpoint); else it is read here, once.
    let found = match req.extensions_mut().remove::<Matched>() {
        Some(Matched(pattern, params)) => routes::select(req.method(), pattern, params),
        None => routes::find(req.method(), req.uri().path()),
    };
    let path = req.uri().path();
    let (need, params, writes) = match found {
        Found::Route(route, params) => (route.need, params, route.writes(req.method())),
        Found::Method(_, params) if path.starts_with("/v2/") => {
            (routes::REGISTRY_OTHER_METHODS, params, false)
        }
        Found::Method(allow, _) => return finish(method_not_allowed(path, &allow), path),
        Found::None => return finish(no_route(path), path),
        Found::Invalid(res) => return finish(*res, path),
    };
    let Need::Grant {
        permission,
        touches,
        anonymous,
        public_when,
    } = need
    else {
        params.hand_on(req.extensions_mut());
        return next(req).await;
    };
    let repo = match write_target(&req, &params) {
        Ok(r) => r,
        Err(e) => return finish(e.into_response(), req.uri().path()),
    };
    let target = Target {
        permission,
        touches,
        anonymous,
        params: &params,
        repo,
    };
    let address = client.map(|a| a.to_string());
    if policy.is_open() {
        if let Some(res) = held_back(&app, writes) {
            return finish(res, req.uri().path());
        }
        let actor = Actor {
            who: auth::OPEN_WHO.into(),
            address,
            admin: true,
        };
        params.hand_on(req.extensions_mut());
        return audit::scope(actor, next(req)).await;
    }
    let public = match public_when {
        Some(Switch::TorcxPublic) => app.torcx.public(),
        Some(Switch::PublicMetrics) => policy.public_metrics,
        None => false,
    };
    if public {
        params.hand_on(req.extensions_mut());
        return next(req).await;
    }
    let ip = client.map_or_else(|| "-".to_string(), |a| a.ip().to_string());
    let names = req.extensions().get::<ClientCertNames>().cloned();
    let tls = app.tls_request(&req);
    let caller = Caller {
        headers: req.headers(),
        path: req.uri().path(),
        names: names.as_ref(),
        tls,
        ip: &ip,
    };
    let principal = match Box::pin(principal(&app, &policy, &caller)).await {
        Ok(p) => p,
        Err(res) => return finish(res, req.uri().path()),
    };
    let grant = Grant::of(&policy, principal.clone());
    if let Some(res) = Box::pin(authorize(&app, &grant, &target, req.uri())).await {
        if let Principal::User(u) = &principal {
            tracing::info!(user = %u.name, client = %ip, path = %req.uri().path(), "access denied");
        }
        return finish(res, req.uri().path());
    }
    if let Some(res) = held_back(&app, writes) {
        return finish(res, req.uri().path());
    }
    let who = principal_name(&principal);
    let scope = match &principal {
        Principal::User(u) if !u.repositories.is_empty() => {
            let u = u.clone();
            RepositoryScope::limited(move |repo| u.may(Permission::Pull, Some(repo)))
        }
        _ => RepositoryScope::all(),
    };
    let admin = grant.allows::<&str>(Permission::Admin, &[]);
    let upload = upload_body(req.method(), &params);
    params.hand_on(req.extensions_mut());
    req.extensions_mut().insert(scope);
    req.extensions_mut().insert(Uploader(who.clone()));
    req.extensions_mut().insert(grant);
    let quota = match upload {
        true if app.uploads.user_byte_cap() > 0 => {
            let cap = app.uploads.user_byte_cap();
            if let Some(len) = crate::registry::upload::declared_length(req.headers())
                && app.uploads.held_by(&who).saturating_add(len) > cap
            {
                return finish(over_quota(&app, &who), req.uri().path());
            }
            let (metered, quota) = Quota::meter(app.clone(), &who, req);
            req = metered;
            Some(quota)
        }
        _ => None,
    };
    let actor = Actor {
        who: who.clone(),
        address,
        admin,
    };
    let path = req.uri().path().to_string();
    let res = audit::scope(actor, next(req)).await;
    if quota.is_some_and(Quota::finish) {
        return finish(over_quota(&app, &who), &path);
    }
    res
}

/// The path of a request as the listener read it ahead of the access
/// layer (a request with a body, whose pace depends on the endpoint:
/// [`Matched::read`]), handed to [`check`] as a request extension so that
/// the path is parsed once: the rows' pattern and the typed parameters.
#[derive(Debug, Clone)]
pub struct Matched(pub &'static str, pub Params);

impl Matched {
    /// Reads `path` ([`routes::read`]); `None` when it matches no row or a
    /// name in it does not parse (the access layer then reads it again to
    /// answer the refusal).
    pub fn read(method: &Method, path: &str) -> Option<Matched> {
        routes::read(method, path)
            .ok()
            .flatten()
            .map(|(pattern, params)| Matched(pattern, params))
    }

    /// Whether it is a manifest PUT (its body has a deadline of its own).
    pub fn is_manifest_put(&self, method: &Method) -> bool {
        *method == Method::PUT && matches!(self.1, Params::Registry(RegistryRoute::Manifest { .. }))
    }
}

/// What the principal of a request is found from.
struct Caller<'a> {
    headers: &'a HeaderMap,
    path: &'a str,
    names: Option<&'a ClientCertNames>,
    tls: bool,
    ip: &'a str,
}

/// The principal of a request: a client certificate naming a user, else
/// (on the console's paths) a console session, else Basic credentials.
async fn principal(
    app: &App,
    policy: &auth::Policy,
    c: &Caller<'_>,
) -> Result<Principal, Response> {
    if let Some(names) = c.names
        && let Some(u) = policy.user_for_certificate(&names.0)
    {
        return Ok(Principal::User(u.clone()));
    }
    if let Some(sessions) = app.console_sessions()
        && is_console_path(c.path)
        && let Some(u) = sessions.user(policy, &app.state, c.headers, c.tls).await
    {
        return Ok(Principal::User(u));
    }
    let authorization = c.headers.get(header::AUTHORIZATION).cloned();
    identify(app, authorization, c.ip).await
}

/// `None` when `grant` may do what `target` needs; else the answer: 401
/// (or the console's login form) for an anonymous caller, 403 `DENIED`
/// for a user, 404 for a chunk outside what the caller may read.
async fn authorize(app: &App, grant: &Grant, t: &Target<'_>, uri: &Uri) -> Option<Response> {
    let anonymous = grant.user().is_none();
    let refuse = || {
        if anonymous {
            match app.console_sessions() {
                Some(s) if is_page(uri.path()) => s.login_redirect(uri),
                _ => unauthorized("authentication required"),
            }
        } else {
            denied(grant, t)
        }
    };
    if anonymous && !t.anonymous {
        return Some(refuse());
    }
    // A declaration names what the path must hold; a path without it is
    // refused (fail closed), never checked as naming nothing.
    let missing = |what: &str| {
        tracing::error!(path = %uri.path(), what, "route declaration names a parameter the path lacks");
        Some(internal(format!("the route has no {what}")))
    };
    let resources: Vec<String> = match t.touches {
        Touches::Nothing | Touches::Listed | Touches::Named | Touches::Resolved => Vec::new(),
        Touches::Repository => match &t.repo {
            Some(r) => vec![r.to_string()],
            None => return missing("repository"),
        },
        Touches::StackImages | Touches::StackAndNamed | Touches::Cell => {
            let Some(stack) = t.stack() else {
                return missing("stack");
            };
            match app.stacks.table(&app.state).await {
                Ok(table) => table.repositories(stack),
                Err(e) => return Some(unread(e)),
            }
        }
        Touches::Lifecycle => {
            let Some(digest) = t.digest() else {
                return missing("digest");
            };
            let table = match app.stacks.table(&app.state).await {
                Ok(t) => t,
                Err(e) => return Some(unread(e)),
            };
            match crate::stacks::lifecycle::lifecycle(&table, digest).stack {
                Some(stack) => table.repositories(&stack),
                None => Vec::new(),
            }
        }
        Touches::Remote => match t.remote() {
            Some(r) => vec![format!("torcx/{r}")],
            None => return missing("remote"),
        },
        Touches::Everything => {
            return (!grant.allows_everywhere(t.permission)).then(refuse);
        }
        Touches::Chunk => return chunk(app, grant, t).await.then(refuse),
    };
    if !grant.allows(t.permission, &resources) {
        return Some(refuse());
    }
    if t.touches == Touches::Cell {
        let Some(cell) = t.cell() else {
            return missing("cell");
        };
        if !grant.may_report_for(cell) {
            return Some(
                RegistryError::with_message(
                    ErrorCode::Denied,
                    "this credential may not report for that cell (the user's cells)",
                    json!({ "user": grant.user(), "cell": cell }),
                )
                .into_response(),
            );
        }
    }
    None
}

/// Whether `grant` may not read the chunk of `t` (true: refuse). A chunk
/// no stack the caller may read uses answers 404, as an absent one does.
async fn chunk(app: &App, grant: &Grant, t: &Target<'_>) -> bool {
    if grant.allows_everywhere(t.permission) {
        return false;
    }
    if grant.user().is_none() {
        return true;
    }
    let Some(id) = t.chunk() else {
        return true;
    };
    let (Ok(stacks), Ok(table)) = (
        app.stacks.stacks_using_chunk(&app.state, id).await,
        app.stacks.table(&app.state).await,
    ) else {
        return true;
    };
    !stacks
        .iter()
        .any(|s| grant.allows(t.permission, &table.repositories(s)))
}

/// The repository a request touches: for a registry write, where `?ns=`
/// sends it (as the registry applies it); else the path's.
///
/// Errors: 400 `NAME_INVALID` when `?ns=` makes no repository name.
fn write_target(req: &Request, params: &Params) -> Result<Option<RepositoryName>, RegistryError> {
    let Some(name) = params.repository() else {
        return Ok(None);
    };
    if !matches!(params, Params::Registry(_)) {
        return Ok(Some(name.clone()));
    }
    let ns = crate::registry::query::QueryParams::from_uri(req.uri())
        .get("ns")
        .map(str::to_string);
    crate::registry::namespace::write_target(ns.as_deref(), name).map(Some)
}

/// 403 `DENIED` naming the user and what was asked for.
fn denied(grant: &Grant, t: &Target<'_>) -> Response {
    if t.touches == Touches::Chunk
        && let Some(id) = t.chunk()
    {
        return crate::stacks::api::chunk_not_found(id);
    }
    RegistryError::new(
        ErrorCode::Denied,
        json!({
            "user": grant.user(),
            "repository": t.repo,
            "stack": t.stack(),
            "remote": t.remote(),
        }),
    )
    .into_response()
}

/// 503 `UNAVAILABLE` with `Retry-After` for a write (`writes`, from the
/// route's declaration: [`routes::Route::writes`]) while the store's write lock is
/// held ([`crate::ops::write_lock`]); `None` otherwise. Checked after the
/// caller is authorized, so a refusal tells nothing to who may not write.
fn held_back(app: &App, writes: bool) -> Option<Response> {
    if !writes {
        return None;
    }
    let lock = app.write_lock.held()?;
    let mut res = RegistryError::with_message(
        ErrorCode::Unavailable,
        "writes are paused while a backup holds the write lock; retry later",
        json!({ "lock": lock.describe(), "holder": lock.holder, "reason": lock.reason, "since": lock.taken }),
    )
    .into_response();
    res.headers_mut().insert(
        header::RETRY_AFTER,
        HeaderValue::from(crate::ops::write_lock::RETRY_AFTER_SECS),
    );
    Some(res)
}

fn internal(e: impl std::fmt::Display) -> Response {
    tracing::error!(error = %e, "access check failed: the state cannot be read");
    RegistryError::Internal(e.to_string()).into_response()
}

/// The stack table could not be read for the access check: as the
/// registry answers a state error (503 with `Retry-After` for an
/// unavailable object store or damage, else 500).
fn unread(e: crate::stacks::StackError) -> Response {
    match e {
        crate::stacks::StackError::State(s) => RegistryError::from(s).into_response(),
        other => internal(other),
    }
}

/// 404 for a path no route declares (under `/v2`: the registry's
/// `NAME_UNKNOWN` "no such endpoint").
fn no_route(path: &str) -> Response {
    if path == "/v2" || path.starts_with("/v2/") {
        return RegistryError::NoEndpoint.into_response();
    }
    if path == "/torcx" || path.starts_with("/torcx/") {
        return crate::torcx::api::not_a_remote_path().into_response();
    }
    let mut res = (
        StatusCode::NOT_FOUND,
        axum::Json(json!({ "code": "NOT_FOUND", "message": format!("no endpoint {path}") })),
    )
        .into_response();
    res.extensions_mut()
        .insert(crate::registry::errors::LoggedCode("NOT_FOUND"));
    res
}

/// 405 with `Allow` for a method no route declares on `path` (outside
/// `/v2/`, whose registry answers its own: [`routes::REGISTRY_OTHER_METHODS`]).
fn method_not_allowed(path: &str, allow: &[&str]) -> Response {
    let allow = allow.join(", ");
    let mut headers = HeaderMap::new();
    if let Ok(v) = HeaderValue::from_str(&allow) {
        headers.insert(header::ALLOW, v);
    }
    if path == "/v2" {
        return RegistryError::Status {
            status: StatusCode::METHOD_NOT_ALLOWED,
            code: ErrorCode::Unsupported,
            detail: json!({ "allow": allow }),
            headers: Box::new(headers),
        }
        .into_response();
    }
    let mut res = (
        StatusCode::METHOD_NOT_ALLOWED,
        axum::Json(json!({ "code": "UNSUPPORTED", "message": format!("allowed: {allow}") })),
    )
        .into_response();
    res.headers_mut().extend(headers);
    res
}

/// Whether `path` is a console page (HTML: an anonymous visitor is sent to
/// the login form rather than answered 401).
pub fn is_page(path: &str) -> bool {
    path == "/ui" || path.starts_with("/ui/")
}

/// A GET or HEAD under `/v2/`: the registry's reads (pull, tags, catalog,
/// referrers, upload progress), which never change state.
fn registry_read(req: &Request) -> bool {
    matches!(*req.method(), Method::GET | Method::HEAD) && req.uri().path().starts_with("/v2/")
}

fn principal_name(p: &Principal) -> String {
    match p {
        Principal::User(u) => u.name.clone(),
        Principal::Anonymous => "anonymous".into(),
    }
}

/// 413 `DENIED`: the user's upload bytes would pass `max_upload_bytes_per_user`.
fn over_quota(app: &App, who: &str) -> Response {
    let cap = app.uploads.user_byte_cap();
    tracing::warn!(user = %who, cap, "upload refused: per-user upload bytes");
    RegistryError::Status {
        status: axum::http::StatusCode::PAYLOAD_TOO_LARGE,
        code: ErrorCode::Denied,
        detail: json!({
            "user": who,
            "reason": format!(
                "upload quota: user {who} would hold more than {cap} bytes in open upload sessions \
                 (limits.max_upload_bytes_per_user); finish or cancel uploads first"
            ),
            "held": app.uploads.held_by(who),
            "max": cap,
        }),
        headers: Box::default(),
    }
    .into_response()
}

/// The bytes of one upload request body, counted against its user's
/// byte cap chunk by chunk as the registry reads them.
struct Quota {
    app: Arc<App>,
    who: String,
    reserved: Arc<AtomicU64>,
    refused: Arc<AtomicBool>,
}

impl Quota {
    /// `req` with its body metered: a chunk that would pass the cap fails
    /// the body (the registry stores nothing of it) and marks the quota
    /// refused.
    fn meter(app: Arc<App>, who: &str, req: Request) -> (Request, Quota) {
        let quota = Quota {
            app,
            who: who.to_string(),
            reserved: Arc::default(),
            refused: Arc::default(),
        };
        let (parts, body) = req.into_parts();
        let (app, who) = (quota.app.clone(), quota.who.clone());
        let (reserved, refused) = (quota.reserved.clone(), quota.refused.clone());
        let stream = body.into_data_stream().map(move |chunk| {
            let chunk = chunk.map_err(BoxError::from)?;
            let n = chunk.len() as u64;
            if !app.uploads.reserve(&who, n) {
                refused.store(true, Ordering::Relaxed);
                return Err(BoxError::from("per-user upload bytes exceeded"));
            }
            reserved.fetch_add(n, Ordering::Relaxed);
            Ok(chunk)
        });
        (
            Request::from_parts(parts, axum::body::Body::from_stream(stream)),
            quota,
        )
    }

    /// Gives the reserved bytes back (the session's size is known from the
    /// answer); true when the body was refused for the cap.
    fn finish(self) -> bool {
        self.app
            .uploads
            .unreserve(&self.who, self.reserved.load(Ordering::Relaxed));
        self.refused.load(Ordering::Relaxed)
    }
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The principal of Basic credentials (checked against configured users,
/// then token users; throttled), else anonymous.
async fn identify(
    app: &App,
    authorization: Option<HeaderValue>,
    ip: &str,
) -> Result<Principal, Response> {
    let policy = app.auth.load();
    let Some(value) = authorization else {
        return Ok(Principal::Anonymous);
    };
    let Some((user, password)) = basic_credentials(&value) else {
        // Another scheme (e.g. a Bearer token from another registry's login):
        // not ours, treated as no credentials.
        return Ok(Principal::Anonymous);
    };
    if user.is_empty() && password.is_empty() {
        // `Basic Og==` (":"): what some clients (skopeo without --creds)
        // send for "no credentials".
        return Ok(Principal::Anonymous);
    }
    match password_login(&policy, &app.state, &user, &password, ip).await {
        Ok(u) => Ok(Principal::User(u)),
        Err(LoginRefused::Throttled(wait)) => Err(too_many_failures(wait)),
        Err(LoginRefused::Invalid) => Err(unauthorized("invalid username or password")),
    }
}

/// Why [`password_login`] refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoginRefused {
    /// Too many failed attempts from this address or for this user: try
    /// again after this long.
    Throttled(Duration),
    /// Unknown user or wrong password.
    Invalid,
}

/// The user `user` if `password` is theirs ([`crate::auth::Policy::login`]), with
/// failed logins throttled per client address `ip` and per (user, address):
/// the one password check of HTTP Basic and of the console's login form.
/// Failures from one address never lock the same user out at another, so
/// nobody can lock an admin out by failing logins in its name.
pub async fn password_login(
    policy: &crate::auth::Policy,
    state: &crate::state::StateStore,
    user: &str,
    password: &str,
    ip: &str,
) -> Result<auth::User, LoginRefused> {
    let keys = [format!("addr:{ip}"), format!("user:{user}@{ip}")];
    let keys: [&str; 2] = [&keys[0], &keys[1]];
    if let Some(wait) = policy.throttle.blocked(&keys) {
        tracing::warn!(user = %user, client = %ip, "login refused: too many failed attempts");
        return Err(LoginRefused::Throttled(wait));
    }
    if let Some(u) = policy.login(state, user, password).await {
        return Ok(u);
    }
    policy.throttle.fail(&keys);
    tracing::warn!(user = %user, client = %ip, "login failed");
    Err(LoginRefused::Invalid)
}

/// `(user, password)` of an `Authorization: Basic ...` header (RFC 7617).
fn basic_credentials(value: &HeaderValue) -> Option<(String, String)> {
    let text = value.to_str().ok()?;
    let (scheme, b64) = text.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(b64.trim())
        .ok()?;
    let text = String::from_utf8(bytes).ok()?;
    let (u, p) = text.split_once(':')?;
    Some((u.to_string(), p.to_string()))
}

fn unauthorized(message: &'static str) -> Response {
    let mut res =
        RegistryError::with_message(ErrorCode::Unauthorized, message, json!(null)).into_response();
    if let Ok(v) = HeaderValue::from_str(&format!("Basic realm=\"{}\"", auth::REALM)) {
        res.headers_mut().insert(header::WWW_AUTHENTICATE, v);
    }
    res
}

fn too_many_failures(wait: Duration) -> Response {
    let mut res = RegistryError::with_message(
        ErrorCode::TooManyRequests,
        "too many failed logins; try again later",
        json!(null),
    )
    .into_response();
    let secs = wait.as_secs().max(1).to_string();
    if let Ok(v) = HeaderValue::from_str(&secs) {
        res.headers_mut().insert(header::RETRY_AFTER, v);
    }
    res
}

/// Adds the registry's version header to answers on `/v2`.
fn finish(mut res: Response, path: &str) -> Response {
    if path == "/v2" || path.starts_with("/v2/") {
        res.headers_mut()
            .insert(DOCKER_DISTRIBUTION_API_VERSION, API_VERSION);
    }
    res
}

/// A request whose body may go into an upload session or a blob: `POST`
/// of `.../blobs/uploads/`, or `PATCH`/`PUT` of a session (metered
/// against the per-user byte cap).
fn upload_body(method: &Method, params: &Params) -> bool {
    matches!(*method, Method::POST | Method::PATCH | Method::PUT)
        && matches!(params, Params::Registry(RegistryRoute::Upload { .. }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn basic_credentials_parse() {
        let v = HeaderValue::from_static("Basic b3BzOnMzY3I6ZXQ="); // ops:s3cr:et
        assert_eq!(
            basic_credentials(&v),
            Some(("ops".into(), "s3cr:et".into()))
        );
        assert_eq!(
            basic_credentials(&HeaderValue::from_static("Bearer abc")),
            None
        );
        assert_eq!(
            basic_credentials(&HeaderValue::from_static("Basic !!!")),
            None
        );
    }
}
