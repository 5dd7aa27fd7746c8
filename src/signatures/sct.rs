//! A Fulcio certificate's embedded signed certificate timestamp (SCT),
//! checked offline against the certificate transparency logs of a trusted
//! root: the log signed (RFC 6962 §3.2, `digitally-signed` over a
//! `precert_entry`) the certificate's TBS without its SCT list extension
//! (the precertificate as the log saw it, RFC 6962 §3.1), bound to the
//! issuer's key hash.
//!
//! Owns: [`check`] and the precertificate's TBS ([`precert_tbs`]). Never
//! decides which logs are trusted: the caller passes them.

use der::asn1::AnyRef;
use der::{Decode, Encode, Reader, SliceReader, Tag, TagNumber, Tagged};
use sha2::{Digest as _, Sha256};
use x509_parser::extensions::ParsedExtension;
use x509_parser::prelude::X509Certificate;

use super::PublicKey;

/// The SCT list extension's OID (1.3.6.1.4.1.11129.2.4.2), DER-encoded
/// with its tag and length, as an `Extension`'s first field starts.
const SCT_LIST_OID: &[u8] = &[
    0x06, 0x0a, 0x2b, 0x06, 0x01, 0x04, 0x01, 0xd6, 0x79, 0x02, 0x04, 0x02,
];
/// TLS `HashAlgorithm.sha256` and `SignatureAlgorithm.ecdsa` (RFC 5246
/// §7.4.1.4.1), the only pair a CT log of sigstore uses.
const SHA256: u8 = 4;
const ECDSA: u8 = 3;

/// A certificate transparency log of the trusted root: its id (sha256 of
/// its key) and key.
pub struct CtLog<'a> {
    /// `logId.keyId`, raw bytes.
    pub id: &'a [u8],
    /// The log's key.
    pub key: &'a PublicKey,
}

/// The DER `TBSCertificate` `tbs` without its SCT list extension (RFC 6962
/// §3.1: what a log signs for a precertificate; the poison extension is
/// not in a final certificate). Errors: `tbs` is not DER of that shape.
pub fn precert_tbs(tbs: &[u8]) -> der::Result<Vec<u8>> {
    let extensions = Tag::ContextSpecific {
        constructed: true,
        number: TagNumber::N3,
    };
    let outer = AnyRef::from_der(tbs)?;
    let mut fields = SliceReader::new(outer.value())?;
    let mut out = Vec::new();
    while !fields.is_finished() {
        let field = AnyRef::decode(&mut fields)?;
        if field.tag() != extensions {
            field.encode_to_vec(&mut out)?;
            continue;
        }
        let list = AnyRef::from_der(field.value())?;
        let mut exts = SliceReader::new(list.value())?;
        let mut kept = Vec::new();
        while !exts.is_finished() {
            let ext = AnyRef::decode(&mut exts)?;
            if !ext.value().starts_with(SCT_LIST_OID) {
                ext.encode_to_vec(&mut kept)?;
            }
        }
        let list = AnyRef::new(Tag::Sequence, &kept)?.to_der()?;
        AnyRef::new(extensions, &list)?.encode_to_vec(&mut out)?;
    }
    AnyRef::new(Tag::Sequence, &out)?.to_der()
}

/// Checks that `leaf` (issued by the certificate whose SubjectPublicKeyInfo
/// is `issuer_spki`) carries an SCT that one of `logs` signed over it
/// (RFC 6962 §3.2; SHA-256 with ECDSA). Errors: no SCT, an SCT of a log not
/// listed, or one the log's key does not verify.
pub fn check(leaf: &X509Certificate, issuer_spki: &[u8], logs: &[CtLog]) -> Result<(), String> {
    let scts = leaf
        .extensions()
        .iter()
        .find_map(|e| match e.parsed_extension() {
            ParsedExtension::SCT(list) => Some(list),
            _ => None,
        });
    let Some(scts) = scts.filter(|l| !l.is_empty()) else {
        return Err(
            "a certificate without a signed certificate timestamp (the trusted root lists CT logs)"
                .into(),
        );
    };
    let tbs = precert_tbs(leaf.tbs_certificate.as_ref())
        .map_err(|e| format!("a certificate whose TBS is not DER: {e}"))?;
    let tbs_len = u32::try_from(tbs.len())
        .ok()
        .filter(|n| *n < 1 << 24)
        .ok_or("a certificate too large for an SCT")?;
    let issuer_key_hash = Sha256::digest(issuer_spki);
    for sct in scts {
        let Some(log) = logs.iter().find(|l| l.id == &sct.id.key_id[..]) else {
            continue;
        };
        if sct.signature.hash_alg_id != SHA256 || sct.signature.sign_alg_id != ECDSA {
            continue;
        }
        let ext = sct.extensions.0;
        let mut signed = Vec::with_capacity(tbs.len() + 64);
        signed.extend_from_slice(&[sct.version.0, 0]);
        signed.extend_from_slice(&sct.timestamp.to_be_bytes());
        signed.extend_from_slice(&1u16.to_be_bytes());
        signed.extend_from_slice(&issuer_key_hash);
        signed.extend_from_slice(&tbs_len.to_be_bytes()[1..]);
        signed.extend_from_slice(&tbs);
        signed.extend_from_slice(&(ext.len() as u16).to_be_bytes());
        signed.extend_from_slice(ext);
        if log.key.verifies(&signed, sct.signature.data) {
            return Ok(());
        }
        return Err("a certificate whose SCT its log's key does not verify".into());
    }
    Err("a certificate whose SCTs are by no CT log of the trusted root".into())
}
