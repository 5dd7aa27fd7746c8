//! Connection slots: the connection cap, the per-client-address cap, and
//! eviction of connections that have not sent a request yet.
//!
//! Owns: counting open connections (in total and per client IP address),
//! and choosing which connection to close when the cap is reached: the
//! oldest one that has not started a request (a silent or half-sent
//! client), so that a new client gets in while silent ones are open.
//! Never reads or writes sockets: a chosen connection is told to close
//! through its [`Activity`] and its task does the rest.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;

use super::activity::Activity;

/// Open connections, shared by the accept loop and every connection task.
pub(super) struct Slots {
    inner: Mutex<Inner>,
    /// Signalled whenever a slot is freed.
    freed: Notify,
    max_total: usize,
    max_per_address: usize,
}

#[derive(Default)]
struct Inner {
    open: usize,
    next_id: u64,
    per_address: HashMap<IpAddr, usize>,
    /// Connections that had not started a request when last looked at,
    /// by accept order (oldest first). Entries whose connection has
    /// started one are dropped lazily, at eviction time or when it ends.
    fresh: BTreeMap<u64, Arc<Activity>>,
    /// Every open connection, for [`Slots::stop_all`].
    all: HashMap<u64, Arc<Activity>>,
}

/// Why [`Slots::admit`] refused a connection.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Refused {
    /// The client address already holds `max_per_address` connections.
    PerAddress,
    /// Every slot is taken (checked under the same lock as the count, so
    /// accept loops on several threads never admit past the cap).
    Full,
}

/// One open connection's slot; freed on drop.
pub(super) struct Slot {
    slots: Arc<Slots>,
    id: u64,
    ip: IpAddr,
}

impl Slots {
    /// At most `max_total` connections in all (at least 1), and
    /// `max_per_address` from one client IP address (at least 1).
    pub(super) fn new(max_total: usize, max_per_address: usize) -> Arc<Slots> {
        Arc::new(Slots {
            inner: Mutex::new(Inner::default()),
            freed: Notify::new(),
            max_total: max_total.max(1),
            max_per_address: max_per_address.max(1),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // The state is a few counters: still meaningful after a panic elsewhere.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Tells the oldest connection that has not started a request to close;
    /// `false` when there is none (every open connection is serving or
    /// has served a request).
    pub(super) fn evict_oldest_fresh(&self) -> bool {
        let mut inner = self.lock();
        while let Some((_, activity)) = inner.fresh.pop_first() {
            if !activity.has_requests() {
                activity.close();
                return true;
            }
        }
        false
    }

    /// Tells every open connection that the server stops
    /// ([`Activity::stop`]).
    pub(super) fn stop_all(&self) {
        for activity in self.lock().all.values() {
            activity.stop();
        }
    }

    /// Completes when a slot may have been freed (a freed slot is never
    /// missed: a release before the wait is remembered; every waiting
    /// accept loop is woken).
    pub(super) async fn wait_freed(&self) {
        self.freed.notified().await
    }

    /// Takes a slot for a connection from `ip` with `activity`. Errors: the
    /// address is at its cap (checked first: such a connection is refused
    /// even when every slot is taken), or every slot is taken.
    pub(super) fn admit(
        self: &Arc<Self>,
        ip: IpAddr,
        activity: &Arc<Activity>,
    ) -> Result<Slot, Refused> {
        let mut inner = self.lock();
        if inner
            .per_address
            .get(&ip)
            .is_some_and(|&n| n >= self.max_per_address)
        {
            return Err(Refused::PerAddress);
        }
        if inner.open >= self.max_total {
            return Err(Refused::Full);
        }
        *inner.per_address.entry(ip).or_default() += 1;
        inner.open += 1;
        let id = inner.next_id;
        inner.next_id += 1;
        inner.fresh.insert(id, activity.clone());
        inner.all.insert(id, activity.clone());
        Ok(Slot {
            slots: self.clone(),
            id,
            ip,
        })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut inner = self.slots.lock();
        inner.open = inner.open.saturating_sub(1);
        inner.fresh.remove(&self.id);
        inner.all.remove(&self.id);
        if let Some(n) = inner.per_address.get_mut(&self.ip) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                inner.per_address.remove(&self.ip);
            }
        }
        drop(inner);
        // Wake every accept loop waiting now, and remember the release for
        // one that is about to wait.
        self.slots.freed.notify_waiters();
        self.slots.freed.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_and_eviction_order() {
        let slots = Slots::new(3, 2);
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let acts: Vec<Arc<Activity>> = (0..4).map(|_| Arc::new(Activity::new())).collect();
        let s0 = slots.admit(a, &acts[0]).unwrap();
        let _s1 = slots.admit(a, &acts[1]).unwrap();
        assert_eq!(slots.admit(a, &acts[2]).err(), Some(Refused::PerAddress));
        let _s2 = slots.admit(b, &acts[2]).unwrap();
        assert_eq!(slots.admit(b, &acts[3]).err(), Some(Refused::Full));
        assert_eq!(slots.admit(a, &acts[3]).err(), Some(Refused::PerAddress));
        // The oldest connection has started a request: the next one is evicted.
        let _guard = acts[0].begin_request();
        assert!(slots.evict_oldest_fresh());
        assert!(acts[1].close_requested());
        assert!(!acts[0].close_requested());
        assert!(slots.evict_oldest_fresh());
        assert!(acts[2].close_requested());
        assert!(!slots.evict_oldest_fresh());
        drop(s0);
        let _s3 = slots.admit(a, &acts[3]).unwrap();
    }
}
