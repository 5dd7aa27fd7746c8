//! Keyless signatures (sigstore), checked offline: a short-lived
//! certificate from a Fulcio CA names the signer (its subject alternative
//! name) and the OIDC issuer that vouched for it (extension
//! `1.3.6.1.4.1.57264.1.8`, or the older `…1.1`); a Rekor transparency log
//! entry proves the signature existed while the certificate was valid.
//! Both are checked against a `trusted_root.json` (sigstore's
//! `TrustedRoot`, media type `application/vnd.dev.sigstore.trustedroot+json`)
//! that the mirror config or the site names, so nothing is fetched.
//!
//! Owns: [`TrustedRoot`] (its certificate authorities and logs),
//! [`Identity`] (who a policy trusts), and the three checks a keyless
//! signature needs ([`TrustedRoot::certificate`], [`TrustedRoot::log_time`],
//! [`binds`]). The signature itself is verified by the caller with the
//! certificate's key ([`super::PublicKey::from_der`]).
//!
//! A bundle's inclusion proof and the log's checkpoint are checked too
//! ([`super::tlog`]), and so is the certificate's embedded SCT when the
//! trusted root lists certificate transparency logs ([`super::sct`]).
//!
//! Not checked: RFC 3161 timestamps: the log's signed entry timestamp (its
//! inclusion promise) is what dates the signature here, so an entry
//! without one (Rekor v2) is refused.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow, bail};
use base64::Engine as _;
use time::OffsetDateTime;
use x509_parser::prelude::{FromDer, GeneralName, X509Certificate};

use super::PublicKey;

/// Fulcio's OIDC issuer extension (DER UTF8String).
const ISSUER_V2: &str = "1.3.6.1.4.1.57264.1.8";
/// Fulcio's first OIDC issuer extension (the raw string).
const ISSUER_V1: &str = "1.3.6.1.4.1.57264.1.1";

/// Standard base64, as protobuf JSON and cosign's annotations write bytes.
pub(super) fn b64(s: &str) -> Result<Vec<u8>, String> {
    base64::engine::general_purpose::STANDARD
        .decode(s.trim())
        .map_err(|e| format!("not base64: {e}"))
}

/// A signer a keyless policy trusts, as cosign's
/// `--certificate-identity[-regexp]` and `--certificate-oidc-issuer[-regexp]`:
///
/// ```toml
/// identities = [{ subject = "https://github.com/example/base/.github/workflows/release.yml@refs/heads/main",
///                 issuer = "https://token.actions.githubusercontent.com" }]
/// ```
/// Exactly one of `subject`/`subject_regex` and one of `issuer`/`issuer_regex`.
/// A regex matches anywhere in the value, as cosign's do: anchor it with
/// `^…$` to match the whole.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct Identity {
    /// A subject alternative name of the certificate, exactly (an email,
    /// or a URI such as a CI workflow's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
    /// A regex one subject alternative name matches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject_regex: Option<String>,
    /// The OIDC issuer, exactly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub issuer: Option<String>,
    /// A regex the OIDC issuer matches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub issuer_regex: Option<String>,
}

/// An [`Identity`] with its regexes compiled.
#[derive(Debug, Clone)]
pub struct Matcher {
    subject: Match,
    issuer: Match,
}

#[derive(Debug, Clone)]
enum Match {
    Exact(String),
    Regex(regex::Regex),
}

impl Match {
    fn new(exact: &Option<String>, re: &Option<String>, what: &str) -> Result<Match> {
        match (exact, re) {
            (Some(s), None) => Ok(Match::Exact(s.clone())),
            (None, Some(r)) => regex::Regex::new(r)
                .map(Match::Regex)
                .map_err(|e| anyhow!("{what}_regex {r:?}: {e}")),
            _ => bail!("give exactly one of {what} and {what}_regex"),
        }
    }

    fn matches(&self, v: &str) -> bool {
        match self {
            Match::Exact(s) => s == v,
            Match::Regex(r) => r.is_match(v),
        }
    }
}

impl std::fmt::Display for Match {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Match::Exact(s) => write!(f, "{s}"),
            Match::Regex(r) => write!(f, "/{}/", r.as_str()),
        }
    }
}

impl Identity {
    /// The identity compiled. Errors: both or neither of a pair, a bad regex.
    pub fn compile(&self) -> Result<Matcher> {
        Ok(Matcher {
            subject: Match::new(&self.subject, &self.subject_regex, "subject")?,
            issuer: Match::new(&self.issuer, &self.issuer_regex, "issuer")?,
        })
    }
}

