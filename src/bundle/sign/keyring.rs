//! [`Keyring`]: trusted public keys, and the rules that make a key usable for a signature.

use std::path::Path;

use pgp::composed::{CleartextSignedMessage, Deserializable, SignedPublicKey};
use pgp::crypto::hash::HashAlgorithm;
use pgp::packet::{Signature, SignatureType, SubpacketData};
use pgp::types::{Fingerprint, KeyDetails, Tag, Timestamp};

use super::cleartext::{Framing, check_framing};
use super::{SignError, hex_fpr, key_err, parse_blocks, read, signature_failure};

/// The trusted public keys: an armored file that may hold several keys in one block
/// (`gpg --export --armor a b`) or several concatenated `PUBLIC KEY BLOCK`s.
pub struct Keyring {
    certs: Vec<Cert>,
}

impl std::fmt::Debug for Keyring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Keyring")
            .field("fingerprints", &self.fingerprints())
            .finish()
    }
}

/// Result of a successful [`Keyring::verify_cleartext`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    /// The signed text in canonical form (see the module docs): dash-escaping removed,
    /// `\n` line endings, no trailing spaces/tabs, no line ending before the signature block.
    pub text: String,
    /// Fingerprint (uppercase hex) of the keyring's primary key whose key (primary or
    /// signing subkey) made the first signature that verifies.
    pub signer: String,
    /// Every keyring key (primary fingerprint, uppercase hex) with a
    /// signature that verifies, in signature order, each once: what a
    /// threshold counts ([`crate::bundle::trust`]). Starts with `signer`.
    pub signers: Vec<String>,
}

impl Keyring {
    /// Parses every transferable public key (RFC 9580 §10.1) in `text`; whitespace may
    /// surround the armor blocks, nothing else may.
    ///
    /// Each key must carry a valid self-signature; duplicates (same fingerprint) keep the first.
    /// Errors: [`SignError::Key`] for empty input, text outside armor blocks, a non-public
    /// block (e.g. a private key), an unparsable key, or a key without a valid self-signature.
    pub fn from_armored(text: &str) -> Result<Keyring, SignError> {
        let keys = parse_blocks(text, "PUBLIC KEY BLOCK", |block| {
            let (iter, _) = SignedPublicKey::from_string_many(block).map_err(key_err)?;
            iter.map(|k| k.map_err(key_err)).collect()
        })?;
        let mut certs: Vec<Cert> = Vec::new();
        for key in keys {
            if certs
                .iter()
                .any(|c| c.key.fingerprint() == key.fingerprint())
            {
                continue;
            }
            certs.push(Cert::new(key)?);
        }
        Ok(Keyring { certs })
    }

    /// Reads and parses `path` as [`Keyring::from_armored`].
    ///
    /// Errors: [`SignError::Read`] naming the path, then those of `from_armored`.
    pub fn load(path: &Path) -> Result<Keyring, SignError> {
        Self::from_armored(&read(path)?)
    }

    /// For each key, in file order: its primary fingerprint and the public-key
    /// algorithms (rPGP's names, e.g. `RSA`, `EdDSALegacy`) of those of its
    /// keys (primary or subkeys) that may sign now.
    pub fn signing_algorithms(&self) -> Vec<(String, Vec<String>)> {
        let now = Timestamp::now().as_secs();
        self.certs
            .iter()
            .map(|c| {
                let algos = c
                    .components
                    .iter()
                    .filter(|comp| comp.usable_at(now).is_ok())
                    .map(
                        |comp| match comp.subkey.and_then(|i| c.key.public_subkeys.get(i)) {
                            Some(sub) => format!("{:?}", sub.key.algorithm()),
                            None => format!("{:?}", c.key.primary_key.algorithm()),
                        },
                    )
                    .collect();
                (hex_fpr(&c.key.fingerprint()), algos)
            })
            .collect()
    }

