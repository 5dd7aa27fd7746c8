//! The `/torcx/...` routes: what a torcx host fetches from a remote whose
//! `base_url` is `http(s)://HOST/torcx/<remote>/${COREOS_BOARD}/${VERSION_ID}/`.
//!
//! | GET/HEAD `/torcx/<remote>/<board>/<os version>/...` | answer |
//! | --- | --- |
//! | `torcx_remote_contents.json.asc` | the vendor's document for that target byte for byte if a bundle carried one, else the site contents cleartext-signed with the remote's key |
//! | `<name>:<version>.torcx.<tgz\|squashfs>` | the archive, streamed, with `ETag` (its sha256), `Accept-Ranges` and single byte ranges |
//! | `torcx_manifest.json`, `torcx_manifest.json.asc` | the legacy package list (absolute `url` locations built from `Host`) and its detached signature |
//!
//! Every other path, an unknown remote, board, OS version or file, a
//! withdrawn version, or a remote without a signing key is 404 with a plain
//! text body: the client ignores status codes, so an error is never a 200.
//! Signed documents are cached per version of the `torcx` document, so a
//! document and its signature stay byte-identical between requests until the
//! next import.
//!
//! With `[torcx] public = true` hosts fetch without credentials even when
//! users are configured ([`TorcxConfig::serves_anonymously`]): the remote's
//! `remote.json` on every host then holds no password.
//!
//! Owns: routing, response headers and the signing-key map. Never changes
//! state; reads the current snapshot on every request (new imports are
//! served without a restart).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use bytes::Bytes;

use super::contents;
use super::format::{CONTENTS_FILE, PACKAGE_LIST_FILE, check_token, parse_archive_file_name};
use super::table::{RemoteTable, Target, TorcxDoc};
use crate::bundle::sign::SigningKey;
use crate::digest::Digest;
use crate::registry::range::RangeOutcome;
use crate::registry::responses::{BlobResponse, RangeNotSatisfiable, etag};
use crate::state::StateStore;
use crate::store::blob_key;

/// Largest number of signed documents kept in the cache.
const CACHE_MAX: usize = 1024;

/// The torcx part of the server's configuration: one RSA signing key per
/// remote (`serve --torcx-key REMOTE=KEY.sec.asc`), whether hosts fetch
/// without credentials (`[torcx] public`), and the signed-document cache.
#[derive(Default)]
pub struct TorcxConfig {
    /// Signing key per remote; replaced whole on a config reload.
    keys: arc_swap::ArcSwap<BTreeMap<String, Arc<SigningKey>>>,
    /// GET/HEAD of `/torcx/...` need no credentials (see [`TorcxConfig::serves_anonymously`]).
    public: std::sync::atomic::AtomicBool,
    cache: Mutex<HashMap<String, Arc<Cached>>>,
    /// The last `torcx` document read, by its digest (documents are immutable).
    doc: Mutex<Option<(String, Arc<TorcxDoc>)>>,
}

/// A signed document ready to send.
struct Cached {
    bytes: Bytes,
    digest: Digest,
}

impl TorcxConfig {
    /// A configuration signing each remote's contents with its key.
    pub fn new(keys: BTreeMap<String, SigningKey>) -> TorcxConfig {
        TorcxConfig {
            keys: arc_swap::ArcSwap::from_pointee(
                keys.into_iter().map(|(r, k)| (r, Arc::new(k))).collect(),
            ),
            public: std::sync::atomic::AtomicBool::new(false),
            cache: Mutex::default(),
            doc: Mutex::default(),
        }
    }

    /// Replaces the signing keys and `public` (a config reload); documents signed with
    /// the old keys are dropped from the cache.
    pub fn replace_keys(&self, other: TorcxConfig) {
        self.keys.store(other.keys.load_full());
        self.public.store(other.public(), Ordering::Relaxed);
        if let Ok(mut m) = self.cache.lock() {
            m.clear();
        }
    }

    /// The remotes that have a signing key, sorted.
    pub fn remotes(&self) -> Vec<String> {
        self.keys.load().keys().cloned().collect()
    }

    /// The signing key of `remote`, if it has one.
    fn key(&self, remote: &str) -> Option<Arc<SigningKey>> {
        self.keys.load().get(remote).cloned()
    }

    /// Whether hosts fetch without credentials (`[torcx] public`).
    pub fn public(&self) -> bool {
        self.public.load(Ordering::Relaxed)
    }

    /// With `public`, hosts fetch contents and archives without credentials
    /// (`[torcx] public = true`, `serve --torcx-public`).
    pub fn with_public(self, public: bool) -> TorcxConfig {
        self.public.store(public, Ordering::Relaxed);
        self
    }

