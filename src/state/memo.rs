//! Decoded lookups of paged trees, remembered by the tree's root digest.
//!
//! Owns: a bounded, direct-mapped table of answers to "what is under this
//! key in the tree with this root": a repository's root page by name, a
//! tag's manifest digest, a manifest's [`ManifestInfo`], a linked blob's
//! size, or "absent". A tree's root digest names its whole content (pages
//! are immutable and content-addressed), so an answer never goes stale and
//! needs no invalidation: a new generation has new roots and is looked up
//! anew. So a GET by tag parses no JSON and walks no pages while the
//! repository is unchanged.
//!
//! Bounds: [`SLOTS`] entries; a new answer replaces the one in its slot
//! (slot = hash of root and key). Each slot has its own lock, so readers
//! on different threads do not wait for each other.

use std::hash::Hasher as _;
use std::sync::Mutex;

use super::docs::ManifestInfo;
use crate::digest::{Digest, DigestHasher};

/// Answers held at most (4,096; about 150 bytes each plus their strings).
pub const SLOTS: usize = 4096;

/// What a key names (the key spaces of `super::repo`, plus the repository table).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Kind {
    /// Repository table: name → repository root page.
    Repository,
    /// `t/<tag>` → manifest digest.
    Tag,
    /// `m/<digest>` → [`ManifestInfo`].
    Manifest,
    /// `b/<digest>` → size.
    Blob,
}

/// A decoded answer.
#[derive(Clone, Debug)]
pub(super) enum Answer {
    /// The key is not in the tree.
    Absent,
    /// A digest (repository root page, tag target).
    Digest(Digest),
    /// A manifest record.
    Manifest(ManifestInfo),
    /// A blob size in bytes.
    Size(u64),
}

/// The key of an answer: tree root, kind, and the key's text as (prefix,
/// rest) so that a digest key needs no allocation (`("sha256", hex)`).
#[derive(Clone, Copy)]
pub(super) struct Key<'a> {
    pub root: &'a Digest,
    pub kind: Kind,
    pub prefix: &'static str,
    pub text: &'a str,
}

impl<'a> Key<'a> {
    /// The key of `digest` in `root`'s tree.
    pub fn digest(root: &'a Digest, kind: Kind, digest: &'a Digest) -> Key<'a> {
        Key {
            root,
            kind,
            prefix: digest.algorithm().name(),
            text: digest.hex(),
        }
    }

    /// The key `text` (a tag or repository name) in `root`'s tree.
    pub fn text(root: &'a Digest, kind: Kind, text: &'a str) -> Key<'a> {
        Key {
            root,
            kind,
            prefix: "",
            text,
        }
    }

    fn slot(&self) -> usize {
        let mut h = DigestHasher::default();
        h.write(self.root.hex().as_bytes());
        h.write_u8(self.kind as u8);
        h.write(self.prefix.as_bytes());
        h.write(self.text.as_bytes());
        (h.finish() % SLOTS as u64) as usize
    }
}

struct Slot {
    root: Digest,
    kind: Kind,
    prefix: &'static str,
    text: Box<str>,
    answer: Answer,
}

impl Slot {
    fn holds(&self, k: &Key<'_>) -> bool {
        self.kind == k.kind
            && *k.root == self.root
            && self.text.as_ref() == k.text
            && self.prefix == k.prefix
    }
}

/// The table (empty and inert when built with `enabled = false`).
pub(super) struct Memo {
    slots: Box<[Mutex<Option<Slot>>]>,
}

impl Memo {
    /// A table of [`SLOTS`] answers, or none at all when not `enabled`
    /// (`--cache-size 0`: every read goes to the store).
    pub(super) fn new(enabled: bool) -> Memo {
        let n = if enabled { SLOTS } else { 0 };
        Memo {
            slots: (0..n).map(|_| Mutex::new(None)).collect(),
        }
    }

    /// The answer remembered for `key`, if any.
    pub(super) fn get(&self, key: &Key<'_>) -> Option<Answer> {
        if self.slots.is_empty() {
            return None;
        }
        let slot = self.slots[key.slot()].lock().ok()?;
        slot.as_ref()
            .filter(|s| s.holds(key))
            .map(|s| s.answer.clone())
    }

    /// Remembers `answer` for `key` (replacing what its slot held).
    pub(super) fn put(&self, key: &Key<'_>, answer: Answer) {
        if self.slots.is_empty() {
            return;
        }
        if let Ok(mut slot) = self.slots[key.slot()].lock() {
            *slot = Some(Slot {
                root: key.root.clone(),
                kind: key.kind,
                prefix: key.prefix,
                text: key.text.into(),
                answer,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_kept_per_root_and_key() {
        let memo = Memo::new(true);
        let (r1, r2) = (Digest::sha256_of(b"1"), Digest::sha256_of(b"2"));
        let d = Digest::sha256_of(b"m");
        let k = Key::text(&r1, Kind::Tag, "v1");
        assert!(memo.get(&k).is_none());
        memo.put(&k, Answer::Digest(d.clone()));
        assert!(matches!(memo.get(&k), Some(Answer::Digest(x)) if x == d));
        assert!(
            memo.get(&Key::text(&r2, Kind::Tag, "v1")).is_none(),
            "another root"
        );
        assert!(
            memo.get(&Key::text(&r1, Kind::Tag, "v2")).is_none(),
            "another key"
        );
        assert!(
            memo.get(&Key::text(&r1, Kind::Repository, "v1")).is_none(),
            "another kind"
        );
        memo.put(&Key::digest(&r1, Kind::Blob, &d), Answer::Size(7));
        assert!(matches!(
            memo.get(&Key::digest(&r1, Kind::Blob, &d)),
            Some(Answer::Size(7))
        ));
        assert!(memo.get(&Key::digest(&r1, Kind::Manifest, &d)).is_none());
        let off = Memo::new(false);
        off.put(&k, Answer::Absent);
        assert!(off.get(&k).is_none(), "disabled: remembers nothing");
    }
}
