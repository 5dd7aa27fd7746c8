//! The `/v2` route table: path → [`Route`], with typed, validated parameters.
//!
//! Owns: the path grammar of distribution-spec v1.1 "Endpoints". Repository
//! names contain `/`, so a path is matched by the *last* occurrence of each
//! endpoint marker, and the part after a marker must be a single segment.
//! The name and the part after the marker are then percent-decoded once
//! ([`crate::names::percent_decode`]) and parsed as their types. This is the
//! only reading of a `/v2` path: the access layer's route table
//! (`server::routes`) matches `/v2` rows through [`Route::parse`] and hands
//! the parsed [`Route`] on to the registry as a request extension, so the
//! repository it checks is the one the registry serves.
//! Never looks at methods, headers or state (see `super::dispatch`).

use serde_json::json;

use super::errors::{ErrorCode, RegistryError, Result};
use super::uploads::UploadId;
use crate::digest::Digest;
use crate::names::{Reference, RepositoryName, percent_decode};

/// A parsed `/v2` request path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// `/v2/` (also `/v2`): API version check (end-1).
    Base,
    /// `/v2/_catalog`: repository list (distribution extension).
    Catalog,
    /// `/v2/<name>/manifests/<reference>` (end-3, end-7, end-9).
    Manifest {
        /// Repository.
        name: RepositoryName,
        /// Tag or digest.
        reference: Reference,
    },
    /// `/v2/<name>/blobs/<digest>` (end-2, end-10).
    Blob {
        /// Repository.
        name: RepositoryName,
        /// Blob digest.
        digest: Digest,
    },
    /// `/v2/<name>/tags/list` (end-8a, end-8b).
    TagsList {
        /// Repository.
        name: RepositoryName,
    },
    /// `/v2/<name>/referrers/<digest>` (end-12a, end-12b).
    Referrers {
        /// Repository.
        name: RepositoryName,
        /// The subject digest.
        digest: Digest,
    },
    /// `/v2/<name>/blobs/uploads/` and `/v2/<name>/blobs/uploads/<session>`
    /// (end-4a/4b/11 without a session; end-5/6/13/14 with one).
    Upload {
        /// Repository.
        name: RepositoryName,
        /// The upload session id, `None` for the POST endpoint.
        session: Option<UploadId>,
    },
}

/// What may follow an endpoint marker.
#[derive(Debug, Clone, Copy)]
enum Tail {
    /// Exactly one non-empty path segment.
    Segment,
    /// One segment or nothing.
    SegmentOrEmpty,
    /// Nothing: the marker ends the path.
    End,
}

#[derive(Debug, Clone, Copy)]
enum Kind {
    Manifest,
    Blob,
    TagsList,
    Referrers,
    Upload,
}

/// The endpoint table: marker, what follows it, endpoint. At most one row can
/// match a given path (each requires a different second-to-last segment), so
/// the order carries no meaning.
const TABLE: [(&str, Tail, Kind); 5] = [
    ("/blobs/uploads/", Tail::SegmentOrEmpty, Kind::Upload),
    ("/manifests/", Tail::Segment, Kind::Manifest),
    ("/blobs/", Tail::Segment, Kind::Blob),
    ("/referrers/", Tail::Segment, Kind::Referrers),
    ("/tags/list", Tail::End, Kind::TagsList),
];

