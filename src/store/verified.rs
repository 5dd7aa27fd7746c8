//! Verify once per file identity (issue 26 §1): a blob whose bytes were
//! hashed in full and matched its digest is recorded with the identity of
//! the object it was read from; while that identity is unchanged, reads
//! skip hashing.
//!
//! The identity is what a write cannot leave unchanged: on the filesystem
//! (device, inode, size, mtime, ctime: every `write(2)` moves the ctime, so
//! a byte flipped with `dd` sends the blob back through verification), on
//! S3 (ETag, size). Bit rot under an unchanged identity is what the scrub
//! finds ([`crate::ops::scrub`]): it forgets a blob ([`VerifiedBlobs::forget`])
//! before rehashing it.
//!
//! The record lives in memory, bounded to [`MAX_ENTRIES`] blobs (about
//! 80 bytes each: 8 MiB at most); the oldest record is dropped first, and a
//! dropped or never-made record only means the next full read hashes again.

use std::collections::{HashMap, VecDeque};
use std::hash::{Hash, Hasher as _};
use std::sync::Mutex;

use crate::digest::Digest;

/// Blobs remembered as verified at most.
pub const MAX_ENTRIES: usize = 100_000;

/// The identity of a stored object, reduced to 64 bits (a hash of the
/// backend's identity fields; see [`Identity::of`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Identity(u64);

impl Identity {
    /// The identity of the fields `parts` (any hashable tuple: on the
    /// filesystem `(dev, ino, size, mtime, mtime_ns, ctime, ctime_ns)`, on
    /// S3 `(etag, size)`).
    pub fn of(parts: impl Hash) -> Identity {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        parts.hash(&mut h);
        Identity(h.finish())
    }
}

/// Blobs verified in full, by digest, with the identity they were read at.
#[derive(Default)]
pub struct VerifiedBlobs {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    map: HashMap<Digest, Identity>,
    /// Digests in the order recorded (the eviction order; may hold digests
    /// forgotten or recorded again since, skipped when evicting).
    order: VecDeque<Digest>,
}

impl VerifiedBlobs {
    /// Whether `digest` was verified at identity `id` (and not forgotten since).
    pub fn is_verified(&self, digest: &Digest, id: Identity) -> bool {
        self.inner
            .lock()
            .is_ok_and(|i| i.map.get(digest) == Some(&id))
    }

    /// Records that `digest`'s bytes, read at identity `id`, matched it.
    pub fn record(&self, digest: Digest, id: Identity) {
        let Ok(mut inner) = self.inner.lock() else {
            return;
        };
        if inner.map.insert(digest.clone(), id).is_none() {
            inner.order.push_back(digest);
        }
        while inner.map.len() > MAX_ENTRIES {
            match inner.order.pop_front() {
                Some(old) => {
                    inner.map.remove(&old);
                }
                None => break,
            }
        }
        // Forgotten digests leave stale queue entries: compact now and then.
        if inner.order.len() > 2 * MAX_ENTRIES.max(inner.map.len()) {
            let Inner { map, order } = &mut *inner;
            order.retain(|d| map.contains_key(d));
        }
    }

    /// Forgets `digest` (it was found corrupt, or a scrub rehashes it).
    pub fn forget(&self, digest: &Digest) {
        if let Ok(mut inner) = self.inner.lock() {
            inner.map.remove(digest);
        }
    }

    /// Blobs remembered now.
    pub fn len(&self) -> usize {
        self.inner.lock().map_or(0, |i| i.map.len())
    }

    /// Whether nothing is remembered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_changed_identity_is_not_verified() {
        let v = VerifiedBlobs::default();
        let d = Digest::sha256_of(b"x");
        let id = Identity::of((1u64, 2u64, 3u64));
        assert!(!v.is_verified(&d, id));
        v.record(d.clone(), id);
        assert!(v.is_verified(&d, id));
        assert!(!v.is_verified(&d, Identity::of((1u64, 2u64, 4u64))));
        v.forget(&d);
        assert!(!v.is_verified(&d, id));
    }

    #[test]
    fn bounded() {
        let v = VerifiedBlobs::default();
        for i in 0..(MAX_ENTRIES + 10) as u64 {
            v.record(Digest::sha256_of(&i.to_le_bytes()), Identity::of(i));
        }
        assert_eq!(v.len(), MAX_ENTRIES);
        assert!(!v.is_verified(&Digest::sha256_of(&0u64.to_le_bytes()), Identity::of(0u64)));
        let last = (MAX_ENTRIES + 9) as u64;
        assert!(v.is_verified(&Digest::sha256_of(&last.to_le_bytes()), Identity::of(last)));
    }
}