    /// Whether a request needs no credentials because it is a host's read
    /// of a public torcx remote: GET or HEAD under `/torcx/` with `[torcx]
    /// public = true`. Safe to serve to anyone: the contents are signed
    /// with the remote's key and every archive is verified by its hash
    /// against them on the host, and torcx has no write routes. The access
    /// layer asks this once per request, before it asks for credentials.
    pub fn serves_anonymously(&self, method: &Method, path: &str) -> bool {
        self.public()
            && matches!(*method, Method::GET | Method::HEAD)
            && (path == "/torcx" || path.starts_with("/torcx/"))
    }

    /// Parses `REMOTE=PATH` and loads the key, which must be RSA (the torcx
    /// client cannot verify EdDSA signatures).
    ///
    /// Errors: bad syntax, an unreadable key, or a key that is not RSA.
    pub fn load_key(spec: &str) -> Result<(String, SigningKey), String> {
        let (remote, path) = spec
            .split_once('=')
            .ok_or_else(|| format!("--torcx-key {spec:?}: expected REMOTE=KEY.sec.asc"))?;
        check_token("remote", remote).map_err(|e| format!("--torcx-key: {e}"))?;
        let key = SigningKey::load(std::path::Path::new(path))
            .map_err(|e| format!("--torcx-key {remote}: {e}"))?;
        let algo = key.algorithm_name();
        if !algo.starts_with("RSA") {
            return Err(format!(
                "--torcx-key {remote}: key {} is {algo}; torcx hosts verify RSA signatures only (airlock keys generate --algo rsa3072)",
                key.fingerprint()
            ));
        }
        Ok((remote.to_string(), key))
    }

    fn cached(
        &self,
        key: String,
        make: impl FnOnce() -> Result<Vec<u8>, TorcxError>,
    ) -> Result<Arc<Cached>, TorcxError> {
        if let Some(c) = self.cache.lock().ok().and_then(|m| m.get(&key).cloned()) {
            return Ok(c);
        }
        let bytes = make()?;
        let c = Arc::new(Cached {
            digest: Digest::sha256_of(&bytes),
            bytes: Bytes::from(bytes),
        });
        if let Ok(mut m) = self.cache.lock() {
            if m.len() >= CACHE_MAX {
                m.clear();
            }
            m.insert(key, c.clone());
        }
        Ok(c)
    }
}

/// What the routes need from the composition root.
pub trait Context: Send + Sync + 'static {
    /// The state (re-read on every request).
    fn state(&self) -> &StateStore;
    /// Keys and cache.
    fn torcx(&self) -> &TorcxConfig;
}

/// An error answer: status and a one-line plain text body.
#[derive(Debug)]
pub struct TorcxError {
    status: StatusCode,
    message: String,
    /// `Retry-After` (seconds) of a 503.
    retry_after: Option<u64>,
}

impl TorcxError {
    fn not_found(message: impl Into<String>) -> TorcxError {
        TorcxError {
            status: StatusCode::NOT_FOUND,
            message: message.into(),
            retry_after: None,
        }
    }

    fn internal(e: impl std::fmt::Display) -> TorcxError {
        tracing::error!(error = %e, "torcx request failed");
        TorcxError {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            message: format!("internal error: {e}"),
            retry_after: None,
        }
    }

    /// A failed state read: 503 with `Retry-After` when it is worth
    /// retrying ([`crate::state::StateError::retry_after`]: an unavailable
    /// object store, a lost root race), else internal.
    fn state(e: crate::state::StateError) -> TorcxError {
        match e.retry_after() {
            Some(secs) => {
                tracing::warn!(error = %e, "torcx request refused: try again (503)");
                TorcxError {
                    status: StatusCode::SERVICE_UNAVAILABLE,
                    message: e.to_string(),
                    retry_after: Some(secs),
                }
            }
            None => TorcxError::internal(e),
        }
    }

    /// A failed store read: as [`TorcxError::state`].
    fn store(e: crate::store::StoreError) -> TorcxError {
        TorcxError::state(e.into())
    }
}

impl IntoResponse for TorcxError {
    fn into_response(self) -> Response {
        let mut res = (self.status, format!("{}\n", self.message)).into_response();
        res.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        if let Some(secs) = self.retry_after {
            res.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        res
    }
}

/// The `/torcx` routes over `app`.
pub fn router<C: Context>(app: Arc<C>) -> Router {
    Router::new()
        .route("/torcx", get(not_found))
        .route("/torcx/", get(not_found))
        .route("/torcx/{*path}", get(file::<C>))
        .with_state(app)
}

/// A remote file's path, `/torcx/<remote>/<board>/<os version>/<file>`,
/// each part percent-decoded once ([`crate::names::percent_decode`]) and
/// the first three checked as tokens: the only reading of a `/torcx` path.
/// The access layer's route table (`server::routes`) matches the row
/// through [`FilePath::of_path`] (checking `torcx/<remote>`) and hands the
/// value on to the handler as a request extension.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilePath {
    /// The remote's name.
    pub remote: String,
    /// `${COREOS_BOARD}`.
    pub board: String,
    /// `${VERSION_ID}`.
    pub os_version: String,
    /// The file name (`<name>:<version>.torcx.tgz`, the contents document, ...).
    pub file: String,
}

