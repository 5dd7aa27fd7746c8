//! The console's HTTP plumbing: who is asking ([`Viewer`]), the headers
//! every answer carries, its error type, query and form parsing, and the
//! CSRF check of every state-changing form.

use std::collections::BTreeMap;

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use http_body_util::BodyExt as _;

use super::session::Session;
use crate::registry::scope::RepositoryScope;

/// `Content-Security-Policy` of every console answer: nothing but the
/// console's own compiled-in stylesheet, script and images; no inline
/// script or style, no frames, forms only to itself.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
     connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// Largest form body accepted.
const MAX_FORM: usize = 16 * 1024;

/// Who asks, as the access layer established it, and their session.
#[derive(Clone, Default)]
pub struct Viewer {
    /// The actor's name (`anonymous`, a user, or the open policy's actor).
    pub who: String,
    /// What they may do, as the access layer found it: read models filter
    /// with it and pages offer only the forms it allows (the access layer
    /// enforces every route itself).
    pub grant: crate::auth::Grant,
    /// True when the server has no users (everyone is admin).
    pub open: bool,
    /// The repositories they may read.
    pub scope: RepositoryScope,
    /// Their console session (carries the CSRF token), if any.
    pub session: Option<Session>,
    /// The `Host` the browser asked for (for pull commands), as sent.
    pub host: Option<String>,
}

impl Viewer {
    /// Whether they hold the admin role somewhere (the header says so).
    pub fn admin(&self) -> bool {
        self.grant.holds(crate::auth::Permission::Admin)
    }

    /// Whether they may change every repository at once (roll the whole
    /// state back, revoke users, see users and the store).
    pub fn admin_everywhere(&self) -> bool {
        self.grant.allows_everywhere(crate::auth::Permission::Admin)
    }

    /// Whether they may read the repository `repo`.
    pub fn may_read(&self, repo: &str) -> bool {
        self.grant.may_read(repo)
    }

    /// Whether they may read stack `name` of `table` (every repository of
    /// its images, as `/stacks/v1` decides).
    pub fn may_read_stack(
        &self,
        table: &crate::stacks::table::StackTable,
        name: &crate::stacks::StackName,
    ) -> bool {
        self.grant
            .allows(crate::auth::Permission::Stack, &table.repositories(name))
    }

    /// Whether a logged-in session (not an anonymous one) is in use.
    pub fn logged_in(&self) -> bool {
        self.session.as_ref().is_some_and(|s| s.user.is_some())
    }

    /// The CSRF token for this viewer's forms ("" without a session).
    pub fn csrf(&self) -> &str {
        self.session.as_ref().map_or("", Session::csrf)
    }
}

/// A console error: its status, a stable code and a one-line message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UiError {
    /// The HTTP status.
    pub status: StatusCode,
    /// `NOT_FOUND`, `INVALID`, `DENIED`, `CONFLICT`, `REFUSED`,
    /// `UNAVAILABLE`, `UNKNOWN`.
    pub code: &'static str,
    /// What went wrong, one line.
    pub message: String,
    /// `Retry-After` in seconds (503 for a commit that lost the root race
    /// to other writers too long).
    pub retry_after: Option<u64>,
}

impl UiError {
    /// An error with `status`, `code` and `message`.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> UiError {
        UiError {
            status,
            code,
            message: message.into(),
            retry_after: None,
        }
    }

    /// 404.
    pub fn not_found(message: impl Into<String>) -> UiError {
        UiError::new(StatusCode::NOT_FOUND, "NOT_FOUND", message)
    }

    /// 400.
    pub fn invalid(message: impl Into<String>) -> UiError {
        UiError::new(StatusCode::BAD_REQUEST, "INVALID", message)
    }

    /// 403.
    pub fn denied(message: impl Into<String>) -> UiError {
        UiError::new(StatusCode::FORBIDDEN, "DENIED", message)
    }

    /// 409.
    pub fn conflict(message: impl Into<String>) -> UiError {
        UiError::new(StatusCode::CONFLICT, "CONFLICT", message)
    }

    /// 503 `UNAVAILABLE` with `Retry-After: secs`: a lost root race or an
    /// unavailable object store, tried again later.
    pub fn unavailable(message: impl std::fmt::Display, secs: u64) -> UiError {
        UiError {
            retry_after: Some(secs),
            ..UiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "UNAVAILABLE",
                message.to_string(),
            )
        }
    }

    /// 500 (logged).
    pub fn internal(message: impl std::fmt::Display) -> UiError {
        tracing::warn!(error = %message, "console: request failed");
        UiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "UNKNOWN",
            message.to_string(),
        )
    }
}

impl From<crate::state::StateError> for UiError {
    fn from(e: crate::state::StateError) -> UiError {
        match e {
            crate::state::StateError::NotFound(m) => UiError::not_found(m),
            crate::state::StateError::Store(e) => e.into(),
            e => match e.retry_after() {
                Some(secs) => UiError::unavailable(e, secs),
                None => UiError::internal(e),
            },
        }
    }
}

impl From<crate::store::StoreError> for UiError {
    /// 404 for a missing object; 503 `UNAVAILABLE` with `Retry-After` for
    /// an unavailable object store ([`crate::store::StoreError::retry_after`]);
    /// else 500.
    fn from(e: crate::store::StoreError) -> UiError {
        match e {
            crate::store::StoreError::NotFound(_) => UiError::not_found(e.to_string()),
            e => match e.retry_after() {
                Some(secs) => UiError::unavailable(e, secs),
                None => UiError::internal(e),
            },
        }
    }
}

