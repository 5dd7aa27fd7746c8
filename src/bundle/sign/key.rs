//! Key generation and [`SigningKey`]: clearsigned and detached signatures.

use std::path::Path;

use pgp::composed::{
    ArmorOptions, CleartextSignedMessage, Deserializable, KeyType, SecretKeyParamsBuilder,
    SignedSecretKey,
};
use pgp::crypto::hash::HashAlgorithm;
use pgp::packet::{SignatureConfig, SignatureType, Subpacket, SubpacketData};
use pgp::types::{KeyDetails, KeyVersion, Password, SigningKey as PgpSigningKey, Timestamp};

use super::cleartext::{Framing, SIGNATURE_END, canonical_text, check_framing};
use super::keyring::Cert;
use super::{SignError, hex_fpr, key_err, one_line, parse_blocks, read, signature_failure};

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
    /// <base64 signature packet>
    /// =<CRC24 checksum>
    /// -----END PGP SIGNATURE-----
    /// ```
    ///
    /// Errors: [`SignError::Sign`] if the OpenPGP library fails.
    pub fn clearsign(&self, text: &str) -> Result<String, SignError> {
        let text = canonical_text(text);
        let msg = self.sign_canonical(&text)?;
        armor(&msg)
    }

    /// A cleartext-signed message over `text`, already canonical, by this key alone.
    fn sign_canonical(&self, text: &str) -> Result<CleartextSignedMessage, SignError> {
        let mut rng = rand::thread_rng();
        match self.subkey()? {
            None => sign_text(&mut rng, text, &self.key.primary_key),
            Some(sub) => sign_text(&mut rng, text, &sub.key),
        }
    }
}

/// One cleartext-signed document (RFC 9580 §7) over `text` with a
/// signature by each of `keys`, in order, in one signature block: what
/// `gpg --clearsign -u A -u B` writes, and what `gpg --verify` checks
/// signature by signature. `text` is made canonical as in
/// [`SigningKey::clearsign`]. With one key it equals `clearsign`.
///
/// Errors: [`SignError::Sign`] for no keys or a library failure.
pub fn clearsign_all(keys: &[&SigningKey], text: &str) -> Result<String, SignError> {
    let text = canonical_text(text);
    let mut signatures = Vec::new();
    for key in keys {
        signatures.extend(key.sign_canonical(&text)?.signatures().iter().cloned());
    }
    if signatures.is_empty() {
        return Err(SignError::Sign("no signing key given".into()));
    }
    let msg = CleartextSignedMessage::new_many(&text, |_| Ok(signatures))
        .map_err(|e| SignError::Sign(one_line(&e)))?;
    armor(&msg)
}

/// `armored` (a cleartext-signed document) with one more signature, by
/// `key`, over the same text; the signatures already there are kept as
/// they are and not checked (a second release engineer co-signs what the
/// first one signed; the site checks them all).
///
/// Errors: [`SignError::NotCleartext`] / [`SignError::TrailingData`] for a
/// document that is not one, [`SignError::Sign`] if the library fails.
pub fn add_signature(armored: &str, key: &SigningKey) -> Result<String, SignError> {
    let Framing { document, .. } = check_framing(armored)?;
    let (msg, _) = CleartextSignedMessage::from_string(document)
        .map_err(|e| SignError::NotCleartext(signature_failure(&e)))?;
    let text = msg.signed_text().replace("\r\n", "\n");
    let mut signatures: Vec<_> = msg.signatures().to_vec();
    signatures.extend(key.sign_canonical(&text)?.signatures().iter().cloned());
    let msg = CleartextSignedMessage::new_many(&text, |_| Ok(signatures))
        .map_err(|e| SignError::Sign(one_line(&e)))?;
    armor(&msg)
}

/// The armored form of `msg` with `\n` line endings, ending after the
/// signature block's end line.
///
/// The armor always carries its CRC24 checksum line (`=XXXX`, RFC 4880
/// §6.1). RFC 9580 §6.1 says not to emit it unless a reader that needs it
/// matters, and two readers airlock serves do need it. The torcx client's
/// golang.org/x/crypto/openpgp armor decoder (2018) requires it. GnuPG 2.2
/// (Debian 12) misreads a checksum-less armor whose base64 ends without `=`
/// padding: it takes the END line for data and exits 2, which happens when
/// the signature packets' total length is a multiple of 3, e.g. for some
/// pairs of Ed25519 signatures.
fn armor(msg: &CleartextSignedMessage) -> Result<String, SignError> {
    let armored = msg
        .to_armored_string(ArmorOptions {
            headers: None,
            include_checksum: true,
        })
        .map_err(|e| SignError::Sign(one_line(&e)))?;
    let armored = armored.trim_end();
    if armored.ends_with(SIGNATURE_END) {
        Ok(format!("{armored}\n"))
    } else {
        Err(SignError::Sign("armor writer produced no end line".into()))
    }
}

/// Every signature's subpackets (RFC 9580 §5.2.3): hashed creation time and
/// issuer fingerprint, and for a v4 key the unhashed issuer key id that
/// older readers look up the key by.
fn set_subpackets<K: PgpSigningKey>(
    config: &mut SignatureConfig,
    key: &K,
) -> Result<(), SignError> {
    let sign_err = |e: pgp::errors::Error| SignError::Sign(one_line(&e));
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
    Ok(())
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
    set_subpackets(&mut config, key)?;
    CleartextSignedMessage::new(text, config, key, &Password::empty()).map_err(sign_err)
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
    /// An armored detached signature (RFC 9580 §10.4, `-----BEGIN PGP SIGNATURE-----`,
    /// with the CRC24 checksum line old readers need) over `data` as binary (type 0x00),
    /// SHA-256, with the same subpackets as [`SigningKey::clearsign`]; what `gpg --verify FILE.asc FILE` and
    /// `openpgp.CheckArmoredDetachedSignature` check.
    ///
    /// Errors: [`SignError::Sign`] if the OpenPGP library fails.
    pub fn detached_sign(&self, data: &[u8]) -> Result<String, SignError> {
        match self.subkey()? {
            None => detached(data, &self.key.primary_key),
            Some(sub) => detached(data, &sub.key),
        }
    }

    /// The subkey that makes the signatures, or `None` when the primary key does.
    ///
    /// Errors: [`SignError::Sign`] if the chosen subkey index is out of range.
    fn subkey(&self) -> Result<Option<&pgp::composed::SignedSecretSubKey>, SignError> {
        match self.signer {
            None => Ok(None),
            Some(i) => self
                .key
                .secret_subkeys
                .get(i)
                .map(Some)
                .ok_or_else(|| SignError::Sign("signing subkey vanished".into())),
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
    set_subpackets(&mut config, key)?;
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
