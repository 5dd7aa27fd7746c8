//! Registry errors: the distribution-spec error code table and the one HTTP
//! error type every handler returns.
//!
//! Owns: code → (HTTP status, message) (distribution-spec v1.1 "Error Codes",
//! code-1 … code-15), the JSON error body, and the `From` conversions from
//! store and state errors. Never decides *when* an error happens; handlers do.

use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use crate::state::StateError;
use crate::store::StoreError;

/// An error code of distribution-spec v1.1 "Error Codes".
///
/// Two codes of the reference registry that v1.1's table does not list are
/// kept because clients and the conformance suite expect them:
/// `TAG_INVALID` (the old code-11) for a manifest PUT to a reference that is
/// neither a tag nor a digest, and `PAGINATION_NUMBER_INVALID` for a bad `n`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorCode {
    /// code-1 `BLOB_UNKNOWN`, 404.
    BlobUnknown,
    /// code-2 `BLOB_UPLOAD_INVALID`, 400.
    BlobUploadInvalid,
    /// code-3 `BLOB_UPLOAD_UNKNOWN`, 404.
    BlobUploadUnknown,
    /// code-4 `DIGEST_INVALID`, 400.
    DigestInvalid,
    /// code-5 `MANIFEST_BLOB_UNKNOWN`, 400 (the spec names no status; 400 is
    /// what distribution and zot send for a manifest PUT naming absent content).
    ManifestBlobUnknown,
    /// code-6 `MANIFEST_INVALID`, 400.
    ManifestInvalid,
    /// code-7 `MANIFEST_UNKNOWN`, 404.
    ManifestUnknown,
    /// code-8 `NAME_INVALID`, 400.
    NameInvalid,
    /// code-9 `NAME_UNKNOWN`, 404.
    NameUnknown,
    /// code-10 `SIZE_INVALID`, 400.
    SizeInvalid,
    /// code-11 `TAG_INVALID`, 400: a manifest PUT whose reference is no tag
    /// or digest. Reads of such a reference answer `MANIFEST_UNKNOWN`.
    TagInvalid,
    /// `PAGINATION_NUMBER_INVALID`, 400 (the reference registry's code): `n`
    /// is not a non-negative decimal integer.
    PaginationNumberInvalid,
    /// code-12 `UNAUTHORIZED`, 401.
    Unauthorized,
    /// code-13 `DENIED`, 403.
    Denied,
    /// code-14 `UNSUPPORTED`, 405 (airlock uses it for methods it does not serve).
    Unsupported,
    /// code-15 `TOOMANYREQUESTS`, 429.
    TooManyRequests,
    /// `INSUFFICIENT_STORAGE`, 507 (RFC 4918 §11.5; not in the spec's
    /// table, whose clients treat unknown codes as generic failures): the
    /// store's disk is full or below its free-space floor. Nothing was
    /// stored; reads still work.
    InsufficientStorage,
    /// `UNAVAILABLE`, 503 (the reference registry's `errcode.ErrorCodeUnavailable`):
    /// writes are paused while a backup holds the write lock
    /// ([`crate::ops::write_lock`]), sent with `Retry-After`; reads go on.
    Unavailable,
}

/// One row of the error code table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CodeInfo {
    /// The code as sent (`BLOB_UNKNOWN`).
    pub code: &'static str,
    /// The HTTP status it is sent with.
    pub status: StatusCode,
    /// The fixed human-readable message (the spec's description).
    pub message: &'static str,
}