impl std::fmt::Display for Matcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} from {}", self.subject, self.issuer)
    }
}

/// A trusted root: the Fulcio certificate authorities and Rekor logs a
/// keyless signature is checked against, each with its validity window.
#[derive(Debug, Clone)]
pub struct TrustedRoot {
    /// Where it was read from (for messages).
    pub path: PathBuf,
    cas: Vec<Ca>,
    logs: Vec<Log>,
    /// Certificate transparency logs (`ctlogs`): when there are any, a
    /// certificate must carry an SCT by one of them ([`super::sct`]).
    ct_logs: Vec<Log>,
}

#[derive(Debug, Clone)]
struct Ca {
    /// DER certificates, the issuing one first, the root last.
    chain: Vec<Vec<u8>>,
    window: Window,
}

#[derive(Debug, Clone)]
struct Log {
    key_id: Vec<u8>,
    key: PublicKey,
    window: Window,
}

#[derive(Debug, Clone, Copy)]
struct Window {
    start: Option<OffsetDateTime>,
    end: Option<OffsetDateTime>,
}

impl Window {
    fn contains(&self, t: OffsetDateTime) -> bool {
        self.start.is_none_or(|s| s <= t) && self.end.is_none_or(|e| t <= e)
    }
}

pub(super) mod json {
    //! The parts of sigstore's `TrustedRoot` (protobuf JSON) read here;
    //! [`Raw`] and [`Chain`] are the bundle's shapes too.
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    pub struct Root {
        #[serde(default)]
        pub media_type: Option<String>,
        #[serde(default)]
        pub tlogs: Vec<Tlog>,
        #[serde(default)]
        pub certificate_authorities: Vec<Ca>,
        #[serde(default)]
        pub ctlogs: Vec<Tlog>,
    }
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    pub struct Tlog {
        pub public_key: Key,
        pub log_id: LogId,
    }
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    pub struct Key {
        pub raw_bytes: String,
        #[serde(default)]
        pub valid_for: Option<ValidFor>,
    }
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    pub struct LogId {
        pub key_id: String,
    }
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    pub struct Ca {
        pub cert_chain: Chain,
        #[serde(default)]
        pub valid_for: Option<ValidFor>,
    }
    #[derive(serde::Deserialize)]
    pub struct Chain {
        pub certificates: Vec<Raw>,
    }
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    pub struct Raw {
        pub raw_bytes: String,
    }
    #[derive(serde::Deserialize)]
    pub struct ValidFor {
        #[serde(default)]
        pub start: Option<String>,
        #[serde(default)]
        pub end: Option<String>,
    }
}

/// The logs `list` (the trusted root's field `field`), keys parsed.
fn parse_logs(list: &[json::Tlog], field: &str, path: &Path) -> Result<Vec<Log>> {
    let mut logs = Vec::new();
    for (i, t) in list.iter().enumerate() {
        let der = b64(&t.public_key.raw_bytes).map_err(|e| anyhow!("{field}[{i}]: {e}"))?;
        let key = PublicKey::from_der(&der, &path.join(format!("{field}[{i}]")))?;
        logs.push(Log {
            key_id: b64(&t.log_id.key_id).map_err(|e| anyhow!("{field}[{i}].logId: {e}"))?,
            key,
            window: window(t.public_key.valid_for.as_ref())?,
        });
    }
    Ok(logs)
}

fn window(v: Option<&json::ValidFor>) -> Result<Window> {
    let parse = |s: &Option<String>| -> Result<Option<OffsetDateTime>> {
        s.as_deref()
            .map(|t| {
                OffsetDateTime::parse(t, &time::format_description::well_known::Rfc3339)
                    .map_err(|e| anyhow!("validFor {t:?}: {e}"))
            })
            .transpose()
    };
    Ok(match v {
        Some(v) => Window {
            start: parse(&v.start)?,
            end: parse(&v.end)?,
        },
        None => Window {
            start: None,
            end: None,
        },
    })
}