impl FilePath {
    /// The pattern of its route table row.
    pub const PATTERN: &'static str = "/torcx/{remote}/{board}/{os}/{file}";

    /// Parses `path`: `Ok(None)` when it is no remote file path (four
    /// parts under `/torcx/`); `Err` with the 404 answer when a part is
    /// malformed or not a token.
    pub fn of_path(path: &str) -> Result<Option<FilePath>, TorcxError> {
        let Some(rest) = path.strip_prefix("/torcx/") else {
            return Ok(None);
        };
        let parts: Vec<&str> = rest.split('/').collect();
        let [remote, board, os, file] = parts[..] else {
            return Ok(None);
        };
        let decode = |what: &str, s: &str| {
            crate::names::percent_decode(s)
                .map(std::borrow::Cow::into_owned)
                .map_err(|e| TorcxError::not_found(format!("{what}: {e}")))
        };
        let p = FilePath {
            remote: decode("remote", remote)?,
            board: decode("board", board)?,
            os_version: decode("OS version", os)?,
            file: decode("file", file)?,
        };
        for (what, s) in [
            ("remote", &p.remote),
            ("board", &p.board),
            ("OS version", &p.os_version),
        ] {
            check_token(what, s).map_err(TorcxError::not_found)?;
        }
        if p.file.is_empty() || p.file.contains('/') {
            // A decoded `/` makes it no remote file's path.
            return Err(not_a_remote_path());
        }
        Ok(Some(p))
    }
}

async fn not_found() -> TorcxError {
    not_a_remote_path()
}

/// 404 for a path under `/torcx` that is no remote file (plain text, as
/// every torcx error; the access layer answers it for paths no route
/// declares).
pub fn not_a_remote_path() -> TorcxError {
    TorcxError::not_found("not a torcx remote path: /torcx/<remote>/<board>/<os version>/<file>")
}

/// A small signed document: 200 with `Content-Length`, a strong `ETag`
/// (its sha256) and `Cache-Control: no-cache` (it changes with imports).
fn small(doc: &Cached, content_type: &'static str, head: bool) -> Response {
    let mut res = if head {
        Response::new(axum::body::Body::empty())
    } else {
        Response::new(axum::body::Body::from(doc.bytes.clone()))
    };
    let h = res.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(header::CONTENT_LENGTH, HeaderValue::from(doc.bytes.len()));
    if let Ok(v) = HeaderValue::from_str(&etag(&doc.digest)) {
        h.insert(header::ETAG, v);
    }
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    res
}

