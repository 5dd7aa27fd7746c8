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
//! The connection itself (TLS, retries, redirects' URI resolution, bounded
//! reads) is [`crate::http_client`]; this module adds the registry's
//! authentication on top.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use bytes::Bytes;
use hyper::body::Incoming;
use hyper::header::{ACCEPT, AUTHORIZATION, LOCATION, RANGE, WWW_AUTHENTICATE};
use hyper::{Method, Response, StatusCode, Uri};

use crate::http_client::{
    Counters, HttpClient, RetryPolicy, TlsOptions, percent_encode, resolve_location,
};
pub use crate::http_client::{MAX_RETRIES, READ_TIMEOUT, read_limited};

use super::RegistryConfig;
use super::auth::{self, Credentials, Found};

/// Largest token-endpoint answer read, in bytes.
const MAX_TOKEN_BODY: usize = 1 << 20;

/// Requests and bytes, counted over every registry (for the `--json` summary).
#[derive(Debug, Default)]
pub struct Stats {
    /// HTTP requests sent and retries made (of requests and of bodies).
    pub http: Arc<Counters>,
    /// Body bytes received for blobs and manifests.
    pub bytes: AtomicU64,
    /// Blobs and manifests found in the cache instead of downloaded.
    pub cache_hits: AtomicU64,
}

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

/// The TLS settings of `cfg` (a relative `ca_file` against `base_dir`).
fn tls_options(cfg: Option<&RegistryConfig>, base_dir: &Path) -> TlsOptions {
    TlsOptions {
        ca_file: cfg
            .and_then(|c| c.ca_file.as_ref())
            .map(|ca| base_dir.join(ca)),
        verify: cfg.is_none_or(|c| c.tls_verify),
        identity: None,
    }
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
        let tls = crate::http_client::tls_config(&tls_options(cfg, base_dir))?;
        let client = HttpClient::new(tls, RetryPolicy::default(), stats.http.clone());
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
            let tls_ok = matches!(
                tokio::time::timeout(
                    Duration::from_secs(10),
                    me.client.try_once(Method::GET, &uri)
                )
                .await,
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
        self.client
            .send(&Method::GET, uri, headers, Bytes::new())
            .await
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
            url.push_str(&format!("{sep}service={}", percent_encode(s)));
            sep = '&';
        }
        url.push_str(&format!("{sep}scope={}", percent_encode(scope)));
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
            percent_encode("repository:a/b:pull"),
            "repository%3Aa%2Fb%3Apull"
        );
    }
}
