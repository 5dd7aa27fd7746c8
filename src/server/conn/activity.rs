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
/// within the header timeout after accept; or no request in progress and
/// either no activity for the idle timeout, or (on the lean HTTP/1 path)
/// no complete request head within the header timeout after the previous
/// response ([`Activity::await_head`]).
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
        let deadline = activity.deadline(limits, now);
        if deadline <= now {
            // A request may have started since the loads above; re-check.
            let now = Instant::now();
            if activity.deadline(limits, now) <= now {
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
    /// `started` on the coarse clock ([`coarse_ms`]).
    started_coarse: u64,
    /// Milliseconds after `started` of the last read or write (on the
    /// coarse clock: at most one kernel tick early).
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
    pub(super) close_requested: AtomicBool,
    /// Set when the server stops ([`Activity::stop`]).
    stopping: AtomicBool,
    /// Milliseconds after `started` since when the lean HTTP/1 path waits
    /// for a request head; `u64::MAX`: it does not (hyper has its own
    /// header timer).
    head_wait_ms: AtomicU64,
}

impl Activity {
    pub(in crate::server) fn new() -> Activity {
        Activity {
            started: Instant::now(),
            started_coarse: coarse_ms(),
            last_ms: AtomicU64::new(0),
            requests: AtomicU64::new(0),
            in_flight: AtomicUsize::new(0),
            bodies: AtomicUsize::new(0),
            h2: AtomicBool::new(false),
            close: Notify::new(),
            close_requested: AtomicBool::new(false),
            stopping: AtomicBool::new(false),
            head_wait_ms: AtomicU64::new(u64::MAX),
        }
    }

    /// When [`idle_deadline`] closes the connection, as of `now`.
    fn deadline(&self, limits: &Limits, now: Instant) -> Instant {
        if self.requests.load(Ordering::Acquire) == 0 {
            return self.started + limits.header_timeout;
        }
        if self.in_flight.load(Ordering::Acquire) > 0 {
            return now + limits.idle_timeout;
        }
        let idle = self.last() + limits.idle_timeout;
        match self.head_wait_ms.load(Ordering::Acquire) {
            u64::MAX => idle,
            ms => idle.min(self.started + Duration::from_millis(ms) + limits.header_timeout),
        }
    }

    /// The lean HTTP/1 path waits for the next request head from the last
    /// activity on (the end of the previous response) when `waiting`;
    /// else (handed to hyper) it no longer does.
    pub(super) fn await_head(&self, waiting: bool) {
        let ms = if waiting {
            self.last_ms.load(Ordering::Acquire)
        } else {
            u64::MAX
        };
        self.head_wait_ms.store(ms, Ordering::Release);
    }

    /// Tells the connection the server stops: an idle one closes at once,
    /// a busy one after its response.
    pub(in crate::server) fn stop(&self) {
        self.stopping.store(true, Ordering::Release);
        self.close.notify_one();
    }

    /// Whether [`Activity::stop`] was called.
    pub(super) fn stopping(&self) -> bool {
        self.stopping.load(Ordering::Acquire)
    }

    /// Whether nothing of a request is in progress: none in flight, no
    /// response body alive.
    pub(super) fn idle(&self) -> bool {
        self.in_flight.load(Ordering::Acquire) == 0 && self.bodies.load(Ordering::Acquire) == 0
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
    pub(in crate::server) fn close_requested(&self) -> bool {
        self.close_requested.load(Ordering::Acquire)
    }

    /// Records activity now (a few times per request: read on the coarse
    /// clock, and stored only when it moved).
    pub(in crate::server) fn touch(&self) {
        let ms = coarse_ms().saturating_sub(self.started_coarse);
        if ms > self.last_ms.load(Ordering::Relaxed) {
            self.last_ms.fetch_max(ms, Ordering::Release);
        }
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

/// Milliseconds on the monotonic clock as of the kernel's last tick
/// (`CLOCK_MONOTONIC_COARSE`, clock_gettime(2): read from the vDSO without
/// a system call or a hardware clock read; its resolution, one tick, is
/// 1-10 ms). Enough for idle and header timeouts, which are seconds; a
/// fraction of the cost of `Instant::now` and its `Duration` arithmetic,
/// and connections record activity a few times per request. Where the
/// kernel refuses that clock, milliseconds since the first call (the
/// precise clock; the same one every time, so differences stay right).
fn coarse_ms() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the call to fill.
    if unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut ts) } == 0 {
        return (ts.tv_sec as u64) * 1000 + (ts.tv_nsec as u64) / 1_000_000;
    }
    static BASE: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    BASE.get_or_init(std::time::Instant::now)
        .elapsed()
        .as_millis() as u64
}

/// One request in progress; on drop the idle clock restarts from now.
pub(in crate::server) struct RequestGuard(Arc<Activity>);

impl Drop for RequestGuard {
    fn drop(&mut self) {
        self.0.touch();
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The coarse clock moves with the precise one (within its tick).
    #[test]
    fn coarse_ms_follows_the_monotonic_clock() {
        let (c0, t0) = (coarse_ms(), std::time::Instant::now());
        std::thread::sleep(Duration::from_millis(300));
        let (c1, t1) = (coarse_ms(), std::time::Instant::now());
        let precise = (t1 - t0).as_millis() as u64;
        let coarse = c1 - c0;
        // A tick, and a preemption between the two reads of a pair.
        assert!(
            coarse + 100 >= precise && coarse <= precise + 100,
            "coarse {coarse} ms, precise {precise} ms"
        );
    }

    /// Activity recorded after a pause moves the idle clock by the pause.
    #[test]
    fn touch_records_the_time_of_the_last_activity() {
        let a = Activity::new();
        std::thread::sleep(Duration::from_millis(150));
        a.touch();
        let last = a.last_ms.load(Ordering::Acquire);
        assert!((120..=5000).contains(&last), "last activity at {last} ms");
        let before = a.last();
        a.touch();
        assert!(a.last() >= before, "touch never moves the clock back");
    }
}
