//! The cell's side of `/stacks/v1`: what this cell runs, the rootfs
//! download, the report of what it installed.
//!
//! Owns: URLs, credentials (HTTP Basic sent with every request to the
//! airlock host; an mTLS client certificate through the TLS settings), and
//! the JSON shapes of the three calls (see `stacks::api`). Rides on
//! [`crate::http_client`] for TLS, retries (429 `Retry-After` honoured) and
//! verified downloads.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use base64::Engine;
use bytes::Bytes;
use hyper::header::{AUTHORIZATION, CONTENT_TYPE, HeaderName, RANGE};
use hyper::{Method, StatusCode, Uri};

use crate::digest::Digest;
use crate::http_client::download::Download;
use crate::http_client::{
    Counters, HttpClient, RetryPolicy, TlsOptions, percent_encode, read_limited,
};

/// What `GET /stacks/v1/<name>?cell=<id>` answers (the fields a cell uses).
#[derive(Debug, Clone, serde::Deserialize)]
pub struct Assignment {
    /// The platform image manifest the cell should run.
    pub digest: Digest,
    /// `repository@digest` promoted.
    pub image: String,
    /// `os/arch[/variant]` of that rootfs.
    pub platform: String,
    /// Path (and query) of the rootfs download on the same server.
    pub rootfs_url: String,
    /// sha256 of the rootfs tar, `sha256:<hex>`.
    pub rootfs_digest: Digest,
    /// Its size in bytes.
    pub rootfs_size: u64,
    /// Cloud Controller state of the stack.
    pub state: String,
    /// The promotion id.
    pub promotion: u64,
    /// Path (and query) of the rootfs's casync blob index, when it was chunked.
    #[serde(default)]
    pub rootfs_index_url: Option<String>,
    /// Path of the casync chunk store on the same server.
    #[serde(default)]
    pub chunk_store_url: Option<String>,
    /// The zstd patch to this rootfs from the one it replaced, when the
    /// server made one ([`crate::chunks::patch`]).
    #[serde(default)]
    pub rootfs_patch: Option<PatchInfo>,
}

/// A rootfs patch as the assignment lists it.
#[derive(Debug, Clone, serde::Deserialize)]
pub struct PatchInfo {
    /// Path (and query) of the patch download on the same server.
    pub url: String,
    /// sha256 of the rootfs tar (as published) the patch applies to.
    pub from: Digest,
    /// That rootfs's size in bytes.
    pub from_size: u64,
    /// sha256 of the patch.
    pub digest: Digest,
    /// The patch's size in bytes.
    pub size: u64,
}

/// Retries of one call: 5xx and connection errors back off up to 8 s, 429
/// waits the server's `Retry-After` (up to 5 minutes); 30 retries bound a
/// call to a few minutes of a busy or restarting server.
pub const CELL_RETRY_POLICY: RetryPolicy = RetryPolicy {
    max_retries: 30,
    max_retry_after: Duration::from_secs(300),
};

/// Largest JSON answer read.
const MAX_JSON: usize = 1 << 20;

/// A client of one airlock's stacks API.
pub struct StacksClient {
    base: String,
    http: HttpClient,
    authorization: Option<String>,
}

