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

use crate::digest::{Digest, DigestMap};
use crate::store::ByteStream;

/// `Docker-Content-Digest`: the digest of the whole entity (not of a range).
pub const DOCKER_CONTENT_DIGEST: HeaderName = HeaderName::from_static("docker-content-digest");
/// `Docker-Distribution-API-Version`, sent on every `/v2` response.
pub const DOCKER_DISTRIBUTION_API_VERSION: HeaderName =
    HeaderName::from_static("docker-distribution-api-version");
/// The value of [`DOCKER_DISTRIBUTION_API_VERSION`].
pub const API_VERSION: HeaderValue = HeaderValue::from_static("registry/2.0");

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
    if let Ok(v) = HeaderValue::from_maybe_shared(bytes::Bytes::from(digest.text())) {
        headers.insert(DOCKER_CONTENT_DIGEST, v);
    }
}

/// Response heads built once per digest and reused (per worker thread, so
/// no lock): the headers of a whole blob or a manifest depend only on what
/// the digest names (its length, and a manifest's stored media type, which
/// is compared), and building them costs more than the rest of a small
/// GET. At most [`HEADS_MAX`] heads per kind; a full cache starts over.
struct Heads {
    blobs: DigestMap<Digest, Head>,
    manifests: DigestMap<Digest, Head>,
}

/// A kept head and the `Content-Length` it says.
struct Head {
    length: u64,
    headers: HeaderMap,
}

/// Heads kept per kind and worker thread (about 1 KiB each).
const HEADS_MAX: usize = 1024;

thread_local! {
    static HEADS: std::cell::RefCell<Heads> = std::cell::RefCell::new(Heads {
        blobs: DigestMap::default(),
        manifests: DigestMap::default(),
    });
}

/// The head `pick` selects for `digest` when it says `length` and `fits`
/// accepts it, else the one `build` makes (kept for the next request).
fn cached_head(
    pick: fn(&mut Heads) -> &mut DigestMap<Digest, Head>,
    digest: &Digest,
    length: u64,
    fits: impl Fn(&HeaderMap) -> bool,
    build: impl FnOnce() -> HeaderMap,
) -> HeaderMap {
    HEADS.with_borrow_mut(|heads| {
        let map = pick(heads);
        if let Some(h) = map
            .get(digest)
            .filter(|h| h.length == length && fits(&h.headers))
        {
            return h.headers.clone();
        }
        let mut h = build();
        // Every `/v2` response gains it on its way out; set here, that is
        // a replacement, not a growth of the cloned map.
        h.insert(DOCKER_DISTRIBUTION_API_VERSION, API_VERSION);
        if map.len() >= HEADS_MAX {
            map.clear();
        }
        map.insert(
            digest.clone(),
            Head {
                length,
                headers: h.clone(),
            },
        );
        h
    })
}

/// Room for the headers of a content response and the few every `/v2`
/// response gains on its way out, allocated once (a map that grows is
/// allocated and rehashed again).
const CONTENT_HEADERS: usize = 12;

