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

use std::path::{Path, PathBuf};

use pgp::composed::{
    ArmorOptions, CleartextSignedMessage, Deserializable, KeyType, SecretKeyParamsBuilder,
    SignedPublicKey, SignedSecretKey,
};
use pgp::crypto::hash::HashAlgorithm;
use pgp::packet::{Signature, SignatureConfig, SignatureType, Subpacket, SubpacketData};
use pgp::types::{
    Fingerprint, KeyDetails, KeyVersion, Password, SigningKey as PgpSigningKey, Tag, Timestamp,
};

const SIGNED_MESSAGE_BEGIN: &str = "-----BEGIN PGP SIGNED MESSAGE-----";
const SIGNATURE_BEGIN: &str = "-----BEGIN PGP SIGNATURE-----";
const SIGNATURE_END: &str = "-----END PGP SIGNATURE-----";

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

/// A freshly generated ed25519 signing key: one v4 EdDSA (legacy ed25519) primary key
/// flagged certify+sign, no subkeys, user id `uid` (`"NAME <EMAIL>"`), no expiry, no passphrase.
/// v4/ed25519-legacy is chosen because GnuPG 2.2 does not read RFC 9580 v6 keys.
///
/// Returns `(secret, public)`: the secret key armored as
/// "-----BEGIN PGP PRIVATE KEY BLOCK-----", and the public key armored as
/// "-----BEGIN PGP PUBLIC KEY BLOCK-----" (RFC 9580 §10.1 transferable public key, §6 armor).
///
/// Errors: [`SignError::Key`] for an empty or multi-line `uid`, or a generation failure.
pub fn generate_key(uid: &str) -> Result<(String, String), SignError> {
    generate(uid, KeyType::Ed25519Legacy)
}

/// A fresh certify-and-sign primary key of `key_type` for `uid`, armored
/// `(secret, public)`.
fn generate(uid: &str, key_type: KeyType) -> Result<(String, String), SignError> {
    if uid.trim().is_empty() || uid.contains(['\n', '\r']) {
        return Err(SignError::Key(format!(
            "user id must be one non-empty line, got {uid:?}"
        )));
    }
    let params = SecretKeyParamsBuilder::default()
        .key_type(key_type)
        .can_certify(true)
        .can_sign(true)
        .primary_user_id(uid.to_string())
        .preferred_hash_algorithms((&[HashAlgorithm::Sha256, HashAlgorithm::Sha512][..]).into())
        .build()
        .map_err(|e| SignError::Key(format!("key parameters: {}", one_line(&e))))?;
    let secret = params
        .generate(rand::thread_rng())
        .map_err(|e| SignError::Key(format!("key generation: {}", one_line(&e))))?;
    let secret_armored = secret
        .to_armored_string(ArmorOptions::default())
        .map_err(|e| SignError::Key(format!("armoring secret key: {}", one_line(&e))))?;
    let public_armored = secret
        .to_public_key()
        .to_armored_string(ArmorOptions::default())
        .map_err(|e| SignError::Key(format!("armoring public key: {}", one_line(&e))))?;
    Ok((secret_armored, public_armored))
}

/// A secret key loaded from an armored file: `gpg --export-secret-keys --armor` output
/// (the key must not be passphrase-protected) or the secret half of [`generate_key`].
///
/// Signs with the primary key when it is signing-capable, otherwise with the newest valid
/// signing subkey (RFC 9580 §5.2.3 "Key Flags"; §5.2.1 subkey binding 0x18 carrying a
/// primary key binding back-signature 0x19).
pub struct SigningKey {
    key: SignedSecretKey,
    /// `None`: the primary key signs; `Some(i)`: `key.secret_subkeys[i]` signs.
    signer: Option<usize>,
}

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SigningKey")
            .field("fingerprint", &self.fingerprint())
            .finish_non_exhaustive()
    }
}

