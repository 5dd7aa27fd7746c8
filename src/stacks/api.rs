//! The `/stacks/v1` HTTP API for cells and admins.
//!
//! | request | answer |
//! | --- | --- |
//! | `GET /stacks/v1/` | the stack table (every stack, the default) |
//! | `GET /stacks/v1/<name>?cell=<id>[&platform=P]` | what that cell runs: `digest`, `image`, `platform`, `rootfs_url`, `rootfs_sha256`, `rootfs_digest`, `rootfs_size`, `state`, `state_reason`, `promotion`, `latest`, `rollout_percent` |
//! | `GET /stacks/v1/<name>` | the stack (as `stack show --json`) |
//! | `GET/HEAD /stacks/v1/<name>/rootfs.tar[?digest=D][&platform=P][&cell=ID]` | the flattened rootfs (a blob: `Docker-Content-Digest`, ranges); `digest` names a promoted image or platform manifest; without it the cell's or the active promotion |
//! | `PUT /stacks/v1/<name>/cells/<id>` `{"digest", "platform"?}` | 204: the cell's report ([`super::cells`]) |
//! | `GET /stacks/v1/<name>/status` | `stack status --json` |
//! | `POST /stacks/v1/<name>/{promote,rollout,rollback,state,default}` | admin: as the CLI; 403 `DENIED` unless `serve --allow-admin` |
//! | `POST /stacks/v1/<name>/register` `{"image", "description"?}` | a custom stack ([`super::custom`]), if the `custom_stacks` policy allows the caller |
//! | `GET /stacks/v1/lifecycle/<digest>` | [`super::lifecycle::Lifecycle`]: `current`, `superseded`, `custom` or `unknown`, `restage_required` |
//!
//! Cells are served in every state; DEPRECATED, RESTRICTED and DISABLED
//! add `Warning: 299 - "<Cloud Controller's warning>"`. A stack with
//! `max_in_flight` N serves at most N rootfs downloads at once; the next
//! gets 429 `TOOMANYREQUESTS` with `Retry-After` (the base plus a random
//! share of it, so refused cells do not come back all at once).
//! Errors are `{"code","message"}` with the status of [`StackError`].
//!
//! Owns: paths, query and body parsing, statuses and headers. Handlers call
//! one function of [`super::ops`], [`super::cells`] or the table.

use crate::registry::scope::RepositoryScope;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use futures_util::StreamExt;
use http_body_util::BodyExt;
use serde_json::json;

use super::StackError;
use super::cells::{self, CellReport};
use super::custom::{Actor, CustomPolicy};
use super::lifecycle;
use super::ops::{self, PromoteRequest};
use super::table::{Promotion, Rootfs, Stack, StackName, StackState, StackTable};
use crate::digest::Digest;
use crate::registry::pull::blob_response;
use crate::registry::query::QueryParams;
use crate::state::{StateStore, now_rfc3339};
use crate::store::blob_key;

/// What the operator switched on for `/stacks/v1`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StacksConfig {
    /// Serve the admin POST routes (to the admin role when users are
    /// configured; `airlock serve --allow-admin`).
    pub allow_admin: bool,
    /// Base of `Retry-After` on a 429; a random extra of up to the same again is added.
    pub retry_after: Duration,
    /// Cell reports older than this count as stale in `status`.
    pub stale_after: Duration,
    /// Who may register custom stacks (`custom_stacks`, default off).
    pub custom_stacks: CustomPolicy,
}

impl Default for StacksConfig {
    /// Admin routes off, `Retry-After` 10 to 20 s, stale after 1 hour.
    fn default() -> StacksConfig {
        StacksConfig {
            allow_admin: false,
            retry_after: Duration::from_secs(10),
            stale_after: Duration::from_secs(3600),
            custom_stacks: CustomPolicy::Off,
        }
    }
}

