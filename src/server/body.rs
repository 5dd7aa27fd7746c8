//! Request and response bodies as the listener hands them to hyper:
//! progress deadlines on request bodies, a memory budget on response bodies.
//!
//! Owns:
//! - [`RequestBody`]: a request body that fails with [`BodyTooSlow`] when it
//!   makes no progress for the idle timeout, falls below the minimum rate
//!   (after a grace period, like Apache's `mod_reqtimeout` `MinRate`), or
//!   passes an overall deadline (manifest PUTs). Timers run only while the
//!   handler waits for the body, so a handler busy elsewhere is never
//!   charged for it. The listener answers such a request 408 and closes it.
//! - [`ResponseBody`]: every chunk of every response holds its size in
//!   bytes from a shared [`ResponseBudget`] until hyper has written it and
//!   dropped it, so the bytes of responses waiting on slow readers are
//!   capped in total; at the cap, a body waits for room before its next chunk.
//!
//! Both count as activity of their connection ([`super::activity`]).

use std::error::Error as StdError;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::Bytes;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::{Instant, Sleep};
use tokio_util::sync::PollSemaphore;

use super::activity::{Activity, BodyGuard};
use super::budget::ResponseBudget;

type BoxError = Box<dyn StdError + Send + Sync>;

/// The error a [`RequestBody`] fails with when the client sends too slowly.
#[derive(Debug)]
pub struct BodyTooSlow {
    /// What was too slow, for logs and the 408's `detail`.
    pub reason: &'static str,
}

impl std::fmt::Display for BodyTooSlow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "request body too slow: {}", self.reason)
    }
}

impl StdError for BodyTooSlow {}

/// The rules a request body is held to.
#[derive(Clone, Copy, Debug)]
pub(super) struct Pace {
    /// Longest wait for the next byte.
    pub idle: Duration,
    /// Minimum average rate in bytes per second, 0 = none: `n` bytes must
    /// have arrived `grace + n / min_rate` seconds after the body started.
    pub min_rate: u64,
    /// See `min_rate`.
    pub grace: Duration,
    /// The whole body must have arrived by then.
    pub deadline: Option<Instant>,
}

/// A request body under a [`Pace`]; `Incoming` with no body passes unwatched.
pub(super) struct RequestBody {
    inner: Incoming,
    watch: Option<Box<Watch>>,
}

struct Watch {
    pace: Pace,
    activity: Arc<Activity>,
    /// Set to the reason when the body failed with [`BodyTooSlow`].
    too_slow: Arc<OnceLock<&'static str>>,
    started: Instant,
    last: Instant,
    received: u64,
    sleep: Pin<Box<Sleep>>,
    failed: bool,
}

impl RequestBody {
    /// Watches `inner` under `pace` unless it is empty; `too_slow` is set
    /// to the reason when it fails for being too slow.
    pub(super) fn new(
        inner: Incoming,
        pace: Pace,
        activity: Arc<Activity>,
        too_slow: Arc<OnceLock<&'static str>>,
    ) -> RequestBody {
        let watch = (!inner.is_end_stream()).then(|| {
            let now = Instant::now();
            Box::new(Watch {
                pace,
                activity,
                too_slow,
                started: now,
                last: now,
                received: 0,
                sleep: Box::pin(tokio::time::sleep_until(now + pace.idle)),
                failed: false,
            })
        });
        RequestBody { inner, watch }
    }
}

impl Watch {
    /// The earliest deadline in force now, with its reason.
    fn deadline(&self) -> (Instant, &'static str) {
        let mut at = (
            self.last + self.pace.idle,
            "no progress for the idle timeout",
        );
        if self.pace.min_rate > 0 {
            let allowed = self.pace.grace
                + Duration::from_secs_f64(self.received as f64 / self.pace.min_rate as f64);
            let rate = self.started + allowed;
            if rate < at.0 {
                at = (rate, "below the minimum rate");
            }
        }
        if let Some(d) = self.pace.deadline
            && d < at.0
        {
            at = (d, "past the request's deadline");
        }
        at
    }
}

