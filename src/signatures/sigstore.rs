//! Sigstore bundles attached as OCI referrers (cosign's bundle
//! specification, `specs/BUNDLE_SPEC.md`; what `cosign sign` writes since
//! v3): a manifest whose `subject` is the image and whose `artifactType`
//! (and single layer) is a sigstore bundle media type
//! ([`is_bundle_type`]), the layer being the bundle's JSON
//! (`sigstore_bundle.proto`, versions 0.1 to 0.3).
//!
//! Owns: reading a bundle and deciding whether it is a signature of the
//! image `digest` by one of the [`Signers`]. Two contents count:
//! - a DSSE envelope (`application/vnd.in-toto+json`) holding an in-toto
//!   statement of predicate type [`SIGN_PREDICATE`] whose subject is the
//!   image's digest, signed over DSSE's pre-authentication encoding;
//! - a message signature whose message digest is the image's digest (ECDSA
//!   P-256 over that digest).
//!
//! An attestation (another predicate type: SLSA provenance, an SBOM) is
//! carried but is not a signature. The signer is a key of the policy
//! (`verificationMaterial.publicKey`), or a certificate
//! (`certificate`, or the first of `x509CertificateChain`) checked as a
//! keyless signature ([`super::keyless`]) with the bundle's log entries.

use super::keyless::{LogEntry, Signed};
use super::tlog::InclusionProof;
use super::{Signers, Unsigned};
use crate::digest::Digest;

/// The predicate type of an image signature in cosign v3's bundles.
pub const SIGN_PREDICATE: &str = "https://sigstore.dev/cosign/sign/v1";

/// DSSE payload type of an in-toto statement.
const IN_TOTO: &str = "application/vnd.in-toto+json";

/// Largest bundle read, in bytes (a keyless one is a few KiB).
pub const MAX_BUNDLE: u64 = 1 << 20;

/// Whether `media_type` is a sigstore bundle's:
/// `application/vnd.dev.sigstore.bundle.v0.3+json`, or the older
/// `application/vnd.dev.sigstore.bundle+json;version=0.N`.
pub fn is_bundle_type(media_type: &str) -> bool {
    media_type.starts_with("application/vnd.dev.sigstore.bundle.")
        || media_type.starts_with("application/vnd.dev.sigstore.bundle+json")
}

/// The bundle layers of the referrer manifest `manifest` if its subject
/// is `subject` and it is a sigstore bundle (artifact type, or its layer's
/// media type), each at most [`MAX_BUNDLE`] bytes; none otherwise (a
/// manifest that does not parse is not a bundle referrer).
pub fn bundle_layers(manifest: &[u8], subject: &Digest) -> Vec<crate::oci::Descriptor> {
    let Ok(m) = crate::oci::Manifest::parse(manifest) else {
        return Vec::new();
    };
    if m.subject.as_ref().is_none_or(|s| &s.digest != subject) {
        return Vec::new();
    }
    m.layers
        .into_iter()
        .filter(|l| is_bundle_type(&l.media_type) && l.size <= MAX_BUNDLE)
        .collect()
}

mod json {
    //! The parts of `sigstore_bundle.proto` (protobuf JSON) read here.
    use serde::Deserialize;

    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    pub struct Bundle {
        pub media_type: String,
        pub verification_material: Material,
        #[serde(default)]
        pub dsse_envelope: Option<Envelope>,
        #[serde(default)]
        pub message_signature: Option<MessageSignature>,
    }
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    pub struct Material {
        #[serde(default)]
        pub certificate: Option<Raw>,
        #[serde(default)]
        pub x509_certificate_chain: Option<Chain>,
        #[serde(default)]
        pub tlog_entries: Vec<Tlog>,
    }
    pub use super::super::keyless::json::{Chain, LogId, Raw};
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    pub struct Tlog {
        pub log_index: Int,
        pub log_id: LogId,
        pub integrated_time: Int,
        #[serde(default)]
        pub inclusion_promise: Option<Promise>,
        #[serde(default)]
        pub inclusion_proof: Option<Proof>,
        pub canonicalized_body: String,
    }
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    pub struct Proof {
        pub log_index: Int,
        pub root_hash: String,
        pub tree_size: Int,
        #[serde(default)]
        pub hashes: Vec<String>,
        #[serde(default)]
        pub checkpoint: Option<Checkpoint>,
    }
    #[derive(Deserialize)]
    pub struct Checkpoint {
        pub envelope: String,
    }
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    pub struct Promise {
        pub signed_entry_timestamp: String,
    }
    /// An int64, which protobuf JSON writes as a string.
    #[derive(Deserialize)]
    #[serde(untagged)]
    pub enum Int {
        Num(i64),
        Text(String),
    }
    impl Int {
        pub fn get(&self) -> Option<i64> {
            match self {
                Int::Num(n) => Some(*n),
                Int::Text(s) => s.parse().ok(),
            }
        }
    }
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    pub struct Envelope {
        pub payload: String,
        pub payload_type: String,
        pub signatures: Vec<Signature>,
    }
    #[derive(Deserialize)]
    pub struct Signature {
        pub sig: String,
    }
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    pub struct MessageSignature {
        pub message_digest: Digest,
        pub signature: String,
    }
    #[derive(Deserialize)]
    pub struct Digest {
        pub algorithm: String,
        pub digest: String,
    }
    /// An in-toto statement (v0.1 or v1).
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    pub struct Statement {
        #[serde(default)]
        pub predicate_type: String,
        #[serde(default)]
        pub subject: Vec<Subject>,
    }
    #[derive(Deserialize)]
    pub struct Subject {
        #[serde(default)]
        pub digest: std::collections::BTreeMap<String, String>,
    }
}

