//! Pull (distribution-spec v1.1 "Pulling manifests", "Pulling blobs",
//! "Checking if content exists"): end-2 and end-3.
//!
//! Owns: resolving a reference in one state snapshot, manifest content
//! negotiation, and the rule that a blob is served from a repository only if
//! it is linked there (or is one of its manifests). Never changes state and
//! never converts a manifest: what was stored is what is sent.

use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::errors::{ErrorCode, RegistryError, Result};
use super::links;
use super::range::RangeOutcome;
use super::responses::{BlobResponse, ManifestResponse, RangeNotSatisfiable, etag};
use crate::digest::Digest;
use crate::names::{Reference, RepositoryName};
use crate::state::{Repository, Snapshot, StateStore};
use crate::store::hot::HOT_BLOB_MAX;
use crate::store::{self, StoreError, blob_key};

/// The repository `name` in the current snapshot; 404 `NAME_UNKNOWN` if absent.
pub async fn repository(state: &StateStore, name: &RepositoryName) -> Result<Repository> {
    repository_in(state, &*state.snapshot().await?, name).await
}

async fn repository_in(
    state: &StateStore,
    snap: &Snapshot,
    name: &RepositoryName,
) -> Result<Repository> {
    state
        .repository(snap, name)
        .await?
        .ok_or_else(|| RegistryError::new(ErrorCode::NameUnknown, json!({ "name": name })))
}

/// The manifest `reference` names in `name` in `snap`: its digest and record.
async fn find_manifest(
    state: &StateStore,
    snap: &Snapshot,
    name: &RepositoryName,
    reference: &Reference,
) -> Result<(Digest, crate::state::ManifestInfo)> {
    let repo = repository_in(state, snap, name).await?;
    let unknown = || {
        RegistryError::new(
            ErrorCode::ManifestUnknown,
            json!({ "name": name, "reference": reference.to_string() }),
        )
    };
    let digest = match reference {
        Reference::Tag(t) => repo.tag(t).await?.ok_or_else(unknown)?,
        Reference::Digest(d) => d.clone(),
    };
    let info = repo.manifest(&digest).await?.ok_or_else(unknown)?;
    Ok((digest, info))
}

/// The repository `name` in `snap` and the size recorded when `digest`
/// was linked there (as a blob, or a manifest): what is sent as its
/// length, whatever the store says of the object.
async fn recorded_size(
    state: &StateStore,
    snap: &Snapshot,
    name: &RepositoryName,
    digest: &Digest,
) -> Result<(Option<Repository>, Option<u64>)> {
    let repo = state.repository(snap, name).await?;
    let recorded = match &repo {
        Some(r) => match r.blob(digest).await? {
            Some(size) => Some(size),
            None => r.manifest(digest).await?.map(|m| m.size),
        },
        None => None,
    };
    Ok((repo, recorded))
}

/// Whether `e` is a 404 that a newer root might answer.
fn is_unknown(e: &RegistryError) -> bool {
    matches!(
        e,
        RegistryError::Api {
            code: ErrorCode::NameUnknown | ErrorCode::ManifestUnknown | ErrorCode::BlobUnknown,
            ..
        }
    )
}

