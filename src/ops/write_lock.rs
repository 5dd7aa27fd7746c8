//! The write lock (issue 42 §2): while a backup copies the store, every
//! replica refuses writes (pushes, deletes, imports, stack and console
//! changes: the routes [`crate::server::routes::Route::writes`] names) with
//! 503 `UNAVAILABLE` and `Retry-After`, and reads go on.
//!
//! The lock is the object `locks/writes`: one line of JSON ([`LockDoc`]),
//! only ever changed by compare-and-swap ([`Blobstore::swap`]), so of two
//! takers exactly one wins. It is bounded, so a backup that dies never
//! leaves the site read-only:
//! - a server counts a lock as held for `ttl_secs` from when it first saw
//!   that version of the object, by its *own* monotonic clock (as
//!   [`super::lease`] does: no replica compares its wall clock with
//!   another's); a holder that works longer renews it ([`renew`]: a new
//!   version, counted from again);
//! - a taker ([`take`]) may take over a lock of another holder only once
//!   its `expires_unix` (the wall clock of the last renewal plus the ttl)
//!   has passed, or by force ([`release`] with no holder).
//!
//! A server reads the object every [`REFRESH`] ([`LockView::refresh`]);
//! the callers of [`take`] and [`release`] wait [`PROPAGATION`] before they
//! return, so every replica refuses (accepts) writes by then. A write admitted just before that still
//! commits; a backup copies the generation current when it starts, and
//! generations never change, so it is consistent either way.

use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Result, bail};

use crate::store::{Blobstore, RootVersion, StoreError};

/// The key of the lock object.
pub const KEY: &str = "locks/writes";

/// How long a lock lasts past each renewal unless given: 10 minutes.
pub const DEFAULT_TTL: Duration = Duration::from_secs(600);

/// How often a server reads the lock object: 1 s.
pub const REFRESH: Duration = Duration::from_secs(1);

/// How long a taker waits after taking the lock before every replica
/// refuses writes: two refreshes.
pub const PROPAGATION: Duration = Duration::from_secs(2);

/// The `Retry-After` a refused write is answered with, in seconds.
pub const RETRY_AFTER_SECS: u64 = 5;

/// The lock object (`locks/writes`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LockDoc {
    /// Who holds it (`bbr`, `backup@host`); empty when released.
    pub holder: String,
    /// Why, shown in refusals and `airlock status`.
    pub reason: String,
    /// How long it lasts past its last renewal, in seconds.
    pub ttl_secs: u64,
    /// When it was taken (RFC 3339 UTC, for people).
    pub taken: String,
    /// Renewals since it was taken.
    pub renewals: u64,
    /// The taker's wall clock at the last renewal plus the ttl (Unix
    /// seconds): when another taker may take it over.
    pub expires_unix: u64,
}

impl LockDoc {
    /// Whether it is held (not released).
    pub fn is_held(&self) -> bool {
        !self.holder.is_empty()
    }

    /// Whether it is held and its `expires_unix` has not passed by this
    /// host's clock (what a command outside a server goes by).
    pub fn in_force(&self) -> bool {
        self.is_held() && self.expires_unix > unix_now()
    }