impl Route {
    /// Parses a request path as sent (markers are found in the raw path;
    /// the name and the part after the marker are percent-decoded once,
    /// then parsed).
    ///
    /// Errors: [`RegistryError::NoEndpoint`] for a path that is no endpoint;
    /// `NAME_INVALID` for a bad repository name; `TAG_INVALID` for a
    /// manifest reference that is neither a tag nor a digest (reads map it
    /// to `MANIFEST_UNKNOWN`, see [`RegistryError::for_method`]); `DIGEST_INVALID`
    /// for a bad or unsupported blob or referrers digest.
    pub fn parse(path: &str) -> Result<Route> {
        let rest = match path {
            "/v2" | "/v2/" => return Ok(Route::Base),
            "/v2/_catalog" => return Ok(Route::Catalog),
            p => p.strip_prefix("/v2/").ok_or(RegistryError::NoEndpoint)?,
        };
        // Fast paths for the two reads every pull makes: `<name>/blobs/<digest>`
        // and `<name>/manifests/<ref>`. The table below would find the same
        // row (no other row can match a path whose second-to-last segment is
        // `manifests` or `blobs` followed by one non-empty segment). A sha256
        // blob digest has a fixed length, so its segment is found without a
        // search; otherwise only the last segment is searched.
        if let Some((name, digest)) = split_sha256_blob(rest) {
            return build(Kind::Blob, name, digest);
        }
        if let Some(last) = rest.rfind('/') {
            let (head, after) = (&rest[..last], &rest[last + 1..]);
            if !after.is_empty() {
                if let Some(name) = head.strip_suffix("/manifests") {
                    return build(Kind::Manifest, name, after);
                }
                if let Some(name) = head.strip_suffix("/blobs") {
                    return build(Kind::Blob, name, after);
                }
            }
        }
        for (marker, tail, kind) in TABLE {
            let Some(at) = rfind_marker(rest, marker) else {
                continue;
            };
            let after = &rest[at + marker.len()..];
            let fits = match tail {
                Tail::Segment => !after.is_empty() && !after.contains('/'),
                Tail::SegmentOrEmpty => !after.contains('/'),
                Tail::End => after.is_empty(),
            };
            if fits {
                return build(kind, &rest[..at], after);
            }
        }
        Err(RegistryError::NoEndpoint)
    }

    /// The pattern of the route table row (`server::routes::ROUTES`) this
    /// endpoint is: what the access layer enforces for it.
    pub fn pattern(&self) -> &'static str {
        match self {
            Route::Base => "/v2/",
            Route::Catalog => "/v2/_catalog",
            Route::Manifest { .. } => "/v2/{repo*}/manifests/{reference}",
            Route::Blob { .. } => "/v2/{repo*}/blobs/{blob}",
            Route::TagsList { .. } => "/v2/{repo*}/tags/list",
            Route::Referrers { .. } => "/v2/{repo*}/referrers/{subject}",
            Route::Upload { session: None, .. } => "/v2/{repo*}/blobs/uploads/",
            Route::Upload {
                session: Some(_), ..
            } => "/v2/{repo*}/blobs/uploads/{session}",
        }
    }

    /// The repository the route is about, if any, for rewriting (mirror
    /// namespaces).
    pub fn repository_mut(&mut self) -> Option<&mut RepositoryName> {
        match self {
            Route::Base | Route::Catalog => None,
            Route::Manifest { name, .. }
            | Route::Blob { name, .. }
            | Route::TagsList { name }
            | Route::Referrers { name, .. }
            | Route::Upload { name, .. } => Some(name),
        }
    }

    /// The repository the route is about, if any.
    pub fn repository(&self) -> Option<&RepositoryName> {
        match self {
            Route::Base | Route::Catalog => None,
            Route::Manifest { name, .. }
            | Route::Blob { name, .. }
            | Route::TagsList { name }
            | Route::Referrers { name, .. }
            | Route::Upload { name, .. } => Some(name),
        }
    }
}

/// `path` split around its last `/blobs/` when what follows is a sha256
/// digest's shape (`sha256:` and 64 bytes without `/`, not yet checked as
/// hex): `(before, digest)`, else `None`. The common blob path, found
/// without a search (also by the metrics' route class).
pub fn split_sha256_blob(path: &str) -> Option<(&str, &str)> {
    const DIGEST: usize = "sha256:".len() + 64;
    const SUFFIX: usize = "/blobs/".len() + DIGEST;
    let at = path.len().checked_sub(SUFFIX)?;
    let tail = path.as_bytes().get(at..)?;
    if !tail.starts_with(b"/blobs/sha256:") || tail[SUFFIX - 64..].contains(&b'/') {
        return None;
    }
    // The bytes checked are ASCII, so both ends are char boundaries.
    Some((&path[..at], &path[at + SUFFIX - DIGEST..]))
}

/// Where the last occurrence of `marker` (which starts with `/`) begins in
/// `path`: the same as `path.rfind(marker)`, found by trying the positions
/// of `/` from the end (cheaper than a substring search for every marker of
/// every request's path).
pub fn rfind_marker(path: &str, marker: &str) -> Option<usize> {
    debug_assert!(marker.starts_with('/'));
    path.rmatch_indices('/')
        .map(|(at, _)| at)
        .find(|&at| path[at..].starts_with(marker))
}