fn b64(s: &str) -> Option<Vec<u8>> {
    super::keyless::b64(s).ok()
}

/// DSSE's pre-authentication encoding (DSSE v1 protocol):
/// `"DSSEv1" SP LEN(type) SP type SP LEN(body) SP body`.
fn pae(payload_type: &str, payload: &[u8]) -> Vec<u8> {
    let mut out = format!(
        "DSSEv1 {} {payload_type} {} ",
        payload_type.len(),
        payload.len()
    )
    .into_bytes();
    out.extend_from_slice(payload);
    out
}

/// What was signed, and how to check a signature over it.
enum Content {
    /// DSSE: the PAE bytes, and the payload's sha256 (hex) for the log.
    Dsse {
        pae: Vec<u8>,
        payload_sha256: String,
        sigs: Vec<Vec<u8>>,
    },
    /// A message signature over the image digest.
    Message { sig: Vec<u8> },
}

/// Checks the sigstore bundle `bytes` as a signature of `digest` by one
/// of `signers`. Returns who signed (a key id, or `SUBJECT from ISSUER`);
/// errors say what the bundle is instead (an attestation, a signature over
/// another digest, by another signer, with a certificate the trusted root
/// does not vouch for).
pub fn check(bytes: &[u8], digest: &Digest, signers: &Signers) -> Result<String, Unsigned> {
    let bundle: json::Bundle = serde_json::from_slice(bytes)
        .map_err(|e| Unsigned(format!("a sigstore bundle that does not parse: {e}")))?;
    if !is_bundle_type(&bundle.media_type) {
        return Err(Unsigned(format!(
            "a sigstore bundle of media type {:?}",
            bundle.media_type
        )));
    }
    let content = content(&bundle, digest)?;
    let m = &bundle.verification_material;
    let cert = m
        .certificate
        .as_ref()
        .or_else(|| m.x509_certificate_chain.as_ref()?.certificates.first());
    match cert {
        None => by_key(&content, digest, signers),
        Some(c) => {
            let der = b64(&c.raw_bytes)
                .ok_or_else(|| Unsigned("a bundle whose certificate is not base64".into()))?;
            let needs_proof = !bundle.media_type.ends_with(";version=0.1");
            by_certificate(
                &content,
                digest,
                &der,
                &m.tlog_entries,
                needs_proof,
                signers,
            )
        }
    }
}

/// The bundle's content, checked to be a signature of `digest`.
fn content(bundle: &json::Bundle, digest: &Digest) -> Result<Content, Unsigned> {
    let bad = |s: &str| Unsigned(s.to_string());
    if let Some(env) = &bundle.dsse_envelope {
        if env.payload_type != IN_TOTO {
            return Err(Unsigned(format!(
                "a DSSE envelope of payload type {:?}",
                env.payload_type
            )));
        }
        let payload = b64(&env.payload).ok_or_else(|| bad("a DSSE payload that is not base64"))?;
        let st: json::Statement = serde_json::from_slice(&payload).map_err(|e| {
            Unsigned(format!(
                "a DSSE payload that is not an in-toto statement: {e}"
            ))
        })?;
        if st.predicate_type != SIGN_PREDICATE {
            return Err(Unsigned(format!(
                "an attestation ({}), not a signature",
                st.predicate_type
            )));
        }
        let alg = digest.algorithm().name();
        if !st
            .subject
            .iter()
            .any(|s| s.digest.get(alg).is_some_and(|h| h == digest.hex()))
        {
            let other = st
                .subject
                .first()
                .and_then(|s| s.digest.iter().next())
                .map(|(a, h)| format!("{a}:{h}"))
                .unwrap_or_else(|| "none".into());
            return Err(Unsigned(format!(
                "a signature over another digest ({other})"
            )));
        }
        return Ok(Content::Dsse {
            pae: pae(&env.payload_type, &payload),
            payload_sha256: Digest::sha256_of(&payload).hex().to_string(),
            sigs: env.signatures.iter().filter_map(|s| b64(&s.sig)).collect(),
        });
    }
    if let Some(ms) = &bundle.message_signature {
        let d = b64(&ms.message_digest.digest)
            .ok_or_else(|| bad("a message digest that is not base64"))?;
        if ms.message_digest.algorithm != "SHA2_256" || hex::encode(&d) != digest.hex() {
            return Err(Unsigned(format!(
                "a signature over another digest ({} {})",
                ms.message_digest.algorithm,
                hex::encode(&d)
            )));
        }
        let sig = b64(&ms.signature).ok_or_else(|| bad("a signature that is not base64"))?;
        return Ok(Content::Message { sig });
    }
    Err(bad(
        "a sigstore bundle with neither a DSSE envelope nor a message signature",
    ))
}

