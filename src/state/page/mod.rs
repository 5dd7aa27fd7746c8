//! Paged trees: a sorted map of string keys to small JSON values, stored as
//! a B+tree of bounded, immutable pages, each a content-addressed blob (as
//! git stores trees).
//!
//! Owns: the page document, looking a key up, listing a key range in order,
//! and applying a batch of changes ([`Delta`]) by rewriting only the pages
//! on the paths to the changed keys; every other page keeps its digest and
//! is shared with the previous version of the tree. Never knows what the
//! keys mean: `repo` encodes repositories into keys.
//!
//! Layout. A page is the canonical JSON
//! `{"kind":"airlock.page.v1","level":L,"entries":[[key,value],...]}` with
//! entries sorted by key (byte-wise). Level 0 pages (leaves) hold the
//! values; a page at level L > 0 holds one entry per child page at level
//! L-1: the child's first key and its digest (a JSON string). A child
//! covers the keys from its first key up to the next child's first key
//! (the first child also covers everything below). Pages hold about
//! [`MAX_PAGE_BYTES`] (split in even halves, thirds, ... when larger; a
//! single entry larger than that gets a page of its own); a rewritten page
//! under a quarter of that is merged with a neighbour. One change to a tree
//! of N entries therefore writes O(log N) pages of at most ~4 KiB each.
//! An empty tree is the empty leaf page.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use futures_util::future::BoxFuture;
use serde_json::value::RawValue;

use super::cache::{ByteLru, Cached, weight};
use super::{Result, StateError};
use crate::digest::Digest;
use crate::store::{self, Blobstore};

/// The `kind` of every page.
pub const PAGE_KIND: &str = "airlock.page.v1";
/// A page is split when its JSON would exceed this many bytes.
pub const MAX_PAGE_BYTES: usize = 4096;
/// A rewritten page smaller than this is merged with a neighbour.
const MIN_PAGE_BYTES: usize = MAX_PAGE_BYTES / 4;
/// Bytes of a page's JSON besides its entries (`{"kind":...,"entries":[]}`).
const PAGE_OVERHEAD: usize = 48;

/// A value stored under a key: compact JSON text.
pub type Value = Box<RawValue>;

/// Changes to a tree: key → new value (`None`: remove the key).
pub type Delta = BTreeMap<String, Option<Value>>;

/// One page of a paged tree.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct Page {
    /// Always [`PAGE_KIND`].
    pub kind: String,
    /// 0 for a leaf; one more than its children's level otherwise.
    pub level: u8,
    /// (key, value) sorted by key; for level > 0 the value is the child's digest.
    pub entries: Vec<(String, Value)>,
}

impl Page {
    /// A leaf page holding `entries` (sorted by key).
    pub fn leaf(entries: Vec<(String, Value)>) -> Page {
        Page {
            kind: PAGE_KIND.into(),
            level: 0,
            entries,
        }
    }

    /// The index of the child of this (level > 0) page whose range holds `key`.
    fn child_for(&self, key: &str) -> usize {
        self.entries
            .partition_point(|(k, _)| k.as_str() <= key)
            .saturating_sub(1)
    }

    /// The digest of child `i` (level > 0).
    pub fn child(&self, i: usize) -> Result<Digest> {
        digest_value(&self.entries[i].1)
    }
}

/// A JSON string value.
pub fn string_value(s: &str) -> Value {
    let text = serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into());
    RawValue::from_string(text).unwrap_or_else(|_| null())
}

/// The JSON `null` value.
pub fn null() -> Value {
    RawValue::from_string("null".into()).expect("null is JSON")
}

/// Any serializable value, as compact JSON.
pub fn json_value<T: serde::Serialize>(v: &T) -> Result<Value> {
    serde_json::value::to_raw_value(v).map_err(|e| StateError::Corrupt {
        digest: "(new page entry)".into(),
        cause: e.to_string(),
    })
}

/// Parses a value as `T`.
pub fn parse_value<T: serde::de::DeserializeOwned>(v: &RawValue) -> Result<T> {
    serde_json::from_str(v.get()).map_err(|e| StateError::Corrupt {
        digest: "(page entry)".into(),
        cause: format!("{e}: {}", v.get()),
    })
}