/// GET/HEAD `/v2/<name>/manifests/<reference>` (end-3).
///
/// Resolves a tag or digest in `name` and streams the stored bytes from the
/// store (GET), or just the headers (HEAD, `head = true`),
/// with the media type they were stored as. `Accept` is not consulted: the
/// stored bytes are never converted and never hidden, so a client that does
/// not know the type fails with a clear media-type error rather than a
/// misleading "not found" (what zot and Harbor do; the spec leaves it open).
///
/// Errors: `NAME_UNKNOWN` (no such repository), `MANIFEST_UNKNOWN` (no such
/// tag or digest in it), internal errors for store failures or content that
/// no longer matches its digest.
pub async fn manifest(
    state: &StateStore,
    name: &RepositoryName,
    reference: &Reference,
    head: bool,
) -> Result<ManifestResponse> {
    let arrived = std::time::Instant::now();
    let found = find_manifest(state, &*state.snapshot().await?, name, reference).await;
    let (digest, mut info) = match found {
        // A tag or digest another replica made or served since this one
        // read the root: a miss is checked against the current root.
        Err(e) if is_unknown(&e) => {
            find_manifest(
                state,
                &*state.snapshot_since(arrived).await?,
                name,
                reference,
            )
            .await?
        }
        other => other?,
    };
    let unknown = || {
        RegistryError::new(
            ErrorCode::ManifestUnknown,
            json!({ "name": name, "reference": reference.to_string() }),
        )
    };
    // The record is this request's own copy: its string becomes the
    // header value without another copy.
    let media_type = std::mem::take(&mut info.media_type);
    let media_type =
        HeaderValue::from_maybe_shared(bytes::Bytes::from(media_type)).map_err(|_| {
            RegistryError::Internal(format!(
                "stored media type of {digest} is not a header value"
            ))
        })?;
    let missing = |e: StoreError| match e {
        StoreError::NotFound(_) | StoreError::Corrupt(_) | StoreError::Mismatch(_) => {
            tracing::warn!(%digest, %name, "manifest recorded in state is missing from the blobstore (or was quarantined)");
            unknown()
        }
        other => other.into(),
    };
    if head {
        // HEAD checks the stored bytes too: a corrupt manifest is never announced.
        if store::check(&**state.blobstore(), &digest).await?.is_none() {
            return Err(missing(StoreError::NotFound(blob_key(&digest))));
        }
        return Ok(ManifestResponse {
            digest,
            media_type,
            length: info.size,
            body: None,
        });
    }
    // Read whole (at most `MAX_MANIFEST_SIZE`, the size recorded at push)
    // through the store's read path, which verifies content, before a byte
    // is sent: the length sent is the recorded one, never what the store
    // says of the object (a proxy answered HEAD with `Content-Length: 0`).
    let store = state.blobstore();
    let key = blob_key(&digest);
    let (_, body) = store
        .stream_sized(&key)
        .await
        .map_err(missing)?
        .ok_or_else(|| missing(StoreError::NotFound(key)))?;
    let bytes = collect_exact(body, info.size).await.map_err(|e| match e {
        Collected::Store(e) => missing(e),
        Collected::Length(got) => wrong_length("manifest", &digest, name, info.size, got),
    })?;
    Ok(ManifestResponse {
        digest,
        media_type,
        length: info.size,
        body: Some(bytes),
    })
}

/// Why [`collect_exact`] failed.
enum Collected {
    /// The store's read failed (among them: content that fails its digest).
    Store(StoreError),
    /// The body was not the expected length: the bytes it had (at most
    /// one past the expected length).
    Length(u64),
}

/// The whole of `body`, which must be exactly `len` bytes. A body that
/// comes in one chunk (a small object the store holds in memory) is
/// returned as that chunk, without a copy.
async fn collect_exact(
    mut body: store::ByteStream,
    len: u64,
) -> std::result::Result<bytes::Bytes, Collected> {
    use futures_util::StreamExt;
    let mut first = bytes::Bytes::new();
    // Only filled (first chunk, then the rest) when a second chunk comes.
    let mut joined = bytes::BytesMut::new();
    while let Some(chunk) = body.next().await {
        let chunk = chunk.map_err(|e| Collected::Store(StoreError::Io(e)))?;
        let have = first.len() + joined.len();
        if (have + chunk.len()) as u64 > len {
            return Err(Collected::Length(len + 1));
        }
        if have == 0 {
            first = chunk;
            continue;
        }
        if joined.is_empty() {
            joined.reserve(len.min(crate::oci::MAX_MANIFEST_SIZE) as usize);
            joined.extend_from_slice(&std::mem::take(&mut first));
        }
        joined.extend_from_slice(&chunk);
    }
    let whole = if joined.is_empty() {
        first
    } else {
        joined.freeze()
    };
    if whole.len() as u64 != len {
        return Err(Collected::Length(whole.len() as u64));
    }
    Ok(whole)
}

/// The answer to a read of the `what` (`"manifest"`, `"blob"`) `digest` of
/// `name` whose store bytes were `got` long where `recorded` were
/// expected: logged (error), not served, an internal error.
fn wrong_length(
    what: &str,
    digest: &Digest,
    name: &RepositoryName,
    recorded: u64,
    got: u64,
) -> RegistryError {
    tracing::error!(%digest, %name, recorded, got, "the store's {what} bytes are not the recorded length; not served");
    RegistryError::Internal(format!(
        "the store returned {got} bytes for {what} {digest} of {recorded} bytes"
    ))
}

