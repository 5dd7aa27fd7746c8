//! Cache headers of the stacks downloads: one rule for every file a cell
//! fetches (`rootfs.tar` here, `rootfs.caibx` in the chunks room), so that a
//! cache between cells and airlock never keeps a rootfs that a promotion,
//! a widened rollout or a rollback replaced.
//!
//! | URL | `Cache-Control` (RFC 9111 §5.2.2) |
//! | --- | --- |
//! | names its content by digest (`?digest=D`) | `public, max-age=31536000, immutable` |
//! | anything else (the stack's current rootfs, a cell's `?cell=ID`) | `no-cache` (a cache must revalidate every time) |
//!
//! Both carry `ETag` (the blob digest in quotes, as the registry's), and
//! a GET or HEAD whose `If-None-Match` names that tag (weak comparison,
//! RFC 9110 §13.1.2) is answered 304 Not Modified with no body: a
//! revalidation costs one round trip, never a rootfs.
//!
//! Owns: the decision and the headers. Never reads the store.

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::Response;

use crate::digest::Digest;
use crate::registry::query::QueryParams;
use crate::registry::responses::etag;

/// How a download URL names what it serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Addressing {
    /// By digest: the answer never changes.
    ByDigest,
    /// By stack (and cell): the answer changes at promote, widen and rollback.
    Mutable,
}

impl Addressing {
    /// `ByDigest` when the query names a `digest`, else `Mutable`.
    pub fn of(query: &QueryParams) -> Addressing {
        if query.get("digest").is_some() {
            Addressing::ByDigest
        } else {
            Addressing::Mutable
        }
    }

    /// The `Cache-Control` value (see the module table).
    pub fn cache_control(self) -> HeaderValue {
        HeaderValue::from_static(match self {
            Addressing::ByDigest => "public, max-age=31536000, immutable",
            Addressing::Mutable => "no-cache",
        })
    }
}

/// Whether `If-None-Match` in `headers` names `digest`'s entity tag (or is `*`).
fn matches(headers: &HeaderMap, digest: &Digest) -> bool {
    let tag = etag(digest);
    headers
        .get_all(header::IF_NONE_MATCH)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .any(|t| t == "*" || t.strip_prefix("W/").unwrap_or(t) == tag)
}

/// Sets `Cache-Control` and `ETag` of a download of blob `digest`.
pub fn apply(res: &mut Response, digest: &Digest, addressing: Addressing) {
    let h = res.headers_mut();
    h.insert(header::CACHE_CONTROL, addressing.cache_control());
    if let Ok(v) = HeaderValue::from_str(&etag(digest)) {
        h.insert(header::ETAG, v);
    }
}

/// 304 Not Modified (with `Cache-Control` and `ETag`) when the request's
/// `If-None-Match` names blob `digest`; `None`: send the content.
pub fn not_modified(
    headers: &HeaderMap,
    digest: &Digest,
    addressing: Addressing,
) -> Option<Response> {
    if !matches(headers, digest) {
        return None;
    }
    let mut res = Response::new(Body::empty());
    *res.status_mut() = StatusCode::NOT_MODIFIED;
    apply(&mut res, digest, addressing);
    Some(res)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn revalidation_matches_the_blob_tag_only() {
        let d = Digest::sha256_of(b"rootfs");
        let mut h = HeaderMap::new();
        assert!(not_modified(&h, &d, Addressing::Mutable).is_none());
        let value = format!("\"sha256:00\", W/\"{}\"", d.text());
        h.insert(
            header::IF_NONE_MATCH,
            HeaderValue::from_str(&value).unwrap(),
        );
        let res = not_modified(&h, &d, Addressing::Mutable).unwrap();
        assert_eq!(res.status(), 304);
        assert_eq!(res.headers()[header::CACHE_CONTROL], "no-cache");
        assert_eq!(res.headers()[header::ETAG], format!("\"{}\"", d.text()));
        h.insert(
            header::IF_NONE_MATCH,
            HeaderValue::from_static("\"sha256:00\""),
        );
        assert!(not_modified(&h, &d, Addressing::ByDigest).is_none());
    }
}