/// Serves the [`FilePath`] the access layer parsed and checked (its
/// request extension); never reads the path again.
async fn file<C: Context>(
    State(app): State<Arc<C>>,
    method: Method,
    headers: HeaderMap,
    path: Option<axum::Extension<FilePath>>,
) -> Result<Response, TorcxError> {
    // Who may read the remote (`torcx/<remote>`) is declared in
    // `server::routes` and enforced before this handler runs.
    let Some(axum::Extension(FilePath {
        remote,
        board,
        os_version: os,
        file,
    })) = path
    else {
        tracing::error!("torcx request without the access layer's route");
        return Err(TorcxError::internal(
            "the request was not routed by the access layer",
        ));
    };
    let head = method == Method::HEAD;
    let state = app.state();
    let snap = state.snapshot().await.map_err(TorcxError::state)?;
    let doc_digest = snap
        .state
        .as_ref()
        .and_then(|s| s.documents.get(super::DOCUMENT))
        .map(|d| d.to_string())
        .unwrap_or_default();
    let cached_doc = app
        .torcx()
        .doc
        .lock()
        .ok()
        .and_then(|d| d.clone())
        .filter(|(d, _)| *d == doc_digest)
        .map(|(_, doc)| doc);
    let doc: Arc<TorcxDoc> = match cached_doc {
        Some(doc) => doc,
        None => {
            let doc: Arc<TorcxDoc> = Arc::new(
                state
                    .document(&snap, super::DOCUMENT)
                    .await
                    .map_err(TorcxError::state)?
                    .unwrap_or_default(),
            );
            if let Ok(mut slot) = app.torcx().doc.lock() {
                *slot = Some((doc_digest.clone(), doc.clone()));
            }
            doc
        }
    };
    let table = doc
        .remotes
        .get(&remote)
        .ok_or_else(|| TorcxError::not_found(format!("remote {remote:?} is not known")))?;
    let target = Target {
        board,
        os_version: os,
    };
    let nothing = || {
        TorcxError::not_found(format!(
            "remote {remote:?} offers nothing for board {:?}, OS version {:?}",
            target.board, target.os_version
        ))
    };
    let key = || {
        app.torcx().key(&remote).ok_or_else(|| {
            TorcxError::not_found(format!(
                "remote {remote:?} has no signing key (serve --torcx-key {remote}=KEY.sec.asc)"
            ))
        })
    };
    let cache_key = |what: &str| {
        format!(
            "{doc_digest}|{remote}|{}|{}|{what}",
            target.board, target.os_version
        )
    };
    let text = "text/plain; charset=utf-8";
    if file == CONTENTS_FILE {
        if let Some(v) = table.vendor_for(&target) {
            let bytes = crate::store::get_verified(&**state.blobstore(), &v.digest)
                .await
                .map_err(TorcxError::store)?;
            let doc = Cached {
                digest: v.digest.clone(),
                bytes: Bytes::from(bytes),
            };
            return Ok(small(&doc, text, head));
        }
        let key = key()?;
        let doc = app.torcx().cached(cache_key("contents"), || {
            let contents = contents::site_contents(table, &target).ok_or_else(nothing)?;
            contents::sign_contents(&contents, &key)
                .map(String::into_bytes)
                .map_err(TorcxError::internal)
        })?;
        return Ok(small(&doc, text, head));
    }
    if file == PACKAGE_LIST_FILE || file == format!("{PACKAGE_LIST_FILE}.asc") {
        let host = headers
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .filter(|h| !h.is_empty() && h.bytes().all(|b| b.is_ascii_graphic() && b != b'/'))
            .ok_or_else(|| TorcxError::not_found("the package list needs a Host header"))?;
        let base = format!(
            "http://{host}/torcx/{remote}/{}/{}/",
            target.board, target.os_version
        );
        let list = contents::package_list(table, &target, &base).ok_or_else(nothing)?;
        let key = key()?;
        let sig = app
            .torcx()
            .cached(cache_key(&format!("list.asc|{host}")), || {
                key.detached_sign(&list)
                    .map(String::into_bytes)
                    .map_err(TorcxError::internal)
            })?;
        if file == PACKAGE_LIST_FILE {
            let doc = Cached {
                digest: Digest::sha256_of(&list),
                bytes: Bytes::from(list),
            };
            return Ok(small(&doc, "application/json", head));
        }
        return Ok(small(&sig, "application/pgp-signature", head));
    }
    archive(state, table, &target, &file, &headers, head).await
}

/// An archive by its file name, streamed with ranges.
async fn archive(
    state: &StateStore,
    table: &RemoteTable,
    target: &Target,
    file: &str,
    headers: &HeaderMap,
    head: bool,
) -> Result<Response, TorcxError> {
    let (name, version, format) = parse_archive_file_name(file).ok_or_else(|| {
        TorcxError::not_found(format!(
            "{file:?} is not {CONTENTS_FILE}, {PACKAGE_LIST_FILE}[.asc] or <name>:<version>.torcx.<tgz|squashfs>"
        ))
    })?;
    let build = table
        .offered(target)
        .find(|b| b.name == name && b.version == version && b.format == format)
        .ok_or_else(|| {
            TorcxError::not_found(format!(
                "{file} is not offered for board {:?}, OS version {:?}",
                target.board, target.os_version
            ))
        })?;
    let store = state.blobstore();
    let key = blob_key(&build.sha256);
    let size = store
        .stat(&key)
        .await
        .map_err(TorcxError::store)?
        .ok_or_else(|| {
            TorcxError::internal(format!("archive {} missing from the store", build.sha256))
        })?;
    let outcome = if head {
        RangeOutcome::Full
    } else {
        RangeOutcome::evaluate(headers, size, &etag(&build.sha256))
    };
    let (range, read) = match outcome {
        RangeOutcome::Unsatisfiable => return Ok(RangeNotSatisfiable { size }.into_response()),
        RangeOutcome::Full => (None, None),
        RangeOutcome::Partial { start, end } => (Some((start, end)), Some((start, end + 1))),
    };
    let body = if head {
        None
    } else {
        Some(store.stream(&key, read).await.map_err(TorcxError::store)?)
    };
    Ok(BlobResponse {
        digest: build.sha256.clone(),
        size,
        range,
        body,
    }
    .into_response())
}