    /// One line for refusals: `writes are locked by bbr (backup) since T`.
    pub fn describe(&self) -> String {
        format!(
            "writes are locked by {} ({}) since {}, for at most {} s past its last renewal",
            self.holder, self.reason, self.taken, self.ttl_secs
        )
    }
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The lock object and its version, `None` when absent or unreadable as a
/// lock (a damaged lock never blocks writes). Errors: the store failed.
pub async fn read(store: &dyn Blobstore) -> Result<Option<(RootVersion, LockDoc)>, StoreError> {
    let Some(v) = store.read_versioned(KEY).await? else {
        return Ok(None);
    };
    match serde_json::from_str::<LockDoc>(v.value.trim()) {
        Ok(doc) => Ok(Some((v, doc))),
        Err(e) => {
            tracing::warn!(key = KEY, error = %e, "write lock unreadable: not counted as held");
            Ok(None)
        }
    }
}

async fn write(
    store: &dyn Blobstore,
    expected: Option<&RootVersion>,
    doc: &LockDoc,
) -> Result<bool, StoreError> {
    let value = serde_json::to_string(doc).map_err(|e| StoreError::Io(e.into()))?;
    store.swap(KEY, expected, &value).await
}

/// Takes the lock for `holder`, lasting `ttl` past each renewal: when it
/// is absent, released, already `holder`'s (taken again: a bbr run after
/// one that died), or past its `expires_unix`. Callers wait
/// [`PROPAGATION`] before relying on it.
///
/// Errors: another holder has it (naming it and when it expires), the
/// store failed, or another taker won the race.
pub async fn take(
    store: &dyn Blobstore,
    holder: &str,
    reason: &str,
    ttl: Duration,
) -> Result<LockDoc> {
    if holder.is_empty() {
        bail!("a write lock needs a holder name");
    }
    let current = read(store).await?;
    if let Some((_, doc)) = &current
        && doc.is_held()
        && doc.holder != holder
        && doc.expires_unix > unix_now()
    {
        bail!(
            "{}; it expires in {} s (airlock unlock --force ends it now)",
            doc.describe(),
            doc.expires_unix - unix_now()
        );
    }
    let doc = LockDoc {
        holder: holder.to_string(),
        reason: reason.to_string(),
        ttl_secs: ttl.as_secs().max(1),
        taken: crate::state::now_rfc3339(),
        renewals: 0,
        expires_unix: unix_now() + ttl.as_secs().max(1),
    };
    // The version read above, also when it did not parse as a lock.
    let expected = match current {
        Some((v, _)) => Some(v),
        None => store.read_versioned(KEY).await?,
    };
    if !write(store, expected.as_ref(), &doc).await? {
        bail!("another taker changed the write lock meanwhile; run it again");
    }
    tracing::info!(holder, reason, ttl_secs = doc.ttl_secs, "write lock taken");
    Ok(doc)
}

/// Renews `holder`'s lock (a new version: servers count its ttl again).
/// `false` when `holder` does not hold it any more (released, or taken
/// over after it expired). Errors: the store failed.
pub async fn renew(store: &dyn Blobstore, holder: &str) -> Result<bool, StoreError> {
    let Some((v, doc)) = read(store).await? else {
        return Ok(false);
    };
    if doc.holder != holder {
        return Ok(false);
    }
    let next = LockDoc {
        renewals: doc.renewals + 1,
        expires_unix: unix_now() + doc.ttl_secs,
        ..doc
    };
    write(store, Some(&v), &next).await
}

/// Releases the lock: `holder`'s own (`Some`), or whoever holds it
/// (`None`: `airlock unlock --force`). Returns the released lock, `None`
/// when there was nothing to release.
///
/// Errors: another holder has it (with `Some`), the store failed.
pub async fn release(store: &dyn Blobstore, holder: Option<&str>) -> Result<Option<LockDoc>> {
    let Some((v, doc)) = read(store).await? else {
        return Ok(None);
    };
    if !doc.is_held() {
        return Ok(None);
    }
    if let Some(h) = holder
        && h != doc.holder
    {
        bail!(
            "{}; not released (it is not {h}'s: airlock unlock --force releases any)",
            doc.describe()
        );
    }
    let released = LockDoc {
        holder: String::new(),
        ..doc.clone()
    };
    if !write(store, Some(&v), &released).await? {
        bail!("the write lock changed meanwhile; run it again");
    }
    tracing::info!(holder = %doc.holder, "write lock released");
    Ok(Some(doc))
}

/// For writers outside a server (`airlock import`, `airlock restore`):
/// refuses while a lock is held and not past its `expires_unix`.
/// Errors: the lock is held (one line naming it), the store failed.
pub async fn refuse_if_locked(store: &dyn Blobstore) -> Result<()> {
    if let Some((_, doc)) = read(store).await?
        && doc.in_force()
    {
        bail!(
            "{}: nothing was written; run it again after the backup (post-backup-unlock, or airlock unlock)",
            doc.describe()
        );
    }
    Ok(())
}

/// What one server knows of the lock: the version it last read and since
/// when (its own clock).
struct Seen {
    version: String,
    doc: LockDoc,
    since: Instant,
}

/// A server's view of the lock, refreshed every [`REFRESH`] by its task
/// ([`LockView::refresh`]); [`LockView::held`] is what the access layer
/// asks before a write.
#[derive(Default)]
pub struct LockView {
    seen: Mutex<Option<Seen>>,
}

impl LockView {
    /// The lock, when held and less than its ttl old by this process's
    /// clock since this version was first seen.
    pub fn held(&self) -> Option<LockDoc> {
        let seen = self.seen.lock().ok()?;
        let s = seen.as_ref()?;
        (s.doc.is_held() && s.since.elapsed() < Duration::from_secs(s.doc.ttl_secs))
            .then(|| s.doc.clone())
    }