impl ErrorCode {
    /// The table row for this code: the single place codes map to statuses.
    #[rustfmt::skip]
    pub const fn info(self) -> CodeInfo {
        use ErrorCode::*;
        let (code, status, message) = match self {
            BlobUnknown =>         ("BLOB_UNKNOWN",          StatusCode::NOT_FOUND,          "blob unknown to registry"),
            BlobUploadInvalid =>   ("BLOB_UPLOAD_INVALID",   StatusCode::BAD_REQUEST,        "blob upload invalid"),
            BlobUploadUnknown =>   ("BLOB_UPLOAD_UNKNOWN",   StatusCode::NOT_FOUND,          "blob upload unknown to registry"),
            DigestInvalid =>       ("DIGEST_INVALID",        StatusCode::BAD_REQUEST,        "provided digest did not match uploaded content"),
            ManifestBlobUnknown => ("MANIFEST_BLOB_UNKNOWN", StatusCode::BAD_REQUEST,        "blob unknown to registry"),
            ManifestInvalid =>     ("MANIFEST_INVALID",      StatusCode::BAD_REQUEST,        "manifest invalid"),
            ManifestUnknown =>     ("MANIFEST_UNKNOWN",      StatusCode::NOT_FOUND,          "manifest unknown"),
            NameInvalid =>         ("NAME_INVALID",          StatusCode::BAD_REQUEST,        "invalid repository name"),
            NameUnknown =>         ("NAME_UNKNOWN",          StatusCode::NOT_FOUND,          "repository name not known to registry"),
            SizeInvalid =>         ("SIZE_INVALID",          StatusCode::BAD_REQUEST,        "provided length did not match content length"),
            TagInvalid =>          ("TAG_INVALID",           StatusCode::BAD_REQUEST,        "manifest tag did not match URI"),
            PaginationNumberInvalid => ("PAGINATION_NUMBER_INVALID", StatusCode::BAD_REQUEST, "invalid number of results requested"),
            Unauthorized =>        ("UNAUTHORIZED",          StatusCode::UNAUTHORIZED,       "authentication required"),
            Denied =>              ("DENIED",                StatusCode::FORBIDDEN,          "requested access to the resource is denied"),
            Unsupported =>         ("UNSUPPORTED",           StatusCode::METHOD_NOT_ALLOWED, "the operation is unsupported"),
            TooManyRequests =>     ("TOOMANYREQUESTS",       StatusCode::TOO_MANY_REQUESTS,  "too many requests"),
            InsufficientStorage => ("INSUFFICIENT_STORAGE",  StatusCode::INSUFFICIENT_STORAGE, "insufficient storage: the registry's disk is full"),
            Unavailable =>         ("UNAVAILABLE",           StatusCode::SERVICE_UNAVAILABLE, "service unavailable"),
        };
        CodeInfo {
            code,
            status,
            message,
        }
    }
}

/// The one error type of the `/v2` API. Every handler returns it; it renders
/// itself as `{"errors":[{"code":..,"message":..,"detail":..}]}` with
/// `Content-Type: application/json`.
#[derive(Debug)]
pub enum RegistryError {
    /// A spec error: status and message from [`ErrorCode::info`], `detail` is
    /// free JSON (`null` when there is nothing to add).
    Api {
        /// The code.
        code: ErrorCode,
        /// Sent as `detail`.
        detail: Value,
        /// Sent as `message` instead of the table's, when the table's would
        /// mislead (`DIGEST_INVALID` for a malformed digest: nothing was
        /// uploaded, so "did not match uploaded content" is wrong).
        message: Option<&'static str>,
    },
    /// A spec error sent with a status the spec names for the case instead of
    /// the code's table row, plus headers: 416 for an upload chunk out of
    /// order (`BLOB_UPLOAD_INVALID`, with `Location`, `Range`,
    /// `Docker-Upload-UUID`), 413 for a manifest over the size limit
    /// (`SIZE_INVALID`).
    Status {
        /// The HTTP status sent.
        status: StatusCode,
        /// The code in the body.
        code: ErrorCode,
        /// Sent as `detail`.
        detail: Value,
        /// Extra response headers (boxed: keeps every `Result` small).
        headers: Box<HeaderMap>,
    },
    /// A method this endpoint does not serve: 405 `UNSUPPORTED` with
    /// `Allow: <allow>` (RFC 9110 §15.5.6 requires the header).
    MethodNotAllowed {
        /// The methods the endpoint does serve, e.g. `GET, HEAD`.
        allow: &'static str,
    },
    /// No such endpoint under `/v2` (a path no route matches, e.g. a blob
    /// "digest" holding `/`): 404 `NAME_UNKNOWN` with the path's shape in
    /// `detail`, so every answer under `/v2` carries an OCI error body.
    NoEndpoint,
    /// Anything else: 500 with a generic message; the cause is logged, never sent.
    Internal(String),
}