/// A log entry as a keyless signature carries it: the entry's body (base64
/// as the log returned it), when it was integrated, its index, the log's
/// id (sha256 of its key) and the log's signed entry timestamp.
#[derive(Debug, Clone)]
pub struct LogEntry {
    /// `canonicalizedBody`, base64.
    pub body: String,
    /// Seconds since the epoch.
    pub integrated_time: i64,
    /// The entry's index in the log.
    pub log_index: i64,
    /// The log's id (raw bytes).
    pub log_id: Vec<u8>,
    /// The signed entry timestamp (DER signature).
    pub set: Vec<u8>,
    /// The entry's inclusion proof with the log's checkpoint, when the
    /// signature carries one (a sigstore bundle v0.2 or later must).
    pub proof: Option<super::tlog::InclusionProof>,
}

impl TrustedRoot {
    /// Reads a `trusted_root.json`. Errors name the file: unreadable, not
    /// JSON of that shape, a certificate or key that does not parse, no
    /// certificate authority or no log.
    pub fn load(path: &Path) -> Result<TrustedRoot> {
        let text = std::fs::read(path)
            .with_context(|| format!("reading trusted root {}", path.display()))?;
        TrustedRoot::parse(&text, path).with_context(|| format!("trusted root {}", path.display()))
    }

    /// [`TrustedRoot::load`] of bytes already read.
    pub fn parse(bytes: &[u8], path: &Path) -> Result<TrustedRoot> {
        let root: json::Root = serde_json::from_slice(bytes)?;
        if let Some(m) = &root.media_type
            && !m.starts_with("application/vnd.dev.sigstore.trustedroot")
        {
            bail!("media type {m:?} is not a sigstore trusted root");
        }
        let mut cas = Vec::new();
        for (i, ca) in root.certificate_authorities.iter().enumerate() {
            let mut chain = Vec::new();
            for c in &ca.cert_chain.certificates {
                let der =
                    b64(&c.raw_bytes).map_err(|e| anyhow!("certificateAuthorities[{i}]: {e}"))?;
                X509Certificate::from_der(&der)
                    .map_err(|e| anyhow!("certificateAuthorities[{i}]: {e}"))?;
                chain.push(der);
            }
            if chain.is_empty() {
                bail!("certificateAuthorities[{i}]: no certificates");
            }
            cas.push(Ca {
                chain,
                window: window(ca.valid_for.as_ref())?,
            });
        }
        let logs = parse_logs(&root.tlogs, "tlogs", path)?;
        let ct_logs = parse_logs(&root.ctlogs, "ctlogs", path)?;
        if cas.is_empty() || logs.is_empty() {
            bail!("needs at least one certificate authority and one transparency log");
        }
        Ok(TrustedRoot {
            path: path.to_path_buf(),
            cas,
            logs,
            ct_logs,
        })
    }