/// Parses a value holding a digest.
pub fn digest_value(v: &RawValue) -> Result<Digest> {
    // Fast path (every lookup reads one): a JSON string whose text between
    // the quotes is a digest (the digest grammar has no `\\` or `"`, so
    // that text holds no escape and is the string's value).
    if let Some(text) = v.get().strip_prefix('"').and_then(|t| t.strip_suffix('"'))
        && let Ok(d) = text.parse()
    {
        return Ok(d);
    }
    parse_value(v)
}

/// A page as its parent names it: first key, digest, and the JSON size
/// when it was written by this change (`None`: an unchanged page).
struct Node {
    key: String,
    digest: Digest,
    fresh: Option<usize>,
}

/// Pages written by a commit and not yet stored: digest → (page, JSON).
type Staged = std::collections::HashMap<Digest, (Arc<Page>, Vec<u8>)>;

/// Reads and writes the pages of paged trees, through the byte-bounded
/// cache. New pages are staged in memory ([`Pages::apply`]) and stored
/// together by [`Pages::flush`]; reads see staged pages.
#[derive(Clone)]
pub(super) struct Pages {
    pub(super) store: Arc<dyn Blobstore>,
    pub(super) cache: Arc<Mutex<ByteLru>>,
    pub(super) staged: Arc<Mutex<Staged>>,
    /// Pages the staged changes replace ([`Pages::forget_superseded`]).
    pub(super) superseded: Arc<Mutex<Vec<Digest>>>,
    /// Decoded lookups by tree root ([`super::memo`]).
    pub(super) memo: Arc<super::memo::Memo>,
}

impl Pages {
    /// The page `digest`, from the cache or the store.
    ///
    /// Errors: the store fails, or the blob is not a page ([`StateError::Corrupt`]).
    pub(super) async fn load(&self, digest: &Digest) -> Result<Arc<Page>> {
        self.read(digest, true).await
    }

    /// The page `digest`; kept in the cache only when `keep` (a walk of
    /// every page must not evict the pages readers use).
    pub(super) async fn read(&self, digest: &Digest, keep: bool) -> Result<Arc<Page>> {
        if let Some(Cached::Page(p)) = self.cache.lock().ok().and_then(|mut c| c.get(digest)) {
            return Ok(p);
        }
        if let Some((p, _)) = self.staged.lock().ok().and_then(|s| s.get(digest).cloned()) {
            return Ok(p);
        }
        let read = self.read_stored(digest, keep).await;
        if let Err(e) = &read
            && keep
        {
            // A reader's page (a walk's damage is fsck's to report).
            super::note_damage(&*self.store, digest, e).await;
        }
        read
    }

    /// [`Pages::read`] of a page neither cached nor staged.
    async fn read_stored(&self, digest: &Digest, keep: bool) -> Result<Arc<Page>> {
        let bytes = store::get_verified(&*self.store, digest).await?;
        let corrupt = |cause: String| StateError::Corrupt {
            digest: digest.to_string(),
            cause,
        };
        let mut page: Page = serde_json::from_slice(&bytes).map_err(|e| corrupt(e.to_string()))?;
        // The parser grows the vector by doubling: up to half of it would
        // be spare capacity that the cache holds but does not charge for.
        page.entries.shrink_to_fit();
        if page.kind != PAGE_KIND {
            return Err(corrupt(format!("kind {:?} is not a page", page.kind)));
        }
        let page = Arc::new(page);
        if keep {
            self.remember(digest, &page, bytes.len());
        }
        Ok(page)
    }

    fn remember(&self, digest: &Digest, page: &Arc<Page>, stored: usize) {
        if let Ok(mut c) = self.cache.lock() {
            let w = weight(stored, page.entries.len());
            c.insert(digest.clone(), Cached::Page(page.clone()), w);
        }
    }

    /// Stages `page` for [`Pages::flush`] and names it for its parent.
    async fn write(&self, mut page: Page) -> Result<Node> {
        page.entries.shrink_to_fit();
        let bytes = serde_json::to_vec(&page).map_err(|e| StateError::Corrupt {
            digest: "(new page)".into(),
            cause: e.to_string(),
        })?;
        let digest = Digest::sha256_of(&bytes);
        let key = page
            .entries
            .first()
            .map(|e| e.0.clone())
            .unwrap_or_default();
        let len = bytes.len();
        if let Ok(mut s) = self.staged.lock() {
            s.insert(digest.clone(), (Arc::new(page), bytes));
        }
        Ok(Node {
            key,
            digest,
            fresh: Some(len),
        })
    }