impl SigningKey {
    /// Parses exactly one armored transferable secret key (RFC 9580 §10.2).
    ///
    /// Errors: [`SignError::Key`] if the text is not one secret key block, if a self-signature
    /// is missing or invalid, if the key is revoked or expired, if no signing-capable key has
    /// its secret part, or if that secret part is passphrase-protected.
    pub fn from_armored(text: &str) -> Result<SigningKey, SignError> {
        let keys = parse_blocks(text, "PRIVATE KEY BLOCK", |block| {
            let (iter, _) = SignedSecretKey::from_string_many(block).map_err(key_err)?;
            iter.map(|k| k.map_err(key_err)).collect()
        })?;
        let [key] = <[SignedSecretKey; 1]>::try_from(keys).map_err(|keys| {
            SignError::Key(format!("expected one secret key, found {}", keys.len()))
        })?;
        let fpr = hex_fpr(&key.fingerprint());
        let cert = Cert::new(key.to_public_key())?;
        let now = Timestamp::now().as_secs();
        let mut problems = Vec::new();
        let mut protected = false;
        // (index into secret_subkeys or None for the primary, creation time)
        let mut usable: Vec<(Option<usize>, u32)> = Vec::new();
        for comp in &cert.components {
            let name = hex_fpr(&comp.fingerprint);
            if let Err(reason) = comp.usable_at(now) {
                problems.push(format!("{name}: {reason}"));
                continue;
            }
            let (index, encrypted) = match comp.subkey {
                None => (None, key.primary_key.secret_params().is_encrypted()),
                Some(_) => {
                    let found = key
                        .secret_subkeys
                        .iter()
                        .position(|s| s.key.fingerprint() == comp.fingerprint);
                    let Some(i) = found else {
                        problems.push(format!("{name}: secret part missing"));
                        continue;
                    };
                    (
                        Some(i),
                        key.secret_subkeys[i].key.secret_params().is_encrypted(),
                    )
                }
            };
            if encrypted {
                protected = true;
                problems.push(format!("{name}: passphrase-protected"));
                continue;
            }
            usable.push((index, comp.created));
        }
        // The primary key if it can sign, otherwise the newest signing subkey.
        let signer = usable
            .iter()
            .find(|(index, _)| index.is_none())
            .or_else(|| usable.iter().max_by_key(|(_, created)| *created))
            .map(|(index, _)| *index);
        match signer {
            Some(signer) => Ok(SigningKey { key, signer }),
            None if protected => Err(SignError::Key(format!(
                "secret key {fpr} is passphrase-protected; export it without a passphrase"
            ))),
            None => Err(SignError::Key(format!(
                "{fpr} has no usable signing key ({})",
                problems.join("; ")
            ))),
        }
    }

    /// Reads and parses `path` as [`SigningKey::from_armored`].
    ///
    /// Errors: [`SignError::Read`] naming the path, then those of `from_armored`.
    pub fn load(path: &Path) -> Result<SigningKey, SignError> {
        Self::from_armored(&read(path)?)
    }

    /// Fingerprint of the primary key, uppercase hex (40 digits for v4 keys), also when a
    /// subkey makes the signatures; equals [`Verified::signer`] for this key's signatures.
    pub fn fingerprint(&self) -> String {
        hex_fpr(&self.key.fingerprint())
    }

    /// OpenPGP cleartext signature (RFC 9580 §7; RFC 4880 §7) over `text`: a v4 (v6 for v6
    /// keys) text-mode signature (type 0x01) with SHA-256, creation time and issuer
    /// fingerprint (hashed) plus issuer key id (unhashed, v4 only).
    ///
    /// `text` is first put in canonical form (line endings `\r\n`/`\r` become `\n`; trailing
    /// spaces and tabs on each line are removed, as RFC 9580 §7 excludes them from the hash);
    /// lines starting with `-` are dash-escaped (RFC 9580 §7.2).
    ///
    /// Returns the full armored document with `\n` line endings; nothing follows the
    /// signature block, and a text ending in `\n` shows as a blank line before it:
    ///
    /// ```text
    /// -----BEGIN PGP SIGNED MESSAGE-----
    /// Hash: SHA256
    ///
    /// <canonical text, dash-escaped>
    /// -----BEGIN PGP SIGNATURE-----
    ///
    /// <base64 signature packet, no CRC24 line>
    /// -----END PGP SIGNATURE-----
    /// ```
    ///
    /// Errors: [`SignError::Sign`] if the OpenPGP library fails.
    pub fn clearsign(&self, text: &str) -> Result<String, SignError> {
        // RFC 9580 §6.1: the CRC24 footer SHOULD NOT be emitted.
        self.clearsign_armored(text, false)
    }

