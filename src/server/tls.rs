//! TLS for the listener (rustls, ring): certificate chain and key from PEM
//! files, TLS 1.2 and 1.3 only, ALPN `h2` and `http/1.1`, optional client
//! certificates (mTLS) checked against a CA bundle, and reload on SIGHUP.
//!
//! Owns: building the rustls [`ServerConfig`] from [`TlsFiles`], swapping
//! it on reload (connections already open keep the config they were
//! accepted with; every new handshake uses the newest), and reading a
//! verified client certificate's names (subject CN, then DNS, e-mail and URI
//! SANs) for the access layer ([`crate::auth`] maps them to a user). A
//! client without a certificate may still connect (it logs in with a
//! password); a client certificate that does not chain to the CA bundle
//! fails the handshake.
//!
//! Cipher suites: the server's preference wins (`ignore_client_order`), and
//! it prefers AES-128-GCM (TLS 1.3 `TLS13_AES_128_GCM_SHA256`, TLS 1.2
//! `ECDHE_*_WITH_AES_128_GCM_SHA256`), then AES-256-GCM, then
//! ChaCha20-Poly1305; all of them are AEAD suites with forward secrecy.
//! AES-128 runs 10 rounds per block against AES-256's 14, so bulk transfers
//! (64 MiB layers) cost both ends less CPU per byte. OpenSSL clients (curl,
//! wrk) list AES-256-GCM first and would otherwise get it; a client that
//! offers only AES-256-GCM or only ChaCha20-Poly1305 still gets that.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use anyhow::{Context as _, Result, anyhow};
use rustls::ServerConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;

/// The PEM files of the server's TLS identity (config `[tls]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// Certificate chain, leaf first.
    pub cert: PathBuf,
    /// Private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    /// CA bundle for client certificates; `None`: no mTLS.
    pub client_ca: Option<PathBuf>,
}

/// The names of a verified client certificate (a request extension):
/// subject CN first, then SANs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientCertNames(pub Vec<String>);

/// A request extension marking a request that came over TLS (a console
/// session minted over plain HTTP is not accepted on it, and its answers
/// carry `Strict-Transport-Security`).
#[derive(Debug, Clone, Copy)]
pub struct OverTls;

/// The current TLS configuration, reloadable.
pub struct Tls {
    current: RwLock<(TlsFiles, TlsAcceptor)>,
}

fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>> {
    let certs = CertificateDer::pem_file_iter(path)
        .with_context(|| format!("reading certificates from {}", path.display()))?
        .collect::<std::result::Result<Vec<_>, _>>()
        .with_context(|| format!("parsing certificates in {}", path.display()))?;
    if certs.is_empty() {
        return Err(anyhow!("{}: no PEM certificate found", path.display()));
    }
    Ok(certs)
}

/// Builds a rustls server config from `files`.
///
/// Errors: a file cannot be read or parsed, the key does not match the
/// certificate, or the CA bundle holds no usable certificate.
pub fn server_config(files: &TlsFiles) -> Result<ServerConfig> {
    let provider = Arc::new(provider());
    let chain = read_certs(&files.cert)?;
    let key = PrivateKeyDer::from_pem_file(&files.key)
        .with_context(|| format!("reading the private key in {}", files.key.display()))?;
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .context("TLS protocol versions")?;
    let builder = match &files.client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            for c in read_certs(ca)? {
                roots
                    .add(c)
                    .with_context(|| format!("client CA certificate in {}", ca.display()))?;
            }
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                provider,
            )
            .allow_unauthenticated()
            .build()
            .with_context(|| format!("client CA bundle {}", ca.display()))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder.with_single_cert(chain, key).with_context(|| {
        format!(
            "TLS key {} for {}",
            files.key.display(),
            files.cert.display()
        )
    })?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    config.ignore_client_order = true;
    Ok(config)
}

/// rustls's *ring* provider with its cipher suites in the server's order of
/// preference: AES-128-GCM first, then AES-256-GCM, then the rest (each
/// group keeps ring's order; see the module docs).
pub fn provider() -> rustls::crypto::CryptoProvider {
    use rustls::CipherSuite as C;
    let mut provider = rustls::crypto::ring::default_provider();
    provider.cipher_suites.sort_by_key(|s| match s.suite() {
        C::TLS13_AES_128_GCM_SHA256
        | C::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256
        | C::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256 => 0,
        C::TLS13_AES_256_GCM_SHA384
        | C::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384
        | C::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384 => 1,
        _ => 2,
    });
    provider
}

impl Tls {
    /// Loads `files`.
    ///
    /// Errors: as [`server_config`].
    pub fn load(files: TlsFiles) -> Result<Tls> {
        let config = server_config(&files)?;
        Ok(Tls {
            current: RwLock::new((files, TlsAcceptor::from(Arc::new(config)))),
        })
    }

    /// Re-reads the files; on an error the current config stays.
    ///
    /// Errors: as [`server_config`].
    pub fn reload(&self) -> Result<()> {
        let files = self.files();
        let config = server_config(&files)?;
        if let Ok(mut cur) = self.current.write() {
            *cur = (files, TlsAcceptor::from(Arc::new(config)));
        }
        Ok(())
    }

    /// Takes `other`'s files and loaded configuration (a config reload
    /// that loaded them already): new handshakes use them.
    pub fn replace_with(&self, other: &Tls) {
        let next = match other.current.read() {
            Ok(c) => c.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        };
        tracing::info!(cert = %next.0.cert.display(), "TLS certificate loaded");
        if let Ok(mut cur) = self.current.write() {
            *cur = next;
        }
    }

    /// The files the current configuration was read from.
    pub fn files(&self) -> TlsFiles {
        match self.current.read() {
            Ok(c) => c.0.clone(),
            Err(poisoned) => poisoned.into_inner().0.clone(),
        }
    }

    /// The acceptor for the next handshake.
    pub fn acceptor(&self) -> TlsAcceptor {
        match self.current.read() {
            Ok(a) => a.1.clone(),
            Err(poisoned) => poisoned.into_inner().1.clone(),
        }
    }
}

/// The names of the verified client certificate of `conn`, if it sent one.
pub fn client_names(conn: &rustls::ServerConnection) -> Option<ClientCertNames> {
    use x509_parser::prelude::{FromDer, GeneralName, X509Certificate};
    let leaf = conn.peer_certificates()?.first()?;
    let (_, cert) = X509Certificate::from_der(leaf.as_ref()).ok()?;
    let mut names: Vec<String> = cert
        .subject()
        .iter_common_name()
        .filter_map(|cn| cn.as_str().ok().map(str::to_string))
        .collect();
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        for n in &san.value.general_names {
            match n {
                GeneralName::DNSName(s) | GeneralName::RFC822Name(s) | GeneralName::URI(s) => {
                    names.push((*s).to_string())
                }
                _ => {}
            }
        }
    }
    Some(ClientCertNames(names))
}