    /// When the log entry `e` was integrated, checked: a log of this root
    /// signed it (its signed entry timestamp over the canonical JSON
    /// `{"body":…,"integratedTime":…,"logID":"<hex>","logIndex":…}`, as
    /// Rekor signs it) within that log key's validity, and, when `e`
    /// carries an inclusion proof, the log's checkpoint shows the entry in
    /// its tree ([`super::tlog::InclusionProof::check`]). Errors: why not.
    pub fn log_time(&self, e: &LogEntry) -> Result<OffsetDateTime, String> {
        let Some(log) = self.logs.iter().find(|l| l.key_id == e.log_id) else {
            return Err(format!(
                "a log entry from a log the trusted root does not list ({})",
                hex::encode(&e.log_id)
            ));
        };
        if !e
            .body
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"+/=".contains(&b))
        {
            return Err("a log entry whose body is not base64".into());
        }
        let signed = format!(
            r#"{{"body":"{}","integratedTime":{},"logID":"{}","logIndex":{}}}"#,
            e.body,
            e.integrated_time,
            hex::encode(&e.log_id),
            e.log_index
        );
        if !log.key.verifies(signed.as_bytes(), &e.set) {
            return Err(format!(
                "a log entry (index {}) whose signed entry timestamp the log's key does not verify",
                e.log_index
            ));
        }
        let t = OffsetDateTime::from_unix_timestamp(e.integrated_time)
            .map_err(|_| format!("a log entry at time {}", e.integrated_time))?;
        if !log.window.contains(t) {
            return Err(format!(
                "a log entry at {t}, outside its log key's validity"
            ));
        }
        if let Some(p) = &e.proof {
            let body = b64(&e.body).map_err(|_| "a log entry whose body is not base64")?;
            p.check(&body, &log.key, &log.key_id)?;
        }
        Ok(t)
    }

    /// Checks the leaf certificate `der` at time `at` (the log's): issued
    /// by one of this root's certificate authorities valid then, valid
    /// itself then, logged by one of its CT logs when it lists any (an
    /// embedded SCT), for code signing, naming one of `identities`. Returns
    /// `SUBJECT from ISSUER`; errors say what did not hold.
    pub fn certificate(
        &self,
        der: &[u8],
        at: OffsetDateTime,
        identities: &[Matcher],
    ) -> Result<String, String> {
        let (_, leaf) = X509Certificate::from_der(der)
            .map_err(|e| format!("a certificate that does not parse: {e}"))?;
        let v = leaf.validity();
        if at < v.not_before.to_datetime() || v.not_after.to_datetime() < at {
            return Err(format!(
                "a certificate valid from {} to {}, signed at {at} (outside its validity)",
                v.not_before, v.not_after
            ));
        }
        let issuer = self.cas.iter().find_map(|ca| {
            let (_, issuer) = X509Certificate::from_der(&ca.chain[0]).ok()?;
            (ca.window.contains(at)
                && leaf.issuer() == issuer.subject()
                && leaf.verify_signature(Some(issuer.public_key())).is_ok()
                && issuer.validity().is_valid_at(at.into()))
            .then_some(issuer)
        });
        let Some(issuer) = issuer else {
            return Err(format!(
                "a certificate (issuer {}) no certificate authority of the trusted root issued",
                leaf.issuer()
            ));
        };
        if !self.ct_logs.is_empty() {
            let logs: Vec<super::sct::CtLog> = self
                .ct_logs
                .iter()
                .map(|l| super::sct::CtLog {
                    id: &l.key_id,
                    key: &l.key,
                })
                .collect();
            super::sct::check(&leaf, issuer.public_key().raw, &logs)?;
        }
        let code_signing = leaf
            .extended_key_usage()
            .ok()
            .flatten()
            .is_some_and(|e| e.value.code_signing);
        if !code_signing {
            return Err("a certificate without the code signing usage".into());
        }
        let subjects = subjects(&leaf);
        let issuer = oidc_issuer(&leaf).unwrap_or_default();
        let found = format!("{} from {issuer}", subjects.join(", "));
        for m in identities {
            if m.issuer.matches(&issuer) && subjects.iter().any(|s| m.subject.matches(s)) {
                return Ok(found);
            }
        }
        Err(format!("a signature by {found}"))
    }
}

/// The subject alternative names (emails, URIs, DNS names) of `cert`.
fn subjects(cert: &X509Certificate) -> Vec<String> {
    let mut out = Vec::new();
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        for n in &san.value.general_names {
            match n {
                GeneralName::RFC822Name(s) | GeneralName::URI(s) | GeneralName::DNSName(s) => {
                    out.push((*s).to_string())
                }
                _ => {}
            }
        }
    }
    out
}

/// The OIDC issuer Fulcio wrote into `cert`.
fn oidc_issuer(cert: &X509Certificate) -> Option<String> {
    let ext = |oid: &str| {
        cert.extensions()
            .iter()
            .find(|e| e.oid.to_id_string() == oid)
            .map(|e| e.value)
    };
    if let Some(v) = ext(ISSUER_V2) {
        let (_, s) = x509_parser::der_parser::der::parse_der_utf8string(v).ok()?;
        return s.as_str().ok().map(str::to_string);
    }
    ext(ISSUER_V1).and_then(|v| std::str::from_utf8(v).ok().map(str::to_string))
}

