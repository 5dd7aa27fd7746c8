//! Events for the site's automation: stack promotions, rollbacks, state
//! changes and completed imports, delivered to webhooks as signed JSON.
//!
//! Rooms inside:
//! - this file: the [`Event`] and its durable queue in the blobstore;
//! - [`webhook`]: the `[[webhook]]` settings and the HMAC-SHA256 signature;
//! - [`deliver`]: the delivery loop `airlock serve` runs (POST, retry with
//!   backoff, results kept for `airlock events`).
//!
//! Any process that changes state (the CLI, the server) appends an event to
//! the queue in the blobstore after its commit; the server delivers. So an
//! event survives a restart of either, and all state stays in the
//! blobstore. Keys (`[a-z0-9._-]`, sorted by time):
//! - `events/queue/<unix ns, 20 digits>-<uuid>.json`: a [`Queued`] event
//!   waiting for delivery (with its per-webhook attempts so far);
//! - `events/log/<same name>`: the [`Queued`] record after its last
//!   attempt, delivered or given up.
//!
//! Both are bounded ([`MAX_QUEUE`], [`MAX_LOG`]); the oldest go first.
//! An event is delivered at least once: a crash between a receiver's 2xx and
//! the record of it sends it again (receivers de-duplicate by `id`).

pub mod deliver;
pub mod webhook;

use std::collections::BTreeMap;

use bytes::Bytes;

use crate::store::{self, Blobstore, StoreError};

/// The event types: `stack.promoted`, `stack.rolled_back`,
/// `stack.state_changed`, `import.completed`, and `stack.vulnerable` (an
/// imported vulnerability feed affects a promoted stack, [`crate::sbom`]).
pub const KINDS: [&str; 5] = [
    "stack.promoted",
    "stack.rolled_back",
    "stack.state_changed",
    "import.completed",
    "stack.vulnerable",
];

/// Most events waiting in `events/queue/`; beyond it the oldest are dropped
/// (logged, and recorded in `events/log/` as dropped).
pub const MAX_QUEUE: usize = 10_000;
/// Most delivery records kept in `events/log/`.
pub const MAX_LOG: usize = 1_000;

const QUEUE: &str = "events/queue/";
const LOG: &str = "events/log/";

/// One event, as POSTed (the request body is exactly this JSON).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Event {
    /// Unique id (UUID v4), also sent as `X-Airlock-Delivery`.
    pub id: String,
    /// One of [`KINDS`].
    #[serde(rename = "type")]
    pub kind: String,
    /// When it happened, RFC 3339 UTC.
    pub time: String,
    /// The state generation the change made.
    pub generation: u64,
    /// Who made the change.
    pub who: String,
    /// The details: for stacks `stack`, `promotion`, `image`, ...; for
    /// imports `bundle`, `images`, `bytes_new`.
    pub data: serde_json::Value,
}

/// One webhook's delivery of one event.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Delivery {
    /// `pending`, `delivered`, `failed` (gave up) or `dropped` (queue full).
    pub status: String,
    /// POSTs so far.
    pub attempts: u32,
    /// The last HTTP status, if a response came.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_status: Option<u16>,
    /// The last error (connection, timeout, non-2xx).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// When the last attempt was made, RFC 3339.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time: Option<String>,
    /// When the next attempt is due, Unix seconds (`pending` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_at: Option<u64>,
}

/// An event in the queue or the log, with its deliveries by webhook URL.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Queued {
    /// The event.
    pub event: Event,
    /// Webhook URL → its delivery.
    #[serde(default)]
    pub deliveries: BTreeMap<String, Delivery>,
}

