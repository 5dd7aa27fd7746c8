//! Content digests (OCI image-spec v1.1 "Digests") and streaming hashing.
//!
//! Owns: the `Digest` newtype, the algorithms airlock accepts (sha256, sha512),
//! and the incremental `Hasher`. Never touches storage or the network.

use std::fmt;
use std::str::FromStr;

use sha2::Digest as _;

/// A digest algorithm registered by the OCI image-spec ("Registered algorithms").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Algorithm {
    /// SHA-256, 64 lower-case hex characters.
    Sha256,
    /// SHA-512, 128 lower-case hex characters.
    Sha512,
}

impl Algorithm {
    /// The name as written before the `:` (`sha256`, `sha512`).
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::Sha256 => "sha256",
            Algorithm::Sha512 => "sha512",
        }
    }

    /// Length of the hex encoding in characters.
    pub fn hex_len(self) -> usize {
        match self {
            Algorithm::Sha256 => 64,
            Algorithm::Sha512 => 128,
        }
    }
}

/// Why a string is not an acceptable digest.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DigestError {
    /// Not of the image-spec grammar `algorithm ":" encoded`.
    #[error("invalid digest {0:?}: expected <algorithm>:<hex>")]
    Invalid(String),
    /// Grammatically valid but an algorithm airlock does not implement.
    #[error("unsupported digest algorithm {0:?} (supported: sha256, sha512)")]
    Unsupported(String),
    /// Known algorithm but the encoded part has the wrong length or characters.
    #[error("invalid {alg} digest {value:?}: expected {len} lower-case hex characters")]
    BadEncoding {
        /// Algorithm name.
        alg: &'static str,
        /// The offending input.
        value: String,
        /// Expected hex length.
        len: usize,
    },
}

/// A cheap hasher for keys made of digests and object keys that embed one
/// (multiply-rotate over 8-byte words, as rustc's FxHash): digest text is
/// uniformly distributed and such keys are trusted (digests the state or
/// the store names), so the keyed SipHash of `HashMap`'s default is not
/// needed on the hot paths (page cache, small blobs in memory).
#[derive(Default, Clone, Copy)]
pub struct DigestHasher(u64);

impl DigestHasher {
    const K: u64 = 0xf135_7aea_2e62_a9c5;
}

impl std::hash::Hasher for DigestHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let w = u64::from_le_bytes(c.try_into().unwrap_or([0; 8]));
            self.0 = (self.0.rotate_left(5) ^ w).wrapping_mul(Self::K);
        }
        for &b in chunks.remainder() {
            self.0 = (self.0.rotate_left(5) ^ u64::from(b)).wrapping_mul(Self::K);
        }
    }

    fn write_u8(&mut self, i: u8) {
        self.write_u64(u64::from(i));
    }

    fn write_u64(&mut self, i: u64) {
        self.0 = (self.0.rotate_left(5) ^ i).wrapping_mul(Self::K);
    }

    fn write_usize(&mut self, i: usize) {
        self.write_u64(i as u64);
    }

    fn finish(&self) -> u64 {
        self.0.rotate_left(26)
    }
}

/// A `HashMap` hashed with [`DigestHasher`].
pub type DigestMap<K, V> =
    std::collections::HashMap<K, V, std::hash::BuildHasherDefault<DigestHasher>>;

/// A validated content digest such as `sha256:9f86d0...`.
///
/// Implements the image-spec "Digests" section: `algorithm ":" encoded`,
/// with sha256 (64 hex) and sha512 (128 hex), lower case only. Any other
/// registered or unregistered algorithm is rejected with
/// [`DigestError::Unsupported`]. Deserializes through the validator, so an
/// invalid `Digest` cannot exist.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Digest {
    algorithm: Algorithm,
    /// Shared: digests are cloned on every request (routes, memo answers,
    /// responses), and a clone is then a count, not a copy.
    hex: std::sync::Arc<str>,
}

impl Digest {
    /// The algorithm.
    pub fn algorithm(&self) -> Algorithm {
        self.algorithm
    }

    /// The encoded (hex) part.
    pub fn hex(&self) -> &str {
        &self.hex
    }

