//! A cache of immutable metadata documents, bounded in bytes
//! (`airlock serve --cache-size`, default 64 MiB), evicting the least
//! recently used ones first (approximately: the CLOCK algorithm).
//!
//! Owns: the byte budget and eviction order. Keys are document digests, so
//! an entry never goes stale; values are parsed pages and room documents, each weighed by
//! the size of its stored JSON plus a per-entry allowance for the parsed
//! form ([`weight`]). Never reads the store itself.
//!
//! A hit (every request reads a few pages) allocates nothing and moves
//! nothing: it sets the entry's reference bit. Eviction sweeps the entries
//! in insertion order ("the clock hand"): an entry referenced since the
//! hand last passed gets a second chance (its bit is cleared and it goes
//! to the back), the first one not referenced is evicted. Keys are hashed
//! with [`crate::digest::DigestHasher`] (a digest's hex is already uniformly distributed;
//! SipHash over 70 bytes is not needed).

use std::collections::VecDeque;
use std::sync::Arc;

use super::page::Page;
use crate::digest::{Digest, DigestMap};

/// Default byte budget: 64 MiB.
pub const DEFAULT_CACHE_BYTES: u64 = 64 * 1024 * 1024;

/// A cached document.
#[derive(Clone)]
pub(super) enum Cached {
    /// A page of a paged tree.
    Page(Arc<Page>),
    /// A named document (`StateDoc.documents`), as stored.
    Document(bytes::Bytes),
}

/// Bytes charged for a document of `stored` bytes holding `entries` entries:
/// the JSON text, 64 bytes per entry for the parsed form's pointers and
/// allocation rounding, and 384 per document for its two copies of the key
/// (map and clock, 96 bytes each with the hex), the map slot and the shared
/// page's header.
pub(super) fn weight(stored: usize, entries: usize) -> u64 {
    (stored + 64 * entries + 384) as u64
}

/// Keys the clock may hold beyond twice the held documents before
/// [`ByteLru::remove`] rebuilds it.
const CLOCK_SLACK: usize = 1024;

/// An entry: the document, its weight and whether it was used since the
/// clock hand last passed it.
struct Entry {
    value: Cached,
    weight: u64,
    referenced: bool,
}

/// The cache: digest → (document, weight, reference bit), and the digests
/// in clock order.
pub(super) struct ByteLru {
    budget: u64,
    used: u64,
    map: DigestMap<Digest, Entry>,
    /// The clock: every key of `map` once, the hand at the front.
    clock: VecDeque<Digest>,
}

impl ByteLru {
    /// An empty cache holding at most `budget` bytes (0: caches nothing).
    pub(super) fn new(budget: u64) -> ByteLru {
        ByteLru {
            budget,
            used: 0,
            map: DigestMap::default(),
            clock: VecDeque::new(),
        }
    }

    /// The document under `digest`, marked as used (no allocation).
    pub(super) fn get(&mut self, digest: &Digest) -> Option<Cached> {
        let e = self.map.get_mut(digest)?;
        e.referenced = true;
        Some(e.value.clone())
    }

    /// Adds a document of `weight` bytes, evicting documents not used
    /// since the clock hand last passed them until the total fits. A
    /// document heavier than the whole budget is not kept.
    pub(super) fn insert(&mut self, digest: Digest, value: Cached, weight: u64) {
        if weight > self.budget || self.map.contains_key(&digest) {
            return;
        }
        while self.used + weight > self.budget {
            let Some(old) = self.clock.pop_front() else {
                break;
            };
            match self.map.get_mut(&old) {
                Some(e) if e.referenced => {
                    e.referenced = false;
                    self.clock.push_back(old);
                }
                Some(_) => {
                    if let Some(e) = self.map.remove(&old) {
                        self.used -= e.weight;
                    }
                }
                None => {}
            }
        }
        self.clock.push_back(digest.clone());
        self.map.insert(
            digest,
            Entry {
                value,
                weight,
                referenced: false,
            },
        );
        self.used += weight;
    }

    /// Drops the document under `digest`, if held. Its key leaves the
    /// clock lazily: when the clock holds more than twice as many keys as
    /// the map (plus [`CLOCK_SLACK`]), it is rebuilt without dropped and
    /// repeated keys, so its length stays within that bound.
    pub(super) fn remove(&mut self, digest: &Digest) {
        if let Some(e) = self.map.remove(digest) {
            self.used -= e.weight;
        }
        if self.clock.len() > 2 * self.map.len() + CLOCK_SLACK {
            // A key dropped and then inserted again is in the clock twice:
            // keep its first place only.
            let map = &self.map;
            let mut seen = std::collections::HashSet::with_capacity(map.len());
            self.clock
                .retain(|d| map.contains_key(d) && seen.insert(d.clone()));
        }
    }

    /// The digests of the documents held now.
    #[cfg(test)]
    pub(super) fn keys(&self) -> Vec<Digest> {
        self.map.keys().cloned().collect()
    }

    /// Bytes charged for the documents held now (never above the budget).
    pub(super) fn used(&self) -> u64 {
        self.used
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page() -> Cached {
        Cached::Page(Arc::new(Page::leaf(Vec::new())))
    }

    #[test]
    fn evicts_least_recently_used_within_the_budget() {
        let d = |i: u8| Digest::sha256_of(&[i]);
        let mut c = ByteLru::new(300);
        c.insert(d(1), page(), 100);
        c.insert(d(2), page(), 100);
        c.insert(d(3), page(), 100);
        assert!(c.get(&d(1)).is_some());
        c.insert(d(4), page(), 100);
        assert!(c.get(&d(2)).is_none(), "least recently used went first");
        assert!(c.get(&d(1)).is_some() && c.get(&d(3)).is_some());
        assert_eq!(c.used(), 300);
        c.insert(d(5), page(), 301);
        assert!(c.get(&d(5)).is_none(), "heavier than the budget: not kept");
        assert_eq!(c.used(), 300);
    }

    #[test]
    fn removed_documents_free_their_bytes_and_leave_the_clock() {
        let d = |i: u32| Digest::sha256_of(&i.to_be_bytes());
        let mut c = ByteLru::new(1 << 30);
        for i in 0..10 {
            c.insert(d(i), page(), 100);
        }
        c.remove(&d(3));
        c.remove(&d(3));
        assert_eq!(c.used(), 900);
        assert!(c.get(&d(3)).is_none());
        // Drop and insert the same keys many times: the clock stays bounded
        // and holds each held key once.
        for round in 0..20u64 {
            for i in 0..1000 {
                c.remove(&d(100 + i));
                c.insert(d(100 + i), page(), 10 + round % 2);
            }
        }
        assert_eq!(c.keys().len(), 1009);
        assert!(
            c.clock.len() <= 2 * 1009 + CLOCK_SLACK,
            "clock of {}",
            c.clock.len()
        );
        assert_eq!(c.used(), 900 + 1000 * 11);
        // Evicting everything still works from a compacted clock.
        c.insert(d(99_999), page(), 1 << 30);
        assert_eq!(c.keys(), vec![d(99_999)]);
        assert_eq!(c.used(), 1 << 30);
    }
}