/// The stacks API's share of the server: its switches and the rootfs
/// downloads in flight per stack.
#[derive(Debug, Default)]
pub struct StacksServer {
    /// The switches.
    pub config: StacksConfig,
    downloads: Mutex<HashMap<String, Arc<AtomicU32>>>,
    /// The last stack table read, by its document digest (cells ask often;
    /// the table changes rarely).
    table: Mutex<Option<(Digest, Arc<StackTable>)>>,
}

impl StacksServer {
    /// A server with `config`.
    pub fn new(config: StacksConfig) -> StacksServer {
        StacksServer {
            config,
            ..StacksServer::default()
        }
    }

    /// The stack table in the current state: one read of the root, the
    /// document parsed only when its digest changed.
    async fn table(&self, state: &StateStore) -> std::result::Result<Arc<StackTable>, StackError> {
        let snap = state.snapshot().await?;
        let Some(digest) = snap
            .state
            .as_ref()
            .and_then(|s| s.documents.get(super::table::DOC_NAME))
        else {
            return Ok(Arc::new(StackTable::default()));
        };
        if let Ok(cached) = self.table.lock()
            && let Some((d, t)) = cached.as_ref()
            && d == digest
        {
            return Ok(t.clone());
        }
        let table = Arc::new(ops::load_in(state, &snap).await?);
        if let Ok(mut cached) = self.table.lock() {
            *cached = Some((digest.clone(), table.clone()));
        }
        Ok(table)
    }

    /// Takes one of `limit` download slots of `stack`; `None` when all are taken.
    fn acquire(&self, stack: &StackName, limit: u32) -> Option<Slot> {
        let counter = self
            .downloads
            .lock()
            .ok()?
            .entry(stack.to_string())
            .or_default()
            .clone();
        counter
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < limit).then_some(n + 1)
            })
            .ok()?;
        Some(Slot(counter))
    }

    /// Rootfs downloads of `stack` in flight now.
    pub fn in_flight(&self, stack: &str) -> u32 {
        self.downloads
            .lock()
            .ok()
            .and_then(|m| m.get(stack).map(|c| c.load(Ordering::Acquire)))
            .unwrap_or(0)
    }
}

/// One download slot, given back when the response body is dropped.
struct Slot(Arc<AtomicU32>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// What the stacks API needs from the composition root (`server::App`).
pub trait Context: Send + Sync + 'static {
    /// The state to serve (re-read on every request).
    fn state(&self) -> &StateStore;
    /// Switches and download slots.
    fn stacks(&self) -> &StacksServer;
}

/// The `/stacks/v1` router.
pub fn router(ctx: Arc<dyn Context>) -> Router {
    Router::new()
        .route("/stacks/v1", any(handle))
        .route("/stacks/v1/", any(handle))
        .route("/stacks/v1/{*path}", any(handle))
        .with_state(ctx)
}

/// An error answer: status and `{"code","message"}`, plus `Allow` (405)
/// or `Retry-After` (429).
struct ApiError {
    status: StatusCode,
    code: &'static str,
    message: String,
    allow: Option<&'static str>,
    retry_after: Option<u64>,
}

impl ApiError {
    fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            code,
            message: message.into(),
            allow: None,
            retry_after: None,
        }
    }
}

impl From<StackError> for ApiError {
    fn from(e: StackError) -> ApiError {
        let (status, code) = match &e {
            StackError::Invalid(_) => (StatusCode::BAD_REQUEST, "INVALID"),
            StackError::NotFound(_) => (StatusCode::NOT_FOUND, "NOT_FOUND"),
            StackError::Conflict(_) => (StatusCode::CONFLICT, "CONFLICT"),
            StackError::Denied(_) => (StatusCode::FORBIDDEN, "DENIED"),
            StackError::Refused(_) => (StatusCode::UNPROCESSABLE_ENTITY, "REFUSED"),
            StackError::Image(_) => (StatusCode::UNPROCESSABLE_ENTITY, "IMAGE_INVALID"),
            StackError::State(_) | StackError::Other(_) => {
                tracing::error!(error = %e, "stacks API internal error");
                (StatusCode::INTERNAL_SERVER_ERROR, "INTERNAL")
            }
        };
        ApiError::new(status, code, e.to_string())
    }
}

