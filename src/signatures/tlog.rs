//! A transparency log entry's inclusion proof, checked offline: the
//! entry's leaf hash is chained up its audit path to the tree's root
//! (RFC 9162 §2.1.3.2, the algorithm for RFC 6962 trees such as Rekor's),
//! and that root is the one a checkpoint signed by the log names
//! (transparency-dev's checkpoint format inside a signed note).
//!
//! Owns: [`InclusionProof`] and [`InclusionProof::check`]. Never decides
//! which log is trusted: the caller passes the log's key and id from the
//! trusted root ([`super::keyless::TrustedRoot`]).

use sha2::{Digest as _, Sha256};

use super::PublicKey;

/// An inclusion proof as a sigstore bundle carries it
/// (`verificationMaterial.tlogEntries[].inclusionProof`).
#[derive(Debug, Clone)]
pub struct InclusionProof {
    /// The entry's index in the tree the proof is for (0-based).
    pub log_index: u64,
    /// Entries in that tree.
    pub tree_size: u64,
    /// The tree's root hash (32 bytes).
    pub root_hash: Vec<u8>,
    /// The audit path, from the leaf's sibling up (RFC 6962 §2.1.1).
    pub hashes: Vec<Vec<u8>>,
    /// The log's signed checkpoint: a signed note whose text is the
    /// origin, the tree size and the root hash (base64), one per line,
    /// followed by a blank line and `— NAME base64(key hint ‖ signature)`
    /// lines.
    pub checkpoint: String,
}

/// RFC 6962 §2.1: the hash of an interior node.
fn node(left: &[u8], right: &[u8]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update([1u8]);
    h.update(left);
    h.update(right);
    h.finalize().into()
}

/// RFC 6962 §2.1: the hash of a leaf whose data is `body`.
pub fn leaf_hash(body: &[u8]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update([0u8]);
    h.update(body);
    h.finalize().into()
}

/// The root that the audit path `hashes` leads to from leaf `index` (hash
/// `leaf`) of a tree of `size` entries (RFC 9162 §2.1.3.2); `None` when the
/// path cannot be that leaf's (index past the end, a path too short or too
/// long).
pub fn root_from_path(
    index: u64,
    size: u64,
    leaf: [u8; 32],
    hashes: &[Vec<u8>],
) -> Option<[u8; 32]> {
    if index >= size {
        return None;
    }
    let (mut f, mut s) = (index, size - 1);
    let mut r = leaf;
    for p in hashes {
        if s == 0 {
            return None;
        }
        if f & 1 == 1 || f == s {
            r = node(p, &r);
            if f & 1 == 0 {
                while f & 1 == 0 && f != 0 {
                    f >>= 1;
                    s >>= 1;
                }
            }
        } else {
            r = node(&r, p);
        }
        f >>= 1;
        s >>= 1;
    }
    (s == 0).then_some(r)
}

impl InclusionProof {
    /// Checks that the entry whose canonicalized body is `body` is in the
    /// log of `key` (id `log_id`, the sha256 of its key): the audit path
    /// leads from the body's leaf hash to `root_hash`, and the checkpoint
    /// is signed by the log (a signature line whose key hint is the log
    /// id's first 4 bytes, verified by `key` over the note's text) and
    /// names that root. Errors: which of these does not hold.
    pub fn check(&self, body: &[u8], key: &PublicKey, log_id: &[u8]) -> Result<(), String> {
        let leaf = leaf_hash(body);
        match root_from_path(self.log_index, self.tree_size, leaf, &self.hashes) {
            Some(r) if r[..] == self.root_hash[..] => {}
            _ => {
                return Err(format!(
                    "a log entry whose inclusion proof (index {} of {}) does not lead to its root hash",
                    self.log_index, self.tree_size
                ));
            }
        }
        let (text, root) = signed_note(&self.checkpoint, key, log_id)?;
        if root != self.root_hash {
            return Err(format!(
                "a log entry whose checkpoint ({}) names another root hash than its inclusion proof",
                text.lines().next().unwrap_or_default()
            ));
        }
        Ok(())
    }
}

/// The note text of the signed checkpoint `envelope` and the root hash it
/// names, when a signature line of the log (key hint `log_id[..4]`)
/// verifies with `key`. Errors: malformed, or not signed by the log.
fn signed_note<'a>(
    envelope: &'a str,
    key: &PublicKey,
    log_id: &[u8],
) -> Result<(&'a str, Vec<u8>), String> {
    let bad = |what: &str| format!("a log entry whose checkpoint {what}");
    let Some(split) = envelope.find("\n\n") else {
        return Err(bad("is not a signed note"));
    };
    let (text, sigs) = (&envelope[..=split], &envelope[split + 2..]);
    let hint = log_id.get(..4).ok_or_else(|| bad("has no log id"))?;
    let signed = sigs.lines().any(|line| {
        line.strip_prefix("\u{2014} ")
            .and_then(|rest| rest.rsplit_once(' '))
            .and_then(|(_, b64)| super::keyless::b64(b64).ok())
            .is_some_and(|raw| {
                raw.len() > 4 && &raw[..4] == hint && key.verifies(text.as_bytes(), &raw[4..])
            })
    });
    if !signed {
        return Err(bad("the log's key does not sign"));
    }
    let mut lines = text.lines();
    let (_origin, _size, root) = (lines.next(), lines.next(), lines.next());
    let root = root
        .and_then(|r| super::keyless::b64(r).ok())
        .ok_or_else(|| bad("without a root hash"))?;
    Ok((text, root))
}
