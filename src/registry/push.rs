//! Pushing manifests (distribution-spec v1.1 "Pushing Manifests", end-7).
//!
//! Owns: the checks a manifest passes before it is stored (size, media
//! type, digest, referenced content) and the one root swap that records it.
//! Never rewrites a manifest: the body is stored and later served byte for
//! byte, so its digest never changes.
//!
//! Rules:
//! - At most [`MAX_MANIFEST_SIZE`] bytes (4 MiB), else 413 `SIZE_INVALID`.
//! - The media type is the `Content-Type`, normalized (parameters dropped,
//!   lower case: RFC 9110 §8.3.1 makes type and subtype case-insensitive),
//!   else the body's `mediaType`; the normalized form is stored.
//! - The body must pass the one manifest rule, [`Manifest::read`] with that
//!   media type, else 400 `MANIFEST_INVALID`: the rule every later reader
//!   of the recorded manifest (`gc`, `fsck`, `rollback`, recovery, backup)
//!   reads it with, so that a manifest the registry accepts is one they
//!   can read. An OCI or Docker schema 2 manifest or index must parse as
//!   its type, carry `schemaVersion: 2` and agree with its `mediaType`
//!   field; a body whose `mediaType` field is one of those four types must
//!   be sent with exactly that type (so a foreign or differently cased
//!   `Content-Type` cannot skip the reference checks); any other media type
//!   (artifact manifests, custom types) must be a JSON object, whose
//!   `subject`, when present, is a descriptor, and is stored as given.
//! - A digest already recorded in the repository keeps the media type it
//!   was first recorded with (see [`Op::PutManifest`]); only tags move.
//! - A digest reference must be the body's digest (400 `DIGEST_INVALID`).
//! - Config and layers must be linked in the repository and index children
//!   must be manifests of it, else 400 `MANIFEST_BLOB_UNKNOWN`, checked in
//!   the same root swap that records the manifest. Layers with a
//!   non-distributable or foreign media type are not required. A `subject`
//!   need not exist (spec: "MUST accept").

use axum::http::{HeaderMap, header};
use bytes::{Bytes, BytesMut};
use futures_util::StreamExt;
use serde_json::json;

use super::Context;
use super::errors::{ErrorCode, RegistryError, Result};
use super::links;
use super::responses::Created;
use super::upload::HTTP_WHO;
use super::uploads::BodyStream;
use crate::digest::Digest;
use crate::names::{Reference, RepositoryName};
use crate::oci::{self, MAX_MANIFEST_SIZE, Manifest};
use crate::state::{ManifestInfo, Op, StateError};
use crate::store::put_digested;

fn too_large(size: Option<u64>) -> RegistryError {
    RegistryError::Status {
        status: axum::http::StatusCode::PAYLOAD_TOO_LARGE,
        code: ErrorCode::SizeInvalid,
        detail: json!({ "limit": MAX_MANIFEST_SIZE, "size": size }),
        headers: Box::default(),
    }
}

fn invalid(reason: impl Into<String>) -> RegistryError {
    RegistryError::new(
        ErrorCode::ManifestInvalid,
        json!({ "reason": reason.into() }),
    )
}

/// Reads a manifest body, refusing more than [`MAX_MANIFEST_SIZE`] bytes.
async fn read_body(headers: &HeaderMap, body: &mut (impl BodyStream + ?Sized)) -> Result<Bytes> {
    let announced = super::upload::declared_length(headers);
    if announced.is_some_and(|n| n > MAX_MANIFEST_SIZE) {
        return Err(too_large(announced));
    }
    let mut buf = BytesMut::new();
    while let Some(chunk) = body.next().await {
        let chunk = chunk.map_err(|e| invalid(format!("reading the body: {e}")))?;
        if (buf.len() + chunk.len()) as u64 > MAX_MANIFEST_SIZE {
            return Err(too_large(None));
        }
        buf.extend_from_slice(&chunk);
    }
    Ok(buf.freeze())
}

/// What a manifest requires and records.
struct Checked {
    media_type: String,
    blobs: Vec<Digest>,
    manifests: Vec<Digest>,
    subject: Option<Digest>,
    artifact_type: Option<String>,
}

fn not_required(media_type: &str) -> bool {
    media_type.contains("nondistributable") || media_type.contains("foreign")
}

/// A `Content-Type` value as a bare media type: parameters dropped,
/// whitespace trimmed, lower case (RFC 9110 §8.3.1). `None` when empty.
fn normalize_media_type(value: &str) -> Option<String> {
    let bare = value.split(';').next().unwrap_or("").trim();
    (!bare.is_empty()).then(|| bare.to_ascii_lowercase())
}