impl From<crate::state::StateError> for ApiError {
    fn from(e: crate::state::StateError) -> ApiError {
        StackError::from(e).into()
    }
}

impl From<crate::store::StoreError> for ApiError {
    fn from(e: crate::store::StoreError) -> ApiError {
        StackError::from(e).into()
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut res = (
            self.status,
            axum::Json(json!({ "code": self.code, "message": self.message })),
        )
            .into_response();
        if let Some(allow) = self.allow {
            res.headers_mut()
                .insert(header::ALLOW, HeaderValue::from_static(allow));
        }
        if let Some(secs) = self.retry_after {
            res.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        res
    }
}

type Result<T> = std::result::Result<T, ApiError>;

/// A parsed `/stacks/v1` path.
#[derive(Debug, PartialEq, Eq)]
enum Route {
    List,
    Stack(StackName),
    Rootfs(StackName),
    Status(StackName),
    Cell(StackName, String),
    Admin(StackName, Action),
    Register(StackName),
    Lifecycle(Digest),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    Promote,
    Rollout,
    Rollback,
    State,
    Default,
}

/// Percent-decodes a path part (`%2F` in a cell id); `None` when malformed.
fn decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = s.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

impl Route {
    fn parse(path: &str) -> Result<Route> {
        let no_route = || {
            ApiError::new(
                StatusCode::NOT_FOUND,
                "NOT_FOUND",
                format!("no stacks endpoint {path}"),
            )
        };
        let rest = path
            .strip_prefix("/stacks/v1")
            .ok_or_else(no_route)?
            .trim_start_matches('/');
        if rest.is_empty() {
            return Ok(Route::List);
        }
        let (name, tail) = match rest.split_once('/') {
            Some((n, t)) => (n, Some(t)),
            None => (rest, None),
        };
        if name == "lifecycle"
            && let Some(Ok(d)) = tail.map(str::parse::<Digest>)
        {
            return Ok(Route::Lifecycle(d));
        }
        let name: StackName = name.parse()?;
        Ok(match tail {
            None | Some("") => Route::Stack(name),
            Some("rootfs.tar") => Route::Rootfs(name),
            Some("status") => Route::Status(name),
            Some("promote") => Route::Admin(name, Action::Promote),
            Some("rollout") => Route::Admin(name, Action::Rollout),
            Some("rollback") => Route::Admin(name, Action::Rollback),
            Some("state") => Route::Admin(name, Action::State),
            Some("default") => Route::Admin(name, Action::Default),
            Some("register") => Route::Register(name),
            Some(t) => match t.strip_prefix("cells/") {
                Some(id) => {
                    let id = decode(id)
                        .ok_or_else(|| StackError::Invalid(format!("bad cell id {id:?}")))?;
                    cells::check_cell_id(&id)?;
                    Route::Cell(name, id)
                }
                None => return Err(no_route()),
            },
        })
    }
}

async fn handle(
    State(ctx): State<Arc<dyn Context>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    scope: Option<axum::Extension<RepositoryScope>>,
    body: Body,
) -> Response {
    let scope = scope.map(|axum::Extension(s)| s).unwrap_or_default();
    dispatch(&*ctx, &method, &uri, &headers, &scope, body)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

fn method_not_allowed(allow: &'static str) -> ApiError {
    let mut e = ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "UNSUPPORTED",
        format!("allowed: {allow}"),
    );
    e.allow = Some(allow);
    e
}

async fn dispatch(
    ctx: &dyn Context,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    scope: &RepositoryScope,
    body: Body,
) -> Result<Response> {
    let route = Route::parse(uri.path())?;
    let query = QueryParams::from_uri(uri);
    let read = matches!(*method, Method::GET | Method::HEAD);
    match route {
        Route::List if read => list(ctx).await,
        Route::Stack(name) if read => match query.get("cell") {
            Some(cell) => resolve(ctx, &name, cell, query.get("platform")).await,
            None => show(ctx, &name).await,
        },
        Route::Rootfs(name) if read => {
            rootfs(ctx, &name, &query, headers, *method == Method::HEAD).await
        }
        Route::Status(name) if read => status(ctx, &name).await,
        Route::Lifecycle(digest) if read => {
            let table = ctx.stacks().table(ctx.state()).await?;
            Ok(axum::Json(lifecycle::lifecycle(&table, &digest)).into_response())
        }
        Route::Register(name) if *method == Method::POST => register(ctx, &name, scope, body).await,
        Route::Cell(name, id) if *method == Method::PUT => report(ctx, &name, id, body).await,
        Route::Admin(name, action) if *method == Method::POST => {
            admin(ctx, &name, action, body).await
        }
        Route::Cell(..) => Err(method_not_allowed("PUT")),
        Route::Admin(..) | Route::Register(..) => Err(method_not_allowed("POST")),
        _ => Err(method_not_allowed("GET, HEAD")),
    }
}

/// `Warning: 299 - "..."` for a stack that is not ACTIVE.
fn warn(res: &mut Response, name: &StackName, stack: &Stack) {
    if let Some(text) = stack.state.warning(name, &stack.state_reason) {
        let quoted = text.replace('\\', "\\\\").replace('"', "\\\"");
        let value: String = format!("299 - \"{quoted}\"")
            .chars()
            .map(|c| {
                if c.is_ascii() && !c.is_ascii_control() {
                    c
                } else {
                    '?'
                }
            })
            .collect();
        if let Ok(v) = HeaderValue::from_str(&value) {
            res.headers_mut().append(header::WARNING, v);
        }
    }
}

async fn list(ctx: &dyn Context) -> Result<Response> {
    let table = ctx.stacks().table(ctx.state()).await?;
    let stacks: Vec<_> = table
        .stacks
        .iter()
        .map(|(n, s)| s.view(n, table.default.as_ref() == Some(n)))
        .collect();
    Ok(axum::Json(json!({ "default": table.default, "stacks": stacks })).into_response())
}

async fn show(ctx: &dyn Context, name: &StackName) -> Result<Response> {
    let table = ctx.stacks().table(ctx.state()).await?;
    let stack = table.get(name)?;
    let mut res =
        axum::Json(stack.view(name, table.default.as_ref() == Some(name))).into_response();
    warn(&mut res, name, stack);
    Ok(res)
}

fn rootfs_url(name: &StackName, r: &Rootfs) -> String {
    format!("/stacks/v1/{name}/rootfs.tar?digest={}", r.manifest)
}

fn platform_missing(name: &StackName, p: &Promotion, platform: Option<&str>) -> StackError {
    let have: Vec<&str> = p.rootfs.iter().map(|r| r.platform.as_str()).collect();
    StackError::NotFound(format!(
        "stack {name}: promotion {} has no rootfs for platform {} (has {})",
        p.id,
        platform.map_or_else(super::image::native_platform, str::to_string),
        have.join(", ")
    ))
}

async fn resolve(
    ctx: &dyn Context,
    name: &StackName,
    cell: &str,
    platform: Option<&str>,
) -> Result<Response> {
    cells::check_cell_id(cell)?;
    let table = ctx.stacks().table(ctx.state()).await?;
    let stack = table.get(name)?;
    let res = stack
        .resolve(name, cell)
        .ok_or_else(|| StackError::NotFound(format!("stack {name} has no promotion yet")))?;
    let p = res.promotion;
    let r = p
        .rootfs_for(platform)
        .ok_or_else(|| platform_missing(name, p, platform))?;
    let body = json!({
        "stack": name,
        "cell": cell,
        "digest": r.manifest,
        "image": p.image,
        "platform": r.platform,
        "rootfs_url": rootfs_url(name, r),
        "rootfs_sha256": r.sha256.hex(),
        "rootfs_digest": r.sha256,
        "rootfs_size": r.size,
        "state": stack.state.as_str(),
        "state_reason": stack.state_reason,
        "promotion": p.id,
        "latest": res.latest,
        "rollout_percent": stack.rollout.map_or(100, |r| r.percent),
    });
    let mut out = axum::Json(body).into_response();
    out.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    warn(&mut out, name, stack);
    Ok(out)
}

/// The rootfs a download names: `digest` (a promoted image or platform
/// manifest of this stack), else the cell's, else the active promotion's.
fn find_rootfs<'a>(name: &StackName, stack: &'a Stack, query: &QueryParams) -> Result<&'a Rootfs> {
    let platform = query.get("platform");
    if let Some(d) = query.get("digest") {
        let d: Digest = d
            .parse()
            .map_err(|e| StackError::Invalid(format!("digest {d:?}: {e}")))?;
        for p in stack.promotions.iter().rev() {
            if let Some(r) = p.rootfs.iter().find(|r| r.manifest == d) {
                return Ok(r);
            }
            if p.image.digest == d {
                return p
                    .rootfs_for(platform)
                    .ok_or_else(|| platform_missing(name, p, platform).into());
            }
        }
        return Err(StackError::NotFound(format!("stack {name} never promoted {d}")).into());
    }
    let p = match query.get("cell") {
        Some(cell) => {
            cells::check_cell_id(cell)?;
            stack.resolve(name, cell).map(|r| r.promotion)
        }
        None => stack.active(),
    }
    .ok_or_else(|| StackError::NotFound(format!("stack {name} has no promotion yet")))?;
    Ok(p.rootfs_for(platform)
        .ok_or_else(|| platform_missing(name, p, platform))?)
}