/// A blob GET/HEAD's answer ([`blob`]).
pub struct BlobAnswer {
    /// The response.
    pub response: Response,
    /// Its whole body, for a `200 OK` with all of a small blob (at most
    /// [`HOT_BLOB_MAX`] bytes) the state's tree names: what
    /// [`super::kept`] may keep.
    pub whole: Option<bytes::Bytes>,
}

impl From<Response> for BlobAnswer {
    fn from(response: Response) -> BlobAnswer {
        BlobAnswer {
            response,
            whole: None,
        }
    }
}

/// How long a redirect's presigned URL is valid: 15 minutes.
pub const REDIRECT_TTL: std::time::Duration = std::time::Duration::from_secs(15 * 60);

/// GET/HEAD `/v2/<name>/blobs/<digest>` (end-2), with single byte ranges for
/// GET (see [`RangeOutcome::evaluate`]; HEAD ignores `Range`, RFC 9110 §14.2).
///
/// The blob is streamed from the store, never held in memory.
///
/// A blob is linked when the repository's state names it (as a blob or a
/// manifest) or a pushed-blob link ([`super::links`]) says it was pushed or
/// mounted there since.
///
/// Errors: `NAME_UNKNOWN` (no such repository and no blob linked by a push),
/// `BLOB_UNKNOWN`
/// (not linked in this repository, even if the store holds it; or linked
/// but missing from the store, which is logged), internal errors for store
/// failures.
///
/// `redirect` (redirect mode): a GET answers 307 `Temporary Redirect` to
/// the store's presigned URL of the blob when the store has one
/// ([`store::Blobstore::presigned_get`], valid for [`REDIRECT_TTL`]).
pub async fn blob(
    state: &StateStore,
    name: &RepositoryName,
    digest: &Digest,
    headers: &HeaderMap,
    head: bool,
    redirect: bool,
) -> Result<BlobAnswer> {
    let unknown = || RegistryError::new(ErrorCode::BlobUnknown, json!({ "digest": digest }));
    let store = state.blobstore();
    let arrived = std::time::Instant::now();
    let snap = state.snapshot().await?;
    let (mut repo, mut recorded) = recorded_size(state, &snap, name, digest).await?;
    if recorded.is_none() && links::get(&**store, name, digest).await.is_none() {
        // A blob of a generation another replica served since this one
        // read the root.
        (repo, recorded) =
            recorded_size(state, &*state.snapshot_since(arrived).await?, name, digest).await?;
    }
    let in_tree = recorded.is_some();
    if !in_tree && links::get(&**store, name, digest).await.is_none() {
        let known = repo.is_some() || links::any(&**store, name).await?;
        return Err(if known {
            unknown()
        } else {
            RegistryError::new(ErrorCode::NameUnknown, json!({ "name": name }))
        });
    }
    let key = blob_key(digest);
    let missing = || {
        tracing::warn!(%digest, %name, "blob linked in state is missing from the blobstore");
        unknown()
    };
    if redirect && !head {
        if store.stat(&key).await?.is_none() {
            return Err(missing());
        }
        if let Some(url) = store.presigned_get(&key, REDIRECT_TTL).await? {
            let mut res = axum::http::StatusCode::TEMPORARY_REDIRECT.into_response();
            if let Ok(v) = axum::http::HeaderValue::from_str(&url) {
                res.headers_mut().insert(axum::http::header::LOCATION, v);
            }
            if let Ok(v) = axum::http::HeaderValue::from_str(&digest.to_string()) {
                res.headers_mut().insert("docker-content-digest", v);
            }
            return Ok(res.into());
        }
    }
    if !head && !headers.contains_key(header::RANGE) {
        // The whole blob (the common GET): size and body from one store call.
        let Some((stored, body)) = store.stream_sized(&key).await? else {
            return Err(missing());
        };
        let size = trusted_size(digest, recorded, stored);
        // A small blob the tree names is read whole before its head is
        // sent (one chunk from the store's memory: not copied), so its
        // answer can be kept.
        let (body, whole) = if in_tree && size <= HOT_BLOB_MAX {
            let bytes = collect_exact(body, size).await.map_err(|e| match e {
                Collected::Store(e) => RegistryError::from(e),
                Collected::Length(got) => wrong_length("blob", digest, name, size, got),
            })?;
            let sent = bytes.clone();
            let body: store::ByteStream = Box::pin(futures_util::stream::once(async { Ok(sent) }));
            (body, Some(bytes))
        } else {
            (body, None)
        };
        let response = BlobResponse {
            digest: digest.clone(),
            size,
            range: None,
            body: Some(body),
        }
        .into_response();
        return Ok(BlobAnswer { response, whole });
    }
    // HEAD verifies blobs small enough to verify whole; GET verifies as it streams.
    let size = if head {
        store::check(&**store, digest).await?
    } else {
        store.stat(&key).await?
    };
    let Some(size) = size.map(|stored| trusted_size(digest, recorded, stored)) else {
        return Err(missing());
    };
    Ok(blob_response(&**store, digest, size, headers, head, |s| s)
        .await?
        .into())
}