    /// Each key on its own, in file order: its primary fingerprint
    /// (uppercase hex), its first user id (empty when none) and its
    /// armored transferable public key (what a trust document's `keys` holds).
    ///
    /// Errors: [`SignError::Key`] if the armor writer fails.
    pub fn each_key(&self) -> Result<Vec<(String, String, String)>, SignError> {
        self.certs
            .iter()
            .map(|c| {
                let armored = c
                    .key
                    .to_armored_string(pgp::composed::ArmorOptions::default())
                    .map_err(key_err)?;
                let uid = c
                    .key
                    .details
                    .users
                    .first()
                    .map(|u| String::from_utf8_lossy(u.id.id()).into_owned())
                    .unwrap_or_default();
                Ok((hex_fpr(&c.key.fingerprint()), uid, armored))
            })
            .collect()
    }

    /// Primary-key fingerprints, uppercase hex, in file order.
    pub fn fingerprints(&self) -> Vec<String> {
        self.certs
            .iter()
            .map(|c| hex_fpr(&c.key.fingerprint()))
            .collect()
    }

    /// Verifies a cleartext-signed document (RFC 9580 §7) against the keyring (primary keys
    /// and signing subkeys).
    ///
    /// Accepts: the document starts with `-----BEGIN PGP SIGNED MESSAGE-----`; only `Hash:`
    /// armor headers, and if present they must name each signature's hash (RFC 9580 §7.1);
    /// `\n` or `\r\n` line endings; only whitespace after `-----END PGP SIGNATURE-----`.
    /// Succeeds when at least one text-mode (0x01) signature verifies under a keyring key that
    /// was valid for signing when the signature was made (not revoked, not expired, flagged to
    /// sign; subkeys bound with a back-signature). MD5, SHA-1 and RIPEMD-160 are refused.
    /// A document may carry several signatures (RFC 9580 §7: one block, several signature
    /// packets); every one is checked, and those by keys outside the keyring or that do not
    /// verify are not counted (as gpg reports them one by one).
    ///
    /// Returns the signed text in canonical form (dash-escaping removed; `\n` line endings;
    /// trailing spaces/tabs removed; the line ending before `-----BEGIN PGP SIGNATURE-----`
    /// is not part of the text, RFC 9580 §7.1) and the signer's primary fingerprint.
    ///
    /// Errors: [`SignError::NotCleartext`] (garbage, empty, other block type),
    /// [`SignError::TrailingData`], [`SignError::NoSignature`], [`SignError::Untrusted`] (no
    /// signature by a keyring key; names the issuer), [`SignError::KeyUnusable`],
    /// [`SignError::BadSignature`] (text altered, hash header mismatch, ...).
    pub fn verify_cleartext(&self, armored: &str) -> Result<Verified, SignError> {
        let Framing {
            hash_header,
            document,
        } = check_framing(armored)?;
        let (msg, _) = CleartextSignedMessage::from_string(document)
            .map_err(|e| SignError::NotCleartext(signature_failure(&e)))?;
        if msg.signatures().is_empty() {
            return Err(SignError::NoSignature);
        }
        let signed = msg.signed_text();
        let now = Timestamp::now().as_secs();
        let mut failure: Option<SignError> = None;
        let mut issuers: Vec<String> = Vec::new();
        let mut signers: Vec<String> = Vec::new();
        for sig in msg.signatures() {
            match self.check_signature(sig, signed.as_bytes(), &hash_header, now) {
                Ok(signer) => {
                    if !signers.contains(&signer) {
                        signers.push(signer);
                    }
                }
                Err(SignError::Untrusted { issuer }) => issuers.push(issuer),
                Err(e) => {
                    failure.get_or_insert(e);
                }
            }
        }
        match signers.first() {
            Some(first) => Ok(Verified {
                text: signed.replace("\r\n", "\n"),
                signer: first.clone(),
                signers,
            }),
            None => Err(failure.unwrap_or(SignError::Untrusted {
                issuer: issuers.join(", "),
            })),
        }
    }