/// Appends an event to the queue. Errors: the store failed (callers log it:
/// an event never fails the change it reports, which is already committed).
pub async fn emit(
    store: &dyn Blobstore,
    kind: &str,
    generation: u64,
    who: &str,
    data: serde_json::Value,
) -> store::Result<Event> {
    let event = Event {
        id: uuid::Uuid::new_v4().to_string(),
        kind: kind.into(),
        time: crate::state::now_rfc3339(),
        generation,
        who: who.into(),
        data,
    };
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let name = format!("{nanos:020}-{}.json", event.id);
    let queued = Queued {
        event: event.clone(),
        deliveries: BTreeMap::new(),
    };
    put(store, &format!("{QUEUE}{name}"), &queued).await?;
    let keys = store.list(QUEUE).await?;
    if keys.len() > MAX_QUEUE {
        for key in &keys[..keys.len() - MAX_QUEUE] {
            tracing::warn!(key, "event queue full: dropping the oldest event");
            if let Ok(mut q) = get(store, key).await {
                for d in q.deliveries.values_mut() {
                    d.status = "dropped".into();
                }
                finish(store, key, &q).await?;
            } else {
                store.delete(key).await?;
            }
        }
    }
    Ok(event)
}

/// [`emit`], logging instead of failing: for callers whose change is
/// already committed.
pub async fn emit_logged(
    store: &dyn Blobstore,
    kind: &str,
    generation: u64,
    who: &str,
    data: serde_json::Value,
) {
    if let Err(e) = emit(store, kind, generation, who, data).await {
        tracing::warn!(kind, error = %e, "could not queue event");
    }
}

async fn put(store: &dyn Blobstore, key: &str, q: &Queued) -> store::Result<()> {
    let bytes = serde_json::to_vec(q).map_err(|e| StoreError::Io(e.into()))?;
    let mut w = store.writer(key).await?;
    w.write(Bytes::from(bytes)).await?;
    w.commit().await
}

async fn get(store: &dyn Blobstore, key: &str) -> store::Result<Queued> {
    let bytes = store::read_all(store, key).await?;
    serde_json::from_slice(&bytes).map_err(|e| StoreError::Io(e.into()))
}

/// Moves a queue entry to the log (after its last attempt), keeping the log bounded.
async fn finish(store: &dyn Blobstore, queue_key: &str, q: &Queued) -> store::Result<()> {
    let name = queue_key.strip_prefix(QUEUE).unwrap_or(queue_key);
    put(store, &format!("{LOG}{name}"), q).await?;
    store.delete(queue_key).await?;
    let keys = store.list(LOG).await?;
    if keys.len() > MAX_LOG {
        for key in &keys[..keys.len() - MAX_LOG] {
            store.delete(key).await?;
        }
    }
    Ok(())
}

/// The newest `n` events, queued or logged, newest first (the console's
/// overview): lists both prefixes and reads only those `n`. Entries that
/// do not parse are skipped with a warning.
///
/// Errors: the store failed.
pub async fn recent(store: &dyn Blobstore, n: usize) -> store::Result<Vec<Queued>> {
    let mut keys: Vec<(String, String)> = Vec::new();
    for prefix in [QUEUE, LOG] {
        for key in store.list(prefix).await? {
            let name = key.strip_prefix(prefix).unwrap_or(&key).to_string();
            keys.push((name, key));
        }
    }
    // Names start with the time in nanoseconds, 20 digits: they sort by time.
    keys.sort();
    let mut out = Vec::new();
    for (_, key) in keys.iter().rev().take(n) {
        match get(store, key).await {
            Ok(q) => out.push(q),
            Err(StoreError::NotFound(_)) => {}
            Err(e) => tracing::warn!(key, error = %e, "unreadable event record"),
        }
    }
    Ok(out)
}

/// Every queued (waiting) event and every logged one, oldest first, for
/// `airlock events`. Entries that do not parse are skipped with a warning.
pub async fn list(store: &dyn Blobstore) -> store::Result<(Vec<Queued>, Vec<Queued>)> {
    let mut out = (Vec::new(), Vec::new());
    for (prefix, into) in [(QUEUE, &mut out.0), (LOG, &mut out.1)] {
        for key in store.list(prefix).await? {
            match get(store, &key).await {
                Ok(q) => into.push(q),
                Err(StoreError::NotFound(_)) => {}
                Err(e) => tracing::warn!(key, error = %e, "unreadable event record"),
            }
        }
    }
    Ok(out)
}
