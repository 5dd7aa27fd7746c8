//! The access layer: one middleware in front of every route that applies
//! the server's [`Policy`] (who may do what, [`crate::auth`]).
//!
//! Owns: finding the principal of a request (a verified client
//! certificate's CN/SAN that names a user, else HTTP Basic credentials,
//! else anonymous), failed-login throttling per client address and per user
//! (429 `TOOMANYREQUESTS` with `Retry-After`), the answers of
//! distribution-spec "Authentication": 401 `UNAUTHORIZED` with
//! `WWW-Authenticate: Basic realm="airlock"` (docker, containerd, podman
//! and skopeo then send credentials) and 403 `DENIED` for a known user
//! without the permission, the per-user upload-session cap, and the audit
//! actor: every request runs inside [`audit::scope`] with the user and the
//! client address, so every state change it makes records them.
//! Never decides a permission itself ([`Policy::allows`], [`auth::required`]).

use std::sync::Arc;
use std::time::Duration;

use axum::extract::Request;
use axum::http::{HeaderValue, Method, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use serde_json::json;

use super::App;
use super::tls::ClientCertNames;
use super::trace::ClientAddr;
use crate::auth::{self, Policy, Principal};
use crate::registry::errors::{ErrorCode, RegistryError};
use crate::registry::responses::{API_VERSION, DOCKER_DISTRIBUTION_API_VERSION};
use crate::registry::routes::Route;
use crate::state::{Actor, audit};

/// Middleware (see `super::front`): authenticates and authorizes the
/// request, then runs it as its actor.
pub async fn check(app: Arc<App>, req: Request, next: Next) -> Response {
    let client = req.extensions().get::<ClientAddr>().map(|c| c.0);
    let address = client.map(|a| a.to_string());
    let policy = &*app.auth;
    if policy.is_open() {
        let actor = Actor {
            who: auth::OPEN_WHO.into(),
            address,
            admin: true,
        };
        return audit::scope(actor, next.run(req)).await;
    }
    let Some(need) = auth::required(req.method(), req.uri()) else {
        return next.run(req).await;
    };
    let ip = client.map_or_else(|| "-".to_string(), |a| a.ip().to_string());
    let names = req.extensions().get::<ClientCertNames>().cloned();
    let authorization = req.headers().get(header::AUTHORIZATION).cloned();
    let principal = match identify(policy, names, authorization, &ip).await {
        Ok(p) => p,
        Err(res) => return finish(res, req.uri().path()),
    };
    if !policy.allows(&principal, &need) {
        let res = match &principal {
            Principal::Anonymous => unauthorized("authentication required"),
            Principal::User(name) => {
                tracing::info!(user = %name, client = %ip, path = %req.uri().path(), "access denied");
                RegistryError::new(
                    ErrorCode::Denied,
                    json!({ "user": name, "repository": need.repository }),
                )
                .into_response()
            }
        };
        return finish(res, req.uri().path());
    }
    let who = match &principal {
        Principal::User(n) => n.clone(),
        Principal::Anonymous => "anonymous".into(),
    };
    let session = upload_session(req.method(), req.uri());
    if let Some(UploadCall::Open) = session
        && !policy.sessions.admits(&who)
    {
        let res = RegistryError::new(
            ErrorCode::TooManyRequests,
            json!({ "user": who, "reason": format!("at most {} open upload sessions per user", policy.sessions.cap()) }),
        )
        .into_response();
        return finish(res, req.uri().path());
    }
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
    let res = audit::scope(actor, next.run(req)).await;
    match session {
        Some(UploadCall::Open) if res.status().as_u16() == 202 => {
            if let Some(id) = res
                .headers()
                .get("docker-upload-uuid")
                .and_then(|v| v.to_str().ok())
            {
                policy.sessions.opened(&who, id);
            }
        }
        Some(UploadCall::Close(id)) if matches!(res.status().as_u16(), 201 | 204 | 404) => {
            policy.sessions.closed(&who, &id);
        }
        _ => {}
    }
    res
}

/// The principal of `req`: a client certificate naming a user, else Basic
/// credentials (checked, throttled), else anonymous.
async fn identify(
    policy: &Policy,
    names: Option<ClientCertNames>,
    authorization: Option<HeaderValue>,
    ip: &str,
) -> Result<Principal, Response> {
    if let Some(names) = names
        && let Some(u) = policy.user_for_certificate(&names.0)
    {
        return Ok(Principal::User(u.name.clone()));
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
    let keys = [format!("addr:{ip}"), format!("user:{user}")];
    let keys: [&str; 2] = [&keys[0], &keys[1]];
    if let Some(wait) = policy.throttle.blocked(&keys) {
        tracing::warn!(user = %user, client = %ip, "login refused: too many failed attempts");
        return Err(too_many_failures(wait));
    }
    if policy.check_password(&user, &password).await {
        return Ok(Principal::User(user));
    }
    policy.throttle.fail(&keys);
    tracing::warn!(user = %user, client = %ip, "login failed");
    Err(unauthorized("invalid username or password"))
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

/// A request that opens or ends a blob-upload session.
enum UploadCall {
    /// `POST .../blobs/uploads/` that may open a session.
    Open,
    /// `PUT` or `DELETE` of session `id`.
    Close(String),
}

fn upload_session(method: &Method, uri: &axum::http::Uri) -> Option<UploadCall> {
    let Ok(Route::Upload { session, .. }) = Route::parse(uri.path()) else {
        return None;
    };
    match (method, session) {
        (&Method::POST, None) => Some(UploadCall::Open),
        (&Method::PUT | &Method::DELETE, Some(id)) => Some(UploadCall::Close(id)),
        _ => None,
    }
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