    /// The cleartext signature of `text`, with or without the armor's CRC24 line.
    fn clearsign_armored(&self, text: &str, include_checksum: bool) -> Result<String, SignError> {
        let text = canonical_text(text);
        let mut rng = rand::thread_rng();
        let msg = match self.signer {
            None => sign_text(&mut rng, &text, &self.key.primary_key)?,
            Some(i) => {
                let sub = self
                    .key
                    .secret_subkeys
                    .get(i)
                    .ok_or_else(|| SignError::Sign("signing subkey vanished".into()))?;
                sign_text(&mut rng, &text, &sub.key)?
            }
        };
        let armored = msg
            .to_armored_string(ArmorOptions {
                headers: None,
                include_checksum,
            })
            .map_err(|e| SignError::Sign(one_line(&e)))?;
        let armored = armored.trim_end();
        if armored.ends_with(SIGNATURE_END) {
            Ok(format!("{armored}\n"))
        } else {
            Err(SignError::Sign("armor writer produced no end line".into()))
        }
    }
}

/// Builds the text-mode signature config and signs the canonical text with `key`.
fn sign_text<K: PgpSigningKey>(
    rng: &mut rand::rngs::ThreadRng,
    text: &str,
    key: &K,
) -> Result<CleartextSignedMessage, SignError> {
    let sign_err = |e: pgp::errors::Error| SignError::Sign(one_line(&e));
    let mut config = match key.version() {
        KeyVersion::V4 => {
            SignatureConfig::v4(SignatureType::Text, key.algorithm(), HashAlgorithm::Sha256)
        }
        KeyVersion::V6 => SignatureConfig::v6(
            rng,
            SignatureType::Text,
            key.algorithm(),
            HashAlgorithm::Sha256,
        )
        .map_err(sign_err)?,
        v => return Err(SignError::Sign(format!("unsupported key version {v:?}"))),
    };
    config.hashed_subpackets = vec![
        Subpacket::regular(SubpacketData::SignatureCreationTime(Timestamp::now()))
            .map_err(sign_err)?,
        Subpacket::regular(SubpacketData::IssuerFingerprint(key.fingerprint()))
            .map_err(sign_err)?,
    ];
    if key.version() == KeyVersion::V4 {
        config.unhashed_subpackets = vec![
            Subpacket::regular(SubpacketData::IssuerKeyId(key.legacy_key_id()))
                .map_err(sign_err)?,
        ];
    }
    CleartextSignedMessage::new(text, config, key, &Password::empty()).map_err(sign_err)
}

/// The signed text of a cleartext-signed document WITHOUT checking any signature
/// (for `bundle inspect`; never for import). Errors as [`Keyring::verify_cleartext`]'s framing errors.
pub fn unverified_text(armored: &str) -> Result<String, SignError> {
    let Framing { document, .. } = check_framing(armored)?;
    let (msg, _) = CleartextSignedMessage::from_string(document)
        .map_err(|e| SignError::NotCleartext(one_line(&e)))?;
    Ok(msg.signed_text().replace("\r\n", "\n"))
}

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
    /// signing subkey) made the signature.
    pub signer: String,
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
            .map_err(|e| SignError::NotCleartext(one_line(&e)))?;
        if msg.signatures().is_empty() {
            return Err(SignError::NoSignature);
        }
        let signed = msg.signed_text();
        let now = Timestamp::now().as_secs();
        let mut failure: Option<SignError> = None;
        let mut issuers: Vec<String> = Vec::new();
        for sig in msg.signatures() {
            match self.check_signature(sig, signed.as_bytes(), &hash_header, now) {
                Ok(signer) => {
                    return Ok(Verified {
                        text: signed.replace("\r\n", "\n"),
                        signer,
                    });
                }
                Err(SignError::Untrusted { issuer }) => issuers.push(issuer),
                Err(e) => {
                    failure.get_or_insert(e);
                }
            }
        }
        Err(failure.unwrap_or(SignError::Untrusted {
            issuer: issuers.join(", "),
        }))
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
                        one_line(&e)
                    )));
                }
            }
        }
        Err(failure.unwrap_or_else(|| SignError::BadSignature("no candidate key".into())))
    }
}

/// A public key with the key material that may make data signatures, judged once at load.
struct Cert {
    key: SignedPublicKey,
    components: Vec<Component>,
}

/// The primary key or one subkey, with what its self-signatures say about signing.
struct Component {
    /// `None`: primary key; `Some(i)`: `key.public_subkeys[i]`.
    subkey: Option<usize>,
    fingerprint: Fingerprint,
    key_id: pgp::types::KeyId,
    created: u32,
    /// Seconds since the epoch after which the key is expired (RFC 9580 §5.2.3
    /// "Key Expiration Time", counted from key creation).
    expires: Option<u64>,
    /// Why this key may never sign (revoked, not flagged for signing, bad binding).
    unusable: Option<String>,
}

