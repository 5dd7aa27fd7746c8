//! The root cache: the current [`Snapshot`] held in memory and revalidated
//! against `refs/root` by generation (issue 11 §5).
//!
//! Owns: when a reader may use the snapshot it holds without asking the
//! store, and at most one revalidation in flight. The rules:
//! - this process's own commits install their new snapshot at once
//!   ([`RootCache::install`]): a writer reads its own writes;
//! - other writers (a CLI `airlock import` while `airlock serve` runs,
//!   another replica on S3) are noticed within the refresh interval
//!   (`[store] root_refresh_ms`): with an interval of 0 every read checks
//!   the root, through [`Blobstore::root_unchanged`] when the backend can
//!   tell locally (one `stat(2)`, no allocation), else with one
//!   [`Blobstore::read_root`]; with an interval above 0 (the filesystem
//!   default, 1 ms, which a CLI command that committed waits out before it
//!   exits: `crate::store::fs::settle`; the S3 default, 1,000 ms) a
//!   snapshot checked less than an interval ago is used as it is, and the
//!   first reader after that reads the root once for everyone waiting;
//! - a changed root costs one read of its state document: pages are cached
//!   by digest ([`super::cache`]), so what did not change is not reloaded.
//!
//! Never reads pages or documents itself: [`super::StateStore`] loads the
//! state document a new root names.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::Snapshot;
use crate::store::{Blobstore, RootVersion};

/// Default refresh interval for backends where reading the root is a
/// round trip (S3): 1,000 ms.
pub const DEFAULT_REMOTE_ROOT_REFRESH: Duration = Duration::from_millis(1000);

/// The snapshot held, and when its root was last confirmed by the store.
struct Held {
    snap: Arc<Snapshot>,
    /// The root as the store last answered (`None`: not yet confirmed,
    /// e.g. just installed by a commit: the backend's version token of a
    /// new root is known only once read).
    /// Shared, so a check takes it out of the lock without copying it.
    seen: Option<Arc<RootVersion>>,
    /// When the read of the root that confirmed it started (or the
    /// commit that installed it ended).
    checked: Option<Instant>,
}

/// The cached snapshot; shared by every clone of a [`super::StateStore`].
pub(super) struct RootCache {
    held: Mutex<Held>,
    /// The root found damaged, and why, while readers are answered from
    /// the last good snapshot (issue 24 §4).
    damage: Mutex<Option<(String, String)>>,
    refresh: Duration,
    /// Taken by the one reader revalidating (interval above 0).
    revalidating: tokio::sync::Mutex<()>,
}

impl RootCache {
    /// An empty cache revalidating at most every `refresh` (0: on every read).
    pub(super) fn new(refresh: Duration) -> RootCache {
        RootCache {
            held: Mutex::new(Held {
                snap: Arc::new(Snapshot::default()),
                seen: None,
                checked: None,
            }),
            refresh,
            revalidating: tokio::sync::Mutex::new(()),
            damage: Mutex::new(None),
        }
    }

    /// The last good snapshot, when one was loaded, for readers while the
    /// root names a damaged generation; records the damage (logged once
    /// per damaged root).
    pub(super) fn last_good(&self, root: &str, cause: &str) -> Option<Arc<Snapshot>> {
        let held = self.held.lock().ok()?;
        held.checked?;
        if let Ok(mut d) = self.damage.lock()
            && d.as_ref().is_none_or(|(r, _)| r != root)
        {
            tracing::error!(
                root,
                cause,
                serving = held.snap.generation(),
                "the current state generation is damaged: serving the last good one; run `airlock fsck --repair`"
            );
            *d = Some((root.to_string(), cause.to_string()));
        }
        Some(held.snap.clone())
    }

    /// Holds `snap` (the snapshot the root's copy names) as the last good
    /// one for a process that had none when the root `root` was found
    /// damaged (`cause`); readers are answered from it from now on.
    pub(super) fn hold_last_good(&self, snap: Snapshot, root: &str, cause: &str) -> Arc<Snapshot> {
        let snap = Arc::new(snap);
        if let Ok(mut held) = self.held.lock() {
            held.snap = snap.clone();
            held.seen = None;
            held.checked = Some(Instant::now());
        }
        tracing::error!(
            root,
            cause,
            serving = snap.generation(),
            "the state root is damaged: serving the generation its copy names; run `airlock fsck --repair`"
        );
        if let Ok(mut d) = self.damage.lock() {
            *d = Some((root.to_string(), cause.to_string()));
        }
        snap
    }

