//! HTTP(S) to one registry: TLS settings, authentication, retries, redirects.
//!
//! Owns: the connection settings of one registry host (rustls with the system
//! roots plus a `ca_file`, or no verification and a plain-HTTP fallback when
//! `tls_verify = false`), the distribution-spec authentication flow
//! (anonymous first; on 401 the `WWW-Authenticate` challenge picks HTTP Basic
//! or the bearer-token flow of the distribution token spec, one token per
//! scope), retries, and redirects. Never interprets bodies beyond the token
//! answer: manifests and blobs are the caller's.
//!
//! Client: hyper-util's pooled client with hyper-rustls (ring, no native-tls
//! or OpenSSL). `oci-client` 0.18 was considered: it does stream blobs
//! (`pull_blob_stream`, `pull_blob_stream_partial` for ranges) and has the
//! token flow, but it has no retries or resume of its own, takes credentials
//! as one `RegistryAuth` per call rather than from the auth files, and
//! brings reqwest 0.13, oci-spec (dropped from this crate for its build
//! cost), chrono and a second sha2 (0.11). hyper and hyper-util are already
//! in the tree, so this module costs only rustls, ring, rustls-webpki,
//! tokio-rustls, hyper-rustls and rustls-native-certs.
//!
//! Retries: a connection error, a timeout, 429 or a 5xx is retried up to
//! [`MAX_RETRIES`] times, waiting 0.5 s, 1 s, 2 s, ... (at most 8 s) or the
//! server's `Retry-After` seconds (at most 60). Redirects (301, 302, 303,
//! 307, 308) are followed up to 5 times; credentials are sent only to the
//! registry's own host.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use hyper::header::{
    ACCEPT, AUTHORIZATION, HeaderValue, LOCATION, RANGE, USER_AGENT, WWW_AUTHENTICATE,
};
use hyper::{Request, Response, StatusCode, Uri};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

use super::RegistryConfig;
use super::auth::{self, Credentials, Found};

/// Retries after the first attempt for a connection error, timeout, 429 or 5xx.
pub const MAX_RETRIES: u32 = 5;
/// Time allowed for the response head, and between two body chunks.
pub const READ_TIMEOUT: Duration = Duration::from_secs(60);
/// Largest token-endpoint answer read, in bytes.
const MAX_TOKEN_BODY: usize = 1 << 20;

/// Requests and bytes, counted over every registry (for the `--json` summary).
#[derive(Debug, Default)]
pub struct Stats {
    /// HTTP requests sent (retries included).
    pub requests: AtomicU64,
    /// Body bytes received for blobs and manifests.
    pub bytes: AtomicU64,
    /// Blobs and manifests found in the cache instead of downloaded.
    pub cache_hits: AtomicU64,
    /// Retries after a failure.
    pub retries: AtomicU64,
}

type HttpClient = Client<HttpsConnector<HttpConnector>, Empty<Bytes>>;

#[derive(Default)]
struct AuthState {
    /// The registry asked for Basic: send it on every request.
    basic: bool,
    /// Bearer tokens by scope.
    tokens: HashMap<String, String>,
}

/// One registry host: its base URL, TLS client and credentials.
pub struct RegistryClient {
    host: String,
    base: String,
    client: HttpClient,
    creds: Option<Credentials>,
    note: String,
    auth: Mutex<AuthState>,
    stats: Arc<Stats>,
}

/// Accepts any server certificate (`tls_verify = false`, one host only).
#[derive(Debug)]
struct NoVerify(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for NoVerify {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &rustls::pki_types::ServerName<'_>,
        _: &[u8],
        _: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }
    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// The system's CA certificates (loaded once).
fn system_roots() -> &'static [CertificateDer<'static>] {
    static ROOTS: OnceLock<Vec<CertificateDer<'static>>> = OnceLock::new();
    ROOTS.get_or_init(|| rustls_native_certs::load_native_certs().certs)
}

fn tls_config(cfg: Option<&RegistryConfig>, base_dir: &Path) -> Result<rustls::ClientConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| anyhow!("TLS setup: {e}"))?;
    if cfg.is_some_and(|c| !c.tls_verify) {
        return Ok(builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(NoVerify(provider)))
            .with_no_client_auth());
    }
    let mut roots = rustls::RootCertStore::empty();
    roots.add_parsable_certificates(system_roots().iter().cloned());
    if let Some(ca) = cfg.and_then(|c| c.ca_file.as_ref()) {
        let path = base_dir.join(ca);
        let mut n = 0;
        for cert in CertificateDer::pem_file_iter(&path)
            .map_err(|e| anyhow!("ca_file {}: {e}", path.display()))?
        {
            let cert = cert.map_err(|e| anyhow!("ca_file {}: {e}", path.display()))?;
            roots
                .add(cert)
                .map_err(|e| anyhow!("ca_file {}: {e}", path.display()))?;
            n += 1;
        }
        if n == 0 {
            bail!("ca_file {}: no PEM certificate in it", path.display());
        }
    }
    Ok(builder.with_root_certificates(roots).with_no_client_auth())
}