impl Component {
    /// `Ok` if the key could make a signature at `time` (seconds since the epoch).
    fn usable_at(&self, time: u32) -> Result<(), String> {
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
    fn new(key: SignedPublicKey) -> Result<Cert, SignError> {
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

/// What [`check_framing`] found: the `Hash:` header values, and the document without
/// whatever whitespace follows the signature block.
struct Framing<'a> {
    hash_header: Vec<String>,
    document: &'a str,
}

/// Checks what rPGP does not: the document starts with the cleartext header line, and nothing
/// but whitespace follows the signature block. (rPGP 0.21 also rejects trailing whitespace,
/// so the document is handed to it cut after the end line.)
fn check_framing(armored: &str) -> Result<Framing<'_>, SignError> {
    if armored.trim().is_empty() {
        return Err(SignError::NotCleartext("empty input".into()));
    }
    let mut lines = armored.split_inclusive('\n');
    if lines.next().map(str::trim_end) != Some(SIGNED_MESSAGE_BEGIN) {
        return Err(SignError::NotCleartext(format!(
            "does not start with {SIGNED_MESSAGE_BEGIN}"
        )));
    }
    let mut hashes = Vec::new();
    let mut consumed = 0usize;
    let mut in_headers = true;
    let mut in_signature = false;
    for line in armored.split_inclusive('\n').skip(1) {
        consumed += line.len();
        let content = line.trim_end_matches(['\r', '\n']);
        if in_headers {
            if content.is_empty() {
                in_headers = false;
            } else if let Some(value) = content.strip_prefix("Hash:") {
                hashes.extend(value.split(',').map(|h| h.trim().to_string()));
            }
            continue;
        }
        if !in_signature {
            // Dash-escaping guarantees the first line starting with "-----" ends the text.
            if content.starts_with("-----") {
                if content != SIGNATURE_BEGIN {
                    return Err(SignError::NotCleartext(format!(
                        "expected {SIGNATURE_BEGIN} after the text, found {content:?}"
                    )));
                }
                in_signature = true;
            }
            continue;
        }
        if content == SIGNATURE_END {
            let first = armored.split_inclusive('\n').next().map_or(0, str::len);
            let rest = &armored[first + consumed..];
            if !rest.trim().is_empty() {
                return Err(SignError::TrailingData);
            }
            return Ok(Framing {
                hash_header: hashes,
                document: &armored[..first + consumed],
            });
        }
    }
    Err(SignError::NotCleartext(format!("no {SIGNATURE_END} line")))
}

/// The canonical form of a text to sign: `\n` line endings, no trailing spaces/tabs.
fn canonical_text(text: &str) -> String {
    let unified = text.replace("\r\n", "\n").replace('\r', "\n");
    let mut out = String::with_capacity(unified.len());
    for line in unified.split_inclusive('\n') {
        let (content, eol) = match line.strip_suffix('\n') {
            Some(c) => (c, "\n"),
            None => (line, ""),
        };
        out.push_str(content.trim_end_matches([' ', '\t']));
        out.push_str(eol);
    }
    out
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

fn hex_fpr(f: &Fingerprint) -> String {
    format!("{f:X}")
}

fn read(path: &Path) -> Result<String, SignError> {
    std::fs::read_to_string(path).map_err(|source| SignError::Read {
        path: path.to_path_buf(),
        source,
    })
}

/// A freshly generated RSA signing key of `bits` bits (2048..=4096; torcx remotes use
/// 3072): one v4 RSA primary key flagged certify+sign, no subkeys, user id `uid`, no
/// expiry, no passphrase, preferring SHA-256. RSA because the torcx client's OpenPGP
/// code (golang.org/x/crypto/openpgp, 2018) does not verify EdDSA signatures.
///
/// Returns `(secret, public)` armored as [`generate_key`] does.
///
/// Errors: [`SignError::Key`] for an empty or multi-line `uid`, a size outside
/// 2048..=4096, or a generation failure.
pub fn generate_rsa_key(uid: &str, bits: u32) -> Result<(String, String), SignError> {
    if !(2048..=4096).contains(&bits) {
        return Err(SignError::Key(format!(
            "RSA key size {bits} outside 2048..=4096"
        )));
    }
    generate(uid, KeyType::Rsa(bits))
}

impl SigningKey {
    /// [`SigningKey::clearsign`], but with the armor's CRC24 checksum line
    /// (`=XXXX`, RFC 4880 §6.1) that old OpenPGP readers need: the torcx
    /// client's golang.org/x/crypto/openpgp armor decoder (2018) requires it,
    /// and GnuPG 2.2 misreads a checksum-less armor whose base64 ends without
    /// `=` padding (it takes the END line for data and exits 2).
    ///
    /// Errors: [`SignError::Sign`] if the OpenPGP library fails.
    pub fn clearsign_with_checksum(&self, text: &str) -> Result<String, SignError> {
        self.clearsign_armored(text, true)
    }

    /// An armored detached signature (RFC 9580 §10.4, `-----BEGIN PGP SIGNATURE-----`,
    /// with the CRC24 checksum line old readers need) over `data` as binary (type 0x00),
    /// SHA-256, with the same subpackets as [`SigningKey::clearsign`]; what `gpg --verify FILE.asc FILE` and
    /// `openpgp.CheckArmoredDetachedSignature` check.
    ///
    /// Errors: [`SignError::Sign`] if the OpenPGP library fails.
    pub fn detached_sign(&self, data: &[u8]) -> Result<String, SignError> {
        match self.signer {
            None => detached(data, &self.key.primary_key),
            Some(i) => {
                let sub = self
                    .key
                    .secret_subkeys
                    .get(i)
                    .ok_or_else(|| SignError::Sign("signing subkey vanished".into()))?;
                detached(data, &sub.key)
            }
        }
    }

    /// The OpenPGP public-key algorithm of the key that makes the signatures
    /// (e.g. `RSA`, `EdDSALegacy`), as rPGP names it.
    pub fn algorithm_name(&self) -> String {
        match self.signer.and_then(|i| self.key.secret_subkeys.get(i)) {
            Some(sub) => format!("{:?}", sub.key.algorithm()),
            None => format!("{:?}", self.key.primary_key.algorithm()),
        }
    }
}

fn detached<K: PgpSigningKey>(data: &[u8], key: &K) -> Result<String, SignError> {
    let sign_err = |e: pgp::errors::Error| SignError::Sign(one_line(&e));
    if key.version() != KeyVersion::V4 {
        return Err(SignError::Sign(
            "detached signatures need a v4 key".to_string(),
        ));
    }
    let mut config = SignatureConfig::v4(
        SignatureType::Binary,
        key.algorithm(),
        HashAlgorithm::Sha256,
    );
    config.hashed_subpackets = vec![
        Subpacket::regular(SubpacketData::SignatureCreationTime(Timestamp::now()))
            .map_err(sign_err)?,
        Subpacket::regular(SubpacketData::IssuerFingerprint(key.fingerprint()))
            .map_err(sign_err)?,
    ];
    config.unhashed_subpackets = vec![
        Subpacket::regular(SubpacketData::IssuerKeyId(key.legacy_key_id())).map_err(sign_err)?,
    ];
    let sig = config
        .sign(key, &Password::empty(), data)
        .map_err(sign_err)?;
    pgp::composed::DetachedSignature::new(sig)
        .to_armored_string(ArmorOptions {
            headers: None,
            include_checksum: true,
        })
        .map_err(|e| SignError::Sign(one_line(&e)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_text_trims_and_unifies_line_endings() {
        assert_eq!(canonical_text("a  \r\nb\t\rc \n"), "a\nb\nc\n");
        assert_eq!(canonical_text("{\"x\": 1}"), "{\"x\": 1}");
        assert_eq!(canonical_text(""), "");
    }

    #[test]
    fn framing_rejects_trailing_text_and_reads_hash_header() {
        let doc = "-----BEGIN PGP SIGNED MESSAGE-----\nHash: SHA256\n\n- -x\n\
                   -----BEGIN PGP SIGNATURE-----\n\nAAAA\n-----END PGP SIGNATURE-----\n";
        let framing = check_framing(doc).unwrap();
        assert_eq!(framing.hash_header, vec!["SHA256".to_string()]);
        assert_eq!(framing.document, doc);
        let padded = format!("{doc}\n  \n");
        assert_eq!(check_framing(&padded).unwrap().document, doc);
        assert!(matches!(
            check_framing(&format!("{doc}x\n")),
            Err(SignError::TrailingData)
        ));
        assert!(matches!(
            check_framing(&format!("junk\n{doc}")),
            Err(SignError::NotCleartext(_))
        ));
    }
}
