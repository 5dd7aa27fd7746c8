//! OpenPGP keys and cleartext signatures (RFC 9580; RFC 4880 §7) for bundle manifests.
//!
//! Contract: this module owns key generation, key/keyring loading, `clearsign` and
//! `verify_cleartext`. It never decides *what* is signed or which keys are trusted (callers
//! hand it a text and a keyring), never shells out to `gpg`, and touches the file system only
//! in the `load` constructors.
//!
//! Text model (RFC 9580 §7.1 and §7.2): the signed text is hashed with `<CR><LF>` line endings,
//! without trailing spaces/tabs on any line, and without the line ending that precedes
//! `-----BEGIN PGP SIGNATURE-----`. Both directions use one *canonical form* of that text:
//! `\n` line endings and no trailing spaces/tabs. [`SigningKey::clearsign`] converts its input
//! to the canonical form before signing (so the document shows exactly the signed bytes), and
//! [`Keyring::verify_cleartext`] returns the canonical form. A text that is already canonical
//! (for example JSON from `serde_json`) therefore round-trips byte for byte, including whether
//! it ends with `\n`.
//!
//! Files: `key.rs` (generation and [`SigningKey`]), `keyring.rs` ([`Keyring`] and what makes
//! a key usable), `cleartext.rs` (the cleartext framing and canonical text).

mod cleartext;
mod key;
mod keyring;

use std::path::{Path, PathBuf};

use pgp::types::Fingerprint;

pub use cleartext::unverified_text;
pub use key::{SigningKey, add_signature, clearsign_all, generate_key, generate_rsa_key};
pub use keyring::{Keyring, Verified};

/// Errors: one-line, user-facing causes.
#[derive(Debug, thiserror::Error)]
pub enum SignError {
    /// A key or keyring could not be parsed or is unusable as a whole
    /// (no valid self-signature, passphrase-protected, no signing-capable key, wrong block type).
    #[error("OpenPGP key: {0}")]
    Key(String),
    /// Reading a key or keyring file failed.
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// Producing a signature failed inside the OpenPGP library.
    #[error("signing failed: {0}")]
    Sign(String),
    /// The input is not an OpenPGP cleartext-signed message (RFC 9580 §7).
    #[error("not an OpenPGP cleartext-signed message: {0}")]
    NotCleartext(String),
    /// Something other than whitespace follows `-----END PGP SIGNATURE-----`.
    #[error("unexpected data after -----END PGP SIGNATURE-----")]
    TrailingData,
    /// The signature block holds no signature packet.
    #[error("the signed message carries no signature")]
    NoSignature,
    /// No signature was made by a key in the keyring; `issuer` names the signer's
    /// fingerprint (or 16-digit key id if the signature carries no fingerprint), uppercase hex.
    #[error("signed by key {issuer}, which is not in the trusted keyring")]
    Untrusted { issuer: String },
    /// The signing key is in the keyring but may not make signatures (revoked, expired when
    /// the signature was made, or not flagged for signing).
    #[error("key {key} cannot make signatures: {reason}")]
    KeyUnusable { key: String, reason: String },
    /// A key in the keyring made the signature but it does not verify (text altered,
    /// mismatching `Hash:` header, weak hash, expired signature, ...).
    #[error("bad signature: {0}")]
    BadSignature(String),
}

/// Splits `text` into armor blocks of kind `kind` ("PUBLIC KEY BLOCK") and parses each.
/// Only whitespace may appear outside the blocks.
fn parse_blocks<T>(
    text: &str,
    kind: &str,
    parse: impl Fn(&str) -> Result<Vec<T>, SignError>,
) -> Result<Vec<T>, SignError> {
    let begin = format!("-----BEGIN PGP {kind}-----");
    let end = format!("-----END PGP {kind}-----");
    let mut out = Vec::new();
    let mut block: Option<String> = None;
    for line in text.lines() {
        let content = line.trim_end();
        match &mut block {
            None if content.is_empty() => {}
            None if content == begin => block = Some(format!("{content}\n")),
            None if content.starts_with("-----BEGIN PGP ") => {
                return Err(SignError::Key(format!("expected {begin}, found {content}")));
            }
            None => {
                return Err(SignError::Key(format!(
                    "unexpected text outside an armor block: {:?}",
                    truncate(content)
                )));
            }
            Some(b) => {
                b.push_str(content);
                b.push('\n');
                if content == end {
                    out.extend(parse(b)?);
                    block = None;
                }
            }
        }
    }
    if block.is_some() {
        return Err(SignError::Key(format!("missing {end}")));
    }
    if out.is_empty() {
        return Err(SignError::Key(format!("no {begin} found")));
    }
    Ok(out)
}

fn truncate(s: &str) -> String {
    s.chars().take(40).collect()
}

fn key_err(e: pgp::errors::Error) -> SignError {
    SignError::Key(one_line(&e))
}

/// Library errors as one line (the variants promise one-line messages).
fn one_line(e: &dyn std::fmt::Display) -> String {
    e.to_string()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

/// A failure of the OpenPGP library to parse or verify a signature, in
/// words. Its internal consistency checks read `assertion failed: `(left ==
/// right)` left: `[121, 0]`, right: ...: what`; an operator sees what they
/// mean instead: the signed text does not match the signature (the
/// document or its signature was altered), or the signature packet is
/// malformed.
fn signature_failure(e: &pgp::errors::Error) -> String {
    let mut text = one_line(e);
    // Some errors print as `Kind { message: "...", backtrace: ... }`: the
    // message is what they say.
    if let Some((_, m)) = text.split_once("message: \"") {
        text = m.split('"').next().unwrap_or(m).replace("\\n", " ");
    }
    if text.contains("invalid signed hash value") {
        return "the signed text does not match the signature (the document or its signature was altered after signing)".into();
    }
    if text.starts_with("assertion failed") {
        // `... right: `X`: what` names what the packet got wrong, when it says.
        return match text.rsplit_once("`: ") {
            Some((_, what)) => format!("the signature packet is malformed ({what})"),
            None => "the signature packet is malformed".into(),
        };
    }
    text
}

fn hex_fpr(f: &Fingerprint) -> String {
    format!("{f:X}")
}

fn read(path: &Path) -> Result<String, SignError> {
    std::fs::read_to_string(path).map_err(|source| SignError::Read {
        path: path.to_path_buf(),
        source,
    })
}