/// The length to send for `digest`: the `recorded` one (from the state,
/// set when it was pushed or imported and verified) over what the store
/// reports (`stored`); a difference is logged. A body shorter or longer
/// than the length sent ends the response with an error (hyper checks
/// `Content-Length`), never a short 200.
fn trusted_size(digest: &Digest, recorded: Option<u64>, stored: u64) -> u64 {
    match recorded {
        Some(r) if r != stored => {
            tracing::warn!(%digest, recorded = r, stored, "the store reports another size than recorded; sending the recorded one");
            r
        }
        Some(r) => r,
        None => stored,
    }
}

/// The GET/HEAD response for the blob `digest` of `size` bytes held in
/// `store`: 200 with all of it, 206 for one byte range, 416 for a range
/// beyond its end (HEAD ignores `Range`). `wrap` sees the body stream
/// before it is sent (the stacks API holds a download slot in it).
///
/// Errors: the store cannot stream the blob.
pub async fn blob_response(
    store: &dyn store::Blobstore,
    digest: &Digest,
    size: u64,
    headers: &HeaderMap,
    head: bool,
    wrap: impl FnOnce(store::ByteStream) -> store::ByteStream,
) -> store::Result<Response> {
    let outcome = if head {
        RangeOutcome::Full
    } else {
        RangeOutcome::evaluate(headers, size, &etag(digest))
    };
    let (range, read) = match outcome {
        RangeOutcome::Unsatisfiable => return Ok(RangeNotSatisfiable { size }.into_response()),
        RangeOutcome::Full => (None, None),
        RangeOutcome::Partial { start, end } => (Some((start, end)), Some((start, end + 1))),
    };
    let body = if head {
        None
    } else {
        Some(wrap(store.stream(&blob_key(digest), read).await?))
    };
    Ok(BlobResponse {
        digest: digest.clone(),
        size,
        range,
        body,
    }
    .into_response())
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn body(chunks: &[&'static [u8]]) -> store::ByteStream {
        let chunks: Vec<std::io::Result<Bytes>> =
            chunks.iter().map(|c| Ok(Bytes::from_static(c))).collect();
        Box::pin(futures_util::stream::iter(chunks))
    }

    #[tokio::test]
    async fn one_chunk_is_kept_and_several_are_joined() {
        static WHOLE: &[u8] = b"{\"schemaVersion\":2}";
        let got = collect_exact(body(&[WHOLE]), WHOLE.len() as u64)
            .await
            .ok()
            .unwrap();
        assert_eq!(got, WHOLE);
        assert_eq!(got.as_ptr(), WHOLE.as_ptr(), "one chunk: not copied");
        let got = collect_exact(body(&[b"", b"{\"schema", b"", b"Version\":2}"]), 19)
            .await
            .ok()
            .unwrap();
        assert_eq!(got, WHOLE);
        let got = collect_exact(body(&[]), 0).await.ok().unwrap();
        assert!(got.is_empty());
    }

    #[tokio::test]
    async fn a_body_of_another_length_is_refused() {
        let long = collect_exact(body(&[b"abc", b"de"]), 4).await;
        assert!(matches!(long, Err(Collected::Length(5))), "one past: 4 + 1");
        let long = collect_exact(body(&[b"abcde"]), 4).await;
        assert!(matches!(long, Err(Collected::Length(5))));
        let short = collect_exact(body(&[b"ab", b"c"]), 4).await;
        assert!(matches!(short, Err(Collected::Length(3))));
        let short = collect_exact(body(&[b"abc"]), 4).await;
        assert!(matches!(short, Err(Collected::Length(3))));
    }
}