impl Body for RequestBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        let Some(watch) = this.watch.as_deref_mut() else {
            return Pin::new(&mut this.inner)
                .poll_frame(cx)
                .map_err(|e| Box::new(e) as BoxError);
        };
        if watch.failed {
            return Poll::Ready(None);
        }
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    watch.received += data.len() as u64;
                    watch.last = Instant::now();
                    watch.activity.touch();
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(other) => Poll::Ready(other.map(|r| r.map_err(|e| Box::new(e) as _))),
            Poll::Pending => {
                let (at, reason) = watch.deadline();
                if watch.sleep.deadline() != at {
                    watch.sleep.as_mut().reset(at);
                }
                ready!(watch.sleep.as_mut().poll(cx));
                watch.failed = true;
                let _ = watch.too_slow.set(reason);
                Poll::Ready(Some(Err(Box::new(BodyTooSlow { reason }))))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A response body whose chunks hold [`ResponseBudget`] room until written;
/// alive, it keeps its connection's request going ([`BodyGuard`]).
pub(super) struct ResponseBody {
    inner: axum::body::Body,
    alive: BodyGuard,
    budget: Arc<ResponseBudget>,
    /// Created on the first wait for room.
    waiter: Option<PollSemaphore>,
    /// A chunk waiting for room.
    pending: Option<Bytes>,
}

/// A chunk and the budget room it holds; the room is freed when hyper drops it.
struct Held {
    bytes: Bytes,
    _permit: OwnedSemaphorePermit,
}

impl AsRef<[u8]> for Held {
    fn as_ref(&self) -> &[u8] {
        &self.bytes
    }
}

impl ResponseBody {
    pub(super) fn new(
        inner: axum::body::Body,
        activity: &Arc<Activity>,
        budget: Arc<ResponseBudget>,
    ) -> ResponseBody {
        ResponseBody {
            inner,
            alive: activity.begin_body(),
            budget,
            waiter: None,
            pending: None,
        }
    }

    /// Takes room for `bytes` (waiting while the budget is spent).
    fn poll_room(&mut self, cx: &mut Context<'_>, bytes: Bytes) -> Poll<Bytes> {
        let n = self.budget.permits(bytes.len());
        if n == 0 {
            return Poll::Ready(bytes);
        }
        let permit = match self.budget.semaphore.clone().try_acquire_many_owned(n) {
            Ok(p) => p,
            Err(_) => {
                let waiter = self
                    .waiter
                    .get_or_insert_with(|| PollSemaphore::new(self.budget.semaphore.clone()));
                match waiter.poll_acquire_many(cx, n) {
                    Poll::Ready(Some(p)) => p,
                    // Never closed; send the chunk rather than fail the response.
                    Poll::Ready(None) => return Poll::Ready(bytes),
                    Poll::Pending => {
                        self.pending = Some(bytes);
                        return Poll::Pending;
                    }
                }
            }
        };
        Poll::Ready(Bytes::from_owner(Held {
            bytes,
            _permit: permit,
        }))
    }
}

impl Body for ResponseBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let this = &mut *self;
        let chunk = match this.pending.take() {
            Some(chunk) => chunk,
            None => match ready!(Pin::new(&mut this.inner).poll_frame(cx)) {
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(chunk) => {
                        this.alive.touch();
                        chunk
                    }
                    Err(frame) => return Poll::Ready(Some(Ok(frame))),
                },
                other => return Poll::Ready(other),
            },
        };
        let chunk = ready!(this.poll_room(cx, chunk));
        Poll::Ready(Some(Ok(Frame::data(chunk))))
    }

    fn is_end_stream(&self) -> bool {
        self.pending.is_none() && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        match &self.pending {
            None => self.inner.size_hint(),
            Some(chunk) => {
                let inner = self.inner.size_hint();
                let n = chunk.len() as u64;
                let mut hint = SizeHint::new();
                hint.set_lower(inner.lower() + n);
                if let Some(upper) = inner.upper() {
                    hint.set_upper(upper + n);
                }
                hint
            }
        }
    }
}
