//! Upstream image signatures, as cosign lays them out, checked against a
//! policy: at `bundle create` (the connected side's `policy` per
//! `[[image]]` or `[[registry]]`) and again at import (the site's
//! `[import] policy`), over the same signatures carried in the bundle.
//!
//! Owns: the tag-based "simple signing" layout (cosign's `sign --key`):
//! the tag `sha256-<hex>.sig` in the image's repository names an OCI image
//! manifest whose layers are payloads of media type
//! [`SIMPLE_SIGNING`], each with its base64 signature in the annotation
//! [`SIGNATURE_ANNOTATION`]; a payload is the JSON
//! `{"critical": {"identity": {"docker-reference": ..}, "image":
//! {"docker-manifest-digest": "sha256:.."}, "type": "cosign container image
//! signature"}, "optional": ..}`. A signature counts for an image when a
//! trusted key ([`key::PublicKey`]) verifies it over the payload bytes and
//! the payload names the image's digest (cosign `verify --key` does the
//! same; the docker-reference is not compared, as cosign does not by
//! default: a mirror renames repositories).
//!
//! Also sigstore bundles attached as referrers ([`sigstore`], what cosign
//! v3 writes), and keyless signers (a certificate naming an identity,
//! checked offline against a `trusted_root.json`, [`keyless`]) in either
//! layout.
//!
//! Never fetches: the callers read the signature manifest, its payloads
//! and the bundles (from the registry cache or a layout at create, from
//! the store at import) and hand them to [`check`].

pub mod key;
pub mod keyless;
pub mod policy;
pub mod sct;
pub mod sigstore;
pub mod tlog;

use std::collections::BTreeMap;

use crate::digest::Digest;
use crate::oci::Manifest;

pub use key::PublicKey;
pub use keyless::{Identity, TrustedRoot};
pub use policy::{Policy, SitePolicy, SiteRule};

/// Media type of a cosign simple-signing payload layer.
pub const SIMPLE_SIGNING: &str = "application/vnd.dev.cosign.simplesigning.v1+json";

/// Annotation on a payload layer holding its base64 signature.
pub const SIGNATURE_ANNOTATION: &str = "dev.cosignproject.cosign/signature";

/// Annotation on a keyless payload layer: the signer's certificate (PEM).
pub const CERTIFICATE_ANNOTATION: &str = "dev.sigstore.cosign/certificate";

/// Annotation on a keyless payload layer: its Rekor entry (JSON
/// `{"SignedEntryTimestamp": .., "Payload": {"body", "integratedTime",
/// "logIndex", "logID"}}`).
pub const BUNDLE_ANNOTATION: &str = "dev.sigstore.cosign/bundle";

/// The `type` of a container image signature payload.
const PAYLOAD_TYPE: &str = "cosign container image signature";

/// Largest payload read, in bytes (cosign's are a few hundred).
pub const MAX_PAYLOAD: u64 = 1 << 20;

/// The tag cosign gives the signatures of the manifest `digest`:
/// `sha256-<hex>.sig`.
pub fn signature_tag(digest: &Digest) -> String {
    format!("{}-{}.sig", digest.algorithm().name(), digest.hex())
}

/// Who a policy trusts: cosign keys (a signature by any one counts), and
/// keyless identities with the trusted root their certificates and log
/// entries are checked against.
#[derive(Debug, Clone, Default)]
pub struct Signers {
    /// Public keys.
    pub keys: Vec<PublicKey>,
    /// Keyless identities, if the policy names any.
    pub keyless: Option<Keyless>,
}

/// The keyless half of [`Signers`].
#[derive(Debug, Clone)]
pub struct Keyless {
    /// Any one of them counts.
    pub identities: Vec<keyless::Matcher>,
    /// What their certificates and log entries are checked against.
    pub root: std::sync::Arc<keyless::TrustedRoot>,
}

impl Signers {
    /// `KEY or KEY or SUBJECT from ISSUER`, for messages.
    pub fn describe(&self) -> String {
        let mut all: Vec<String> = self.keys.iter().map(|k| k.id.clone()).collect();
        if let Some(k) = &self.keyless {
            all.extend(k.identities.iter().map(|m| m.to_string()));
        }
        all.join(" or ")
    }
}

/// The signatures found for one manifest: its cosign signature image (the
/// `sha256-<hex>.sig` tag; `None`: no such tag) and the sigstore bundles
/// of its referrers (each bundle's JSON).
#[derive(Default)]
pub struct Found {
    /// The tag-based signature image.
    pub simple: Option<Signatures>,
    /// The sigstore bundles attached as referrers.
    pub bundles: Vec<Vec<u8>>,
}

/// A signature manifest and the payloads its layers name, read by the
/// caller: payload digest → bytes (a payload missing from the map counts
/// as absent).
#[derive(Clone)]
pub struct Signatures {
    /// The manifest the `sha256-<hex>.sig` tag names, as stored.
    pub manifest: Vec<u8>,
    /// Its payload layers' bytes, by digest.
    pub payloads: BTreeMap<Digest, Vec<u8>>,
}

/// The payload layers of the signature manifest `manifest` that
/// [`check`] reads: media type [`SIMPLE_SIGNING`], at most [`MAX_PAYLOAD`]
/// bytes (the callers read each and put it in [`Signatures::payloads`]).
/// Errors: not a manifest.
pub fn payload_layers(manifest: &[u8]) -> Result<Vec<crate::oci::Descriptor>, Unsigned> {
    let m = Manifest::parse(manifest).map_err(|e| Unsigned(format!("signature manifest: {e}")))?;
    Ok(m.layers
        .into_iter()
        .filter(|l| l.media_type == SIMPLE_SIGNING && l.size <= MAX_PAYLOAD)
        .collect())
}

