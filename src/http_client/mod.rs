//! The outgoing HTTP(S) client every airlock caller shares: TLS settings,
//! retries with backoff and `Retry-After`, redirects, bounded body reads
//! and verified downloads ([`download`]).
//!
//! Owns: the rustls client configuration (the system roots plus a CA file,
//! an optional client certificate for mTLS, or no verification for one
//! host), the retry loop of one request, and the helpers that read answers.
//! Never interprets bodies and never authenticates beyond the headers its
//! callers pass: the registry token flow lives in `bundle::source::http`,
//! the stacks API calls in `cell`.
//!
//! Client: hyper-util's pooled client with hyper-rustls (ring, no native-tls
//! or OpenSSL), HTTP/1.1. `oci-client` 0.18 was considered for the registry
//! side: it streams blobs and has the token flow, but has no retries or
//! resume of its own, takes credentials per call rather than from the auth
//! files, and brings reqwest 0.13, oci-spec, chrono and a second sha2.
//! hyper and hyper-util are already in the tree, so this module costs only
//! rustls, ring, rustls-webpki, tokio-rustls, hyper-rustls and
//! rustls-native-certs.
//!
//! Retries: a connection error, a timeout, 429 or a 5xx is retried up to
//! [`RetryPolicy::max_retries`] times, waiting 0.5 s, 1 s, 2 s, ... (at most
//! 8 s) or the server's `Retry-After` seconds (RFC 9110 §10.2.3, delay
//! form; at most [`RetryPolicy::max_retry_after`]). A TLS handshake failure
//! is never retried.

pub mod download;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::{HeaderName, HeaderValue, USER_AGENT};
use hyper::{Method, Request, Response, StatusCode, Uri};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// Retries after the first attempt, as the registry client uses them.
pub const MAX_RETRIES: u32 = 5;
/// Time allowed for the response head, and between two body chunks.
pub const READ_TIMEOUT: Duration = Duration::from_secs(60);

/// How one client retries.
#[derive(Debug, Clone, Copy)]
pub struct RetryPolicy {
    /// Retries after the first attempt (connection error, timeout, 429, 5xx).
    pub max_retries: u32,
    /// Longest `Retry-After` honoured; longer values wait this long.
    pub max_retry_after: Duration,
}

impl Default for RetryPolicy {
    /// [`MAX_RETRIES`] retries, `Retry-After` up to 60 s.
    fn default() -> RetryPolicy {
        RetryPolicy {
            max_retries: MAX_RETRIES,
            max_retry_after: Duration::from_secs(60),
        }
    }
}

/// Requests sent and retries made, shared by the clients that report them.
#[derive(Debug, Default)]
pub struct Counters {
    /// HTTP requests sent (retries included).
    pub requests: AtomicU64,
    /// Retries after a failure (of a request or of a body).
    pub retries: AtomicU64,
}

/// TLS settings of one server.
#[derive(Debug, Clone)]
pub struct TlsOptions {
    /// PEM file of CA certificates trusted besides the system roots.
    pub ca_file: Option<PathBuf>,
    /// `false`: accept any server certificate.
    pub verify: bool,
    /// Client certificate chain and private key (PEM files), for mTLS.
    pub identity: Option<(PathBuf, PathBuf)>,
}

impl Default for TlsOptions {
    /// System roots only, verified, no client certificate.
    fn default() -> TlsOptions {
        TlsOptions {
            ca_file: None,
            verify: true,
            identity: None,
        }
    }
}

/// Accepts any server certificate (`verify = false`, one host only).
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

/// Every certificate of a PEM file; an error names `what` and the path,
/// also when the file holds none.
pub fn pem_certificates(path: &Path, what: &str) -> Result<Vec<CertificateDer<'static>>> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| anyhow!("{what} {}: {e}", path.display()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| anyhow!("{what} {}: {e}", path.display()))?;
    if certs.is_empty() {
        bail!("{what} {}: no PEM certificate in it", path.display());
    }
    Ok(certs)
}

/// The rustls client configuration `opts` describe. Errors: an unreadable
/// or empty CA file, a client certificate or key that does not parse.
pub fn tls_config(opts: &TlsOptions) -> Result<rustls::ClientConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| anyhow!("TLS setup: {e}"))?;
    let builder = if opts.verify {
        let mut roots = rustls::RootCertStore::empty();
        roots.add_parsable_certificates(system_roots().iter().cloned());
        if let Some(path) = &opts.ca_file {
            for cert in pem_certificates(path, "ca_file")? {
                roots
                    .add(cert)
                    .map_err(|e| anyhow!("ca_file {}: {e}", path.display()))?;
            }
        }
        builder.with_root_certificates(roots)
    } else {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(NoVerify(provider)))
    };
    match &opts.identity {
        None => Ok(builder.with_no_client_auth()),
        Some((cert, key)) => {
            let chain = pem_certificates(cert, "client certificate")?;
            let key = PrivateKeyDer::from_pem_file(key)
                .map_err(|e| anyhow!("client key {}: {e}", key.display()))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| anyhow!("client certificate {}: {e}", cert.display()))
        }
    }
}

/// Waiting time before retry `attempt` (0-based), or the server's
/// `Retry-After` seconds capped at `max_retry_after`.
pub fn backoff(
    attempt: u32,
    retry_after: Option<&HeaderValue>,
    max_retry_after: Duration,
) -> Duration {
    if let Some(secs) = retry_after
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
    {
        return Duration::from_secs(secs).min(max_retry_after);
    }
    Duration::from_millis(500u64 << attempt.min(4))
}

type Inner = Client<HttpsConnector<HttpConnector>, Full<Bytes>>;