/// Whether `key` made a signature of `content` (of `digest`); the
/// signature bytes that verified.
fn verified_by(content: &Content, digest: &Digest, key: &super::PublicKey) -> Option<Vec<u8>> {
    match content {
        Content::Dsse { pae, sigs, .. } => sigs.iter().find(|s| key.verifies(pae, s)).cloned(),
        Content::Message { sig } => hex::decode(digest.hex())
            .ok()
            .filter(|d| key.verifies_prehash(d, sig))
            .map(|_| sig.clone()),
    }
}

fn by_key(content: &Content, digest: &Digest, signers: &Signers) -> Result<String, Unsigned> {
    signers
        .keys
        .iter()
        .find(|k| verified_by(content, digest, k).is_some())
        .map(|k| k.id.clone())
        .ok_or_else(|| {
            Unsigned(
                "a sigstore bundle no trusted key verifies (another signer, or content changed after signing)"
                    .into(),
            )
        })
}

fn by_certificate(
    content: &Content,
    digest: &Digest,
    der: &[u8],
    entries: &[json::Tlog],
    needs_proof: bool,
    signers: &Signers,
) -> Result<String, Unsigned> {
    let Some(keyless) = &signers.keyless else {
        return Err(Unsigned(
            "a keyless signature (a certificate) where the policy names only keys".into(),
        ));
    };
    let key = super::keyless::certificate_key(der, &keyless.root).map_err(Unsigned)?;
    let Some(sig) = verified_by(content, digest, &key) else {
        return Err(Unsigned(
            "a signature its certificate's key does not verify (content changed after signing)"
                .into(),
        ));
    };
    let signed = match content {
        Content::Dsse { payload_sha256, .. } => Signed::Dsse(payload_sha256),
        Content::Message { .. } => Signed::Hashed(digest.hex()),
    };
    let mut why = Vec::new();
    for e in entries {
        let entry = match log_entry(e, needs_proof) {
            Ok(entry) => entry,
            Err(w) => {
                why.push(w);
                continue;
            }
        };
        match keyless.signer(&entry, signed, &sig, der) {
            Ok(who) => return Ok(who),
            Err(w) => why.push(w),
        }
    }
    if why.is_empty() {
        why.push("a keyless signature without a transparency log entry".into());
    }
    Err(Unsigned(why.join("; ")))
}

/// The log entry `e` of a bundle; `needs_proof`: the bundle's version
/// (0.2 and later) requires an inclusion proof with a checkpoint.
fn log_entry(e: &json::Tlog, needs_proof: bool) -> Result<LogEntry, String> {
    let promise = e
        .inclusion_promise
        .as_ref()
        .ok_or("a log entry without an inclusion promise (signed entry timestamp)")?;
    let proof = match &e.inclusion_proof {
        Some(p) => Some(proof(p)?),
        None if needs_proof => {
            return Err(
                "a log entry without an inclusion proof (a bundle v0.2 or later needs one)".into(),
            );
        }
        None => None,
    };
    Ok(LogEntry {
        body: e.canonicalized_body.clone(),
        integrated_time: e
            .integrated_time
            .get()
            .ok_or("a log entry without a time")?,
        log_index: e.log_index.get().ok_or("a log entry without an index")?,
        log_id: b64(&e.log_id.key_id).ok_or("a log id that is not base64")?,
        set: b64(&promise.signed_entry_timestamp)
            .ok_or("a signed entry timestamp that is not base64")?,
        proof,
    })
}

/// The inclusion proof `p`, decoded; it must carry a checkpoint.
fn proof(p: &json::Proof) -> Result<InclusionProof, String> {
    let bad = |what: &str| format!("a log entry whose inclusion proof {what}");
    let int = |i: &json::Int| i.get().and_then(|n| u64::try_from(n).ok());
    Ok(InclusionProof {
        log_index: int(&p.log_index).ok_or_else(|| bad("has no index"))?,
        tree_size: int(&p.tree_size).ok_or_else(|| bad("has no tree size"))?,
        root_hash: b64(&p.root_hash).ok_or_else(|| bad("has a root hash that is not base64"))?,
        hashes: p
            .hashes
            .iter()
            .map(|h| b64(h))
            .collect::<Option<_>>()
            .ok_or_else(|| bad("has a hash that is not base64"))?,
        checkpoint: p
            .checkpoint
            .as_ref()
            .map(|c| c.envelope.clone())
            .ok_or_else(|| bad("has no checkpoint"))?,
    })
}
