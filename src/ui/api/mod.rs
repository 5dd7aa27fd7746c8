//! The console's read models: one JSON document per page (`/api/v1/...`),
//! built from the other rooms' state, and what they cache.
//!
//! Owns: the shapes of `/api/v1/` (each a `serde::Serialize` struct whose
//! fields are the JSON keys) and [`Cache`]. Every list is paged (`limit`
//! and an `after`/`before` cursor, `next` in the answer), so no page reads
//! more than it shows, whatever the size of the site. Never renders HTML
//! (that is `super::pages`) and never changes state.

pub mod imports;
pub mod operations;
pub mod overview;
pub mod repos;
pub mod stacks;
pub mod torcx;
pub mod visible;

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::http::UiError;
use crate::digest::Digest;

/// The result of a read model.
pub type Result<T> = std::result::Result<T, UiError>;

/// Entries a [`Bounded`] map keeps before it starts over.
const CACHE_ENTRIES: usize = 10_000;

/// How long the recent events are reused.
const EVENTS_FOR: Duration = Duration::from_secs(5);

/// A map of immutable values (by digest) that forgets everything when full.
pub(crate) struct Bounded<K, V>(Mutex<HashMap<K, Arc<V>>>);

impl<K, V> Default for Bounded<K, V> {
    fn default() -> Self {
        Bounded(Mutex::new(HashMap::new()))
    }
}

impl<K: Eq + Hash, V> Bounded<K, V> {
    pub(crate) fn get(&self, k: &K) -> Option<Arc<V>> {
        self.0.lock().ok()?.get(k).cloned()
    }

    pub(crate) fn put(&self, k: K, v: Arc<V>) {
        if let Ok(mut m) = self.0.lock() {
            if m.len() >= CACHE_ENTRIES {
                m.clear();
            }
            m.insert(k, v);
        }
    }
}

/// What the read models keep between requests: immutable documents by
/// digest, and a few answers tied to the state generation or reused for
/// a few seconds.
#[derive(Default)]
pub struct Cache {
    /// State documents (as JSON, every field) by digest.
    pub(crate) generations: Bounded<Digest, serde_json::Value>,
    /// Image summaries by manifest digest.
    pub(crate) images: Bounded<Digest, repos::ImageSummary>,
    /// The overview's counts, by state document digest.
    pub(crate) counts: Mutex<Option<(Digest, overview::Counts)>>,
    /// The last import before a state document digest.
    pub(crate) last_import: Bounded<Digest, Option<imports::GenerationView>>,
    /// The most recent events and when they were read.
    pub(crate) events: Mutex<Option<(Instant, Arc<Vec<EventView>>)>>,
    /// Stack statuses by stack, with what they were computed from.
    pub(crate) statuses: Bounded<stacks::StatusKey, crate::stacks::cells::StackStatus>,
}

/// One event of the site's automation queue (`crate::events`).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct EventView {
    /// `stack.promoted`, `stack.rolled_back`, `stack.state_changed`, `import.completed`.
    #[serde(rename = "type")]
    pub kind: String,
    /// When, RFC 3339 UTC.
    pub time: String,
    /// Who.
    pub who: String,
    /// The generation the change made.
    pub generation: u64,
    /// One line saying what happened.
    pub summary: String,
    /// The event's details as sent to webhooks.
    pub data: serde_json::Value,
}

impl EventView {
    fn of(e: &crate::events::Event) -> EventView {
        let d = &e.data;
        let s = |k: &str| match &d[k] {
            serde_json::Value::String(s) => s.clone(),
            serde_json::Value::Null => "?".into(),
            v => v.to_string(),
        };
        let summary = match e.kind.as_str() {
            "stack.promoted" => format!(
                "stack {}: promotion {} to {} % of cells",
                s("stack"),
                s("promotion"),
                s("percent")
            ),
            "stack.rolled_back" => format!(
                "stack {}: rolled back to promotion {} ({})",
                s("stack"),
                s("promotion"),
                s("reason")
            ),
            "stack.state_changed" => format!("stack {}: state {}", s("stack"), s("state")),
            "import.completed" => format!(
                "bundle {} imported: {} images, {} new blobs",
                s("bundle"),
                d["images"].as_array().map_or(0, Vec::len),
                s("blobs_new")
            ),
            other => other.to_string(),
        };
        EventView {
            kind: e.kind.clone(),
            time: e.time.clone(),
            who: e.who.clone(),
            generation: e.generation,
            summary,
            data: e.data.clone(),
        }
    }
}

/// The newest events (at most `crate::events::RECENT`), newest first,
/// read at most every few seconds.
pub(crate) async fn recent_events(
    cache: &Cache,
    store: &dyn crate::store::Blobstore,
) -> Result<Arc<Vec<EventView>>> {
    if let Ok(c) = cache.events.lock()
        && let Some((at, events)) = c.as_ref()
        && at.elapsed() < EVENTS_FOR
    {
        return Ok(events.clone());
    }
    let events: Arc<Vec<EventView>> = Arc::new(
        crate::events::recent(store, 20)
            .await?
            .iter()
            .map(|q| EventView::of(&q.event))
            .collect(),
    );
    if let Ok(mut c) = cache.events.lock() {
        *c = Some((Instant::now(), events.clone()));
    }
    Ok(events)
}

/// A page of a sorted list: the items and the cursor of the next page.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Paged<T> {
    /// The items of this page.
    pub items: Vec<T>,
    /// Pass as `after` for the next page; `None` on the last one.
    pub next: Option<String>,
    /// How many there are in all, when known without reading them all.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total: Option<usize>,
}

/// The page of the sorted `all` after `after` (exclusive), `limit` long.
pub fn page_of(all: &[String], after: Option<&str>, limit: usize) -> Paged<String> {
    let start = after.map_or(0, |a| all.partition_point(|c| c.as_str() <= a));
    let items: Vec<String> = all[start..].iter().take(limit).cloned().collect();
    let next = (start + items.len() < all.len())
        .then(|| items.last().cloned())
        .flatten();
    Paged {
        items,
        next,
        total: Some(all.len()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_of_sorted_lists() {
        let all: Vec<String> = ["a", "b", "c", "d", "e"].map(String::from).to_vec();
        let p = page_of(&all, None, 2);
        assert_eq!(p.items, ["a", "b"]);
        assert_eq!(p.next.as_deref(), Some("b"));
        let p = page_of(&all, Some("b"), 2);
        assert_eq!(p.items, ["c", "d"]);
        let p = page_of(&all, Some("d"), 2);
        assert_eq!(p.items, ["e"]);
        assert_eq!(p.next, None);
        // A cursor that is no item: the page starts after where it sorts.
        assert_eq!(page_of(&all, Some("bb"), 1).items, ["c"]);
        assert_eq!(page_of(&all, Some("z"), 5).items, Vec::<String>::new());
        assert_eq!(p.total, Some(5));
    }
}