/// Waiting time before retry `attempt` (0-based), or the server's `Retry-After`.
fn backoff(attempt: u32, retry_after: Option<&HeaderValue>) -> Duration {
    if let Some(secs) = retry_after
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
    {
        return Duration::from_secs(secs.min(60));
    }
    Duration::from_millis(500u64 << attempt.min(4))
}

/// Percent-encodes a query value (RFC 3986 unreserved characters kept).
fn encode_query(v: &str) -> String {
    let mut out = String::new();
    for b in v.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Parses a `WWW-Authenticate` value: the scheme and its `key="value"` parameters.
pub fn parse_challenge(value: &str) -> (String, HashMap<String, String>) {
    let value = value.trim();
    let (scheme, rest) = value.split_once(' ').unwrap_or((value, ""));
    let mut params = HashMap::new();
    let mut chars = rest.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| *c == ',' || c.is_whitespace()) {
            chars.next();
        }
        let key: String = chars.by_ref().take_while(|c| *c != '=').collect();
        if key.is_empty() {
            break;
        }
        let mut val = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            while let Some(c) = chars.next() {
                match c {
                    '\\' => val.extend(chars.next()),
                    '"' => break,
                    c => val.push(c),
                }
            }
        } else {
            val = chars.by_ref().take_while(|c| *c != ',').collect();
        }
        params.insert(key.trim().to_ascii_lowercase(), val.trim().to_string());
    }
    (scheme.to_ascii_lowercase(), params)
}

