//! Pushing blobs (distribution-spec v1.1 "Pushing blobs", "Mounting a blob
//! from another repository"): end-4a, end-4b, end-5, end-6, end-11, end-13
//! and cancelling a session.
//!
//! Owns: what each upload request means and which status and headers it
//! gets; linking a finished or mounted blob into the repository (a
//! pushed-blob link, [`super::links`]: no root swap). Session storage is
//! [`super::uploads`].
//!
//! Choices where the spec leaves room:
//! - POST with `digest` (end-4b) stores the body at once: 201.
//! - `mount` without `from`, or naming a blob not linked in `from`, opens a
//!   normal session (202): a blob never becomes visible in a repository it
//!   was not pushed or mounted into. A malformed `mount` or `from` is ignored
//!   the same way, as distribution does.
//! - PATCH without `Content-Range` appends the body at the current offset
//!   (the streamed upload that docker, containerd and skopeo use).
//! - A failed final PUT (digest or size mismatch) removes the session.

use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::Context;
use super::errors::{ErrorCode, RegistryError, Result};
use super::links;
use super::query::QueryParams;
use super::responses::{Created, NoContent, UploadStatus};
use super::uploads::{BodyStream, Owner, UploadError, UploadId, parse_content_range};
use crate::digest::Digest;
use crate::names::RepositoryName;
use crate::store::blob_key;

/// `who` of state changes made over HTTP (until authentication names a user).
pub const HTTP_WHO: &str = "admin (http)";

/// `/v2/<name>/blobs/uploads/<uuid>`.
pub fn session_location(name: &RepositoryName, id: &UploadId) -> String {
    format!("/v2/{name}/blobs/uploads/{}", id.as_str())
}

/// `/v2/<name>/blobs/<digest>`.
pub fn blob_location(name: &RepositoryName, digest: &Digest) -> String {
    format!("/v2/{name}/blobs/{digest}")
}

fn status(code: StatusCode, name: &RepositoryName, id: &UploadId, offset: u64) -> UploadStatus {
    UploadStatus {
        status: code,
        location: session_location(name, id),
        uuid: id.as_str().to_string(),
        offset,
    }
}

/// Maps an upload failure to the spec's answer; `id` gives a 416 its headers.
fn upload_error(e: UploadError, name: &RepositoryName, id: Option<&UploadId>) -> RegistryError {
    match e {
        UploadError::Unknown => {
            RegistryError::new(ErrorCode::BlobUploadUnknown, json!({ "name": name }))
        }
        UploadError::OutOfOrder { start, offset } => RegistryError::Status {
            status: StatusCode::RANGE_NOT_SATISFIABLE,
            code: ErrorCode::BlobUploadInvalid,
            detail: json!({ "reason": "chunk out of order", "start": start, "offset": offset }),
            headers: Box::new(
                id.map(|id| status(StatusCode::ACCEPTED, name, id, offset).headers())
                    .unwrap_or_default(),
            ),
        },
        UploadError::RangeInvalid { start, end } => RegistryError::new(
            ErrorCode::BlobUploadInvalid,
            json!({ "reason": "Content-Range length overflows", "start": start, "end": end }),
        ),
        UploadError::Size { expected, actual } => RegistryError::new(
            ErrorCode::SizeInvalid,
            json!({ "expected": expected, "actual": actual }),
        ),
        UploadError::Digest { expected, actual } => RegistryError::new(
            ErrorCode::DigestInvalid,
            json!({ "digest": expected, "actual": actual }),
        ),
        UploadError::TooLarge(max) => RegistryError::Status {
            status: StatusCode::PAYLOAD_TOO_LARGE,
            code: ErrorCode::SizeInvalid,
            detail: json!({ "reason": "blob too large", "max": max }),
            headers: Box::default(),
        },
        UploadError::TooMany { scope, cap } => RegistryError::new(
            ErrorCode::TooManyRequests,
            json!({
                "reason": format!("too many open upload sessions in the {scope}, every one with a request in progress"),
                "scope": scope,
                "max": cap,
            }),
        ),
        UploadError::Body(reason) => {
            RegistryError::new(ErrorCode::BlobUploadInvalid, json!({ "reason": reason }))
        }
        UploadError::Store(e) if e.is_no_space() => RegistryError::no_space(&e),
        UploadError::Store(e) if e.retry_after().is_some() => RegistryError::unavailable(&e),
        UploadError::Store(e) => RegistryError::Internal(e.to_string()),
    }
}

fn digest_param(query: &QueryParams) -> Result<Digest> {
    let raw = query.get("digest").ok_or_else(|| {
        RegistryError::invalid_digest(json!({ "reason": "the digest query parameter is required" }))
    })?;
    raw.parse().map_err(|e: crate::digest::DigestError| {
        RegistryError::invalid_digest(json!({ "digest": raw, "reason": e.to_string() }))
    })
}

/// The body length a request declares (`Content-Length`, RFC 9110 §8.6);
/// `None` when absent or not a decimal number of bytes that fits a `u64`.
pub fn declared_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
}