    /// Verifies one signature; `Ok` carries the primary fingerprint of the signer.
    fn check_signature(
        &self,
        sig: &Signature,
        data: &[u8],
        hash_header: &[String],
        now: u32,
    ) -> Result<String, SignError> {
        let fprs = sig.issuer_fingerprint();
        let ids = sig.issuer_key_id();
        let anonymous = fprs.is_empty() && ids.is_empty();
        let candidates: Vec<(&Cert, &Component)> = self
            .certs
            .iter()
            .flat_map(|c| c.components.iter().map(move |k| (c, k)))
            .filter(|(_, k)| {
                anonymous
                    || fprs.iter().any(|f| **f == k.fingerprint)
                    || ids.iter().any(|i| **i == k.key_id)
            })
            .collect();
        if candidates.is_empty() {
            let issuer = match (fprs.first(), ids.first()) {
                (Some(f), _) => hex_fpr(f),
                (None, Some(i)) => i.to_string().to_uppercase(),
                (None, None) => "(signature names no issuer)".into(),
            };
            return Err(SignError::Untrusted { issuer });
        }

        if sig.typ() != Some(SignatureType::Text) {
            return Err(SignError::BadSignature(format!(
                "signature type {:?} is not a text signature (0x01)",
                sig.typ()
            )));
        }
        let hash = sig
            .hash_alg()
            .ok_or_else(|| SignError::BadSignature("unknown signature version".into()))?;
        if matches!(
            hash,
            HashAlgorithm::Md5 | HashAlgorithm::Sha1 | HashAlgorithm::Ripemd160
        ) {
            return Err(SignError::BadSignature(format!(
                "weak hash algorithm {hash}"
            )));
        }
        if !hash_header.is_empty()
            && !hash_header
                .iter()
                .any(|h| h.eq_ignore_ascii_case(&hash.to_string()))
        {
            return Err(SignError::BadSignature(format!(
                "signature uses {hash} but the Hash header says {}",
                hash_header.join(",")
            )));
        }
        let created = sig
            .created()
            .ok_or_else(|| SignError::BadSignature("signature has no creation time".into()))?
            .as_secs();
        if let Some(d) = sig.signature_expiration_time()
            && d.as_secs() != 0
            && u64::from(now) >= u64::from(created) + u64::from(d.as_secs())
        {
            return Err(SignError::BadSignature("signature has expired".into()));
        }

        let mut failure = None;
        for (cert, comp) in candidates {
            if let Err(reason) = comp.usable_at(created) {
                failure.get_or_insert(SignError::KeyUnusable {
                    key: hex_fpr(&comp.fingerprint),
                    reason,
                });
                continue;
            }
            let result = match comp.subkey {
                None => sig.verify(&cert.key.primary_key, data),
                Some(i) => match cert.key.public_subkeys.get(i) {
                    Some(sub) => sig.verify(&sub.key, data),
                    None => continue,
                },
            };
            match result {
                Ok(()) => return Ok(hex_fpr(&cert.key.fingerprint())),
                Err(e) => {
                    failure.get_or_insert(SignError::BadSignature(format!(
                        "does not verify with key {}: {}",
                        hex_fpr(&comp.fingerprint),
                        signature_failure(&e)
                    )));
                }
            }
        }
        Err(failure.unwrap_or_else(|| SignError::BadSignature("no candidate key".into())))
    }
}

/// A public key with the key material that may make data signatures, judged once at load.
pub(super) struct Cert {
    key: SignedPublicKey,
    pub(super) components: Vec<Component>,
}

/// The primary key or one subkey, with what its self-signatures say about signing.
pub(super) struct Component {
    /// `None`: primary key; `Some(i)`: `key.public_subkeys[i]`.
    pub(super) subkey: Option<usize>,
    pub(super) fingerprint: Fingerprint,
    key_id: pgp::types::KeyId,
    pub(super) created: u32,
    /// Seconds since the epoch after which the key is expired (RFC 9580 §5.2.3
    /// "Key Expiration Time", counted from key creation).
    expires: Option<u64>,
    /// Why this key may never sign (revoked, not flagged for signing, bad binding).
    unusable: Option<String>,
}

impl Component {
    /// `Ok` if the key could make a signature at `time` (seconds since the epoch).
    pub(super) fn usable_at(&self, time: u32) -> Result<(), String> {
        if let Some(reason) = &self.unusable {
            return Err(reason.clone());
        }
        if u64::from(time) < u64::from(self.created) {
            return Err("signature predates the key".into());
        }
        match self.expires {
            Some(end) if u64::from(time) >= end => Err("key expired".into()),
            _ => Ok(()),
        }
    }
}

