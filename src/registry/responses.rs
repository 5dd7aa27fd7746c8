//! Typed `/v2` responses. Each implements `IntoResponse`, and every content
//! response goes through [`entity_headers`], the one place that sets
//! `Content-Type`, `Content-Length` and `Docker-Content-Digest`.
//!
//! Owns: status codes and headers of successful responses. Never reads state
//! or decides what to send; `pull` and `discovery` build these values.

use axum::Json;
use axum::body::Body;
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;

use crate::digest::Digest;
use crate::store::BoxRead;

/// `Docker-Content-Digest`: the digest of the whole entity (not of a range).
pub const DOCKER_CONTENT_DIGEST: HeaderName = HeaderName::from_static("docker-content-digest");
/// `Docker-Distribution-API-Version`, sent on every `/v2` response.
pub const DOCKER_DISTRIBUTION_API_VERSION: HeaderName =
    HeaderName::from_static("docker-distribution-api-version");
/// The value of [`DOCKER_DISTRIBUTION_API_VERSION`].
pub const API_VERSION: HeaderValue = HeaderValue::from_static("registry/2.0");

/// Read buffer for streaming blobs, in bytes (large reads, few syscalls).
pub const STREAM_BUFFER: usize = 256 * 1024;

/// Sets the entity headers of a content response: `Content-Type`,
/// `Content-Length` (bytes in this response) and `Docker-Content-Digest`.
pub fn entity_headers(
    headers: &mut HeaderMap,
    content_type: HeaderValue,
    length: u64,
    digest: &Digest,
) {
    headers.insert(header::CONTENT_TYPE, content_type);
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(length));
    if let Ok(v) = HeaderValue::from_str(&digest.to_string()) {
        headers.insert(DOCKER_CONTENT_DIGEST, v);
    }
}

/// `GET /v2/`: 200 with the body `{}` (end-1).
#[derive(Debug, Clone, Copy)]
pub struct ApiBase;

impl IntoResponse for ApiBase {
    fn into_response(self) -> Response {
        Json(serde_json::json!({})).into_response()
    }
}

/// A manifest, sent as stored (end-3): 200, `Content-Type` = the stored media
/// type, `Content-Length`, `Docker-Content-Digest`; no body for HEAD.
#[derive(Debug)]
pub struct ManifestResponse {
    /// The manifest digest.
    pub digest: Digest,
    /// The stored media type, already a valid header value.
    pub media_type: HeaderValue,
    /// Size in bytes.
    pub length: u64,
    /// The stored bytes; `None` for HEAD.
    pub body: Option<Bytes>,
}

impl IntoResponse for ManifestResponse {
    fn into_response(self) -> Response {
        let mut res = match self.body {
            Some(bytes) => Response::new(Body::from(bytes)),
            None => Response::new(Body::empty()),
        };
        entity_headers(
            res.headers_mut(),
            self.media_type,
            self.length,
            &self.digest,
        );
        res
    }
}

/// A blob (end-2): 200 for all of it or 206 for one range, streamed.
///
/// Headers: `Content-Type: application/octet-stream`, `Content-Length` (of
/// the part sent), `Docker-Content-Digest` (of the whole blob),
/// `Accept-Ranges: bytes`, `ETag: "<digest>"`, `Cache-Control` (immutable
/// content), and `Content-Range: bytes a-b/size` for 206.
pub struct BlobResponse {
    /// The blob digest.
    pub digest: Digest,
    /// Whole blob size in bytes.
    pub size: u64,
    /// `Some((start, end_inclusive))` for a 206.
    pub range: Option<(u64, u64)>,
    /// The bytes to send (exactly the range, or all); `None` for HEAD.
    pub body: Option<BoxRead>,
}

impl IntoResponse for BlobResponse {
    fn into_response(self) -> Response {
        let mut res = match self.body {
            Some(r) => Response::new(Body::from_stream(
                tokio_util::io::ReaderStream::with_capacity(r, STREAM_BUFFER),
            )),
            None => Response::new(Body::empty()),
        };
        let length = match self.range {
            Some((start, end)) => {
                *res.status_mut() = StatusCode::PARTIAL_CONTENT;
                let cr = format!("bytes {start}-{end}/{}", self.size);
                if let Ok(v) = HeaderValue::from_str(&cr) {
                    res.headers_mut().insert(header::CONTENT_RANGE, v);
                }
                end - start + 1
            }
            None => self.size,
        };
        let h = res.headers_mut();
        entity_headers(
            h,
            HeaderValue::from_static("application/octet-stream"),
            length,
            &self.digest,
        );
        h.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
        if let Ok(v) = HeaderValue::from_str(&etag(&self.digest)) {
            h.insert(header::ETAG, v);
        }
        h.insert(
            header::CACHE_CONTROL,
            HeaderValue::from_static("max-age=31536000"),
        );
        res
    }
}

/// The strong entity tag of a blob: its digest in quotes.
pub fn etag(digest: &Digest) -> String {
    format!("\"{digest}\"")
}

/// 416 for a blob range beyond its end: `Content-Range: bytes */<size>`,
/// `Accept-Ranges: bytes`, empty body (distribution-spec v1.1 has no error
/// code for ranges, so no JSON error is sent).
#[derive(Debug, Clone, Copy)]
pub struct RangeNotSatisfiable {
    /// Whole blob size in bytes.
    pub size: u64,
}

impl IntoResponse for RangeNotSatisfiable {
    fn into_response(self) -> Response {
        let mut res = StatusCode::RANGE_NOT_SATISFIABLE.into_response();
        let h = res.headers_mut();
        if let Ok(v) = HeaderValue::from_str(&format!("bytes */{}", self.size)) {
            h.insert(header::CONTENT_RANGE, v);
        }
        h.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
        res
    }
}

/// One page of a JSON listing (tags list, catalog): 200,
/// `Content-Type: application/json`, and when more entries remain
/// `Link: <next>; rel="next"` (RFC 8288).
#[derive(Debug)]
pub struct JsonPage<T> {
    /// The page body.
    pub body: T,
    /// The URL (path and query) of the next page, if any.
    pub next: Option<String>,
}

impl<T: serde::Serialize> IntoResponse for JsonPage<T> {
    fn into_response(self) -> Response {
        let mut res = Json(self.body).into_response();
        if let Some(next) = self.next
            && let Ok(v) = HeaderValue::from_str(&format!("<{next}>; rel=\"next\""))
        {
            res.headers_mut().insert(header::LINK, v);
        }
        res
    }
}