/// Refuses, before any byte of the body is read, a request whose
/// `Content-Length` alone is over the largest blob
/// ([`super::uploads::Uploads::max_blob_size`]): 413 `SIZE_INVALID`, as the
/// same body would get once it streamed past the cap. A body without a
/// length (chunked) is cut off by that streaming check instead.
fn refuse_declared_oversize(
    ctx: &dyn Context,
    name: &RepositoryName,
    headers: &HeaderMap,
) -> Result<()> {
    let max = ctx.uploads().max_blob_size();
    match declared_length(headers) {
        Some(n) if n > max => Err(upload_error(UploadError::TooLarge(max), name, None)),
        _ => Ok(()),
    }
}

/// `Content-Range` of a chunk, if sent; `BLOB_UPLOAD_INVALID` when malformed.
fn content_range(headers: &HeaderMap) -> Result<Option<(u64, u64)>> {
    let Some(v) = headers.get(header::CONTENT_RANGE) else {
        return Ok(None);
    };
    v.to_str()
        .ok()
        .and_then(parse_content_range)
        .map(Some)
        .ok_or_else(|| {
            RegistryError::new(
                ErrorCode::BlobUploadInvalid,
                json!({ "reason": "Content-Range must be <start>-<end>" }),
            )
        })
}

/// Links `digest` (`size` bytes) into `name` with a pushed-blob link (no
/// root swap: [`super::links`]); `what` is logged.
async fn link(
    ctx: &dyn Context,
    name: &RepositoryName,
    digest: &Digest,
    size: u64,
    what: &str,
) -> Result<bool> {
    let store = &**ctx.state().blobstore();
    links::put(store, name, digest, size).await?;
    // A garbage collection may have taken the (unreferenced) blob before
    // the link: it looks again after moving its candidates away
    // (`ops::gc`), so a blob still here now is kept. On S3 its move is a
    // copy then a delete, which can also take a blob just written: the
    // same check covers it. Gone: undo the link.
    if store.stat(&blob_key(digest)).await?.is_none() {
        links::remove(store, name, digest).await?;
        tracing::info!(%name, %digest, what, "blob garbage-collected while it was linked; link undone");
        return Ok(false);
    }
    tracing::debug!(%name, %digest, size, what, "blob linked");
    Ok(true)
}

/// Links a blob just written by a push ([`link`]); a blob a garbage
/// collection took meanwhile is a 500 the client retries (nothing is
/// linked).
async fn link_pushed(
    ctx: &dyn Context,
    name: &RepositoryName,
    digest: &Digest,
    size: u64,
) -> Result<()> {
    if link(
        ctx,
        name,
        digest,
        size,
        &format!("push blob {name}@{digest}"),
    )
    .await?
    {
        return Ok(());
    }
    Err(crate::store::StoreError::Io(std::io::Error::other(format!(
        "blob {digest} was garbage-collected while it was being linked; push it again"
    )))
    .into())
}

/// POST `/v2/<name>/blobs/uploads/` (end-4a, end-4b, end-11).
///
/// - `?mount=<digest>&from=<repo>`: 201 with the blob's `Location` when the
///   blob is linked in `from` (resolved as a read of it would be, with the
///   request's `ns=` or the default mirror namespace:
///   [`super::namespace::resolve_read`]) and `scope` covers it (the caller
///   may read it), else a new session (202).
/// - `?digest=<digest>` with the blob as body: 201, or 400
///   `DIGEST_INVALID` (nothing stored) when the body does not match.
/// - otherwise: 202, `Location` of a new session, `Range: 0-0`,
///   `Docker-Upload-UUID`.
///
/// `owner` names the repository, and the client address and user counted
/// against the session caps ([`super::uploads::Uploads::create`]).
pub async fn start(
    ctx: &dyn Context,
    owner: Owner,
    query: &QueryParams,
    scope: &super::scope::RepositoryScope,
    headers: &HeaderMap,
    body: &mut (impl BodyStream + ?Sized),
) -> Result<Response> {
    let name = &owner.repository;
    refuse_declared_oversize(ctx, name, headers)?;
    if let Some(mount) = query.get("mount") {
        let from = match query.get("from").map(str::parse::<RepositoryName>) {
            // `from=` names a repository as a read would (mirror namespaces
            // included), and is used only when the caller may read it.
            Some(Ok(from)) => {
                let ns = super::namespace::ns_param(query);
                let (from, _) = super::namespace::resolve_read(ctx, &from, ns, scope).await?;
                scope.covers(from.as_str()).then_some(from)
            }
            _ => None,
        };
        if let Some(created) = mount_blob(ctx, name, mount, from.as_ref()).await? {
            return Ok(created.into_response());
        }
    } else if query.get("digest").is_some() {
        let digest = digest_param(query)?;
        let size = ctx
            .uploads()
            .put_blob(&digest, body)
            .await
            .map_err(|e| upload_error(e, name, None))?;
        link_pushed(ctx, name, &digest, size).await?;
        return Ok(Created {
            location: blob_location(name, &digest),
            digest,
            subject: None,
        }
        .into_response());
    }
    let id = ctx
        .uploads()
        .create(owner.clone())
        .await
        .map_err(|e| upload_error(e, name, None))?;
    Ok(status(StatusCode::ACCEPTED, name, &id, 0).into_response())
}