/// What a log entry must say was signed.
#[derive(Clone, Copy)]
pub enum Signed<'a> {
    /// A `hashedrekord` entry: the sha256 (hex) of the signed bytes.
    Hashed(&'a str),
    /// A `dsse` entry: the sha256 (hex) of the envelope's payload.
    Dsse(&'a str),
}

/// Whether the log entry body `body_b64` records `signature` by the
/// certificate `cert_der` over `what` (Rekor's `hashedrekord` and `dsse`
/// kinds, version 0.0.1). Errors: why not.
pub fn binds(
    body_b64: &str,
    what: Signed,
    signature: &[u8],
    cert_der: &[u8],
) -> Result<(), String> {
    let body: serde_json::Value = b64(body_b64)
        .and_then(|b| serde_json::from_slice(&b).map_err(|e| e.to_string()))
        .map_err(|e| format!("a log entry whose body does not parse: {e}"))?;
    let s = |v: &serde_json::Value| v.as_str().map(str::to_string).unwrap_or_default();
    let cert_is = |pem_b64: &serde_json::Value| {
        b64(&s(pem_b64)).ok().is_some_and(|pem| {
            x509_parser::pem::parse_x509_pem(&pem).is_ok_and(|(_, p)| p.contents == cert_der)
        })
    };
    let sig_is = |v: &serde_json::Value| b64(&s(v)).ok().is_some_and(|b| b == signature);
    let spec = &body["spec"];
    let ok = match (what, s(&body["kind"]).as_str()) {
        (Signed::Hashed(hex), "hashedrekord") => {
            s(&spec["data"]["hash"]["value"]) == hex
                && sig_is(&spec["signature"]["content"])
                && cert_is(&spec["signature"]["publicKey"]["content"])
        }
        (Signed::Dsse(hex), "dsse") => {
            s(&spec["payloadHash"]["value"]) == hex
                && spec["signatures"].as_array().is_some_and(|a| {
                    a.iter()
                        .any(|e| sig_is(&e["signature"]) && cert_is(&e["verifier"]))
                })
        }
        (_, kind) => {
            return Err(format!(
                "a log entry of kind {kind:?}, not this signature's"
            ));
        }
    };
    if ok {
        Ok(())
    } else {
        Err("a log entry that records another signature".into())
    }
}

/// The key of the certificate `der`, to verify the signature it made.
/// Errors: the certificate does not parse, or its key is not ECDSA P-256
/// or Ed25519.
pub fn certificate_key(der: &[u8], root: &TrustedRoot) -> Result<PublicKey, String> {
    X509Certificate::from_der(der)
        .map_err(|e| e.to_string())
        .and_then(|(_, c)| {
            PublicKey::from_der(c.public_key().raw, &root.path).map_err(|e| e.to_string())
        })
        .map_err(|e| format!("a certificate whose key cannot be used: {e}"))
}

impl super::Keyless {
    /// Who made `signature` over `what` with the certificate `der`, by the
    /// log entry `entry`: the log dates it ([`TrustedRoot::log_time`]), the
    /// entry records it ([`binds`]), and the certificate was good then and
    /// names a trusted identity ([`TrustedRoot::certificate`]). The
    /// signature itself is verified by the caller ([`certificate_key`]).
    pub fn signer(
        &self,
        entry: &LogEntry,
        what: Signed,
        signature: &[u8],
        der: &[u8],
    ) -> Result<String, String> {
        let at = self.root.log_time(entry)?;
        binds(&entry.body, what, signature, der)?;
        self.root.certificate(der, at, &self.identities)
    }
}

/// A keyless signature in cosign's tag layout (before bundles): the
/// payload layer's `dev.sigstore.cosign/certificate` (PEM) and
/// `dev.sigstore.cosign/bundle` (its log entry) annotations, `sig` being
/// the signature over `payload`. Returns `SUBJECT from ISSUER`; errors say
/// what did not hold.
pub fn legacy(
    keyless: &super::Keyless,
    cert_pem: &str,
    bundle: Option<&String>,
    payload: &[u8],
    sig: &[u8],
) -> Result<String, String> {
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "PascalCase")]
    struct Bundle {
        signed_entry_timestamp: String,
        payload: Entry,
    }
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Entry {
        body: String,
        integrated_time: i64,
        log_index: i64,
        #[serde(rename = "logID")]
        log_id: String,
    }
    let der = x509_parser::pem::parse_x509_pem(cert_pem.as_bytes())
        .map(|(_, p)| p.contents)
        .map_err(|e| format!("a certificate annotation that is not PEM: {e}"))?;
    let key = certificate_key(&der, &keyless.root)?;
    if !key.verifies(payload, sig) {
        return Err(
            "a signature its certificate's key does not verify (a payload changed after signing)"
                .into(),
        );
    }
    let b: Bundle = bundle
        .ok_or("a keyless signature without a transparency log entry")
        .and_then(|b| {
            serde_json::from_str(b).map_err(|_| "a log entry annotation that does not parse")
        })?;
    let entry = LogEntry {
        body: b.payload.body,
        integrated_time: b.payload.integrated_time,
        log_index: b.payload.log_index,
        log_id: hex::decode(&b.payload.log_id).map_err(|_| "a log id that is not hex")?,
        set: b64(&b.signed_entry_timestamp)?,
        proof: None,
    };
    let hash = crate::digest::Digest::sha256_of(payload);
    keyless.signer(&entry, Signed::Hashed(hash.hex()), sig, &der)
}
