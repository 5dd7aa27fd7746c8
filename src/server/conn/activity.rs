//! Per-connection bookkeeping: requests started and in flight, the time
//! of the last activity, and the deadline after which an idle connection
//! is closed.
//!
//! Owns: [`Activity`] (shared by the socket wrapper, the service, the
//! bodies and the slots) and [`idle_deadline`]. Never reads or writes the
//! socket.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use super::Limits;

/// Completes when the connection should be closed: no request started
/// within the header timeout after accept, or no request in progress and
/// no activity for the idle timeout.
///
/// Requests never wake this timer (a wake-up per request would re-poll the
/// connection and re-arm a timer on every request): it sleeps until the
/// deadline computed now, or at most one idle timeout, and then
/// recomputes. Activity only ever moves the deadline later, except the end
/// of the first request when the idle timeout is shorter than the header
/// timeout, which the cap of one idle timeout covers.
pub(super) async fn idle_deadline(activity: &Activity, limits: &Limits) {
    loop {
        let now = Instant::now();
        let deadline = if activity.requests.load(Ordering::Acquire) == 0 {
            activity.started + limits.header_timeout
        } else if activity.in_flight.load(Ordering::Acquire) > 0 {
            now + limits.idle_timeout
        } else {
            activity.last() + limits.idle_timeout
        };
        if deadline <= now {
            // A request may have started since the load above; re-check.
            if activity.in_flight.load(Ordering::Acquire) == 0
                && (activity.requests.load(Ordering::Acquire) == 0
                    || activity.last() + limits.idle_timeout <= Instant::now())
            {
                return;
            }
            continue;
        }
        tokio::time::sleep_until(deadline.min(now + limits.idle_timeout)).await;
    }
}

/// Per-connection bookkeeping shared by [`TrackedIo`], the service, the
/// bodies, the slots and [`idle_deadline`].
pub(in crate::server) struct Activity {
    pub(super) started: Instant,
    /// Milliseconds after `started` of the last read or write.
    pub(super) last_ms: AtomicU64,
    /// Requests started on this connection.
    pub(super) requests: AtomicU64,
    /// Requests whose response head is not ready yet.
    pub(super) in_flight: AtomicUsize,
    /// Response bodies alive (given to hyper and not yet dropped).
    pub(in crate::server) bodies: AtomicUsize,
    /// Set on the first HTTP/2 request: from then on socket traffic is
    /// not activity, only requests and their bodies are.
    pub(super) h2: AtomicBool,
    /// Signalled when the slots evict this connection.
    pub(super) close: Notify,
    #[cfg_attr(not(test), allow(dead_code))]
    pub(super) close_requested: AtomicBool,
}

impl Activity {
    pub(in crate::server) fn new() -> Activity {
        Activity {
            started: Instant::now(),
            last_ms: AtomicU64::new(0),
            requests: AtomicU64::new(0),
            in_flight: AtomicUsize::new(0),
            bodies: AtomicUsize::new(0),
            h2: AtomicBool::new(false),
            close: Notify::new(),
            close_requested: AtomicBool::new(false),
        }
    }

    /// Whether a request has started on this connection.
    pub(in crate::server) fn has_requests(&self) -> bool {
        self.requests.load(Ordering::Acquire) > 0
    }

    /// Asks the connection's task to close it.
    pub(in crate::server) fn close(&self) {
        self.close_requested.store(true, Ordering::Release);
        self.close.notify_one();
    }

    /// Whether [`Activity::close`] was called.
    #[cfg(test)]
    pub(in crate::server) fn close_requested(&self) -> bool {
        self.close_requested.load(Ordering::Acquire)
    }

    /// Records activity now.
    pub(in crate::server) fn touch(&self) {
        let ms = self.started.elapsed().as_millis() as u64;
        self.last_ms.fetch_max(ms, Ordering::Release);
    }

    /// Socket traffic: activity over HTTP/1 only.
    pub(super) fn touch_io(&self) {
        if !self.h2.load(Ordering::Relaxed) {
            self.touch();
        }
    }

    pub(super) fn last(&self) -> Instant {
        self.started + Duration::from_millis(self.last_ms.load(Ordering::Acquire))
    }

    pub(in crate::server) fn begin_request(self: &Arc<Self>) -> RequestGuard {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        self.requests.fetch_add(1, Ordering::AcqRel);
        RequestGuard(self.clone())
    }
}

/// One request in progress; on drop the idle clock restarts from now.
pub(in crate::server) struct RequestGuard(Arc<Activity>);

impl Drop for RequestGuard {
    fn drop(&mut self) {
        self.0.touch();
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}