impl RegistryClient {
    /// Connects to `endpoint` (`HOST[:PORT]`) with the settings of `cfg` and
    /// the credentials the auth files hold for `host` (as written in the
    /// source) and `repository`. With `tls_verify = false` a host that does
    /// not answer TLS on `/v2/` is used over plain HTTP.
    pub async fn connect(
        host: &str,
        endpoint: &str,
        repository: &str,
        cfg: Option<&RegistryConfig>,
        base_dir: &Path,
        stats: Arc<Stats>,
    ) -> Result<RegistryClient> {
        let tls = tls_config(cfg, base_dir)?;
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .build();
        let client = Client::builder(TokioExecutor::new()).build(https);
        let paths = auth::auth_file_paths();
        let (creds, note) = match auth::find(&paths, host, repository)? {
            Found::Credentials(c, p) => (Some(c), format!("credentials from {}", p.display())),
            Found::Helper(h, p) => (
                None,
                format!(
                    "{} names credential helper {h:?}, which airlock does not run; add an `auth` entry",
                    p.display()
                ),
            ),
            Found::None => (
                None,
                format!(
                    "no credentials for {host} in {}",
                    paths
                        .iter()
                        .map(|(p, _)| p.display().to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ),
        };
        let mut me = RegistryClient {
            host: endpoint.to_string(),
            base: format!("https://{endpoint}"),
            client,
            creds,
            note,
            auth: Mutex::new(AuthState::default()),
            stats,
        };
        if cfg.is_some_and(|c| !c.tls_verify) {
            let uri: Uri = format!("https://{endpoint}/v2/").parse()?;
            let ping = Request::get(uri).body(Empty::new())?;
            let tls_ok = matches!(
                tokio::time::timeout(Duration::from_secs(10), me.client.request(ping)).await,
                Ok(Ok(_))
            );
            if !tls_ok {
                me.base = format!("http://{endpoint}");
            }
        }
        Ok(me)
    }

    /// The host this client talks to.
    pub fn host(&self) -> &str {
        &self.host
    }

    /// Shared counters.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    fn auth_header(&self, scope: &str) -> Option<String> {
        let st = self.auth.lock().ok()?;
        if st.basic {
            return self.creds.as_ref().map(Credentials::basic_header);
        }
        st.tokens.get(scope).map(|t| format!("Bearer {t}"))
    }

    /// Sends one GET, retrying connection errors, timeouts, 429 and 5xx.
    async fn send(
        &self,
        uri: &Uri,
        headers: &[(hyper::header::HeaderName, String)],
    ) -> Result<Response<Incoming>> {
        let mut attempt = 0;
        loop {
            let mut req = Request::get(uri.clone())
                .header(USER_AGENT, concat!("airlock/", env!("CARGO_PKG_VERSION")));
            for (k, v) in headers {
                req = req.header(k, v);
            }
            let req = req.body(Empty::new())?;
            self.stats.requests.fetch_add(1, Ordering::Relaxed);
            let failure = match tokio::time::timeout(READ_TIMEOUT, self.client.request(req)).await {
                Ok(Ok(resp)) => {
                    let s = resp.status();
                    if s != StatusCode::TOO_MANY_REQUESTS && !s.is_server_error() {
                        return Ok(resp);
                    }
                    if attempt >= MAX_RETRIES {
                        bail!("GET {uri}: {s} after {} attempts", attempt + 1);
                    }
                    tokio::time::sleep(backoff(attempt, resp.headers().get("retry-after"))).await;
                    None
                }
                Ok(Err(e)) if is_tls_failure(&e) => {
                    bail!("GET {uri}: {}", source_chain(&e))
                }
                Ok(Err(e)) => Some(format!("{e}: {}", source_chain(&e))),
                Err(_) => Some(format!("no answer within {} s", READ_TIMEOUT.as_secs())),
            };
            if let Some(why) = failure {
                if attempt >= MAX_RETRIES {
                    bail!("GET {uri}: {why} (after {} attempts)", attempt + 1);
                }
                tokio::time::sleep(backoff(attempt, None)).await;
            }
            self.stats.retries.fetch_add(1, Ordering::Relaxed);
            attempt += 1;
        }
    }

    /// GETs `path` (`/v2/...`) for `scope` (`repository:NAME:pull`), with
    /// `accept` and, when `range_from` is set, `Range: bytes=N-`. Handles
    /// authentication, retries and redirects; returns the final response,
    /// whatever its status (401 after authenticating is an error naming
    /// where credentials were looked for).
    pub async fn get(
        &self,
        path: &str,
        scope: &str,
        accept: Option<&str>,
        range_from: Option<u64>,
    ) -> Result<Response<Incoming>> {
        let mut uri: Uri = format!("{}{}", self.base, path)
            .parse()
            .with_context(|| format!("invalid URL for {path}"))?;
        let own = uri.authority().cloned();
        let mut authenticated = false;
        let mut redirects = 0;
        loop {
            let mut headers = Vec::new();
            if let Some(a) = accept {
                headers.push((ACCEPT, a.to_string()));
            }
            if let Some(n) = range_from {
                headers.push((RANGE, format!("bytes={n}-")));
            }
            let same_host = uri.authority() == own.as_ref();
            if same_host && let Some(h) = self.auth_header(scope) {
                headers.push((AUTHORIZATION, h));
            }
            let resp = self.send(&uri, &headers).await?;
            let status = resp.status();
            if status == StatusCode::UNAUTHORIZED && same_host {
                if authenticated {
                    bail!("{}: unauthorized for {scope} ({})", self.host, self.note);
                }
                authenticated = true;
                self.authenticate(&resp, scope).await?;
                continue;
            }
            if status.is_redirection() && status != StatusCode::NOT_MODIFIED {
                redirects += 1;
                if redirects > 5 {
                    bail!("GET {path} on {}: too many redirects", self.host);
                }
                let loc = resp
                    .headers()
                    .get(LOCATION)
                    .and_then(|l| l.to_str().ok())
                    .ok_or_else(|| anyhow!("GET {path}: {status} without Location"))?;
                uri = resolve_location(&uri, loc)?;
                continue;
            }
            return Ok(resp);
        }
    }

    async fn authenticate(&self, resp: &Response<Incoming>, scope: &str) -> Result<()> {
        let value = resp
            .headers()
            .get(WWW_AUTHENTICATE)
            .and_then(|v| v.to_str().ok())
            .ok_or_else(|| anyhow!("{}: 401 without WWW-Authenticate", self.host))?;
        let (scheme, params) = parse_challenge(value);
        match scheme.as_str() {
            "basic" => {
                if self.creds.is_none() {
                    bail!(
                        "{}: registry asks for a password ({})",
                        self.host,
                        self.note
                    );
                }
                if let Ok(mut st) = self.auth.lock() {
                    st.basic = true;
                }
                Ok(())
            }
            "bearer" => {
                let token = self.fetch_token(&params, scope).await?;
                if let Ok(mut st) = self.auth.lock() {
                    st.tokens.insert(scope.to_string(), token);
                }
                Ok(())
            }
            other => bail!("{}: unsupported authentication scheme {other:?}", self.host),
        }
    }

    /// The bearer-token flow (distribution "Token Authentication
    /// Specification"): GET `realm?service=S&scope=SCOPE`, with Basic
    /// credentials when there are any; the answer's `token` or `access_token`.
    async fn fetch_token(&self, params: &HashMap<String, String>, scope: &str) -> Result<String> {
        let realm = params
            .get("realm")
            .ok_or_else(|| anyhow!("{}: bearer challenge without realm", self.host))?;
        let mut url = realm.clone();
        let mut sep = if url.contains('?') { '&' } else { '?' };
        if let Some(s) = params.get("service") {
            url.push_str(&format!("{sep}service={}", encode_query(s)));
            sep = '&';
        }
        url.push_str(&format!("{sep}scope={}", encode_query(scope)));
        let uri: Uri = url
            .parse()
            .with_context(|| format!("{}: invalid token realm {realm:?}", self.host))?;
        let mut headers = Vec::new();
        if let Some(c) = &self.creds {
            headers.push((AUTHORIZATION, c.basic_header()));
        }
        let resp = self.send(&uri, &headers).await?;
        let status = resp.status();
        if !status.is_success() {
            bail!(
                "{}: token endpoint {realm} answered {status} ({})",
                self.host,
                self.note
            );
        }
        let body = read_limited(resp, MAX_TOKEN_BODY).await?;
        #[derive(serde::Deserialize)]
        struct TokenAnswer {
            token: Option<String>,
            access_token: Option<String>,
        }
        let t: TokenAnswer = serde_json::from_slice(&body)
            .with_context(|| format!("{}: token endpoint answer is not JSON", self.host))?;
        t.token
            .or(t.access_token)
            .filter(|t| !t.is_empty())
            .ok_or_else(|| anyhow!("{}: token endpoint gave no token", self.host))
    }
}

/// True when a request failed in the TLS handshake (a certificate the
/// settings do not trust, say): retrying cannot help.
fn is_tls_failure(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if err.is::<rustls::Error>() {
            return true;
        }
        if let Some(io) = err.downcast_ref::<std::io::Error>()
            && io.get_ref().is_some_and(|i| i.is::<rustls::Error>())
        {
            return true;
        }
        cur = err.source();
    }
    false
}