    /// The damage readers are shielded from now: (damaged root, cause).
    pub(super) fn damage(&self) -> Option<(String, String)> {
        self.damage.lock().ok()?.clone()
    }

    /// The refresh interval.
    pub(super) fn refresh(&self) -> Duration {
        self.refresh
    }

    /// The held snapshot when it may be used without reading the root:
    /// checked less than the interval ago, or (interval 0) the backend
    /// says locally that the root is unchanged.
    pub(super) fn fresh(&self, store: &dyn Blobstore) -> Option<Arc<Snapshot>> {
        let (snap, seen) = {
            let held = self.held.lock().ok()?;
            let checked = held.checked?;
            if !self.refresh.is_zero() {
                return (checked.elapsed() < self.refresh).then(|| held.snap.clone());
            }
            (held.snap.clone(), held.seen.clone()?)
        };
        (store.root_unchanged(&seen) == Some(true)).then_some(snap)
    }

    /// The held snapshot when its root was read at or after `since`.
    pub(super) fn read_since(&self, since: Instant) -> Option<Arc<Snapshot>> {
        let held = self.held.lock().ok()?;
        (held.checked? >= since).then(|| held.snap.clone())
    }

    /// The single-flight lock of revalidation (interval above 0 only).
    pub(super) async fn revalidating(&self) -> Option<tokio::sync::MutexGuard<'_, ()>> {
        if self.refresh.is_zero() {
            None
        } else {
            Some(self.revalidating.lock().await)
        }
    }

    /// The held snapshot when it is the one `root` names (same state
    /// document): recorded as confirmed by the read that `started` then,
    /// with `root` as its version.
    pub(super) fn confirm(
        &self,
        root: &Option<RootVersion>,
        started: Instant,
    ) -> Option<Arc<Snapshot>> {
        let mut held = self.held.lock().ok()?;
        let same = match (root, &held.snap.root) {
            // No root, as held: confirmed only when the held empty
            // snapshot was itself loaded (a new cache holds an empty one
            // that was never checked against the root's copy).
            (None, None) => held.checked.is_some(),
            (Some(r), Some(h)) => r.value == h.value,
            _ => false,
        };
        if !same {
            return None;
        }
        if held.snap.root.as_ref().map(|h| &h.version) != root.as_ref().map(|r| &r.version) {
            // Installed by a commit with the version unknown: record the
            // store's token, so a compare-and-swap from it can succeed.
            held.snap = Arc::new(Snapshot {
                root: root.clone(),
                digest: held.snap.digest.clone(),
                state: held.snap.state.clone(),
            });
        }
        held.seen = root.clone().map(Arc::new);
        held.checked = Some(started);
        Some(held.snap.clone())
    }

    /// Holds `snap`, read from the store by a read that `started` then
    /// (unless a concurrent reader holds a newer generation already).
    pub(super) fn loaded(&self, snap: Arc<Snapshot>, started: Instant) {
        if let Ok(mut d) = self.damage.lock() {
            *d = None;
        }
        if let Ok(mut held) = self.held.lock() {
            if held.checked.is_some() && held.snap.generation() > snap.generation() {
                return;
            }
            held.seen = snap.root.clone().map(Arc::new);
            held.checked = Some(started);
            held.snap = snap;
        }
    }

    /// The root as the store last answered it (or a swap of this process
    /// set it), with its version token: what a conditional read of the
    /// root compares with.
    pub(super) fn seen(&self) -> Option<RootVersion> {
        self.held.lock().ok()?.seen.as_deref().cloned()
    }

    /// Makes the next read check the root, whatever the interval.
    pub(super) fn forget(&self) {
        if let Ok(mut held) = self.held.lock() {
            held.checked = None;
        }
    }

    /// Holds the snapshot a commit of this process just made current
    /// (read-your-writes). Its root's version token is not known yet
    /// (empty), so the next check reads the root once; a commit always
    /// reads the root itself ([`super::StateStore::snapshot_now`]).
    pub(super) fn install(&self, snap: Snapshot) {
        if let Ok(mut held) = self.held.lock() {
            // A concurrent reader may hold a newer root already.
            if held.snap.generation() > snap.generation() {
                return;
            }
            // A swap that answered the new root's version token: the next
            // read can be a conditional one.
            held.seen = snap
                .root
                .clone()
                .filter(|r| !r.version.is_empty())
                .map(Arc::new);
            held.checked = Some(Instant::now());
            held.snap = Arc::new(snap);
        }
    }
}