/// Validates `bytes` as sent with `content_type` (already normalized) by
/// the one manifest rule ([`Manifest::read`]: what every later reader of
/// the recorded manifest reads it with), and finds what it requires.
fn check(content_type: Option<&str>, bytes: &[u8]) -> Result<Checked> {
    let media_type = match content_type {
        Some(ct) => ct.to_string(),
        None => Manifest::parse(bytes)
            .ok()
            .and_then(|m| m.effective_media_type().map(str::to_owned))
            .ok_or_else(|| invalid("no Content-Type and no mediaType in the manifest"))?,
    };
    let m = Manifest::read(bytes, Some(&media_type)).map_err(|e| invalid(e.to_string()))?;
    let (blobs, manifests) = if oci::is_index_type(&media_type) {
        let children = m.manifests.iter().map(|d| d.digest.clone()).collect();
        (Vec::new(), children)
    } else if oci::is_manifest_type(&media_type) {
        let blobs = m
            .blobs()
            .filter(|d| !not_required(&d.media_type))
            .map(|d| d.digest.clone())
            .collect();
        (blobs, Vec::new())
    } else {
        // Any other type is kept as given: nothing is required of it.
        (Vec::new(), Vec::new())
    };
    Ok(Checked {
        media_type,
        blobs,
        manifests,
        subject: m.subject.as_ref().map(|s| s.digest.clone()),
        artifact_type: m.referrer_artifact_type(),
    })
}

/// PUT `/v2/<name>/manifests/<reference>` (end-7): 201 with `Location`
/// (`/v2/<name>/manifests/<digest>`), `Docker-Content-Digest`, and
/// `OCI-Subject` when the manifest has a `subject`. A tag reference is
/// moved to the new manifest in the same root swap.
///
/// Errors: 413 `SIZE_INVALID`; 400 `MANIFEST_INVALID`, `DIGEST_INVALID`,
/// `MANIFEST_BLOB_UNKNOWN` (see the module docs).
pub async fn manifest(
    ctx: &dyn Context,
    name: &RepositoryName,
    reference: &Reference,
    headers: &HeaderMap,
    body: &mut (impl BodyStream + ?Sized),
) -> Result<Created> {
    let bytes = read_body(headers, body).await?;
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(normalize_media_type);
    let checked = check(content_type.as_deref(), &bytes)?;
    let (digest, tags) = match reference {
        Reference::Digest(d) => {
            let actual = d.same_alg_of(&bytes);
            if &actual != d {
                return Err(RegistryError::new(
                    ErrorCode::DigestInvalid,
                    json!({ "digest": d, "actual": actual }),
                ));
            }
            (actual, Vec::new())
        }
        Reference::Tag(t) => (Digest::sha256_of(&bytes), vec![t.clone()]),
    };
    let state = ctx.state();
    let store = &**state.blobstore();
    let snap = state.snapshot().await?;
    let repo = state.repository(&snap, name).await?;
    for d in &checked.manifests {
        let known = match &repo {
            Some(r) => r.manifest(d).await?.is_some(),
            None => false,
        };
        if !known {
            return Err(blob_unknown(name, d));
        }
    }
    // Blobs pushed since the last commit are linked by their pushed-blob
    // links; they enter the tree in this manifest's root swap.
    let mut pushed = Vec::new();
    for d in &checked.blobs {
        if let Some(r) = &repo
            && r.is_linked(d).await?
        {
            continue;
        }
        match links::get(store, name, d).await {
            Some(size) => pushed.push((d.clone(), size)),
            None => return Err(blob_unknown(name, d)),
        }
    }
    let size = bytes.len() as u64;
    let written = put_digested(store, &digest, bytes.clone()).await?;
    let ops = [
        Op::LinkBlobs {
            repo: name.clone(),
            blobs: pushed,
        },
        Op::Require {
            repo: name.clone(),
            blobs: checked.blobs,
            manifests: checked.manifests,
        },
        Op::PutManifest {
            repo: name.clone(),
            digest: digest.clone(),
            info: ManifestInfo {
                media_type: checked.media_type,
                size,
                subject: checked.subject.clone(),
                artifact_type: checked.artifact_type,
            },
            guard: crate::state::TagGuard {
                frozen: tags
                    .iter()
                    .any(|t| ctx.config().is_immutable(name, t.as_str())),
                ..crate::state::TagGuard::default()
            },
            tags,
        },
    ];
    let reason = match reference {
        Reference::Tag(t) => format!("push manifest {name}:{t}"),
        Reference::Digest(d) => format!("push manifest {name}@{d}"),
    };
    match state.commit(&reason, HTTP_WHO, &ops).await {
        Ok(_) => {}
        Err(StateError::NotFound(what)) => {
            return Err(RegistryError::new(
                ErrorCode::ManifestBlobUnknown,
                json!({ "name": name, "reason": what }),
            ));
        }
        Err(StateError::Rejected(why)) => {
            return Err(RegistryError::new(
                ErrorCode::Denied,
                json!({ "name": name, "reason": why }),
            ));
        }
        Err(e) => return Err(e.into()),
    }
    if !written {
        // Found present, so unreferenced until this commit named it, a
        // concurrent `gc` may have removed it meanwhile: checked after the
        // naming, as a pushed blob is (see `ops::gc`), and written again.
        put_digested(store, &digest, bytes).await?;
    }
    Ok(Created {
        location: format!("/v2/{name}/manifests/{digest}"),
        digest,
        subject: checked.subject,
    })
}

