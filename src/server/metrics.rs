//! `/metrics`: the process's metrics ([`crate::metrics`]) in the OpenMetrics
//! text format, and the middleware that counts every request.
//!
//! Owns: the route class of a path (a small fixed set, so the label never
//! grows with repository names), the request counters, bytes served (by
//! `Content-Length`) and the latency histogram (until the response head is
//! ready). Never exposes anything per repository or per client.

use std::cell::RefCell;
use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, header};
use axum::response::{IntoResponse, Response};

use super::App;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::histogram::Histogram;

use crate::metrics::{RequestLabels, RouteLabels, global};

/// `Content-Type` of the exposition (OpenMetrics 1.0 text).
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The route class of `path` (see [`RequestLabels::route`]).
pub fn route_class(path: &str) -> &'static str {
    if let Some(rest) = path.strip_prefix("/v2") {
        // The two reads of every pull first, found as `Route::parse` finds
        // them: by the second-to-last segment (a sha256 blob digest has a
        // fixed length, so its segment is found without a search).
        if crate::registry::routes::split_sha256_blob(rest).is_some() {
            return "blob";
        }
        if let Some((head, last)) = rest.rsplit_once('/')
            && !last.is_empty()
            && let Some((_, segment)) = head.rsplit_once('/')
        {
            match segment {
                "manifests" => return "manifest",
                "blobs" if last != "uploads" => return "blob",
                _ => {}
            }
        }
        return if rest.is_empty() || rest == "/" {
            "base"
        } else if rest == "/_catalog" {
            "catalog"
        } else if rest.contains("/blobs/uploads") {
            "upload"
        } else if rest.contains("/blobs/") {
            "blob"
        } else if rest.contains("/manifests/") {
            "manifest"
        } else if rest.ends_with("/tags/list") {
            "tags"
        } else if rest.contains("/referrers/") {
            "referrers"
        } else {
            "other"
        };
    }
    match path {
        "/healthz" | "/readyz" => "probe",
        "/metrics" => "metrics",
        p if p.starts_with("/stacks/v1/chunks/") => "chunk",
        p if p.starts_with("/stacks") => "stacks",
        p if p.starts_with("/torcx") => "torcx",
        p if p.starts_with("/admin") => "admin",
        _ => "other",
    }
}

fn method_label(m: &Method) -> &'static str {
    match *m {
        Method::GET => "GET",
        Method::HEAD => "HEAD",
        Method::PUT => "PUT",
        Method::POST => "POST",
        Method::PATCH => "PATCH",
        Method::DELETE => "DELETE",
        Method::OPTIONS => "OPTIONS",
        _ => "OTHER",
    }
}

/// The metric handles of one (route class, method, status): counters and
/// histograms share their values with the registered families, so a
/// handle kept here counts in `/metrics` like the family's own.
struct Handles {
    requests: Counter,
    latency: Histogram,
    /// Bytes served (`None` for HEAD, which sends no body).
    bytes: Option<Counter>,
}

/// Handles seen by this thread at most (route classes × methods × the few
/// statuses a route answers: well under this in practice).
const HANDLES_PER_THREAD: usize = 64;

/// A handle list's key: (route, method, status).
type HandleKey = (&'static str, &'static str, u16);

thread_local! {
    /// This thread's handles by (route, method, status): looked up by
    /// pointer and number, without hashing labels or taking the families'
    /// locks (the hot path of every request).
    static HANDLES: RefCell<Vec<(HandleKey, Handles)>> =
        const { RefCell::new(Vec::new()) };
}