/// Why an image fails a policy: one line naming what was found.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Unsigned(pub String);

#[derive(serde::Deserialize)]
struct Payload {
    critical: Critical,
}

#[derive(serde::Deserialize)]
struct Critical {
    image: PayloadImage,
    #[serde(rename = "type")]
    kind: String,
}

#[derive(serde::Deserialize)]
struct PayloadImage {
    #[serde(rename = "docker-manifest-digest")]
    digest: String,
}

/// Checks that one of `signers` signed the manifest `digest`, by the
/// signatures `found`: a simple-signing payload of the `sha256-<hex>.sig`
/// image, or a sigstore bundle referrer ([`sigstore::check`]). Returns who
/// signed (a key id, or `SUBJECT from ISSUER`); otherwise the cause,
/// naming what was found: no signatures, signatures by other signers, a
/// signature over another digest, a payload that does not hash to its
/// descriptor, an attestation that is not a signature.
pub fn check(digest: &Digest, signers: &Signers, found: &Found) -> Result<String, Unsigned> {
    let tag = signature_tag(digest);
    if found.simple.is_none() && found.bundles.is_empty() {
        return Err(Unsigned(format!(
            "no cosign signature (no tag {tag}, no sigstore bundle referrer)"
        )));
    }
    let mut seen = Vec::new();
    if let Some(simple) = &found.simple {
        match check_simple(digest, signers, simple) {
            Ok(who) => return Ok(who),
            Err(e) => seen.push(format!("{tag} has {}", e.0)),
        }
    }
    for b in &found.bundles {
        match sigstore::check(b, digest, signers) {
            Ok(who) => return Ok(who),
            Err(e) => seen.push(format!("a sigstore bundle referrer has {}", e.0)),
        }
    }
    Err(Unsigned(format!(
        "not signed by {} ({})",
        signers.describe(),
        seen.join("; ")
    )))
}

/// [`check`] of the simple-signing payloads of one signature image.
fn check_simple(
    digest: &Digest,
    signers: &Signers,
    found: &Signatures,
) -> Result<String, Unsigned> {
    use base64::Engine as _;
    let m = Manifest::parse(&found.manifest)
        .map_err(|e| Unsigned(format!("a manifest that does not parse: {e}")))?;
    let mut seen = Vec::new();
    for layer in &m.layers {
        if layer.media_type != SIMPLE_SIGNING {
            continue;
        }
        let Some(b64) = layer
            .annotations
            .as_ref()
            .and_then(|a| a.get(SIGNATURE_ANNOTATION))
        else {
            seen.push(format!("payload {} without a signature", layer.digest));
            continue;
        };
        let Some(payload) = found.payloads.get(&layer.digest) else {
            seen.push(format!("payload {} missing", layer.digest));
            continue;
        };
        if Digest::sha256_of(payload) != layer.digest || payload.len() as u64 != layer.size {
            seen.push(format!(
                "payload {} does not match its descriptor",
                layer.digest
            ));
            continue;
        }
        let Ok(sig) = base64::engine::general_purpose::STANDARD.decode(b64.trim()) else {
            seen.push(format!("payload {}: signature not base64", layer.digest));
            continue;
        };
        let signer = match simple_signer(layer, payload, &sig, signers) {
            Ok(s) => s,
            Err(w) => {
                seen.push(w);
                continue;
            }
        };
        match serde_json::from_slice::<Payload>(payload) {
            Ok(p) if p.critical.kind != PAYLOAD_TYPE => seen.push(format!(
                "a signature by {signer} of a payload of type {:?}",
                p.critical.kind
            )),
            Ok(p) if p.critical.image.digest != digest.to_string() => seen.push(format!(
                "a signature by {signer} over another digest ({})",
                p.critical.image.digest
            )),
            Ok(_) => return Ok(signer),
            Err(e) => seen.push(format!(
                "a signature by {signer} of a payload that is not simple signing: {e}"
            )),
        }
    }
    if seen.is_empty() {
        seen.push("no simple-signing payloads".into());
    }
    Err(Unsigned(seen.join("; ")))
}

/// Who made `sig` over `payload`: a trusted key, or (a layer carrying
/// cosign's keyless annotations) a certificate checked as
/// [`keyless`] does. Errors: why neither.
fn simple_signer(
    layer: &crate::oci::Descriptor,
    payload: &[u8],
    sig: &[u8],
    signers: &Signers,
) -> Result<String, String> {
    if let Some(k) = signers.keys.iter().find(|k| k.verifies(payload, sig)) {
        return Ok(k.id.clone());
    }
    let annotations = layer.annotations.as_ref();
    let cert = annotations.and_then(|a| a.get(CERTIFICATE_ANNOTATION));
    match (cert, &signers.keyless) {
        (Some(pem), Some(keyless)) => keyless::legacy(
            keyless,
            pem,
            annotations.and_then(|a| a.get(BUNDLE_ANNOTATION)),
            payload,
            sig,
        ),
        (Some(_), None) => Err(
            "a keyless signature (a certificate) where the policy names only keys".into(),
        ),
        _ => Err(
            "a signature no trusted key verifies (another signer, or a payload changed after signing)"
                .into(),
        ),
    }
}

#[cfg(test)]
mod tests;
