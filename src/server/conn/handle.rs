//! One request on a connection: extensions (client address, certificate
//! names), the request body under its pace, the response body under the
//! response budget, and the 408 for a body found too slow.
//!
//! Owns: [`handle`], the service hyper calls per request. Never routes:
//! the registry's hot path and the router are in `super::super`.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};

use axum::http::{HeaderValue, Request, Response, StatusCode, Version, header};
use axum::response::IntoResponse;
use hyper::body::Incoming;
use serde_json::json;
use tokio::time::Instant;

use super::Shared;
use crate::registry::errors::{ErrorCode, RegistryError};
use crate::server::access::Matched;
use crate::server::activity::{Activity, RequestGuard};
use crate::server::body::{Pace, RequestBody, ResponseBody};
use crate::server::tls::ClientCertNames;

/// Serves one request hyper parsed: the request body under its [`Pace`],
/// then [`respond`].
pub(super) fn handle(
    req: Request<Incoming>,
    peer: SocketAddr,
    names: Option<ClientCertNames>,
    shared: &Arc<Shared>,
    activity: &Arc<Activity>,
) -> impl Future<Output = Result<Response<ResponseBody>, Infallible>> + Send + use<> {
    let guard = activity.begin_request();
    let (mut parts, body) = req.into_parts();
    if parts.version == Version::HTTP_2 {
        activity.set_h2();
    }
    let limits = &shared.limits;
    let mut manifest_put = false;
    // A request without a body (most GETs and HEADs) has nothing to pace.
    let (body, too_slow) = if hyper::body::Body::is_end_stream(&body) {
        (axum::body::Body::new(body), None)
    } else {
        // The body's pace depends on the endpoint: the path is read here,
        // and the reading handed on to the access layer (one parse).
        if let Some(matched) = Matched::read(&parts.method, parts.uri.path()) {
            manifest_put = matched.is_manifest_put(&parts.method);
            parts.extensions.insert(matched);
        }
        let pace = Pace {
            idle: limits.idle_timeout,
            min_rate: limits.min_body_rate,
            grace: limits.header_timeout,
            deadline: manifest_put.then(|| Instant::now() + limits.manifest_put_timeout),
        };
        let too_slow = Arc::new(OnceLock::new());
        let body = RequestBody::new(body, pace, activity.clone(), too_slow.clone());
        (axum::body::Body::new(body), Some(too_slow))
    };
    let req = Request::from_parts(parts, body);
    let res = respond(
        req,
        guard,
        too_slow,
        manifest_put,
        peer,
        names,
        shared,
        activity,
    );
    futures_util::FutureExt::map(res, Ok)
}

/// Serves one request (its body, if any, already under its pace;
/// `too_slow` is where the body notes that it was too slow): the client's
/// address and certificate names go into its extensions, the registry's
/// hot path or the router answers it, and the response body is put under
/// the [`ResponseBudget`]. A body found too slow turns the answer into a
/// 408. `guard` is the request's [`Activity`] count, released when the
/// response head is ready. Used by hyper ([`handle`]) and by the lean
/// HTTP/1 path ([`super::lean`]) alike.
#[allow(clippy::too_many_arguments)]
pub(super) fn respond(
    req: Request<axum::body::Body>,
    guard: RequestGuard,
    too_slow: Option<Arc<OnceLock<&'static str>>>,
    manifest_put: bool,
    peer: SocketAddr,
    names: Option<ClientCertNames>,
    shared: &Arc<Shared>,
    activity: &Arc<Activity>,
) -> impl Future<Output = Response<ResponseBody>> + Send + use<> {
    let (mut parts, body) = req.into_parts();
    parts.extensions.insert(axum::extract::ConnectInfo(peer));
    if let Some(n) = names {
        parts.extensions.insert(n);
    }
    if shared.tls() {
        parts.extensions.insert(crate::server::tls::OverTls);
    }
    let v2 = parts.uri.path().starts_with("/v2/");
    let registry = crate::server::is_registry_path(parts.uri.path());
    let http1 = parts.version < Version::HTTP_2;
    let target = if registry {
        Err(shared.app.clone())
    } else {
        Ok(shared.router.clone())
    };
    let (activity, budget) = (activity.clone(), shared.budget.clone());
    async move {
        let req = Request::from_parts(parts, body);
        let res = match target {
            // The registry's hot path skips the router (same middleware).
            // Boxed: the registry's future is large (every handler's
            // state), and hyper moves the future `handle` returns into its
            // own box, a copy of that size per request; on the lean path,
            // unboxed, its moves cost more than the box (callgrind: +850
            // instructions of memcpy per request against 316).
            Err(app) => Box::pin(crate::server::serve_registry(app, req)).await,
            Ok(router) => match tower::ServiceExt::oneshot(router, req).await {
                Ok(res) => res,
                Err(never) => match never {},
            },
        };
        let res = match too_slow.as_ref().and_then(|t| t.get()) {
            Some(reason) => {
                tracing::info!(client = %peer, reason, "request body too slow, answered 408");
                too_slow_response(reason, v2, manifest_put, http1)
            }
            None => res,
        };
        // The body first, then the guard: the request goes on while its
        // body is alive (the connection's timeout rule).
        let res = res.map(|b| ResponseBody::new(b, &activity, budget));
        drop(guard);
        res
    }
}

/// 408 for a request whose body was too slow (`reason`): an OCI error body
/// under `/v2/` (`MANIFEST_INVALID` for a manifest PUT, else
/// `BLOB_UPLOAD_INVALID`), plain text elsewhere; HTTP/1 connections are
/// closed after it.
fn too_slow_response(
    reason: &str,
    v2: bool,
    manifest: bool,
    http1: bool,
) -> axum::response::Response {
    let reason = format!("request body too slow: {reason}");
    let mut res = if v2 {
        let code = if manifest {
            ErrorCode::ManifestInvalid
        } else {
            ErrorCode::BlobUploadInvalid
        };
        let mut res = RegistryError::Status {
            status: StatusCode::REQUEST_TIMEOUT,
            code,
            detail: json!({ "reason": reason }),
            headers: Box::default(),
        }
        .into_response();
        res.headers_mut().insert(
            crate::registry::responses::DOCKER_DISTRIBUTION_API_VERSION,
            crate::registry::responses::API_VERSION,
        );
        res
    } else {
        (StatusCode::REQUEST_TIMEOUT, format!("{reason}\n")).into_response()
    };
    if http1 {
        res.headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    res
}
