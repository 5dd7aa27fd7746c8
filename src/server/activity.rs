//! Per-connection bookkeeping and the one timeout rule of a connection:
//! requests started and in flight, response bodies alive, the time of the
//! last activity, and when the connection is closed for being idle or for
//! not sending a request head in time.
//!
//! Owns: [`Activity`] (shared by the socket wrapper, the service, the
//! bodies and the slots), its rule ([`Activity::deadline`]) and
//! [`idle_deadline`], the timer that applies it. The lean HTTP/1 loop and
//! hyper's connections are held to this one rule, driven only by requests
//! starting ([`Activity::begin_request`]) and ending (the last of the
//! request's guard and its response body dropped): hyper's own header
//! timer is off. Never reads or writes the socket; imports nothing of the
//! connection room above it (`conn`, `body`, `slots`).
//!
//! The rule, for a connection in each phase:
//! - **awaiting a request head** (from accept, and on HTTP/1 from the end
//!   of each response, i.e. when its body is dropped): closed when no
//!   request has started `header_timeout` after the wait began, or after
//!   `idle_timeout` without activity;
//! - **a request in flight** (its response head not ready: the handler
//!   runs): never closed by a timer;
//! - **a response body alive** (streaming to the client): closed after
//!   `idle_timeout` without activity (a read or write of the socket over
//!   HTTP/1, a body chunk) — never by the header timeout, whichever
//!   request of the connection it answers;
//! - **HTTP/2 between requests**: closed after `idle_timeout` without a
//!   request (PINGs and SETTINGS are no activity).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use super::limits::Limits;

/// No head wait (a request or a response body is in progress, or the
/// connection speaks HTTP/2).
const NOT_WAITING: u64 = u64::MAX;

/// Completes when [`Activity::deadline`] has passed.
///
/// Requests never wake this timer (a wake-up per request would re-poll the
/// connection and re-arm a timer on every request): it sleeps until the
/// deadline computed now, and then recomputes. While the connection is
/// busy that is a re-check at most `min(header_timeout, idle_timeout)`
/// ahead, the earliest any deadline can fall once the request ends, so a
/// head wait that begins while the timer sleeps is never enforced late.
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
        tokio::time::sleep_until(deadline).await;
    }
}

/// Per-connection bookkeeping shared by the socket wrapper, the service,
/// the bodies, the slots and [`idle_deadline`].
pub(super) struct Activity {
    started: Instant,
    /// `started` on the coarse clock ([`coarse_ms`]).
    started_coarse: u64,
    /// Milliseconds after `started` of the last read or write (on the
    /// coarse clock: at most one kernel tick early).
    last_ms: AtomicU64,
    /// Requests started on this connection.
    requests: AtomicU64,
    /// Requests whose response head is not ready yet.
    in_flight: AtomicUsize,
    /// Response bodies alive (given to hyper or the lean loop and not yet
    /// dropped).
    bodies: AtomicUsize,
    /// Set on the first HTTP/2 request: from then on socket traffic is
    /// not activity, only requests and their bodies are, and there is no
    /// head wait.
    h2: AtomicBool,
    /// Signalled when the slots evict this connection or the server stops.
    pub(super) close: Notify,
    close_requested: AtomicBool,
    /// Set when the server stops ([`Activity::stop`]).
    stopping: AtomicBool,
    /// Milliseconds after `started` since when the connection awaits a
    /// request head; [`NOT_WAITING`]: it does not.
    head_wait_ms: AtomicU64,
}