/// A pooled HTTP/1.1 client (`https://` and `http://`) with one TLS
/// configuration and one retry policy.
#[derive(Clone)]
pub struct HttpClient {
    inner: Inner,
    policy: RetryPolicy,
    counters: Arc<Counters>,
}

impl HttpClient {
    /// A client using `tls` for `https://` URLs, retrying by `policy`,
    /// counting on `counters`.
    pub fn new(
        tls: rustls::ClientConfig,
        policy: RetryPolicy,
        counters: Arc<Counters>,
    ) -> HttpClient {
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .build();
        HttpClient {
            inner: Client::builder(TokioExecutor::new()).build(https),
            policy,
            counters,
        }
    }

    /// The counters this client adds to.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// The retry policy.
    pub fn policy(&self) -> RetryPolicy {
        self.policy
    }

    /// Sends one request without retrying; the response head within
    /// [`READ_TIMEOUT`]. For probes.
    pub async fn try_once(&self, method: Method, uri: &Uri) -> Result<Response<Incoming>> {
        let req = Request::builder()
            .method(method)
            .uri(uri.clone())
            .body(Full::new(Bytes::new()))?;
        self.counters.requests.fetch_add(1, Ordering::Relaxed);
        match tokio::time::timeout(READ_TIMEOUT, self.inner.request(req)).await {
            Ok(Ok(r)) => Ok(r),
            Ok(Err(e)) => bail!("{uri}: {e}: {}", source_chain(&e)),
            Err(_) => bail!("{uri}: no answer within {} s", READ_TIMEOUT.as_secs()),
        }
    }

    /// Sends one request (`body` may be empty), retrying connection errors,
    /// timeouts, 429 and 5xx by the policy (see the module docs). Returns
    /// the first other response, whatever its status; an error after the
    /// last retry names the method, URI and last cause.
    pub async fn send(
        &self,
        method: &Method,
        uri: &Uri,
        headers: &[(HeaderName, String)],
        body: Bytes,
    ) -> Result<Response<Incoming>> {
        let mut attempt = 0;
        loop {
            let mut req = Request::builder()
                .method(method.clone())
                .uri(uri.clone())
                .header(USER_AGENT, concat!("airlock/", env!("CARGO_PKG_VERSION")));
            for (k, v) in headers {
                req = req.header(k, v);
            }
            let req = req.body(Full::new(body.clone()))?;
            self.counters.requests.fetch_add(1, Ordering::Relaxed);
            let wait = match tokio::time::timeout(READ_TIMEOUT, self.inner.request(req)).await {
                Ok(Ok(resp)) => {
                    let s = resp.status();
                    if s != StatusCode::TOO_MANY_REQUESTS && !s.is_server_error() {
                        return Ok(resp);
                    }
                    if attempt >= self.policy.max_retries {
                        bail!("{method} {uri}: {s} after {} attempts", attempt + 1);
                    }
                    let wait = backoff(
                        attempt,
                        resp.headers().get("retry-after"),
                        self.policy.max_retry_after,
                    );
                    tracing::info!(%uri, status = %s, wait_ms = wait.as_millis() as u64, "retrying");
                    wait
                }
                Ok(Err(e)) if is_tls_failure(&e) => {
                    bail!("{method} {uri}: {}", source_chain(&e))
                }
                failed => {
                    let why = match failed {
                        Ok(Err(e)) => format!("{e}: {}", source_chain(&e)),
                        _ => format!("no answer within {} s", READ_TIMEOUT.as_secs()),
                    };
                    if attempt >= self.policy.max_retries {
                        bail!("{method} {uri}: {why} (after {} attempts)", attempt + 1);
                    }
                    tracing::info!(%uri, error = %why, "retrying");
                    backoff(attempt, None, self.policy.max_retry_after)
                }
            };
            tokio::time::sleep(wait).await;
            self.counters.retries.fetch_add(1, Ordering::Relaxed);
            attempt += 1;
        }
    }
}

/// True when a request failed in the TLS handshake (a certificate the
/// settings do not trust, say): retrying cannot help.
///
/// An `io::Error` is descended through its inner error (`get_ref`), not
/// `source()`: std's `io::Error::source` returns the inner error's source,
/// skipping the inner error itself, and hyper-rustls wraps tokio-rustls's
/// `io::Error(rustls::Error)` in another `io::Error`.
pub fn is_tls_failure(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if err.is::<rustls::Error>() {
            return true;
        }
        cur = match err.downcast_ref::<std::io::Error>() {
            Some(io) => match io.get_ref() {
                Some(inner) => Some(inner as &(dyn std::error::Error + 'static)),
                None => None,
            },
            None => err.source(),
        };
    }
    false
}

/// The causes below `e`, joined by `: `.
pub fn source_chain(e: &dyn std::error::Error) -> String {
    let mut parts = Vec::new();
    let mut cur = e.source();
    while let Some(s) = cur {
        parts.push(s.to_string());
        cur = s.source();
    }
    parts.join(": ")
}

/// Percent-encodes a path part or query value (RFC 3986 §2.3 unreserved
/// characters kept, every other byte `%XX`).
pub fn percent_encode(v: &str) -> String {
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

/// Resolves a `Location` header against the request URI (absolute, or a path).
pub fn resolve_location(base: &Uri, loc: &str) -> Result<Uri> {
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
    fn backoff_grows_and_honours_retry_after() {
        let max = Duration::from_secs(60);
        assert_eq!(backoff(0, None, max), Duration::from_millis(500));
        assert_eq!(backoff(2, None, max), Duration::from_secs(2));
        assert_eq!(backoff(9, None, max), Duration::from_secs(8));
        let h = HeaderValue::from_static("3");
        assert_eq!(backoff(0, Some(&h), max), Duration::from_secs(3));
        let h = HeaderValue::from_static("600");
        assert_eq!(backoff(0, Some(&h), max), max);
    }
}