impl Cert {
    /// Checks the self-signatures (RFC 9580 §5.2.1 types, §5.2.3 "Key Flags", "Key Expiration
    /// Time", §10.1 structure) and records which keys may sign. Errors if the primary key has
    /// no valid self-signature at all.
    pub(super) fn new(key: SignedPublicKey) -> Result<Cert, SignError> {
        let primary = &key.primary_key;
        let fpr = hex_fpr(&key.fingerprint());

        // Newest valid self-signature over the primary key (user id certification or
        // direct-key signature) carries its flags and expiry.
        let mut self_sigs: Vec<&Signature> = Vec::new();
        for user in &key.details.users {
            self_sigs.extend(user.signatures.iter().filter(|s| {
                matches!(
                    s.typ(),
                    Some(
                        SignatureType::CertGeneric
                            | SignatureType::CertPersona
                            | SignatureType::CertCasual
                            | SignatureType::CertPositive
                    )
                ) && s
                    .verify_certification(primary, Tag::UserId, &user.id)
                    .is_ok()
            }));
        }
        self_sigs.extend(
            key.details
                .direct_signatures
                .iter()
                .filter(|s| s.verify_key(primary).is_ok()),
        );
        let newest = self_sigs
            .iter()
            .max_by_key(|s| s.created().map(Timestamp::as_secs))
            .copied()
            .ok_or_else(|| SignError::Key(format!("{fpr} has no valid self-signature")))?;
        let primary_revoked = key
            .details
            .revocation_signatures
            .iter()
            .any(|s| s.verify_key(primary).is_ok());
        let primary_created = primary.created_at().as_secs();
        let primary_expires = expiry(primary_created, newest);

        let mut components = vec![Component {
            subkey: None,
            fingerprint: primary.fingerprint(),
            key_id: primary.legacy_key_id(),
            created: primary_created,
            expires: primary_expires,
            unusable: if primary_revoked {
                Some("revoked".into())
            } else if has_key_flags(newest) && !newest.key_flags().sign() {
                Some("not flagged for signing".into())
            } else {
                None
            },
        }];

        for (i, sub) in key.public_subkeys.iter().enumerate() {
            let binding = sub
                .signatures
                .iter()
                .filter(|s| {
                    s.typ() == Some(SignatureType::SubkeyBinding)
                        && s.verify_subkey_binding(primary, &sub.key).is_ok()
                })
                .max_by_key(|s| s.created().map(Timestamp::as_secs));
            let revoked = sub.signatures.iter().any(|s| {
                s.typ() == Some(SignatureType::SubkeyRevocation)
                    && s.verify_subkey_binding(primary, &sub.key).is_ok()
            });
            let created = sub.key.created_at().as_secs();
            let own_expiry = binding.and_then(|b| expiry(created, b));
            let expires = match (own_expiry, primary_expires) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            let unusable = match binding {
                _ if primary_revoked => Some(format!("primary key {fpr} is revoked")),
                _ if revoked => Some("revoked".into()),
                None => Some("no valid subkey binding signature".into()),
                Some(b) if !b.key_flags().sign() => Some("not flagged for signing".into()),
                Some(b)
                    if !b.embedded_signature().is_some_and(|back| {
                        back.verify_primary_key_binding(&sub.key, primary).is_ok()
                    }) =>
                {
                    Some("signing subkey lacks a valid back-signature".into())
                }
                Some(_) => None,
            };
            components.push(Component {
                subkey: Some(i),
                fingerprint: sub.key.fingerprint(),
                key_id: sub.key.legacy_key_id(),
                created,
                expires,
                unusable,
            });
        }
        Ok(Cert { key, components })
    }
}

/// Absolute expiry from a self-signature's key expiration time (relative to key creation).
fn expiry(key_created: u32, sig: &Signature) -> Option<u64> {
    sig.key_expiration_time()
        .map(|d| d.as_secs())
        .filter(|&secs| secs != 0)
        .map(|secs| u64::from(key_created) + u64::from(secs))
}

/// Does the signature carry a key flags subpacket at all? (Absent flags: RFC 4880 keys
/// without flags may sign.)
fn has_key_flags(sig: &Signature) -> bool {
    sig.config().is_some_and(|c| {
        c.hashed_subpackets()
            .any(|p| matches!(p.data, SubpacketData::KeyFlags(_)))
    })
}