    /// SHA-256 of `bytes`.
    pub fn sha256_of(bytes: &[u8]) -> Digest {
        let mut h = Hasher::new(Algorithm::Sha256);
        h.update(bytes);
        h.finish()
    }

    /// Digest of `bytes` with the same algorithm as `self`.
    pub fn same_alg_of(&self, bytes: &[u8]) -> Digest {
        let mut h = Hasher::new(self.algorithm);
        h.update(bytes);
        h.finish()
    }

    /// The text form `<alg>:<hex>` (as `to_string`, without the
    /// formatting machinery: it is sent in headers of every pull).
    pub fn text(&self) -> String {
        let name = self.algorithm.name();
        let mut s = String::with_capacity(name.len() + 1 + self.hex.len());
        s.push_str(name);
        s.push(':');
        s.push_str(&self.hex);
        s
    }

    /// The referrers tag schema form `<alg>-<hex>` (distribution-spec
    /// "Referrers Tag Schema").
    pub fn tag_form(&self) -> String {
        format!("{}-{}", self.algorithm.name(), self.hex)
    }
}

/// Whether every byte of `b` is `[0-9a-f]`. Without an early exit, so
/// that the compiler checks many bytes per instruction (a digest of every
/// pull request is checked).
fn is_lower_hex(b: &[u8]) -> bool {
    b.iter().fold(true, |ok, &x| {
        ok & ((x.wrapping_sub(b'0') < 10) | (x.wrapping_sub(b'a') < 6))
    })
}

impl FromStr for Digest {
    type Err = DigestError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        // Fast path for the common form (every request parses a few).
        if let Some(hex) = s.strip_prefix("sha256:")
            && hex.len() == Algorithm::Sha256.hex_len()
            && is_lower_hex(hex.as_bytes())
        {
            return Ok(Digest {
                algorithm: Algorithm::Sha256,
                hex: hex.into(),
            });
        }
        let (alg, enc) = s
            .split_once(':')
            .ok_or_else(|| DigestError::Invalid(s.to_string()))?;
        // image-spec grammar: algorithm-component := [a-z0-9]+, separators [+._-];
        // encoded := [a-zA-Z0-9=_-]+
        let alg_ok = !alg.is_empty()
            && alg.split(['+', '.', '_', '-']).all(|c| {
                !c.is_empty()
                    && c.bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
            });
        let enc_ok = !enc.is_empty()
            && enc
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'=' | b'_' | b'-'));
        if !alg_ok || !enc_ok {
            return Err(DigestError::Invalid(s.to_string()));
        }
        let algorithm = match alg {
            "sha256" => Algorithm::Sha256,
            "sha512" => Algorithm::Sha512,
            _ => return Err(DigestError::Unsupported(alg.to_string())),
        };
        let len = algorithm.hex_len();
        if enc.len() != len
            || !enc
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        {
            return Err(DigestError::BadEncoding {
                alg: algorithm.name(),
                value: s.to_string(),
                len,
            });
        }
        Ok(Digest {
            algorithm,
            hex: enc.into(),
        })
    }
}

impl TryFrom<String> for Digest {
    type Error = DigestError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

impl From<Digest> for String {
    fn from(d: Digest) -> String {
        d.to_string()
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.algorithm.name())?;
        f.write_str(":")?;
        f.write_str(&self.hex)
    }
}

impl fmt::Debug for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// Incremental hasher for one [`Algorithm`]; sha2 picks the CPU's SHA
/// extensions at run time when present.
#[derive(Clone)]
pub enum Hasher {
    /// SHA-256 state.
    Sha256(sha2::Sha256),
    /// SHA-512 state.
    Sha512(sha2::Sha512),
}

impl Hasher {
    /// A fresh hasher.
    pub fn new(algorithm: Algorithm) -> Hasher {
        match algorithm {
            Algorithm::Sha256 => Hasher::Sha256(sha2::Sha256::new()),
            Algorithm::Sha512 => Hasher::Sha512(sha2::Sha512::new()),
        }
    }

    /// Feeds `bytes`.
    pub fn update(&mut self, bytes: &[u8]) {
        match self {
            Hasher::Sha256(h) => h.update(bytes),
            Hasher::Sha512(h) => h.update(bytes),
        }
    }