fn build(kind: Kind, name: &str, after: &str) -> Result<Route> {
    let name: RepositoryName = percent_decode(name)
        .ok()
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| RegistryError::new(ErrorCode::NameInvalid, json!({ "name": name })))?;
    // Malformed encoding: the part as sent, which no type's grammar admits
    // (`%`), so each refuses it with its own code.
    let decoded = percent_decode(after);
    let after: &str = decoded.as_deref().unwrap_or(after);
    let digest = |s: &str| {
        s.parse::<Digest>().map_err(|e| {
            RegistryError::invalid_digest(json!({ "digest": s, "reason": e.to_string() }))
        })
    };
    Ok(match kind {
        Kind::Manifest => {
            let reference = after.parse::<Reference>().map_err(|reason| {
                RegistryError::new(
                    ErrorCode::TagInvalid,
                    json!({ "reference": after, "reason": format!("not a tag or digest: {reason}") }),
                )
            })?;
            Route::Manifest { name, reference }
        }
        Kind::Blob => Route::Blob {
            name,
            digest: digest(after)?,
        },
        Kind::Referrers => Route::Referrers {
            name,
            digest: digest(after)?,
        },
        Kind::TagsList => Route::TagsList { name },
        Kind::Upload => {
            let session = match after {
                "" => None,
                id => Some(UploadId::parse(id).ok_or_else(|| {
                    RegistryError::new(
                        ErrorCode::BlobUploadUnknown,
                        json!({ "name": name, "session": id }),
                    )
                })?),
            };
            Route::Upload { name, session }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: &str = "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

    fn name(s: &str) -> RepositoryName {
        s.parse().unwrap()
    }

    fn code(path: &str) -> &'static str {
        match Route::parse(path) {
            Err(RegistryError::Api { code, .. }) => code.info().code,
            Err(RegistryError::NoEndpoint) => "none",
            other => panic!("{path}: {other:?}"),
        }
    }

    #[test]
    fn markers_are_found_as_rfind_finds_them() {
        for path in [
            "a/manifests/b/manifests/c",
            "/blobs/",
            "x/blobs/uploads/",
            "a/b",
            "",
            "/",
            "//tags/list",
        ] {
            for marker in [
                "/manifests/",
                "/blobs/",
                "/blobs/uploads/",
                "/tags/list",
                "/",
            ] {
                assert_eq!(
                    rfind_marker(path, marker),
                    path.rfind(marker),
                    "{path} {marker}"
                );
            }
        }
    }

    #[test]
    fn fixed_paths() {
        assert_eq!(Route::parse("/v2/").unwrap(), Route::Base);
        assert_eq!(Route::parse("/v2").unwrap(), Route::Base);
        assert_eq!(Route::parse("/v2/_catalog").unwrap(), Route::Catalog);
    }

    #[test]
    fn names_with_slashes_split_at_last_marker() {
        assert_eq!(
            Route::parse("/v2/a/manifests/b/manifests/latest").unwrap(),
            Route::Manifest {
                name: name("a/manifests/b"),
                reference: Reference::Tag("latest".parse().unwrap())
            }
        );
        assert_eq!(
            Route::parse("/v2/a/manifests/x/tags/list").unwrap(),
            Route::TagsList {
                name: name("a/manifests/x")
            }
        );
        assert_eq!(
            Route::parse(&format!("/v2/x/blobs/uploads/y/blobs/{D}")).unwrap(),
            Route::Blob {
                name: name("x/blobs/uploads/y"),
                digest: D.parse().unwrap()
            }
        );
        assert_eq!(
            Route::parse("/v2/docker.io/library/busybox/blobs/uploads/").unwrap(),
            Route::Upload {
                name: name("docker.io/library/busybox"),
                session: None
            }
        );
        let id = UploadId::new();
        assert_eq!(
            Route::parse(&format!("/v2/a/blobs/uploads/{}", id.as_str())).unwrap(),
            Route::Upload {
                name: name("a"),
                session: Some(id)
            }
        );
        assert_eq!(
            Route::parse(&format!("/v2/a/b/referrers/{D}")).unwrap(),
            Route::Referrers {
                name: name("a/b"),
                digest: D.parse().unwrap()
            }
        );
        assert!(matches!(
            Route::parse(&format!("/v2/a/manifests/{D}")).unwrap(),
            Route::Manifest {
                reference: Reference::Digest(_),
                ..
            }
        ));
    }

    #[test]
    fn errors() {
        assert_eq!(code("/v2/A/B/manifests/latest"), "NAME_INVALID");
        assert_eq!(code("/v2/a//b/manifests/latest"), "NAME_INVALID");
        assert_eq!(code("/v2//manifests/latest"), "NAME_INVALID");
        assert_eq!(code("/v2/a/manifests/-bad"), "TAG_INVALID");
        assert_eq!(code("/v2/a/manifests/sha256:abc"), "TAG_INVALID");
        assert_eq!(code("/v2/a/blobs/sha256:abc"), "DIGEST_INVALID");
        assert_eq!(code("/v2/a/blobs/latest"), "DIGEST_INVALID");
        assert_eq!(code("/v2/a/blobs/uploads"), "DIGEST_INVALID");
        assert_eq!(code("/v2/a/referrers/nope"), "DIGEST_INVALID");
        assert_eq!(code("/v2/a"), "none");
        assert_eq!(code("/v2/a/manifests/"), "none");
        assert_eq!(code("/v2/a/manifests/x/y"), "none");
        assert_eq!(code("/v2/a/tags/list/"), "none");
        assert_eq!(code("/v3/a/tags/list"), "none");
        assert_eq!(code("/v2/a/blobs/uploads/x/y"), "none");
        // A session id is a canonical UUID (an upload's only names).
        assert_eq!(code("/v2/a/blobs/uploads/5f1c"), "BLOB_UPLOAD_UNKNOWN");
        let upper = UploadId::new().as_str().to_uppercase();
        assert_eq!(
            code(&format!("/v2/a/blobs/uploads/{upper}")),
            "BLOB_UPLOAD_UNKNOWN"
        );
        // Names are percent-decoded once, then parsed.
        assert_eq!(
            Route::parse("/v2/%61%2Fb/tags/list").unwrap(),
            Route::TagsList { name: name("a/b") }
        );
        assert_eq!(code("/v2/%zz/tags/list"), "NAME_INVALID");
        assert_eq!(code("/v2/a%2F%2Fb/tags/list"), "NAME_INVALID");
        assert_eq!(code("/v2/a/manifests/%zz"), "TAG_INVALID");
        assert_eq!(code("/v2/a/manifests/v%2F1"), "TAG_INVALID");
        // The sha256 fast path's shape with bytes that are not lower-case
        // hex, or a `/` inside: the segments decide, as for any path.
        let upper = D.to_uppercase().replace("SHA256", "sha256");
        assert_eq!(code(&format!("/v2/a/blobs/{upper}")), "DIGEST_INVALID");
        let slashed = format!("{}/{}", &D[..20], &D[21..]);
        assert_eq!(code(&format!("/v2/a/blobs/{slashed}")), "none");
        assert_eq!(code(&format!("/v2/blobs/{D}")), "none");
        assert_eq!(code(&format!("/v2//blobs/{D}")), "NAME_INVALID");
    }

    #[test]
    fn a_sha256_blob_path_splits_without_a_search() {
        let path = format!("/v2/a/b/blobs/{D}");
        assert_eq!(split_sha256_blob(&path), Some(("/v2/a/b", D)));
        assert_eq!(split_sha256_blob(&format!("/blobs/{D}")), Some(("", D)));
        for other in [
            format!("/v2/a/b/blobs/{}", &D[1..]),
            format!("/v2/a/b/blobs/{D}0"),
            format!("/v2/a/b/blob/x{D}"),
            format!("/v2/a/b/blobs/sha512:{}", &D[7..]),
            format!("/v2/a/b/blobs/{}/{}", &D[..30], &D[31..]),
            format!("blobs/{D}"),
            "/v2/a/blobs/uploads/".to_string(),
            String::new(),
        ] {
            assert_eq!(split_sha256_blob(&other), None, "{other}");
        }
        // Multi-byte characters before the suffix split at a boundary.
        let path = format!("/v2/é/blobs/{D}");
        assert_eq!(split_sha256_blob(&path), Some(("/v2/é", D)));
    }
}