    /// Reads the lock object once. Errors: the store failed (the view is
    /// kept as it was: a lock seen stays counted until its ttl).
    pub async fn refresh(&self, store: &dyn Blobstore) -> Result<(), StoreError> {
        let now = read(store).await?;
        let Ok(mut seen) = self.seen.lock() else {
            return Ok(());
        };
        match now {
            None => *seen = None,
            Some((v, doc)) => {
                if seen.as_ref().is_none_or(|s| s.version != v.version) {
                    if doc.is_held() {
                        tracing::warn!(holder = %doc.holder, reason = %doc.reason, "writes locked: pushes and imports answer 503 until it is released");
                    } else if seen.as_ref().is_some_and(|s| s.doc.is_held()) {
                        tracing::info!("write lock released: writes accepted again");
                    }
                    *seen = Some(Seen {
                        version: v.version,
                        doc,
                        since: Instant::now(),
                    });
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn takers_exclude_each_other_until_release_or_expiry() {
        let dir = tempfile::tempdir().unwrap();
        let store = crate::store::fs::FsStore::open(dir.path()).unwrap();
        let view = LockView::default();
        view.refresh(&store).await.unwrap();
        assert!(view.held().is_none());

        let doc = take(&store, "bbr", "backup", Duration::from_secs(60))
            .await
            .unwrap();
        assert_eq!((doc.holder.as_str(), doc.ttl_secs), ("bbr", 60));
        let err = take(&store, "other", "x", Duration::from_secs(60))
            .await
            .unwrap_err();
        assert!(err.to_string().contains("locked by bbr (backup)"), "{err}");
        // The same holder takes it again (a run after one that died).
        take(&store, "bbr", "backup", Duration::from_secs(60))
            .await
            .unwrap();
        view.refresh(&store).await.unwrap();
        assert_eq!(view.held().unwrap().holder, "bbr");
        assert!(refuse_if_locked(&store).await.is_err());

        assert!(renew(&store, "bbr").await.unwrap());
        assert!(!renew(&store, "other").await.unwrap());
        assert!(release(&store, Some("other")).await.is_err());
        assert_eq!(
            release(&store, Some("bbr")).await.unwrap().unwrap().holder,
            "bbr"
        );
        view.refresh(&store).await.unwrap();
        assert!(view.held().is_none());
        refuse_if_locked(&store).await.unwrap();
        assert!(release(&store, None).await.unwrap().is_none());
    }

    #[tokio::test]
    async fn a_server_counts_a_lock_no_longer_than_its_ttl() {
        let dir = tempfile::tempdir().unwrap();
        let store = crate::store::fs::FsStore::open(dir.path()).unwrap();
        take(&store, "bbr", "backup", Duration::from_secs(1))
            .await
            .unwrap();
        let view = LockView::default();
        view.refresh(&store).await.unwrap();
        assert!(view.held().is_some());
        tokio::time::sleep(Duration::from_millis(1100)).await;
        view.refresh(&store).await.unwrap();
        assert!(view.held().is_none(), "unchanged past its ttl: expired");
        // Past its expiry, another taker may take it over.
        take(&store, "other", "x", Duration::from_secs(60))
            .await
            .unwrap();
        view.refresh(&store).await.unwrap();
        assert_eq!(view.held().unwrap().holder, "other");
    }
}
