//! The access layer: one middleware in front of every route that applies
//! the server's [`Policy`](crate::auth::Policy) (who may do what, [`crate::auth`]).
//!
//! Owns: finding the principal of a request (a verified client
//! certificate's CN/SAN that names a user, else HTTP Basic credentials,
//! else anonymous), failed-login throttling per client address and per user
//! (429 `TOOMANYREQUESTS` with `Retry-After`), the answers of
//! distribution-spec "Authentication": 401 `UNAUTHORIZED` with
//! `WWW-Authenticate: Basic realm="airlock"` (docker, containerd, podman
//! and skopeo then send credentials) and 403 `DENIED` for a known user
//! without the permission, the per-user upload-session and upload-byte
//! caps (413 `DENIED` past `max_upload_bytes_per_user`: a body is counted
//! chunk by chunk as the registry reads it), the user's repository scope
//! handed to the registry as a request extension, and the audit
//! actor: every request that may change state runs inside [`audit::scope`]
//! with the user and the client address, so every state change it makes
//! records them (registry reads, `GET`/`HEAD` under `/v2/`, never change
//! state and skip it when no users are configured).
//! A console request (`/ui/`, `/api/v1/`) may also name its user with the
//! console's session cookie ([`crate::ui::session::user`]); an anonymous
//! request for a console page is sent to its login form.
//! Never decides a permission itself ([`crate::auth::Policy::allows`], [`auth::required`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use axum::extract::Request;
use axum::http::{HeaderValue, Method, header};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use futures_util::StreamExt as _;
use serde_json::json;

use super::App;
use super::tls::ClientCertNames;
use super::trace::ClientAddr;
use crate::auth::{self, Principal};
use crate::registry::errors::{ErrorCode, RegistryError};
use crate::registry::responses::{API_VERSION, DOCKER_DISTRIBUTION_API_VERSION};
use crate::registry::routes::Route;
use crate::registry::scope::RepositoryScope;
use crate::registry::uploads::Uploader;
use crate::state::{Actor, audit};

/// Middleware (see `super::front`): authenticates and authorizes the
/// request, then runs it as its actor, with the user's [`RepositoryScope`]
/// as a request extension (the registry checks the repository it finally
/// reads against it).
pub async fn check<F>(app: Arc<App>, req: Request, next: impl FnOnce(Request) -> F) -> Response
where
    F: Future<Output = Response>,
{
    let client = req.extensions().get::<ClientAddr>().map(|c| c.0);
    let policy = app.auth.load();
    if policy.is_open() && registry_read(&req) {
        // A registry read never commits: no actor to record (and no client
        // address to format on the hot path of pulls).
        return next(req).await;
    }
    let address = client.map(|a| a.to_string());
    if policy.is_open() {
        let actor = Actor {
            who: auth::OPEN_WHO.into(),
            address,
            admin: true,
        };
        return audit::scope(actor, next(req)).await;
    }
    if app.torcx.serves_anonymously(req.method(), req.uri().path()) {
        return next(req).await;
    }
    let Some(need) = auth::required(req.method(), req.uri()) else {
        return next(req).await;
    };
    if need.permission == auth::Permission::Metrics && policy.public_metrics {
        return next(req).await;
    }
    let ip = client.map_or_else(|| "-".to_string(), |a| a.ip().to_string());
    let names = req.extensions().get::<ClientCertNames>().cloned();
    let authorization = req.headers().get(header::AUTHORIZATION).cloned();
    let console = match &app.ui {
        Some(ui) if crate::ui::session::is_console_path(req.uri().path()) => {
            Box::pin(crate::ui::session::user(
                &ui.sessions,
                &policy,
                &app.state,
                req.headers(),
                req.uri().path(),
            ))
            .await
        }
        _ => None,
    };
    let principal = match console {
        Some(u) => Principal::User(u),
        None => match Box::pin(identify(&app, names, authorization, &ip)).await {
            Ok(p) => p,
            Err(res) => return finish(res, req.uri().path()),
        },
    };
    if !policy.allows(&principal, &need) {
        let res = match &principal {
            // A console page sends the browser to its login form instead.
            Principal::Anonymous if app.ui.is_some() && crate::ui::is_page(req.uri().path()) => {
                crate::ui::login_redirect(req.uri())
            }
            Principal::Anonymous => unauthorized("authentication required"),
            Principal::User(u) => {
                tracing::info!(user = %u.name, client = %ip, path = %req.uri().path(), "access denied");
                RegistryError::new(
                    ErrorCode::Denied,
                    json!({ "user": u.name, "repository": need.repository }),
                )
                .into_response()
            }
        };
        return finish(res, req.uri().path());
    }
    let (who, scope) = match &principal {
        Principal::User(u) if !u.repositories.is_empty() => {
            let u = u.clone();
            let scope =
                RepositoryScope::limited(move |repo| u.may(auth::Permission::Pull, Some(repo)));
            (principal_name(&principal), scope)
        }
        _ => (principal_name(&principal), RepositoryScope::all()),
    };
    let mut req = req;
    req.extensions_mut().insert(scope);
    req.extensions_mut().insert(Uploader(who.clone()));
    req.extensions_mut()
        .insert(auth::Grant::of(&policy, principal.clone()));
    let quota = match upload_body(req.method(), req.uri()) {
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
    let admin = policy.allows(
        &principal,
        &auth::Requirement {
            permission: auth::Permission::Admin,
            repository: None,
        },
    );
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

/// The principal of `req`: a client certificate naming a user, else Basic
/// credentials (checked against configured users, then token users;
/// throttled), else anonymous.
async fn identify(
    app: &App,
    names: Option<ClientCertNames>,
    authorization: Option<HeaderValue>,
    ip: &str,
) -> Result<Principal, Response> {
    let policy = app.auth.load();
    if let Some(names) = names
        && let Some(u) = policy.user_for_certificate(&names.0)
    {
        return Ok(Principal::User(u.clone()));
    }
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
/// failed logins throttled per client address `ip` and per user name: the
/// one password check of HTTP Basic and of the console's login form.
pub async fn password_login(
    policy: &crate::auth::Policy,
    state: &crate::state::StateStore,
    user: &str,
    password: &str,
    ip: &str,
) -> Result<auth::User, LoginRefused> {
    let keys = [format!("addr:{ip}"), format!("user:{user}")];
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
fn upload_body(method: &Method, uri: &axum::http::Uri) -> bool {
    matches!(*method, Method::POST | Method::PATCH | Method::PUT)
        && matches!(Route::parse(uri.path()), Ok(Route::Upload { .. }))
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