/// A response with `body` (none: empty) and no headers yet.
fn content_response(body: Option<ByteStream>) -> Response {
    match body {
        Some(s) => Response::new(Body::from_stream(s)),
        None => Response::new(Body::empty()),
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
pub struct ManifestResponse {
    /// The manifest digest.
    pub digest: Digest,
    /// The stored media type, already a valid header value.
    pub media_type: HeaderValue,
    /// Size in bytes.
    pub length: u64,
    /// The stored bytes (read whole and verified before a byte is sent,
    /// at most `oci::MAX_MANIFEST_SIZE`); `None` for HEAD.
    pub body: Option<bytes::Bytes>,
}

impl IntoResponse for ManifestResponse {
    fn into_response(self) -> Response {
        let mut res = Response::new(self.body.map_or_else(Body::empty, Body::from));
        let (digest, length, media_type) = (&self.digest, self.length, self.media_type);
        *res.headers_mut() = cached_head(
            |h| &mut h.manifests,
            digest,
            length,
            |h| h.get(header::CONTENT_TYPE) == Some(&media_type),
            || {
                let mut h = HeaderMap::with_capacity(CONTENT_HEADERS);
                entity_headers(&mut h, media_type.clone(), length, digest);
                h
            },
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
    pub body: Option<ByteStream>,
}

impl IntoResponse for BlobResponse {
    fn into_response(self) -> Response {
        let mut res = content_response(self.body);
        let (digest, size) = (&self.digest, self.size);
        *res.headers_mut() = match self.range {
            None => cached_head(
                |h| &mut h.blobs,
                digest,
                size,
                |_| true,
                || blob_head(digest, size),
            ),
            Some((start, end)) => {
                *res.status_mut() = StatusCode::PARTIAL_CONTENT;
                let mut h = blob_head(digest, end - start + 1);
                if let Ok(v) = HeaderValue::from_str(&format!("bytes {start}-{end}/{size}")) {
                    h.insert(header::CONTENT_RANGE, v);
                }
                h
            }
        };
        res
    }
}

/// The headers of a blob response of `length` bytes (see [`BlobResponse`];
/// `Content-Range` is the caller's).
fn blob_head(digest: &Digest, length: u64) -> HeaderMap {
    let mut h = HeaderMap::with_capacity(CONTENT_HEADERS);
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    h.insert(header::CONTENT_LENGTH, HeaderValue::from(length));
    // `"<digest>"` once: the ETag, and the digest header a slice of it.
    let tag = bytes::Bytes::from(etag(digest));
    if let Ok(v) = HeaderValue::from_maybe_shared(tag.slice(1..tag.len() - 1)) {
        h.insert(DOCKER_CONTENT_DIGEST, v);
    }
    h.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    if let Ok(v) = HeaderValue::from_maybe_shared(tag) {
        h.insert(header::ETAG, v);
    }
    h.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("max-age=31536000"),
    );
    h
}

/// The strong entity tag of a blob: its digest in quotes.
pub fn etag(digest: &Digest) -> String {
    let text = digest.text();
    let mut tag = String::with_capacity(text.len() + 2);
    tag.push('"');
    tag.push_str(&text);
    tag.push('"');
    tag
}

/// 416 for a blob range beyond its end: `Content-Range: bytes */<size>`,
/// `Accept-Ranges: bytes`, and an OCI error body like every answer under
/// `/v2/` (distribution-spec v1.1 has no code for ranges: `SIZE_INVALID`,
/// with the blob's size in `detail`).
#[derive(Debug, Clone, Copy)]
pub struct RangeNotSatisfiable {
    /// Whole blob size in bytes.
    pub size: u64,
}

impl IntoResponse for RangeNotSatisfiable {
    fn into_response(self) -> Response {
        let mut headers = HeaderMap::new();
        if let Ok(v) = HeaderValue::from_str(&format!("bytes */{}", self.size)) {
            headers.insert(header::CONTENT_RANGE, v);
        }
        headers.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
        super::errors::RegistryError::Status {
            status: StatusCode::RANGE_NOT_SATISFIABLE,
            code: super::errors::ErrorCode::SizeInvalid,
            detail: serde_json::json!({
                "reason": "requested range not satisfiable",
                "size": self.size,
            }),
            headers: Box::new(headers),
        }
        .into_response()
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

/// `Docker-Upload-UUID`: the upload session id.
pub const DOCKER_UPLOAD_UUID: HeaderName = HeaderName::from_static("docker-upload-uuid");
/// `OCI-Subject`: the `subject` digest of a pushed manifest (referrers API).
pub const OCI_SUBJECT: HeaderName = HeaderName::from_static("oci-subject");
/// `OCI-Filters-Applied`: the filters a referrers response applied.
pub const OCI_FILTERS_APPLIED: HeaderName = HeaderName::from_static("oci-filters-applied");

fn set(headers: &mut HeaderMap, name: HeaderName, value: &str) {
    if let Ok(v) = HeaderValue::from_str(value) {
        headers.insert(name, v);
    }
}

/// 201 Created for a stored blob (end-4b, end-6, end-11) or manifest
/// (end-7): `Location` (the content's URL), `Docker-Content-Digest`,
/// `Content-Length: 0`, and `OCI-Subject` for a manifest with a `subject`.
#[derive(Debug)]
pub struct Created {
    /// Path of the new content, e.g. `/v2/<name>/blobs/<digest>`.
    pub location: String,
    /// Its digest.
    pub digest: Digest,
    /// The manifest's `subject`, if any.
    pub subject: Option<Digest>,
}

impl IntoResponse for Created {
    fn into_response(self) -> Response {
        let mut res = StatusCode::CREATED.into_response();
        let h = res.headers_mut();
        set(h, header::LOCATION, &self.location);
        set(h, DOCKER_CONTENT_DIGEST, &self.digest.to_string());
        h.insert(header::CONTENT_LENGTH, HeaderValue::from(0));
        if let Some(s) = self.subject {
            set(h, OCI_SUBJECT, &s.to_string());
        }
        res
    }
}

/// Where an upload session stands: 202 after POST (end-4a) and PATCH
/// (end-5), 204 for GET (end-13). Headers: `Location` (the session URL),
/// `Range: 0-<last byte received>` (`0-0` before the first byte, as
/// distribution sends), `Docker-Upload-UUID`, and `Content-Length: 0` on 202
/// (a 204 carries no `Content-Length`, RFC 9110 §8.6).
#[derive(Debug)]
pub struct UploadStatus {
    /// 202 or 204.
    pub status: StatusCode,
    /// The session URL, `/v2/<name>/blobs/uploads/<uuid>`.
    pub location: String,
    /// The session id.
    pub uuid: String,
    /// Bytes received so far.
    pub offset: u64,
}

impl UploadStatus {
    /// The headers shared by this response and a 416 for the same session.
    pub fn headers(&self) -> HeaderMap {
        let mut h = HeaderMap::new();
        set(&mut h, header::LOCATION, &self.location);
        set(
            &mut h,
            header::RANGE,
            &format!("0-{}", self.offset.saturating_sub(1)),
        );
        set(&mut h, DOCKER_UPLOAD_UUID, &self.uuid);
        h
    }
}

impl IntoResponse for UploadStatus {
    fn into_response(self) -> Response {
        let mut res = self.status.into_response();
        let headers = self.headers();
        let h = res.headers_mut();
        h.extend(headers);
        if self.status != StatusCode::NO_CONTENT {
            h.insert(header::CONTENT_LENGTH, HeaderValue::from(0));
        }
        res
    }
}

/// 202 Accepted with `Content-Length: 0`: a delete took effect (end-9, end-10).
#[derive(Debug, Clone, Copy)]
pub struct Accepted;

impl IntoResponse for Accepted {
    fn into_response(self) -> Response {
        let mut res = StatusCode::ACCEPTED.into_response();
        res.headers_mut()
            .insert(header::CONTENT_LENGTH, HeaderValue::from(0));
        res
    }
}

/// 204 No Content: an upload session was cancelled.
#[derive(Debug, Clone, Copy)]
pub struct NoContent;

impl IntoResponse for NoContent {
    fn into_response(self) -> Response {
        StatusCode::NO_CONTENT.into_response()
    }
}

/// The referrers list (end-12a/12b): 200, an image index,
/// `Content-Type: application/vnd.oci.image.index.v1+json`, and
/// `OCI-Filters-Applied: artifactType` when the list was filtered.
#[derive(Debug)]
pub struct ReferrersResponse {
    /// The serialized index.
    pub body: Vec<u8>,
    /// Whether an `artifactType` filter was applied.
    pub filtered: bool,
    /// The URL (path and query) of the next page, if any (`Link: <..>; rel="next"`).
    pub next: Option<String>,
}

impl IntoResponse for ReferrersResponse {
    fn into_response(self) -> Response {
        let len = self.body.len() as u64;
        let mut res = Response::new(Body::from(self.body));
        let h = res.headers_mut();
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static(crate::oci::OCI_INDEX),
        );
        h.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
        if self.filtered {
            h.insert(
                OCI_FILTERS_APPLIED,
                HeaderValue::from_static("artifactType"),
            );
        }
        if let Some(next) = self.next
            && let Ok(v) = HeaderValue::from_str(&format!("<{next}>; rel=\"next\""))
        {
            h.insert(header::LINK, v);
        }
        res
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header<'a>(res: &'a Response, name: &str) -> &'a str {
        res.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_else(|| panic!("no {name}"))
    }

    fn blob(digest: &Digest, size: u64, range: Option<(u64, u64)>) -> Response {
        BlobResponse {
            digest: digest.clone(),
            size,
            range,
            body: None,
        }
        .into_response()
    }

    #[test]
    fn a_reused_blob_head_follows_the_size_and_range_of_each_response() {
        let d = Digest::sha256_of(b"reused blob head");
        let text = d.to_string();
        let first = blob(&d, 10, None);
        let again = blob(&d, 10, None);
        for res in [&first, &again] {
            assert_eq!(res.status(), StatusCode::OK);
            assert_eq!(header(res, "content-length"), "10");
            assert_eq!(header(res, "docker-content-digest"), text);
            assert_eq!(header(res, "etag"), format!("\"{text}\""));
            assert_eq!(header(res, "content-type"), "application/octet-stream");
            assert_eq!(header(res, "accept-ranges"), "bytes");
            assert_eq!(header(res, "cache-control"), "max-age=31536000");
            assert_eq!(
                header(res, "docker-distribution-api-version"),
                "registry/2.0"
            );
            assert!(res.headers().get("content-range").is_none());
        }
        // Another size for the same digest (a store that disagrees with
        // the state): never the cached length.
        assert_eq!(header(&blob(&d, 11, None), "content-length"), "11");
        assert_eq!(header(&blob(&d, 10, None), "content-length"), "10");
        let part = blob(&d, 10, Some((2, 5)));
        assert_eq!(part.status(), StatusCode::PARTIAL_CONTENT);
        assert_eq!(header(&part, "content-length"), "4");
        assert_eq!(header(&part, "content-range"), "bytes 2-5/10");
        assert!(blob(&d, 10, None).headers().get("content-range").is_none());
    }

    #[test]
    fn a_reused_manifest_head_follows_the_media_type_and_length() {
        let d = Digest::sha256_of(b"reused manifest head");
        let manifest = |mt: &'static str, length| {
            ManifestResponse {
                digest: d.clone(),
                media_type: HeaderValue::from_static(mt),
                length,
                body: None,
            }
            .into_response()
        };
        let oci = "application/vnd.oci.image.manifest.v1+json";
        let docker = "application/vnd.docker.distribution.manifest.v2+json";
        for (mt, length) in [(oci, 7), (oci, 7), (docker, 7), (oci, 8), (oci, 7)] {
            let res = manifest(mt, length);
            assert_eq!(header(&res, "content-type"), mt);
            assert_eq!(header(&res, "content-length"), length.to_string());
            assert_eq!(header(&res, "docker-content-digest"), d.to_string());
        }
    }

    #[test]
    fn a_full_head_cache_starts_over() {
        for i in 0..HEADS_MAX + 3 {
            let d = Digest::sha256_of(format!("head {i}").as_bytes());
            let res = blob(&d, i as u64, None);
            assert_eq!(header(&res, "content-length"), i.to_string());
        }
        assert!(HEADS.with_borrow(|h| h.blobs.len()) <= HEADS_MAX);
    }
}