fn blob_unknown(name: &RepositoryName, digest: &Digest) -> RegistryError {
    RegistryError::new(
        ErrorCode::ManifestBlobUnknown,
        json!({ "name": name, "digest": digest }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn media_types() {
        let d = Digest::sha256_of(b"x");
        let m = format!(
            r#"{{"schemaVersion":2,"mediaType":"{}","config":{{"mediaType":"a/b","digest":"{d}","size":1}},"layers":[]}}"#,
            oci::OCI_MANIFEST
        );
        let c = check(None, m.as_bytes()).unwrap();
        assert_eq!(c.media_type, oci::OCI_MANIFEST);
        assert_eq!(c.blobs, vec![d.clone()]);
        assert_eq!(c.artifact_type.as_deref(), Some("a/b"));
        assert!(check(Some(oci::OCI_INDEX), m.as_bytes()).is_err());
        assert!(check(Some(oci::OCI_MANIFEST), b"not json").is_err());
        // Any other type: a JSON object (what gc and fsck can read), kept
        // as given; anything else is refused under every type.
        let other = check(Some("application/x-anything"), b"{}").unwrap();
        assert_eq!(other.media_type, "application/x-anything");
        assert!(other.blobs.is_empty() && other.manifests.is_empty());
        for body in [&b"not json"[..], b"[]", b"[null,null,null]", b"\"x\"", b"1"] {
            assert!(
                check(Some("application/x-anything"), body).is_err(),
                "{}",
                String::from_utf8_lossy(body)
            );
        }
        let bad_subject = br#"{"subject":{"digest":"nope"}}"#;
        assert!(check(Some("application/x-anything"), bad_subject).is_err());
        assert!(check(None, b"{}").is_err());
        // A manifest body cannot be relabelled to skip the reference checks.
        for ct in ["application/octet-stream", "text/plain", oci::OCI_INDEX] {
            assert!(check(Some(ct), m.as_bytes()).is_err(), "{ct}");
        }
        let declared_only = br#"{"mediaType":"application/vnd.oci.image.index.v1+json"}"#;
        assert!(check(Some("application/x-anything"), declared_only).is_err());
        let foreign_field = br#"{"mediaType":"application/x-other","config":1}"#;
        assert!(check(Some("application/x-anything"), foreign_field).is_ok());
    }

    /// A body is read as the type it is pushed as (field report: an index
    /// type took `{"schemaVersion":2}` and an image manifest without
    /// `mediaType`, which skopeo then could not read).
    #[test]
    fn a_manifest_is_checked_against_the_type_it_is_pushed_as() {
        let d = Digest::sha256_of(b"x");
        let image = format!(
            r#"{{"schemaVersion":2,"config":{{"mediaType":"a/b","digest":"{d}","size":1}},"layers":[]}}"#
        );
        let bare = br#"{"schemaVersion":2}"#;
        for index_type in [oci::OCI_INDEX, oci::DOCKER_LIST] {
            let e = check(Some(index_type), bare).err().expect(index_type);
            assert!(
                format!("{e:?}").contains("manifests"),
                "{index_type}: {e:?}"
            );
            assert!(
                check(Some(index_type), image.as_bytes()).is_err(),
                "{index_type}"
            );
        }
        for image_type in [oci::OCI_MANIFEST, oci::DOCKER_MANIFEST] {
            assert!(check(Some(image_type), bare).is_err(), "{image_type}");
        }
        // Both shapes in one body: read as the type given, so an image
        // manifest that also carries `manifests` keeps its config and layers.
        let both = format!(
            r#"{{"schemaVersion":2,"manifests":[],"config":{{"mediaType":"a/b","digest":"{d}","size":1}},"layers":[]}}"#
        );
        let c = check(Some(oci::OCI_MANIFEST), both.as_bytes()).unwrap();
        assert_eq!((c.blobs, c.manifests.len()), (vec![d.clone()], 0));
        let c = check(Some(oci::OCI_INDEX), both.as_bytes()).unwrap();
        assert_eq!((c.blobs.len(), c.manifests.len()), (0, 0));
    }

    #[test]
    fn content_types_are_normalized() {
        assert_eq!(
            normalize_media_type(" APPLICATION/VND.OCI.IMAGE.MANIFEST.V1+JSON ; charset=utf-8")
                .as_deref(),
            Some(oci::OCI_MANIFEST)
        );
        assert_eq!(normalize_media_type(" ; x=y"), None);
        assert_eq!(normalize_media_type(""), None);
    }
}