    /// Stores the staged pages reachable from `roots` (new tree roots),
    /// with the other blobs `also` (the commit's documents), as one batch
    /// ([`Blobstore::put_blobs`]: on the filesystem one pass whose fsyncs
    /// share journal commits), keeps the pages in the cache, and drops the
    /// other staged pages (superseded within the commit: never stored, so
    /// no garbage). Returns the blobs found present and so not written, for
    /// the commit's check after its root swap (`commit::rewrite_vanished`).
    pub(super) async fn flush(
        &self,
        roots: &[Digest],
        also: Vec<(Digest, bytes::Bytes)>,
    ) -> Result<Vec<(Digest, bytes::Bytes)>> {
        let mut staged: Staged = match self.staged.lock() {
            Ok(mut s) => std::mem::take(&mut *s),
            Err(_) => Staged::new(),
        };
        let mut reached = Vec::new();
        let mut stack: Vec<Digest> = roots.to_vec();
        while let Some(d) = stack.pop() {
            let Some((page, bytes)) = staged.remove(&d) else {
                continue; // stored already
            };
            if page.level > 0 {
                for i in 0..page.entries.len() {
                    stack.push(page.child(i)?);
                }
            }
            reached.push((d, page, bytes));
        }
        let mut blobs = also;
        let mut keep = Vec::with_capacity(reached.len());
        for (d, page, bytes) in reached {
            keep.push((d.clone(), page, bytes.len()));
            blobs.push((d, bytes::Bytes::from(bytes)));
        }
        let (n, bytes) = (
            blobs.len(),
            blobs.iter().map(|(_, b)| b.len()).sum::<usize>(),
        );
        let t = std::time::Instant::now();
        let all = blobs.clone();
        // With metadata copies (`store::copies`), the second copies are
        // written beside the blobs; both are durable before the root swap.
        let copies = async {
            if self.store.metadata_copies() >= 2 {
                crate::store::copies::pack::write(&*self.store, &all).await
            } else {
                Ok(())
            }
        };
        let (present, ()) = tokio::try_join!(self.store.put_blobs(blobs), copies)?;
        let present: std::collections::HashSet<Digest> = present.into_iter().collect();
        tracing::debug!(
            blobs = n,
            bytes,
            put_us = t.elapsed().as_micros(),
            "state pages stored"
        );
        for (d, page, len) in keep {
            self.remember(&d, &page, len);
        }
        Ok(all
            .into_iter()
            .filter(|(d, _)| present.contains(d))
            .collect())
    }

    /// Drops staged pages (a commit attempt that will not land).
    pub(super) fn discard(&self) {
        if let Ok(mut s) = self.staged.lock() {
            s.clear();
        }
        if let Ok(mut s) = self.superseded.lock() {
            s.clear();
        }
    }

    /// Drops from the cache the pages that the landed commit's new pages
    /// replaced. Only readers still holding the previous root (and
    /// `history`, `rollback`, `gc`) can reach them now, and those read them
    /// from the store again; left in the cache, every commit's old path
    /// would stay until the budget is full, so the cache would sit at its
    /// budget holding mostly pages no reader uses (issue 8 §1: RSS).
    pub(super) fn forget_superseded(&self) {
        let old = match self.superseded.lock() {
            Ok(mut s) => std::mem::take(&mut *s),
            Err(_) => return,
        };
        if let Ok(mut c) = self.cache.lock() {
            for d in &old {
                c.remove(d);
            }
        }
    }

    /// Notes that `digest` is replaced by the pages being staged.
    fn supersede(&self, digest: &Digest) {
        if let Ok(mut s) = self.superseded.lock() {
            s.push(digest.clone());
        }
    }

    /// The digest of the empty tree (the empty leaf page), staged if needed.
    pub(super) async fn empty(&self) -> Result<Digest> {
        Ok(self.write(Page::leaf(Vec::new())).await?.digest)
    }