async fn rootfs(
    ctx: &dyn Context,
    name: &StackName,
    query: &QueryParams,
    headers: &HeaderMap,
    head: bool,
) -> Result<Response> {
    let table = ctx.stacks().table(ctx.state()).await?;
    let stack = table.get(name)?;
    let r = find_rootfs(name, stack, query)?;
    let store = ctx.state().blobstore();
    let key = blob_key(&r.sha256);
    let size = store.stat(&key).await?.ok_or_else(|| {
        tracing::error!(rootfs = %r.sha256, stack = %name, "promoted rootfs missing from the blobstore");
        StackError::NotFound(format!("rootfs {} is missing from the store", r.sha256))
    })?;
    // A GET takes a download slot, given back when the body is dropped
    // (sent, or the client went away); HEAD takes none.
    let slot = match stack.max_in_flight {
        Some(limit) if !head => Some(
            ctx.stacks()
                .acquire(name, limit)
                .ok_or_else(|| too_many(&ctx.stacks().config, name, limit))?,
        ),
        _ => None,
    };
    let mut res = blob_response(&**store, &r.sha256, size, headers, head, move |stream| {
        Box::pin(stream.map(move |chunk| {
            let _held = &slot;
            chunk
        }))
    })
    .await?;
    res.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/x-tar"),
    );
    warn(&mut res, name, stack);
    Ok(res)
}

