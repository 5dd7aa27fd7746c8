//! Request logging: one tracing event per request.
//!
//! Owns: the access log line: method, path, query (values of
//! credential-like parameters redacted), status, the OCI error code of an
//! error answer, the client address, a request id (also sent back as
//! `X-Request-Id`), the duration until the response head is ready (`ms`),
//! and, once the body is sent or the client went away, the body bytes
//! sent (`bytes`, as nginx's `$body_bytes_sent`) and the whole duration
//! (`total_ms`): the line is logged then. Probes (`/healthz`, `/readyz`) log at
//! debug, everything else at info; when that level is off, nothing is done.
//! Never logs headers (they may carry
//! credentials).

use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use axum::extract::Request;
use axum::http::HeaderValue;
use axum::response::Response;

use crate::registry::errors::LoggedCode;

/// The peer address of the connection a request came on (a request
/// extension set by the accept loop: axum's own, which the registry reads
/// too, so that one insert serves every reader).
pub type ClientAddr = axum::extract::ConnectInfo<SocketAddr>;

/// Query parameters whose values are never logged (compared case-insensitively;
/// a name containing one of these is redacted too, e.g. `X-Amz-Signature`).
const SECRET_PARAMS: [&str; 7] = [
    "token",
    "password",
    "secret",
    "signature",
    "credential",
    "auth",
    "key",
];

/// The query with the values of credential-like parameters replaced by
/// `REDACTED`; `-` when there is none.
pub fn redacted_query(query: Option<&str>) -> String {
    let Some(q) = query.filter(|q| !q.is_empty()) else {
        return "-".into();
    };
    q.split('&')
        .map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            let lower = k.to_ascii_lowercase();
            if !v.is_empty() && SECRET_PARAMS.iter().any(|s| lower.contains(s)) {
                format!("{k}=REDACTED")
            } else {
                pair.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("&")
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// A fresh request id (16 hex digits), as `X-Request-Id` carries it.
pub fn next_request_id() -> String {
    format!("{:016x}", NEXT_ID.fetch_add(1, Ordering::Relaxed))
}

/// Middleware (see `super::front`): runs `next` on the request, sets
/// `X-Request-Id`, and logs it. When the log level would drop the line,
/// the request runs untouched (no work on the hot path).
pub fn log_request<F>(
    req: Request,
    next: impl FnOnce(Request) -> F,
) -> futures_util::future::Either<F, impl Future<Output = Response>>
where
    F: Future<Output = Response>,
{
    // Not an `async fn`: its future would hold `req` beside `next`'s (see
    // `metrics::record`), and a request that is not logged would still pay
    // for the wrapper.
    use futures_util::future::Either;
    let probe = matches!(req.uri().path(), "/healthz" | "/readyz");
    let enabled = if probe {
        tracing::enabled!(tracing::Level::DEBUG)
    } else {
        tracing::enabled!(tracing::Level::INFO)
    };
    if !enabled {
        return Either::Left(next(req));
    }
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    let query = redacted_query(req.uri().query());
    let client = req
        .extensions()
        .get::<ClientAddr>()
        .map_or_else(|| "-".to_string(), |c| c.0.to_string());
    let id = next_request_id();
    let line = Line {
        method,
        path,
        query,
        status: 0,
        code: "-",
        client,
        id,
        ms: 0.0,
        started: Instant::now(),
        probe,
    };
    Either::Right(futures_util::FutureExt::map(next(req), move |res| {
        logged(res, line)
    }))
}

/// `res` with the access log `line` of its request completed, written
/// when the body ends ([`Counted`]).
fn logged(mut res: Response, mut line: Line) -> Response {
    line.status = res.status().as_u16();
    line.code = res.extensions().get::<LoggedCode>().map_or("-", |c| c.0);
    if let Ok(v) = HeaderValue::from_str(&line.id) {
        res.headers_mut().insert("x-request-id", v);
    }
    line.ms = line.started.elapsed().as_secs_f64() * 1000.0;
    let (parts, body) = res.into_parts();
    Response::from_parts(
        parts,
        axum::body::Body::new(Counted {
            inner: body,
            bytes: 0,
            line: Some(line),
        }),
    )
}

/// What the access log line says, waiting for the body's end.
struct Line {
    method: axum::http::Method,
    path: String,
    query: String,
    status: u16,
    code: &'static str,
    client: String,
    id: String,
    ms: f64,
    started: Instant,
    probe: bool,
}

impl Line {
    fn log(self, bytes: u64) {
        let Line {
            method,
            path,
            query,
            status,
            code,
            client,
            id,
            ms,
            started,
            probe,
        } = self;
        let total_ms = started.elapsed().as_secs_f64() * 1000.0;
        if probe {
            tracing::debug!(%method, %path, %query, status, code, %client, request_id = %id, ms, bytes, total_ms, "request");
        } else {
            tracing::info!(%method, %path, %query, status, code, %client, request_id = %id, ms, bytes, total_ms, "request");
        }
    }
}

/// A response body that counts the bytes it sends and logs its request's
/// line when it ends or is dropped (a client that went away).
struct Counted {
    inner: axum::body::Body,
    bytes: u64,
    line: Option<Line>,
}

impl hyper::body::Body for Counted {
    type Data = bytes::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        let polled = std::pin::Pin::new(&mut self.inner).poll_frame(cx);
        match &polled {
            std::task::Poll::Ready(Some(Ok(frame))) => {
                if let Some(d) = frame.data_ref() {
                    self.bytes += d.len() as u64;
                }
            }
            std::task::Poll::Ready(None) => {
                if let Some(l) = self.line.take() {
                    l.log(self.bytes);
                }
            }
            _ => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        if let Some(l) = self.line.take() {
            l.log(self.bytes);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_in_queries_are_redacted() {
        assert_eq!(redacted_query(None), "-");
        assert_eq!(
            redacted_query(Some("ns=registry.local%3A5000&n=10")),
            "ns=registry.local%3A5000&n=10"
        );
        assert_eq!(
            redacted_query(Some("access_token=abc&X-Amz-Signature=f00&ns=docker.io")),
            "access_token=REDACTED&X-Amz-Signature=REDACTED&ns=docker.io"
        );
        assert_eq!(redacted_query(Some("password")), "password");
    }
}
