//! Cosign public keys: the PEM files `cosign generate-key-pair` writes
//! (`cosign.pub`, SubjectPublicKeyInfo, RFC 5280 §4.1.2.7) for ECDSA P-256
//! and Ed25519, and checking a signature by one.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

use crate::digest::Digest;

/// A trusted public key and where it was read from.
#[derive(Clone)]
pub struct PublicKey {
    /// The file named in the config (for messages).
    pub path: PathBuf,
    /// `sha256:` of the key's DER SubjectPublicKeyInfo, first 16 hex digits
    /// (how messages and reports name the key).
    pub id: String,
    kind: Kind,
}

#[derive(Clone)]
enum Kind {
    P256(p256::ecdsa::VerifyingKey),
    Ed25519(ed25519_dalek::VerifyingKey),
}

impl std::fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.path.display(), self.id)
    }
}

impl PublicKey {
    /// Reads a PEM `PUBLIC KEY` file holding an ECDSA P-256 or Ed25519 key.
    /// Errors name the file: unreadable, not PEM, another algorithm.
    pub fn load(path: &Path) -> Result<PublicKey> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading cosign public key {}", path.display()))?;
        PublicKey::parse(&text, path)
    }

    /// [`PublicKey::load`] of PEM text already read (`path` names it).
    pub fn parse(pem: &str, path: &Path) -> Result<PublicKey> {
        use p256::pkcs8::DecodePublicKey;
        let doc = spki::Document::from_public_key_pem(pem.trim()).map_err(|e| {
            anyhow::anyhow!(
                "{}: not a PEM \"PUBLIC KEY\" (cosign.pub): {e}",
                path.display()
            )
        })?;
        PublicKey::from_der(doc.as_bytes(), path)
    }

    /// A key from its DER SubjectPublicKeyInfo (a certificate's key, a
    /// transparency log's key in a trusted root); `path` names where it
    /// came from. Errors: not ECDSA P-256 or Ed25519.
    pub fn from_der(der: &[u8], path: &Path) -> Result<PublicKey> {
        use p256::pkcs8::DecodePublicKey;
        let kind = if let Ok(k) = p256::ecdsa::VerifyingKey::from_public_key_der(der) {
            Kind::P256(k)
        } else if let Ok(k) = ed25519_dalek::VerifyingKey::from_public_key_der(der) {
            Kind::Ed25519(k)
        } else {
            bail!(
                "{}: not an ECDSA P-256 or Ed25519 public key (the two cosign key types airlock checks)",
                path.display()
            );
        };
        let hex = Digest::sha256_of(der).hex().to_string();
        Ok(PublicKey {
            path: path.to_path_buf(),
            id: format!("sha256:{}", &hex[..16]),
            kind,
        })
    }

    /// Whether `signature` (ECDSA P-256, DER) is this key's over the
    /// SHA-256 digest `prehash` of a message (a sigstore bundle's
    /// `messageSignature`, RFC 6979 §2.4 over the digest). An Ed25519 key
    /// signs messages, not digests: false.
    pub fn verifies_prehash(&self, prehash: &[u8], signature: &[u8]) -> bool {
        match &self.kind {
            Kind::P256(k) => {
                use p256::ecdsa::signature::hazmat::PrehashVerifier;
                p256::ecdsa::DerSignature::from_bytes(signature)
                    .is_ok_and(|s| k.verify_prehash(prehash, &s).is_ok())
            }
            Kind::Ed25519(_) => false,
        }
    }

    /// Whether `signature` is this key's signature of `payload`, as cosign
    /// makes them: ECDSA P-256 over SHA-256, ASN.1 DER (RFC 3279 §2.2.3);
    /// Ed25519 over the payload itself (RFC 8032, strict).
    pub fn verifies(&self, payload: &[u8], signature: &[u8]) -> bool {
        match &self.kind {
            Kind::P256(k) => {
                use p256::ecdsa::signature::Verifier;
                p256::ecdsa::DerSignature::from_bytes(signature)
                    .is_ok_and(|s| k.verify(payload, &s).is_ok())
            }
            Kind::Ed25519(k) => ed25519_dalek::Signature::from_slice(signature)
                .is_ok_and(|s| k.verify_strict(payload, &s).is_ok()),
        }
    }

    /// `PATH (ID)`, for messages.
    pub fn label(&self) -> String {
        format!("{} ({})", self.path.display(), self.id)
    }
}