impl StacksClient {
    /// A client of `url` (`https://HOST[:PORT]` or `http://...`, no path)
    /// with `tls` and, when given, HTTP Basic `credentials` (user, password).
    pub fn new(
        url: &str,
        tls: &TlsOptions,
        credentials: Option<(&str, &str)>,
        policy: RetryPolicy,
    ) -> Result<StacksClient> {
        let base = url.trim_end_matches('/').to_string();
        let uri: Uri = base.parse().with_context(|| format!("--url {url:?}"))?;
        if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.authority().is_none() {
            bail!("--url {url:?}: expected http(s)://HOST[:PORT]");
        }
        if !matches!(uri.path(), "" | "/") {
            bail!("--url {url:?}: expected no path");
        }
        let tls = crate::http_client::tls_config(tls)?;
        let authorization = credentials.map(|(u, p)| {
            let raw = format!("{u}:{p}");
            format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(raw)
            )
        });
        Ok(StacksClient {
            base,
            http: HttpClient::new(tls, policy, Arc::new(Counters::default())),
            authorization,
        })
    }

    fn uri(&self, path: &str) -> Result<Uri> {
        format!("{}{path}", self.base)
            .parse()
            .with_context(|| format!("invalid URL for {path}"))
    }

    async fn call(
        &self,
        method: Method,
        path: &str,
        mut headers: Vec<(HeaderName, String)>,
        body: Bytes,
    ) -> Result<hyper::Response<hyper::body::Incoming>> {
        if let Some(a) = &self.authorization {
            headers.push((AUTHORIZATION, a.clone()));
        }
        self.http
            .send(&method, &self.uri(path)?, &headers, body)
            .await
    }

    /// `GET /stacks/v1/<stack>?cell=<cell>`. Errors: a non-200 answer,
    /// with the server's `{"code","message"}`.
    pub async fn resolve(&self, stack: &str, cell: &str) -> Result<Assignment> {
        let path = format!(
            "/stacks/v1/{}?cell={}",
            percent_encode(stack),
            percent_encode(cell)
        );
        let resp = self
            .call(Method::GET, &path, Vec::new(), Bytes::new())
            .await?;
        let status = resp.status();
        if let Some(w) = resp.headers().get("warning").and_then(|w| w.to_str().ok()) {
            tracing::warn!(stack, warning = w, "stack warning");
        }
        let body = read_limited(resp, MAX_JSON).await?;
        if status != StatusCode::OK {
            bail!("GET {path}: {status}: {}", error_text(&body));
        }
        serde_json::from_slice(&body).with_context(|| format!("GET {path}: unexpected answer"))
    }

    /// Downloads the rootfs `a` names into `file`, checking its size and
    /// sha256 against what the API published (resumed with `Range` when a
    /// body stops early). The caller removes `file` on error.
    /// `progress` counts the bytes (its length is set to the rootfs size).
    pub async fn download(
        &self,
        a: &Assignment,
        file: &Path,
        progress: &indicatif::ProgressBar,
    ) -> Result<()> {
        self.download_file(
            &a.rootfs_url,
            &a.rootfs_digest,
            a.rootfs_size,
            file,
            progress,
            None,
        )
        .await
    }

    /// Downloads `path` (`/stacks/v1/...` on this server) into `file`,
    /// checking it is `size` bytes of digest `expected` (resumed with
    /// `Range` when a body stops early); `bytes` counts the body bytes
    /// received. The caller removes `file` on error.
    pub async fn download_file(
        &self,
        path: &str,
        expected: &Digest,
        size: u64,
        file: &Path,
        progress: &indicatif::ProgressBar,
        bytes: Option<&std::sync::atomic::AtomicU64>,
    ) -> Result<()> {
        if !path.starts_with("/stacks/v1/") {
            bail!("unexpected download path {path:?}");
        }
        progress.reset();
        progress.set_length(size);
        let download = Download {
            expected,
            size,
            file,
            progress,
            counters: self.http.counters(),
            bytes,
            max_retries: self.http.policy().max_retries,
        };
        let result = download
            .run(move |from| async move {
                let headers = from
                    .map(|n| vec![(RANGE, format!("bytes={n}-"))])
                    .unwrap_or_default();
                let resp = self.call(Method::GET, path, headers, Bytes::new()).await?;
                if !matches!(resp.status(), StatusCode::OK | StatusCode::PARTIAL_CONTENT) {
                    let status = resp.status();
                    let body = read_limited(resp, MAX_JSON).await.unwrap_or_default();
                    bail!("{status}: {}", error_text(&body));
                }
                Ok(resp)
            })
            .await;
        progress.finish_and_clear();
        result.with_context(|| format!("GET {path}"))
    }

    /// `GET path` (`/stacks/v1/...` on this server): the body of a 200 of
    /// at most `limit` bytes, `None` on a 404. Errors: another status (with
    /// the server's message), a longer body, the connection.
    pub async fn get_bytes(&self, path: &str, limit: usize) -> Result<Option<Bytes>> {
        if !path.starts_with("/stacks/v1/") {
            bail!("unexpected path {path:?}");
        }
        let resp = self
            .call(Method::GET, path, Vec::new(), Bytes::new())
            .await?;
        let status = resp.status();
        if status == StatusCode::NOT_FOUND {
            return Ok(None);
        }
        let body = read_limited(resp, limit).await?;
        if status != StatusCode::OK {
            bail!("GET {path}: {status}: {}", error_text(&body));
        }
        Ok(Some(Bytes::from(body)))
    }

    /// `PUT /stacks/v1/<stack>/cells/<cell>` `{"digest","platform","transfer"}`:
    /// this cell installed `a`, moving what `transfer` says.
    pub async fn report(
        &self,
        stack: &str,
        cell: &str,
        a: &Assignment,
        transfer: Option<crate::stacks::cells::Transfer>,
    ) -> Result<()> {
        let path = format!(
            "/stacks/v1/{}/cells/{}",
            percent_encode(stack),
            percent_encode(cell)
        );
        let body =
            serde_json::json!({ "digest": a.digest, "platform": a.platform, "transfer": transfer });
        let resp = self
            .call(
                Method::PUT,
                &path,
                vec![(CONTENT_TYPE, "application/json".into())],
                Bytes::from(body.to_string()),
            )
            .await?;
        let status = resp.status();
        if status != StatusCode::NO_CONTENT && !status.is_success() {
            let body = read_limited(resp, MAX_JSON).await.unwrap_or_default();
            return Err(anyhow!("PUT {path}: {status}: {}", error_text(&body)));
        }
        Ok(())
    }
}

/// `url` (a path and query on the server) with `cell=<cell>` added: what
/// lets the server count the request against the cell's download slot.
pub fn with_cell(url: &str, cell: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}cell={}", percent_encode(cell))
}

/// The `message` of a `{"code","message"}` error body, else the body as text.
fn error_text(body: &[u8]) -> String {
    #[derive(serde::Deserialize)]
    struct E {
        code: String,
        message: String,
    }
    match serde_json::from_slice::<E>(body) {
        Ok(e) => format!("{} {}", e.code, e.message),
        Err(_) => String::from_utf8_lossy(&body[..body.len().min(512)]).into_owned(),
    }
}