impl From<crate::stacks::StackError> for UiError {
    fn from(e: crate::stacks::StackError) -> UiError {
        use crate::stacks::StackError as E;
        let m = e.to_string();
        match e {
            E::Invalid(_) => UiError::invalid(m),
            E::NotFound(_) => UiError::not_found(m),
            E::Denied(_) => UiError::denied(m),
            E::Conflict(_) => UiError::conflict(m),
            E::Refused(_) | E::Image(_) => {
                UiError::new(StatusCode::UNPROCESSABLE_ENTITY, "REFUSED", m)
            }
            E::State(e) => e.into(),
            E::Other(e) => UiError::internal(format!("{e:#}")),
        }
    }
}

impl IntoResponse for UiError {
    /// `{"code", "message"}` with the status (the JSON API's errors).
    fn into_response(self) -> Response {
        let body = serde_json::json!({ "code": self.code, "message": self.message });
        let mut res = (self.status, axum::Json(body)).into_response();
        if let Some(secs) = self.retry_after {
            res.headers_mut()
                .insert(axum::http::header::RETRY_AFTER, secs.into());
        }
        res
    }
}

/// The headers every console answer carries: the CSP, no sniffing, no
/// referrer to other sites, no framing, no caching of pages that show state.
pub fn secure(res: &mut Response) {
    let h = res.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    // Not `no-referrer`: browsers then send `Origin: null` on every POST,
    // and the CSRF check could not tell this site from another.
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.entry(header::CACHE_CONTROL)
        .or_insert(HeaderValue::from_static("no-store"));
}

/// `303 See Other` to `location` (a path of this server).
pub fn redirect(location: &str) -> Response {
    let mut res = StatusCode::SEE_OTHER.into_response();
    let v = HeaderValue::from_str(location).unwrap_or(HeaderValue::from_static("/ui/"));
    res.headers_mut().insert(header::LOCATION, v);
    res
}

/// The query parameters of `uri`, the last value of each name winning.
pub fn query(uri: &Uri) -> BTreeMap<String, String> {
    form_urlencoded::parse(uri.query().unwrap_or("").as_bytes())
        .into_owned()
        .collect()
}

/// A page size from `limit` (default `default`, 1 to `max`).
pub fn limit(q: &BTreeMap<String, String>, default: usize, max: usize) -> Result<usize, UiError> {
    match q.get("limit") {
        None => Ok(default),
        Some(v) => match v.parse::<usize>() {
            Ok(n) if (1..=max).contains(&n) => Ok(n),
            _ => Err(UiError::invalid(format!("limit must be 1 to {max}"))),
        },
    }
}

/// The fields of an `application/x-www-form-urlencoded` body (at most 16 KiB).
///
/// Errors: another content type, or a body too large or unreadable (400).
pub async fn form(headers: &HeaderMap, body: Body) -> Result<BTreeMap<String, String>, UiError> {
    let ct = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if !ct.starts_with("application/x-www-form-urlencoded") {
        return Err(UiError::invalid(
            "forms are sent as application/x-www-form-urlencoded",
        ));
    }
    let bytes = http_body_util::Limited::new(body, MAX_FORM)
        .collect()
        .await
        .map_err(|e| UiError::invalid(format!("form body: {e}")))?
        .to_bytes();
    Ok(form_urlencoded::parse(&bytes).into_owned().collect())
}

/// Refuses a state-changing form unless it comes from this site: the
/// browser's `Sec-Fetch-Site` (when sent) is `same-origin`, `Origin` (when
/// sent) names the host asked for, and the form's `csrf` field is the
/// session's token.
///
/// Errors: 403 `DENIED` naming which check failed.
pub fn check_csrf(
    viewer: &Viewer,
    headers: &HeaderMap,
    form: &BTreeMap<String, String>,
) -> Result<(), UiError> {
    let refused = |why: &str| UiError::denied(format!("cross-site request refused: {why}"));
    if let Some(site) = headers.get("sec-fetch-site")
        && site.as_bytes() != b"same-origin"
    {
        return Err(refused("Sec-Fetch-Site is not same-origin"));
    }
    if let Some(origin) = headers.get(header::ORIGIN).and_then(|v| v.to_str().ok()) {
        let host = origin.split_once("://").map_or("", |(_, h)| h);
        if origin == "null" || viewer.host.as_deref() != Some(host) {
            return Err(refused("Origin is another site"));
        }
    }
    let token = form.get("csrf").map_or("", String::as_str);
    match &viewer.session {
        Some(s) if !token.is_empty() && s.csrf_matches(token) => Ok(()),
        Some(_) => Err(refused("missing or wrong CSRF token")),
        None => Err(refused("no console session (cookies off?)")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_commit_that_lost_the_race_too_long_is_503_with_retry_after() {
        let e = UiError::from(crate::state::StateError::Contention(40));
        assert_eq!(
            (e.status, e.code),
            (StatusCode::SERVICE_UNAVAILABLE, "UNAVAILABLE")
        );
        let res = e.into_response();
        assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(res.headers()[axum::http::header::RETRY_AFTER], "1");
        let other = UiError::from(crate::state::StateError::NotFound("x".into()));
        assert_eq!(
            (other.status, other.retry_after),
            (StatusCode::NOT_FOUND, None)
        );
    }
}