/// Runs `f` on the handles of (route, method, status), from this thread's
/// list or the families (and then kept, up to [`HANDLES_PER_THREAD`]);
/// a kept handle is borrowed, not cloned (no reference counts touched).
fn with_handles<R>(
    route: &'static str,
    method: &'static str,
    status: u16,
    f: impl FnOnce(&Handles) -> R,
) -> R {
    let same =
        |k: &HandleKey| std::ptr::eq(k.0, route) && std::ptr::eq(k.1, method) && k.2 == status;
    HANDLES.with_borrow_mut(|v| {
        if let Some((_, h)) = v.iter().find(|(k, _)| same(k)) {
            return f(h);
        }
        let m = global();
        let labels = RouteLabels { route };
        let h = Handles {
            requests: m
                .requests
                .get_or_create(&RequestLabels {
                    route,
                    method,
                    status,
                })
                .clone(),
            latency: m.latency.get_or_create(&labels).clone(),
            bytes: (method != "HEAD").then(|| m.bytes_served.get_or_create(&labels).clone()),
        };
        let r = f(&h);
        if v.len() < HANDLES_PER_THREAD {
            v.push(((route, method, status), h));
        }
        r
    })
}

/// Middleware (see `super::front`): runs `next` on the request and counts
/// it by route class, method and status, its body bytes (HEAD sends none)
/// and its latency.
pub fn record<F>(req: Request, next: impl FnOnce(Request) -> F) -> impl Future<Output = Response>
where
    F: Future<Output = Response>,
{
    // Not an `async fn` (nor `async { f(inner.await) }`): a coroutine
    // keeps its captures beside what it awaits, so it would hold the
    // request, or the inner future twice.
    use futures_util::FutureExt as _;
    let route = route_class(req.uri().path());
    let method = method_label(req.method());
    let started = Instant::now();
    next(req).map(move |res| recorded(res, route, method, started))
}

/// Counts `res` (the answer to a `method` request of `route` that started
/// then) and returns it.
fn recorded(
    res: Response,
    route: &'static str,
    method: &'static str,
    started: Instant,
) -> Response {
    let status = res.status().as_u16();
    let latency = started.elapsed().as_secs_f64();
    with_handles(route, method, status, |h| {
        h.requests.inc();
        h.latency.observe(latency);
        if let Some(bytes) = &h.bytes
            && let Some(len) = res
                .headers()
                .get(header::CONTENT_LENGTH)
                .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
        {
            bytes.inc_by(len);
        }
    });
    if status == 507 {
        global().store_error("no_space");
    } else if status >= 500 {
        global().store_error("io");
    }
    res
}

/// `GET /metrics`: every metric, after refreshing the generation gauge from
/// the current root (a failure to read it is logged, the rest still sent);
/// the stack gauges of the stacks the caller may see (the access layer's
/// [`crate::auth::Grant`]: a user limited to repository prefixes sees the
/// stacks whose images are in them).
pub async fn metrics(
    State(app): State<Arc<App>>,
    grant: Option<axum::Extension<crate::auth::Grant>>,
) -> Response {
    let grant = grant.map(|axum::Extension(g)| g).unwrap_or_default();
    match app.state.snapshot().await {
        Ok(snap) => {
            global().generation.set(snap.generation());
            match crate::bundle::freshness::report(&app.state, &snap, None).await {
                Ok(r) => {
                    let secs = r
                        .newest
                        .as_ref()
                        .and_then(crate::bundle::freshness::created_secs);
                    global().newest_bundle_created.set(secs.unwrap_or(0));
                }
                Err(e) => tracing::warn!(error = %e, "metrics: imports document cannot be read"),
            }
            crate::sbom::report::refresh_metrics(&app.state).await;
        }
        Err(e) => tracing::warn!(error = %e, "metrics: state cannot be read"),
    }
    let mut res = crate::stacks::api::with_stack_gauges(&*app, global().render(), &grant)
        .await
        .into_response();
    res.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(CONTENT_TYPE));
    res
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_are_classed() {
        assert_eq!(route_class("/v2/"), "base");
        assert_eq!(route_class("/v2/a/b/blobs/sha256:00"), "blob");
        assert_eq!(route_class("/v2/a/blobs/uploads/x"), "upload");
        assert_eq!(route_class("/v2/a/manifests/latest"), "manifest");
        assert_eq!(route_class("/v2/a/tags/list"), "tags");
        assert_eq!(route_class("/v2/_catalog"), "catalog");
        assert_eq!(route_class("/readyz"), "probe");
        assert_eq!(route_class("/stacks/v1/x"), "stacks");
        assert_eq!(route_class("/stacks/v1/chunks/0a1b/0a1b.cacnk"), "chunk");
    }
}