impl Activity {
    /// A connection accepted now, awaiting its first request head.
    pub(super) fn new() -> Activity {
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
            head_wait_ms: AtomicU64::new(0),
        }
    }

    /// When [`idle_deadline`] closes the connection, as of `now` (the rule
    /// of the module docs); while busy, the time to look again.
    fn deadline(&self, limits: &Limits, now: Instant) -> Instant {
        let recheck = now + limits.header_timeout.min(limits.idle_timeout);
        if self.in_flight.load(Ordering::Acquire) > 0 {
            return recheck;
        }
        let idle = self.last() + limits.idle_timeout;
        if self.bodies.load(Ordering::Acquire) > 0 {
            return idle.min(recheck);
        }
        match self.head_wait_ms.load(Ordering::Acquire) {
            NOT_WAITING => idle,
            ms => idle.min(self.started + Duration::from_millis(ms) + limits.header_timeout),
        }
    }

    /// The request has ended (its guard and its response body are gone):
    /// an HTTP/1 connection awaits the next head from now.
    fn request_ended(&self) {
        if self.h2.load(Ordering::Acquire) {
            return;
        }
        self.touch();
        self.head_wait_ms
            .store(self.last_ms.load(Ordering::Acquire), Ordering::Release);
    }

    /// Marks the connection as speaking HTTP/2 (its first h2 request).
    pub(super) fn set_h2(&self) {
        self.h2.store(true, Ordering::Release);
        self.head_wait_ms.store(NOT_WAITING, Ordering::Release);
    }

    /// Tells the connection the server stops: an idle one closes at once,
    /// a busy one after its response.
    pub(super) fn stop(&self) {
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
    pub(super) fn has_requests(&self) -> bool {
        self.requests.load(Ordering::Acquire) > 0
    }

    /// Asks the connection's task to close it.
    pub(super) fn close(&self) {
        self.close_requested.store(true, Ordering::Release);
        self.close.notify_one();
    }

    /// Whether [`Activity::close`] was called.
    pub(super) fn close_requested(&self) -> bool {
        self.close_requested.load(Ordering::Acquire)
    }

    /// Records activity now (a few times per request: read on the coarse
    /// clock, and stored only when it moved).
    pub(super) fn touch(&self) {
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

    fn last(&self) -> Instant {
        self.started + Duration::from_millis(self.last_ms.load(Ordering::Acquire))
    }

    /// A request's head has arrived: the head wait ends, the request is in
    /// flight until the guard is dropped (when its response head is ready).
    pub(super) fn begin_request(self: &Arc<Self>) -> RequestGuard {
        self.head_wait_ms.store(NOT_WAITING, Ordering::Release);
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        self.requests.fetch_add(1, Ordering::AcqRel);
        RequestGuard(self.clone())
    }

    /// A response body is alive until the returned guard is dropped.
    pub(super) fn begin_body(self: &Arc<Self>) -> BodyGuard {
        self.bodies.fetch_add(1, Ordering::AcqRel);
        BodyGuard(self.clone())
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

/// One request in progress; on drop the idle clock restarts from now, and
/// when no response body of it is alive the request has ended.
pub(super) struct RequestGuard(Arc<Activity>);

impl Drop for RequestGuard {
    fn drop(&mut self) {
        let a = &self.0;
        a.touch();
        if a.in_flight.fetch_sub(1, Ordering::AcqRel) == 1 && a.bodies.load(Ordering::Acquire) == 0
        {
            a.request_ended();
        }
    }
}

/// One response body alive; when it is dropped and no request is in
/// flight, the request has ended.
pub(super) struct BodyGuard(Arc<Activity>);

impl BodyGuard {
    /// Records activity of the body (a chunk produced).
    pub(super) fn touch(&self) {
        self.0.touch();
    }
}

impl Drop for BodyGuard {
    fn drop(&mut self) {
        let a = &self.0;
        if a.bodies.fetch_sub(1, Ordering::AcqRel) == 1 && a.in_flight.load(Ordering::Acquire) == 0
        {
            a.request_ended();
        }
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

    fn limits(header: u64, idle: u64) -> Limits {
        Limits {
            header_timeout: Duration::from_secs(header),
            idle_timeout: Duration::from_secs(idle),
            ..Limits::default()
        }
    }

    /// The header timeout bounds the wait for a head only: not a response
    /// body of the first request, nor of the second (issue 60: the old
    /// rule armed it at the end of request 1 and let it fire during the
    /// body of request 2).
    #[test]
    fn the_header_timeout_never_bounds_a_response_body() {
        let l = limits(3, 120);
        let a = Arc::new(Activity::new());
        let now = Instant::now();
        // Awaiting the first head: accept + 3 s.
        assert_eq!(a.deadline(&l, now), a.started + Duration::from_secs(3));
        for _request in 0..3 {
            let guard = a.begin_request();
            let body = a.begin_body();
            drop(guard);
            // Streaming: only the idle timeout after the last activity
            // closes it; the header timeout is a re-check, always ahead.
            let later = Instant::now() + Duration::from_secs(60);
            let d = a.deadline(&l, later);
            assert!(
                d > later,
                "a body streaming is never cut by the header timeout"
            );
            body.touch();
            drop(body);
            // The response has ended: the next head is due 3 s from now.
            let now = Instant::now();
            let d = a.deadline(&l, now);
            assert!(
                d <= now + Duration::from_secs(3),
                "head wait starts at the end"
            );
            assert!(d + Duration::from_millis(50) >= now + Duration::from_secs(3));
        }
    }

    /// HTTP/2 has no head wait between requests: the idle timeout applies.
    #[test]
    fn http2_waits_the_idle_timeout() {
        let l = limits(3, 120);
        let a = Arc::new(Activity::new());
        let guard = a.begin_request();
        a.set_h2();
        drop(a.begin_body());
        drop(guard);
        let now = Instant::now();
        assert!(a.deadline(&l, now) >= now + Duration::from_secs(119));
    }

    /// A handler that runs long is never cut.
    #[test]
    fn a_request_in_flight_is_never_due() {
        let l = limits(3, 5);
        let a = Arc::new(Activity::new());
        let _guard = a.begin_request();
        let later = Instant::now() + Duration::from_secs(3600);
        assert!(a.deadline(&l, later) > later);
    }
}