fn too_many(cfg: &StacksConfig, name: &StackName, limit: u32) -> ApiError {
    let base = cfg.retry_after.as_secs().max(1);
    let secs = base + rand::random::<u64>() % (base + 1);
    let mut e = ApiError::new(
        StatusCode::TOO_MANY_REQUESTS,
        "TOOMANYREQUESTS",
        format!(
            "stack {name}: {limit} rootfs downloads in flight (max_in_flight {limit}); retry after {secs} s"
        ),
    );
    e.retry_after = Some(secs);
    e
}

async fn status(ctx: &dyn Context, name: &StackName) -> Result<Response> {
    let table = ctx.stacks().table(ctx.state()).await?;
    let stack = table.get(name)?;
    let reports = cells::reports(&**ctx.state().blobstore(), name).await?;
    let s = cells::status(
        name,
        stack,
        &reports,
        time::OffsetDateTime::now_utc(),
        ctx.stacks().config.stale_after,
    );
    Ok(axum::Json(s).into_response())
}

/// Largest JSON body accepted.
const MAX_BODY: usize = 64 * 1024;

async fn json_body<T: serde::de::DeserializeOwned>(body: Body) -> Result<T> {
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
struct ReportBody {
    digest: Digest,
    #[serde(default)]
    platform: Option<String>,
}

async fn report(ctx: &dyn Context, name: &StackName, cell: String, body: Body) -> Result<Response> {
    let b: ReportBody = json_body(body).await?;
    ctx.stacks().table(ctx.state()).await?.get(name)?;
    let r = CellReport {
        cell,
        digest: b.digest,
        platform: b.platform,
        time: now_rfc3339(),
    };
    cells::record(&**ctx.state().blobstore(), name, &r).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RolloutBody {
    percent: u8,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct ReasonBody {
    #[serde(default)]
    reason: Option<String>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct StateBody {
    state: String,
    #[serde(default)]
    reason: Option<String>,
}

/// Who an admin request is when no actor is in scope (the server's access
/// layer sets the authenticated user, see `state::audit`).
const HTTP_ADMIN: &str = "admin (http)";

async fn admin(
    ctx: &dyn Context,
    name: &StackName,
    action: Action,
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
            let req: PromoteRequest = json_body(body).await?;
            let p = ops::promote(state, name, &req, who).await?;
            json!({ "promotion": p.promotion, "percent": p.percent, "generation": p.generation })
        }
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
    let table = ctx.stacks().table(state).await?;
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
struct RegisterBody {
    image: String,
    #[serde(default)]
    description: String,
}

/// `POST /stacks/v1/<name>/register`: the caller (from the access layer's
/// audit scope) is an admin when it holds the admin role and the admin
/// routes are on (`allow_admin`); an anonymous caller is never a
/// registering user. The image must be in a repository the caller may read
/// (`repositories`, the user's repository prefixes).
async fn register(
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes() {
        let n = |s: &str| s.parse::<StackName>().unwrap();
        assert_eq!(Route::parse("/stacks/v1/").ok(), Some(Route::List));
        assert_eq!(
            Route::parse("/stacks/v1/fs4").ok(),
            Some(Route::Stack(n("fs4")))
        );
        assert_eq!(
            Route::parse("/stacks/v1/fs4/rootfs.tar").ok(),
            Some(Route::Rootfs(n("fs4")))
        );
        assert_eq!(
            Route::parse("/stacks/v1/fs4/cells/diego-cell%2F0a").ok(),
            Some(Route::Cell(n("fs4"), "diego-cell/0a".into()))
        );
        assert_eq!(
            Route::parse("/stacks/v1/fs4/cells/diego-cell/0a").ok(),
            Some(Route::Cell(n("fs4"), "diego-cell/0a".into()))
        );
        let d = Digest::sha256_of(b"x");
        assert_eq!(
            Route::parse(&format!("/stacks/v1/lifecycle/{d}")).ok(),
            Some(Route::Lifecycle(d))
        );
        assert_eq!(
            Route::parse("/stacks/v1/lifecycle/status").ok(),
            Some(Route::Status(n("lifecycle")))
        );
        assert!(Route::parse("/stacks/v1/FS4").is_err());
        assert!(Route::parse("/stacks/v1/fs4/nope").is_err());
        assert!(Route::parse("/stacks/v1/fs4/cells/a%2").is_err());
    }
}
