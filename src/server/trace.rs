//! Request logging: one tracing event per request.
//!
//! Owns: the access log line (method, path, status, duration until the
//! response head is ready; streamed bodies may take longer). Probes
//! (`/healthz`, `/readyz`) log at debug, everything else at info. Never logs
//! query strings or headers (they may carry credentials).

use std::time::Instant;

use axum::extract::Request;
use axum::middleware::Next;
use axum::response::Response;

/// Middleware: runs the request and logs it.
pub async fn log_request(req: Request, next: Next) -> Response {
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    let started = Instant::now();
    let res = next.run(req).await;
    let status = res.status().as_u16();
    let ms = started.elapsed().as_secs_f64() * 1000.0;
    if path == "/healthz" || path == "/readyz" {
        tracing::debug!(%method, %path, status, ms, "request");
    } else {
        tracing::info!(%method, %path, status, ms, "request");
    }
    res
}