    /// The value under `key` in the tree `root`.
    pub(super) async fn get(&self, root: &Digest, key: &str) -> Result<Option<Value>> {
        let mut page = self.load(root).await?;
        while page.level > 0 {
            let child = page.child(page.child_for(key))?;
            page = self.load(&child).await?;
        }
        Ok(page
            .entries
            .binary_search_by(|(k, _)| k.as_str().cmp(key))
            .ok()
            .map(|i| page.entries[i].1.clone()))
    }

    /// Up to `limit` entries with `from <= key < to`, in key order.
    pub(super) async fn range(
        &self,
        root: &Digest,
        from: &str,
        to: &str,
        limit: usize,
    ) -> Result<Vec<(String, Value)>> {
        let mut out = Vec::new();
        if limit > 0 && from < to {
            self.range_into(root.clone(), from, to, limit, &mut out)
                .await?;
        }
        Ok(out)
    }

    fn range_into<'a>(
        &'a self,
        digest: Digest,
        from: &'a str,
        to: &'a str,
        limit: usize,
        out: &'a mut Vec<(String, Value)>,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let page = self.load(&digest).await?;
            if page.level == 0 {
                let start = page.entries.partition_point(|(k, _)| k.as_str() < from);
                for (k, v) in &page.entries[start..] {
                    if k.as_str() >= to || out.len() >= limit {
                        break;
                    }
                    out.push((k.clone(), v.clone()));
                }
                return Ok(());
            }
            let start = page.child_for(from);
            for i in start..page.entries.len() {
                if (i > start && page.entries[i].0.as_str() >= to) || out.len() >= limit {
                    break;
                }
                self.range_into(page.child(i)?, from, to, limit, out)
                    .await?;
            }
            Ok(())
        })
    }

    /// Applies `delta` to the tree `root` (`None`: the empty tree), writing
    /// the pages it changes. Returns the new root, `None` when the tree is
    /// left empty. An empty delta, or one that changes no entry, returns
    /// `root` itself and writes nothing.
    pub(super) async fn apply(
        &self,
        root: Option<&Digest>,
        delta: &Delta,
    ) -> Result<Option<Digest>> {
        let muts: Vec<(&String, &Option<Value>)> = delta.iter().collect();
        let (mut level, mut nodes) = match root {
            None => {
                let entries = merge(&[], &muts).0;
                (0, self.write_chunks(0, entries).await?)
            }
            Some(r) => {
                let page = self.load(r).await?;
                let key = page
                    .entries
                    .first()
                    .map(|e| e.0.clone())
                    .unwrap_or_default();
                let level = page.level;
                (level, self.apply_node(key, r.clone(), page, &muts).await?)
            }
        };
        loop {
            match nodes.len() {
                0 => return Ok(None),
                1 => {
                    let page = self.load(&nodes[0].digest).await?;
                    if page.level > 0 && page.entries.len() == 1 {
                        let (key, v) = &page.entries[0];
                        nodes = vec![Node {
                            key: key.clone(),
                            digest: digest_value(v)?,
                            fresh: None,
                        }];
                        continue;
                    }
                    return Ok(Some(nodes.swap_remove(0).digest));
                }
                _ => {
                    level += 1;
                    let entries = nodes
                        .iter()
                        .map(|n| (n.key.clone(), string_value(&n.digest.to_string())))
                        .collect();
                    nodes = self.write_chunks(level, entries).await?;
                }
            }
        }
    }

    /// Applies `muts` (sorted, all within this page's range) to the page
    /// `digest`; returns the pages that replace it at the same level (none
    /// when it is left empty; itself when nothing changed).
    fn apply_node<'a>(
        &'a self,
        key: String,
        digest: Digest,
        page: Arc<Page>,
        muts: &'a [(&'a String, &'a Option<Value>)],
    ) -> BoxFuture<'a, Result<Vec<Node>>> {
        Box::pin(async move {
            let unchanged = || {
                vec![Node {
                    key: key.clone(),
                    digest: digest.clone(),
                    fresh: None,
                }]
            };
            if page.level == 0 {
                let (entries, changed) = merge(&page.entries, muts);
                if !changed {
                    return Ok(unchanged());
                }
                self.supersede(&digest);
                return self.write_chunks(0, entries).await;
            }
            let mut children: Vec<Node> = Vec::with_capacity(page.entries.len());
            let mut changed = false;
            let mut rest = muts;
            for (i, (k, v)) in page.entries.iter().enumerate() {
                let child = digest_value(v)?;
                let here = match page.entries.get(i + 1) {
                    Some((next, _)) => rest.partition_point(|(m, _)| m.as_str() < next.as_str()),
                    None => rest.len(),
                };
                let (mine, after) = rest.split_at(here);
                rest = after;
                if mine.is_empty() {
                    children.push(Node {
                        key: k.clone(),
                        digest: child,
                        fresh: None,
                    });
                    continue;
                }
                let sub = self.load(&child).await?;
                let out = self.apply_node(k.clone(), child.clone(), sub, mine).await?;
                changed |= !(out.len() == 1 && out[0].digest == child);
                children.extend(out);
            }
            if !changed {
                return Ok(unchanged());
            }
            self.supersede(&digest);
            self.merge_small(page.level - 1, &mut children).await?;
            let entries = children
                .into_iter()
                .map(|n| (n.key, string_value(&n.digest.to_string())))
                .collect();
            self.write_chunks(page.level, entries).await
        })
    }

    /// Merges each freshly written child under [`MIN_PAGE_BYTES`] with a
    /// neighbour (both at `level`), re-splitting when the pair is too large.
    async fn merge_small(&self, level: u8, children: &mut Vec<Node>) -> Result<()> {
        let mut i = 0;
        while i < children.len() {
            let small = children[i].fresh.is_some_and(|b| b < MIN_PAGE_BYTES);
            if !small || children.len() < 2 {
                i += 1;
                continue;
            }
            let a = if i + 1 < children.len() { i } else { i - 1 };
            let (left, right) = (
                self.load(&children[a].digest).await?,
                self.load(&children[a + 1].digest).await?,
            );
            self.supersede(&children[a].digest);
            self.supersede(&children[a + 1].digest);
            let entries: Vec<(String, Value)> =
                left.entries.iter().chain(&right.entries).cloned().collect();
            let merged = self.write_chunks(level, entries).await?;
            let one = merged.len() == 1;
            children.splice(a..a + 2, merged);
            // One page may still be small: look at it again; two are each
            // over half a page.
            i = if one { a } else { a + 2 };
        }
        Ok(())
    }

    /// Writes `entries` (sorted) as pages of `level` of about
    /// [`MAX_PAGE_BYTES`] each, split evenly by bytes.
    async fn write_chunks(&self, level: u8, entries: Vec<(String, Value)>) -> Result<Vec<Node>> {
        if entries.is_empty() {
            return Ok(Vec::new());
        }
        let sizes: Vec<usize> = entries
            .iter()
            .map(|(k, v)| k.len() + v.get().len() + 6)
            .collect();
        let total: usize = PAGE_OVERHEAD + sizes.iter().sum::<usize>();
        let pieces = total.div_ceil(MAX_PAGE_BYTES).max(1);
        let mut chunks: Vec<Vec<(String, Value)>> = vec![Vec::new(); pieces];
        let mut at = 0;
        for (entry, size) in entries.into_iter().zip(sizes) {
            let chunk = ((at + size / 2) * pieces / total).min(pieces - 1);
            chunks[chunk].push(entry);
            at += size;
        }
        let mut out = Vec::with_capacity(pieces);
        for entries in chunks.into_iter().filter(|c| !c.is_empty()) {
            out.push(
                self.write(Page {
                    kind: PAGE_KIND.into(),
                    level,
                    entries,
                })
                .await?,
            );
        }
        Ok(out)
    }
}

/// `entries` with `muts` applied (both sorted by key), and whether any
/// entry changed.
fn merge(
    entries: &[(String, Value)],
    muts: &[(&String, &Option<Value>)],
) -> (Vec<(String, Value)>, bool) {
    let mut out = Vec::with_capacity(entries.len() + muts.len());
    let mut changed = false;
    let mut e = entries.iter().peekable();
    for (key, new) in muts {
        while let Some((k, v)) = e.next_if(|(k, _)| k < *key) {
            out.push((k.clone(), v.clone()));
        }
        let old = e.next_if(|(k, _)| k == *key).map(|(_, v)| v);
        changed |= old.map(|v| v.get()) != new.as_ref().map(|v| v.get());
        if let Some(v) = new {
            out.push(((*key).clone(), v.clone()));
        }
    }
    out.extend(e.cloned());
    (out, changed)
}

#[cfg(test)]
mod tests;
