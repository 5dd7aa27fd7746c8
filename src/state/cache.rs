//! A cache of immutable metadata documents, bounded in bytes
//! (`airlock serve --cache-size`, default 64 MiB), evicting the least
//! recently used ones first (approximately: the CLOCK algorithm).
//!
//! Owns: the byte budget and eviction order. Keys are document digests, so
//! an entry never goes stale; values are parsed pages (or, for stores
//! written by the first layout, whole legacy documents), each weighed by
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

use super::docs::{RepoTable, RepositoryDoc};
use super::page::Page;
use crate::digest::{Digest, DigestMap};

/// Default byte budget: 64 MiB.
pub const DEFAULT_CACHE_BYTES: u64 = 64 * 1024 * 1024;

/// A cached document.
#[derive(Clone)]
pub(super) enum Cached {
    /// A page of a paged tree.
    Page(Arc<Page>),
    /// A whole repository document of the first layout.
    LegacyRepository(Arc<RepositoryDoc>),
    /// A whole repository table of the first layout.
    LegacyTable(Arc<RepoTable>),
    /// A named document (`StateDoc.documents`), as stored.
    Document(bytes::Bytes),
}

/// Bytes charged for a document of `stored` bytes holding `entries` entries:
/// the JSON text plus 64 bytes per entry for the parsed form's pointers
/// and allocation headers.
pub(super) fn weight(stored: usize, entries: usize) -> u64 {
    (stored + 64 * entries + 128) as u64
}

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
}
