//! Failed S3 requests as store errors, with a one-line cause: the
//! service's error code and message, or what failed on the way (the
//! connection, a timeout), each cause once, never the SDK's debug dump.

use aws_sdk_s3::config::http::HttpResponse;
use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};

use crate::store::StoreError;

/// The HTTP status of a failed request, if it got a response.
pub(super) fn status<E>(e: &SdkError<E, HttpResponse>) -> Option<u16> {
    e.raw_response().map(|r| r.status().as_u16())
}

/// A store error for a failed request (after the client's retries):
/// `NotFound` on 404; `Unavailable` when the store did not answer in time,
/// could not be reached, or answered 5xx or 429 (an outage: the caller
/// answers 503 with `Retry-After`); else `Io`; each with a one-line cause
/// naming the operation and the key
/// (`S3 GetObject blobs/...: AccessDenied: Access Denied (HTTP 403)`,
/// `S3 PutObject refs/root: connection failed: ...: Connection refused (os error 111)`).
pub(super) fn error<E>(op: &str, key: &str, e: SdkError<E, HttpResponse>) -> StoreError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    let code = status(&e);
    if code == Some(404) {
        return StoreError::NotFound(key.to_string());
    }
    let text = format!("S3 {op} {key}: {}", cause(&e));
    let outage = matches!(e, SdkError::DispatchFailure(_) | SdkError::TimeoutError(_))
        || matches!(code, Some(429 | 500..=599));
    match outage {
        true => StoreError::Unavailable(text),
        false => StoreError::Io(std::io::Error::other(text)),
    }
}

/// One line saying why `e` failed: for an answer of the service, its error
/// code and message and the HTTP status; otherwise what failed (the
/// connection, a timeout, the response, building the request) and the
/// chain of causes below it, each once (an error that prints its source
/// is not followed by that source's text again), newlines flattened.
pub(super) fn cause<E>(e: &SdkError<E, HttpResponse>) -> String
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
{
    let what = match e {
        SdkError::ServiceError(se) => {
            let status = se.raw().status().as_u16();
            let err = se.err();
            return match (err.code(), err.message()) {
                (Some(code), Some(msg)) => format!("{code}: {msg} (HTTP {status})"),
                (Some(code), None) => format!("{code} (HTTP {status})"),
                _ => format!("HTTP {status}"),
            }
            .replace('\n', " ");
        }
        SdkError::DispatchFailure(_) => "connection failed",
        SdkError::TimeoutError(_) => "timed out",
        SdkError::ResponseError(_) => "unreadable response",
        SdkError::ConstructionFailure(_) => "request not built",
        _ => "failed",
    };
    with_sources(what.to_string(), std::error::Error::source(e))
}

/// `out` followed by each of the causes from `cur` down that it does not
/// say already, newlines flattened.
fn with_sources(mut out: String, mut cur: Option<&(dyn std::error::Error + 'static)>) -> String {
    while let Some(c) = cur {
        let text = c.to_string().replace('\n', " ");
        if !text.is_empty() && !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        cur = c.source();
    }
    out
}

/// An error reading the body of `GetObject` of `key`, with its causes
/// (the SDK's own text is only "streaming error").
pub(super) fn body_error(key: &str, e: impl std::error::Error) -> std::io::Error {
    let text = with_sources(e.to_string(), e.source());
    std::io::Error::other(format!("S3 GetObject {key}: reading the body: {text}"))
}