    /// The digest of everything fed so far.
    pub fn finish(self) -> Digest {
        let (algorithm, hex) = match self {
            Hasher::Sha256(h) => (Algorithm::Sha256, hex::encode(h.finalize())),
            Hasher::Sha512(h) => (Algorithm::Sha512, hex::encode(h.finalize())),
        };
        Digest {
            algorithm,
            hex: hex.into(),
        }
    }
}

/// A reader that hashes and counts everything read through it.
pub struct HashingReader<R> {
    inner: R,
    hasher: Hasher,
    count: u64,
}

impl<R> HashingReader<R> {
    /// Wraps `inner`, hashing with `algorithm`.
    pub fn new(inner: R, algorithm: Algorithm) -> Self {
        HashingReader {
            inner,
            hasher: Hasher::new(algorithm),
            count: 0,
        }
    }

    /// Bytes read so far.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Checks what was read against `expected` digest and `size` (bytes).
    /// Errors: a one-line mismatch message naming both values.
    pub fn verify(self, expected: &Digest, size: u64) -> Result<(), Mismatch> {
        let actual = self.hasher.finish();
        if self.count != size {
            return Err(Mismatch::Size {
                digest: expected.clone(),
                expected: size,
                actual: self.count,
            });
        }
        if &actual != expected {
            return Err(Mismatch::Digest {
                expected: expected.clone(),
                actual,
            });
        }
        Ok(())
    }
}

impl<R: std::io::Read> std::io::Read for HashingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hasher.update(&buf[..n]);
        self.count += n as u64;
        Ok(n)
    }
}

/// Content did not match its descriptor.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Mismatch {
    /// Wrong byte count.
    #[error("size mismatch for {digest}: expected {expected} bytes, got {actual}")]
    Size {
        /// The descriptor's digest.
        digest: Digest,
        /// Descriptor size in bytes.
        expected: u64,
        /// Bytes actually seen.
        actual: u64,
    },
    /// Right size, wrong content.
    #[error("digest mismatch: expected {expected}, got {actual}")]
    Digest {
        /// The descriptor's digest.
        expected: Digest,
        /// What the content hashes to.
        actual: Digest,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hex_check_accepts_exactly_lower_case_hex() {
        for b in 0..=255u8 {
            let want = matches!(b, b'0'..=b'9' | b'a'..=b'f');
            assert_eq!(is_lower_hex(&[b]), want, "byte {b}");
            let mut hex = [b'a'; 64];
            hex[37] = b;
            assert_eq!(is_lower_hex(&hex), want, "byte {b} inside");
        }
        assert!(is_lower_hex(b""));
    }

    #[test]
    fn parses_and_rejects() {
        let d: Digest = "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
            .parse()
            .unwrap();
        assert_eq!(d, Digest::sha256_of(b""));
        assert!(matches!(
            "sha384:abc".parse::<Digest>(),
            Err(DigestError::Unsupported(_))
        ));
        assert!(matches!(
            "blake3:abc".parse::<Digest>(),
            Err(DigestError::Unsupported(_))
        ));
        assert!(matches!(
            "sha256".parse::<Digest>(),
            Err(DigestError::Invalid(_))
        ));
        assert!(matches!(
            "sha256:../../x".parse::<Digest>(),
            Err(DigestError::Invalid(_))
        ));
        assert!(matches!(
            "sha256:ABC".parse::<Digest>(),
            Err(DigestError::BadEncoding { .. })
        ));
        let upper = "sha256:E3B0C44298FC1C149AFBF4C8996FB92427AE41E4649B934CA495991B7852B855";
        assert!(upper.parse::<Digest>().is_err());
        assert!(serde_json::from_str::<Digest>("\"sha256:zz\"").is_err());
    }

    #[test]
    fn sha512_known_value() {
        let mut h = Hasher::new(Algorithm::Sha512);
        h.update(b"abc");
        assert_eq!(
            h.finish().to_string(),
            "sha512:ddaf35a193617abacc417349ae20413112e6fa4e89a97ea20a9eeee64b55d39a2192992a274fc1a836ba3c23a3feebbd454d4423643ce80e2a9ac94fa54ca49f"
        );
    }
}
