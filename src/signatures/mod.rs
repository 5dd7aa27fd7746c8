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
//! Never fetches: the callers read the signature manifest and its payloads
//! (from the registry cache or a layout at create, from the store at
//! import) and hand them to [`check`]. Keyless signatures (Fulcio
//! certificates, Rekor entries, `trusted_root.json`) and sigstore bundle
//! referrers are not checked yet: an image whose only signatures are
//! keyless fails a key policy.

pub mod key;
pub mod policy;

use std::collections::BTreeMap;

use crate::digest::Digest;
use crate::oci::Manifest;

pub use key::PublicKey;
pub use policy::{Policy, SitePolicy, SiteRule};

/// Media type of a cosign simple-signing payload layer.
pub const SIMPLE_SIGNING: &str = "application/vnd.dev.cosign.simplesigning.v1+json";

/// Annotation on a payload layer holding its base64 signature.
pub const SIGNATURE_ANNOTATION: &str = "dev.cosignproject.cosign/signature";

/// The `type` of a container image signature payload.
const PAYLOAD_TYPE: &str = "cosign container image signature";

/// Largest payload read, in bytes (cosign's are a few hundred).
pub const MAX_PAYLOAD: u64 = 1 << 20;

/// The tag cosign gives the signatures of the manifest `digest`:
/// `sha256-<hex>.sig`.
pub fn signature_tag(digest: &Digest) -> String {
    format!("{}-{}.sig", digest.algorithm().name(), digest.hex())
}

/// A signature manifest and the payloads its layers name, read by the
/// caller: payload digest → bytes (a payload missing from the map counts
/// as absent).
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

/// Checks that one of `keys` signed the manifest `digest`, by the
/// signatures `found` (`None`: no `sha256-<hex>.sig` tag). Returns the id
/// of the first key whose signature counts; otherwise the cause, naming
/// what was found: no signatures, signatures by other keys, a signature
/// over another digest, a payload that does not hash to its descriptor.
pub fn check(
    digest: &Digest,
    keys: &[PublicKey],
    found: Option<&Signatures>,
) -> Result<String, Unsigned> {
    use base64::Engine as _;
    let Some(found) = found else {
        return Err(Unsigned(format!(
            "no cosign signature (no tag {})",
            signature_tag(digest)
        )));
    };
    let m = Manifest::parse(&found.manifest)
        .map_err(|e| Unsigned(format!("{}: {e}", signature_tag(digest))))?;
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
        let Some(k) = keys.iter().find(|k| k.verifies(payload, &sig)) else {
            seen.push(
                "a signature no trusted key verifies (another signer, or a payload changed after signing)"
                    .to_string(),
            );
            continue;
        };
        match serde_json::from_slice::<Payload>(payload) {
            Ok(p) if p.critical.kind != PAYLOAD_TYPE => seen.push(format!(
                "a signature by {} of a payload of type {:?}",
                k.id, p.critical.kind
            )),
            Ok(p) if p.critical.image.digest != digest.to_string() => seen.push(format!(
                "a signature by {} over another digest ({})",
                k.id, p.critical.image.digest
            )),
            Ok(_) => return Ok(k.id.clone()),
            Err(e) => seen.push(format!(
                "a signature by {} of a payload that is not simple signing: {e}",
                k.id
            )),
        }
    }
    if seen.is_empty() {
        seen.push("no simple-signing payloads".into());
    }
    let trusted: Vec<String> = keys.iter().map(|k| k.id.clone()).collect();
    Err(Unsigned(format!(
        "not signed by {} ({} has {})",
        trusted.join(" or "),
        signature_tag(digest),
        seen.join("; ")
    )))
}

#[cfg(test)]
mod tests;