fn source_chain(e: &dyn std::error::Error) -> String {
    let mut parts = Vec::new();
    let mut cur = e.source();
    while let Some(s) = cur {
        parts.push(s.to_string());
        cur = s.source();
    }
    parts.join(": ")
}

/// Resolves a `Location` header against the request URI (absolute, or a path).
fn resolve_location(base: &Uri, loc: &str) -> Result<Uri> {
    if loc.starts_with("http://") || loc.starts_with("https://") {
        return loc
            .parse()
            .with_context(|| format!("invalid Location {loc:?}"));
    }
    let scheme = base.scheme_str().unwrap_or("https");
    let auth = base.authority().map(|a| a.as_str()).unwrap_or("");
    if loc.starts_with('/') {
        return format!("{scheme}://{auth}{loc}")
            .parse()
            .with_context(|| format!("invalid Location {loc:?}"));
    }
    bail!("unsupported relative Location {loc:?}")
}

/// Reads a whole body of at most `limit` bytes (each chunk within [`READ_TIMEOUT`]).
pub async fn read_limited(resp: Response<Incoming>, limit: usize) -> Result<Vec<u8>> {
    let mut body = resp.into_body();
    let mut out = Vec::new();
    loop {
        let frame = tokio::time::timeout(READ_TIMEOUT, body.frame())
            .await
            .map_err(|_| anyhow!("body stalled for {} s", READ_TIMEOUT.as_secs()))?;
        let Some(frame) = frame else { break };
        let frame = frame.map_err(|e| anyhow!("reading body: {e}"))?;
        if let Ok(data) = frame.into_data() {
            if out.len() + data.len() > limit {
                bail!("body over {limit} bytes");
            }
            out.extend_from_slice(&data);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn challenges() {
        let (s, p) = parse_challenge(
            r#"Bearer realm="https://auth.example/token?x=1",service="reg, inc",scope="repository:a/b:pull""#,
        );
        assert_eq!(s, "bearer");
        assert_eq!(p["realm"], "https://auth.example/token?x=1");
        assert_eq!(p["service"], "reg, inc");
        assert_eq!(p["scope"], "repository:a/b:pull");
        let (s, p) = parse_challenge(r#"Basic realm="Registry Realm""#);
        assert_eq!(s, "basic");
        assert_eq!(p["realm"], "Registry Realm");
        assert_eq!(
            encode_query("repository:a/b:pull"),
            "repository%3Aa%2Fb%3Apull"
        );
    }

    #[test]
    fn backoff_grows_and_honours_retry_after() {
        assert_eq!(backoff(0, None), Duration::from_millis(500));
        assert_eq!(backoff(2, None), Duration::from_secs(2));
        assert_eq!(backoff(9, None), Duration::from_secs(8));
        let h = HeaderValue::from_static("3");
        assert_eq!(backoff(0, Some(&h)), Duration::from_secs(3));
    }
}