/// Mounts `mount` from `from` into `name` if it is linked there; `None`
/// when it cannot (the caller opens a session instead).
async fn mount_blob(
    ctx: &dyn Context,
    name: &RepositoryName,
    mount: &str,
    from: Option<&RepositoryName>,
) -> Result<Option<Created>> {
    let (Ok(digest), Some(from)) = (mount.parse::<Digest>(), from) else {
        return Ok(None);
    };
    let state = ctx.state();
    let snap = state.snapshot().await?;
    let in_tree = match state.repository(&snap, from).await? {
        Some(r) => r.is_linked(&digest).await?,
        None => false,
    };
    if !in_tree
        && links::get(&**state.blobstore(), from, &digest)
            .await
            .is_none()
    {
        return Ok(None);
    }
    let Some(size) = state.blobstore().stat(&blob_key(&digest)).await? else {
        links::log_missing(&**state.blobstore(), &digest, from).await;
        return Ok(None);
    };
    let reason = format!("mount blob {name}@{digest} from {from}");
    if !link(ctx, name, &digest, size, &reason).await? {
        // Fall back to an upload session, as for an unknown blob.
        return Ok(None);
    }
    Ok(Some(Created {
        location: blob_location(name, &digest),
        digest,
        subject: None,
    }))
}

/// PATCH `/v2/<name>/blobs/uploads/<uuid>` (end-5): appends the body.
/// 202 with `Location`, `Range: 0-<last byte>`, `Docker-Upload-UUID`.
///
/// Errors: 404 `BLOB_UPLOAD_UNKNOWN`; 416 (`BLOB_UPLOAD_INVALID`, with the
/// session's `Range`) when `Content-Range` does not start at the current
/// size or ends before it starts; 400 `BLOB_UPLOAD_INVALID` for a malformed
/// `Content-Range` or one whose length overflows (`0-18446744073709551615`;
/// lengths are checked, never wrapped); 400 `SIZE_INVALID` when the body's
/// length differs from the range's; 413 `SIZE_INVALID` when `Content-Length`
/// or the session's size passes the largest blob.
pub async fn patch(
    ctx: &dyn Context,
    name: &RepositoryName,
    id: &UploadId,
    headers: &HeaderMap,
    body: &mut (impl BodyStream + ?Sized),
) -> Result<UploadStatus> {
    refuse_declared_oversize(ctx, name, headers)?;
    let range = content_range(headers)?;
    let offset = ctx
        .uploads()
        .append(id, name, range, body)
        .await
        .map_err(|e| upload_error(e, name, Some(id)))?;
    Ok(status(StatusCode::ACCEPTED, name, id, offset))
}

/// GET `/v2/<name>/blobs/uploads/<uuid>` (end-13): 204 with `Location`,
/// `Range`, `Docker-Upload-UUID`. Errors: 404 `BLOB_UPLOAD_UNKNOWN`.
pub async fn progress(
    ctx: &dyn Context,
    name: &RepositoryName,
    id: &UploadId,
) -> Result<UploadStatus> {
    let offset = ctx
        .uploads()
        .status(id, name)
        .await
        .map_err(|e| upload_error(e, name, Some(id)))?;
    Ok(status(StatusCode::NO_CONTENT, name, id, offset))
}

/// PUT `/v2/<name>/blobs/uploads/<uuid>?digest=<digest>` (end-6): the body
/// is the optional last chunk. 201 with the blob's `Location` and
/// `Docker-Content-Digest`; the blob is linked into `name`.
///
/// Errors: 400 `DIGEST_INVALID` (missing or malformed `digest`, or content
/// that does not match it: nothing is stored and the session is gone); 404
/// `BLOB_UPLOAD_UNKNOWN`; 416, 400 and 413 as for [`patch`].
pub async fn finish(
    ctx: &dyn Context,
    name: &RepositoryName,
    id: &UploadId,
    query: &QueryParams,
    headers: &HeaderMap,
    body: &mut (impl BodyStream + ?Sized),
) -> Result<Created> {
    let digest = digest_param(query)?;
    refuse_declared_oversize(ctx, name, headers)?;
    let range = content_range(headers)?;
    let size = ctx
        .uploads()
        .finish(id, name, &digest, range, body)
        .await
        .map_err(|e| upload_error(e, name, Some(id)))?;
    link_pushed(ctx, name, &digest, size).await?;
    Ok(Created {
        location: blob_location(name, &digest),
        digest,
        subject: None,
    })
}

/// DELETE `/v2/<name>/blobs/uploads/<uuid>`: cancels the session, 204.
/// Errors: 404 `BLOB_UPLOAD_UNKNOWN`.
pub async fn cancel(ctx: &dyn Context, name: &RepositoryName, id: &UploadId) -> Result<NoContent> {
    ctx.uploads()
        .cancel(id, name)
        .await
        .map_err(|e| upload_error(e, name, Some(id)))?;
    Ok(NoContent)
}