/// The error code of an error answer, as a response extension for the
/// access log (`server::trace`): `UNKNOWN` for internal errors.
#[derive(Debug, Clone, Copy)]
pub struct LoggedCode(pub &'static str);

/// `message` of a `DIGEST_INVALID` sent for a missing or malformed digest.
pub const INVALID_DIGEST_MESSAGE: &str = "provided digest is missing or invalid";

/// Shorthand for the result of registry operations.
pub type Result<T> = std::result::Result<T, RegistryError>;

impl RegistryError {
    /// A spec error with a JSON `detail`.
    pub fn new(code: ErrorCode, detail: Value) -> RegistryError {
        RegistryError::Api {
            code,
            detail,
            message: None,
        }
    }

    /// A spec error sent with `message` instead of the table's message.
    pub fn with_message(code: ErrorCode, message: &'static str, detail: Value) -> RegistryError {
        RegistryError::Api {
            code,
            detail,
            message: Some(message),
        }
    }

    /// 400 `DIGEST_INVALID` for a digest that is missing or not a digest
    /// (as opposed to content that does not match a valid one).
    pub fn invalid_digest(detail: Value) -> RegistryError {
        RegistryError::with_message(ErrorCode::DigestInvalid, INVALID_DIGEST_MESSAGE, detail)
    }

    /// 507 `INSUFFICIENT_STORAGE` for a write refused because the disk is
    /// full or below the free-space floor; `detail.reason` names the cause.
    pub fn no_space(cause: &dyn std::fmt::Display) -> RegistryError {
        tracing::error!(%cause, "write refused: store out of space");
        RegistryError::new(
            ErrorCode::InsufficientStorage,
            json!({ "reason": cause.to_string() }),
        )
    }

    /// The error as answered to `method`: a reference that is no tag or
    /// digest (`TAG_INVALID`) is 404 `MANIFEST_UNKNOWN` for every method but
    /// PUT, since such a manifest cannot exist (the conformance suite's
    /// expectation); PUT keeps 400 `TAG_INVALID`.
    pub fn for_method(self, method: &Method) -> RegistryError {
        match self {
            RegistryError::Api {
                code: ErrorCode::TagInvalid,
                detail,
                ..
            } if *method != Method::PUT => RegistryError::new(ErrorCode::ManifestUnknown, detail),
            other => other,
        }
    }

    /// The HTTP status this error is sent with.
    pub fn status(&self) -> StatusCode {
        match self {
            RegistryError::Api { code, .. } => code.info().status,
            RegistryError::Status { status, .. } => *status,
            RegistryError::MethodNotAllowed { .. } => StatusCode::METHOD_NOT_ALLOWED,
            RegistryError::NoEndpoint => StatusCode::NOT_FOUND,
            RegistryError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The body as sent: `{"errors":[{"code":..,"message":..,"detail":..}]}`
    /// (keys in that order).
    pub fn body(&self) -> String {
        let (code, message, detail) = match self {
            RegistryError::Api {
                code,
                detail,
                message,
            } => {
                let info = code.info();
                (info.code, message.unwrap_or(info.message), detail.clone())
            }
            RegistryError::Status { code, detail, .. } => {
                let info = code.info();
                (info.code, info.message, detail.clone())
            }
            RegistryError::MethodNotAllowed { allow } => {
                let info = ErrorCode::Unsupported.info();
                (info.code, info.message, json!({ "allow": allow }))
            }
            RegistryError::NoEndpoint => {
                let info = ErrorCode::NameUnknown.info();
                (
                    info.code,
                    "no such endpoint",
                    json!({ "reason": "the path matches no distribution-spec endpoint" }),
                )
            }
            RegistryError::Internal(_) => ("UNKNOWN", "internal server error", Value::Null),
        };
        let body = ErrorBody {
            errors: [ErrorEntry {
                code,
                message,
                detail,
            }],
        };
        serde_json::to_string(&body).unwrap_or_else(|_| r#"{"errors":[]}"#.into())
    }
}

#[derive(serde::Serialize)]
struct ErrorBody {
    errors: [ErrorEntry; 1],
}

#[derive(serde::Serialize)]
struct ErrorEntry {
    code: &'static str,
    message: &'static str,
    detail: Value,
}

impl IntoResponse for RegistryError {
    fn into_response(self) -> Response {
        if let RegistryError::Internal(cause) = &self {
            tracing::error!(%cause, "internal error serving registry request");
        }
        let status = self.status();
        let code = match &self {
            RegistryError::Api { code, .. } | RegistryError::Status { code, .. } => {
                code.info().code
            }
            RegistryError::MethodNotAllowed { .. } => ErrorCode::Unsupported.info().code,
            RegistryError::NoEndpoint => ErrorCode::NameUnknown.info().code,
            RegistryError::Internal(_) => "UNKNOWN",
        };
        let mut res = (
            status,
            [(header::CONTENT_TYPE, "application/json")],
            self.body(),
        )
            .into_response();
        res.extensions_mut().insert(LoggedCode(code));
        match self {
            RegistryError::MethodNotAllowed { allow } => {
                res.headers_mut()
                    .insert(header::ALLOW, HeaderValue::from_static(allow));
            }
            RegistryError::Status { headers, .. } => res.headers_mut().extend(*headers),
            _ => {}
        }
        res
    }
}

impl From<StoreError> for RegistryError {
    /// For content reads only. `NotFound`: the state links content the store
    /// does not hold (logged, sent as 404 `BLOB_UNKNOWN`); an unavailable
    /// object store is 503 `UNAVAILABLE` with `Retry-After`
    /// ([`RegistryError::unavailable`]); everything else is internal.
    /// A corrupt blob (quarantined on the spot) is absent from now on: 404
    /// `BLOB_UNKNOWN` too. A full disk is 507 `INSUFFICIENT_STORAGE`
    /// ([`RegistryError::no_space`]).
    fn from(e: StoreError) -> RegistryError {
        match e {
            StoreError::NotFound(key) => {
                tracing::warn!(%key, "content recorded in state is missing from the blobstore");
                RegistryError::new(ErrorCode::BlobUnknown, Value::Null)
            }
            StoreError::Corrupt(cause) => {
                tracing::error!(%cause, "corrupt content not served");
                RegistryError::new(ErrorCode::BlobUnknown, Value::Null)
            }
            e if e.is_no_space() => RegistryError::no_space(&e),
            e @ StoreError::Unavailable(_) => RegistryError::unavailable(&e),
            other => RegistryError::Internal(other.to_string()),
        }
    }
}

impl RegistryError {
    /// 503 `UNAVAILABLE` with `Retry-After` for an object store that is
    /// unavailable ([`StoreError::retry_after`]): an outage the client
    /// waits out, logged at warn (not an internal error).
    pub fn unavailable(e: &StoreError) -> RegistryError {
        let secs = e
            .retry_after()
            .unwrap_or(crate::store::UNAVAILABLE_RETRY_SECS);
        tracing::warn!(error = %e, "object store unavailable: request refused (503)");
        let mut headers = HeaderMap::new();
        headers.insert(header::RETRY_AFTER, HeaderValue::from(secs));
        RegistryError::Status {
            status: StatusCode::SERVICE_UNAVAILABLE,
            code: ErrorCode::Unavailable,
            detail: json!({ "reason": e.to_string() }),
            headers: Box::new(headers),
        }
    }
}

/// `Retry-After` of an answer refused for damage: a repair is a person's
/// work, so a minute.
const DAMAGED_RETRY_SECS: u64 = 60;

impl From<StateError> for RegistryError {
    /// Internal but for these: a full store is 507 ([`RegistryError::no_space`]),
    /// an unavailable object store 503 ([`RegistryError::unavailable`])
    /// and a commit that kept losing the root race past its deadline
    /// (`state::commit::RETRY_DEADLINE`) is 503 with `Retry-After: 1`, to
    /// be tried again. Otherwise state errors mean the metadata tree cannot
    /// be read (store failure, a missing or corrupt document), never that
    /// the client asked for something absent; handlers report absence
    /// themselves.
    fn from(e: StateError) -> RegistryError {
        match e {
            StateError::Store(s) if s.is_no_space() => RegistryError::no_space(&s),
            StateError::Store(s @ StoreError::Unavailable(_)) => RegistryError::unavailable(&s),
            StateError::Contention(n) => {
                let mut headers = HeaderMap::new();
                let secs = e.retry_after().unwrap_or(1);
                headers.insert(header::RETRY_AFTER, HeaderValue::from(secs));
                RegistryError::Status {
                    status: StatusCode::SERVICE_UNAVAILABLE,
                    code: ErrorCode::TooManyRequests,
                    detail: json!({ "reason": format!("the state root kept changing under {n} attempts (other replicas committing); try again") }),
                    headers: Box::new(headers),
                }
            }
            // The root or the current generation is damaged: reads are
            // answered from the last good generation, writes wait for a
            // repair (`airlock fsck --repair`).
            other if other.is_damage() => {
                let mut headers = HeaderMap::new();
                headers.insert(header::RETRY_AFTER, HeaderValue::from(DAMAGED_RETRY_SECS));
                tracing::error!(error = %other, "state damaged: request refused (503)");
                RegistryError::Status {
                    status: StatusCode::SERVICE_UNAVAILABLE,
                    code: ErrorCode::Unavailable,
                    detail: json!({ "reason": format!("the state is damaged ({other}); reads are served from the last good generation, changes wait for `airlock fsck --repair`") }),
                    headers: Box::new(headers),
                }
            }
            other => RegistryError::Internal(other.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_matches_spec_statuses() {
        let rows = [
            (ErrorCode::BlobUnknown, "BLOB_UNKNOWN", 404),
            (ErrorCode::BlobUploadInvalid, "BLOB_UPLOAD_INVALID", 400),
            (ErrorCode::BlobUploadUnknown, "BLOB_UPLOAD_UNKNOWN", 404),
            (ErrorCode::DigestInvalid, "DIGEST_INVALID", 400),
            (ErrorCode::ManifestBlobUnknown, "MANIFEST_BLOB_UNKNOWN", 400),
            (ErrorCode::ManifestInvalid, "MANIFEST_INVALID", 400),
            (ErrorCode::ManifestUnknown, "MANIFEST_UNKNOWN", 404),
            (ErrorCode::NameInvalid, "NAME_INVALID", 400),
            (ErrorCode::NameUnknown, "NAME_UNKNOWN", 404),
            (ErrorCode::SizeInvalid, "SIZE_INVALID", 400),
            (ErrorCode::Unauthorized, "UNAUTHORIZED", 401),
            (ErrorCode::Denied, "DENIED", 403),
            (ErrorCode::Unsupported, "UNSUPPORTED", 405),
            (ErrorCode::TooManyRequests, "TOOMANYREQUESTS", 429),
            (ErrorCode::InsufficientStorage, "INSUFFICIENT_STORAGE", 507),
            (ErrorCode::Unavailable, "UNAVAILABLE", 503),
        ];
        for (code, name, status) in rows {
            assert_eq!(code.info().code, name);
            assert_eq!(code.info().status.as_u16(), status, "{name}");
        }
    }

    #[test]
    fn body_shape() {
        let e = RegistryError::new(ErrorCode::NameUnknown, json!({"name": "a/b"}));
        assert_eq!(
            e.body(),
            r#"{"errors":[{"code":"NAME_UNKNOWN","message":"repository name not known to registry","detail":{"name":"a/b"}}]}"#
        );
        let e = RegistryError::invalid_digest(json!({"digest": "md5:x"}));
        assert_eq!(
            e.body(),
            r#"{"errors":[{"code":"DIGEST_INVALID","message":"provided digest is missing or invalid","detail":{"digest":"md5:x"}}]}"#
        );
        let internal = RegistryError::Internal("disk on fire".into());
        assert!(!internal.body().contains("fire"));
    }
}
