//! The accept loop: connection limits, timeouts and graceful shutdown;
//! each connection is served by the [`lean`] HTTP/1.1 path until a request
//! it does not take arrives, then by `hyper_util`'s HTTP/1 + HTTP/2
//! (`auto`) connection builder for the rest of it.
//!
//! Owns: the enforcement of [`Limits`], so that slow, idle or numerous
//! clients can neither hold sockets forever, exhaust file descriptors and
//! memory, nor lock other clients out:
//!
//! - header timeout and idle timeout: one rule for every connection,
//!   [`super::activity`] (applied here by [`idle_deadline`]): a request
//!   head must be complete within the header timeout of accept or of the
//!   end of the previous response, on the lean path and under hyper alike
//!   (hyper's own header timer is off); it never bounds a response body,
//!   whichever request of the connection it answers.
//! - request head size: hyper's HTTP/1 `max_buf_size` and HTTP/2
//!   `max_header_list_size` (`max_request_head`); a larger head is refused
//!   (431) and its buffer never grows past the cap.
//! - idle timeout: a connection with no request in progress (or a
//!   response body making no progress) and no activity for this long is
//!   closed. Over HTTP/1 any byte read or written
//!   is activity; over HTTP/2 only requests are (a request starting or
//!   ending, request and response body data): PINGs, SETTINGS and
//!   WINDOW_UPDATEs never keep a connection open. (Neither hyper nor h2
//!   can rate-limit PINGs; h2 answers one at a time and keeps at most one
//!   answer pending, so a PING flood costs CPU, not memory.)
//! - request bodies: see [`super::body::RequestBody`]: no progress for the
//!   idle timeout, or slower than `min_body_rate` after the header timeout,
//!   or a manifest PUT past `manifest_put_timeout`, is answered 408 (with
//!   an OCI error body under `/v2/`) and the connection closed.
//! - response bodies: at most `max_response_buffer` bytes of responses are
//!   held in memory at once ([`super::budget::ResponseBudget`]).
//! - connection cap ([`super::slots`]): at the cap, the oldest connection
//!   that has not sent a request yet is closed to make room for the next
//!   client; when every connection has sent one, the loop stops accepting
//!   (clients wait in the kernel's backlog) until one closes. A client IP
//!   address holding `max_connections_per_address` connections has further
//!   ones closed at once.
//!
//! - TLS ([`super::tls`]): when a [`Tls`] is given, each accepted socket
//!   first completes a handshake within the header timeout (under the same
//!   connection slot); the limits above then apply to the TLS connection,
//!   and a verified client certificate's names go into every request's
//!   extensions.
//!
//! Never routes or logs requests (that is [`super::router`]).

mod handle;
mod io;
mod lean;
mod malformed;
mod rewind;
mod sendfile;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::http::Request;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::task::TaskTracker;

use self::handle::handle;
use self::io::TrackedIo;
use self::malformed::Answering;
use self::rewind::Rewind;
use super::App;
use super::activity::{Activity, idle_deadline};
use super::budget::ResponseBudget;
use super::limits::Limits;
use super::slots::{Refused, Slot, Slots};
use super::tls::{ClientCertNames, Tls};

/// Minimum interval between two warnings of one kind (cap reached,
/// per-address cap, accept errors).
const WARN_EVERY: Duration = Duration::from_secs(10);
/// Pause after an accept error that is not about one failed connection
/// (e.g. `EMFILE`), so the loop does not spin.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);
/// At the cap, how long an evicted connection gets to close before another
/// is evicted.
const EVICT_RETRY: Duration = Duration::from_secs(1);
/// hyper's smallest HTTP/1 read buffer.
const MIN_HEAD: usize = 8 << 10;

/// What every accept loop and connection task shares: built once per
/// server ([`Shared::new`]), so that with one accept loop per worker
/// thread the connection cap, the per-address cap and the response budget
/// stay global.
pub(super) struct Shared {
    builder: Builder<TokioExecutor>,
    app: Arc<App>,
    router: Router,
    limits: Limits,
    budget: Arc<ResponseBudget>,
    slots: Arc<Slots>,
    tls: Option<Arc<Tls>>,
}

impl Shared {
    /// Serves `app` ([`super::router`]) under `limits` (over TLS when `tls`
    /// is given).
    pub(super) fn new(app: Arc<App>, limits: Limits, tls: Option<Arc<Tls>>) -> Arc<Shared> {
        let head = limits.max_request_head.max(MIN_HEAD);
        let mut builder = Builder::new(TokioExecutor::new());
        // hyper's own header timer is off: the connection's one timeout
        // rule ([`super::activity`]) bounds the wait for every head, on
        // hyper's connections as on the lean path.
        builder
            .http1()
            .timer(TokioTimer::new())
            .header_read_timeout(None)
            .max_buf_size(head);
        builder
            .http2()
            .timer(TokioTimer::new())
            .max_header_list_size(head.min(u32::MAX as usize) as u32);
        Arc::new(Shared {
            builder,
            router: super::router(app.clone()),
            app,
            budget: ResponseBudget::new(limits.max_response_buffer),
            slots: Slots::new(limits.max_connections, limits.max_connections_per_address),
            limits,
            tls,
        })
    }

    /// The limits every connection is served under.
    pub(super) fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Whether connections speak TLS.
    pub(super) fn tls(&self) -> bool {
        self.tls.is_some()
    }
}

/// Rate-limits one kind of warning to one per [`WARN_EVERY`].
#[derive(Default)]
struct Every(Option<Instant>);

impl Every {
    fn due(&mut self) -> bool {
        let now = Instant::now();
        let due = self.0.is_none_or(|t| now.duration_since(t) >= WARN_EVERY);
        if due {
            self.0 = Some(now);
        }
        due
    }
}

/// Accepts on `listener` and serves `shared`'s router on every connection
/// under its limits until `shutdown` completes; then stops accepting and
/// waits up to `limits.shutdown_timeout` for in-flight requests. Several
/// loops (one per worker thread) may share one `shared`.
pub(super) async fn run(
    listener: TcpListener,
    shared: Arc<Shared>,
    shutdown: impl Future<Output = ()>,
) {
    let slots = &shared.slots;
    let limits = &shared.limits;
    let (stop_tx, stop) = watch::channel(false);
    let tracker = TaskTracker::new();
    let (mut cap_warn, mut address_warn, mut accept_warn) =
        (Every::default(), Every::default(), Every::default());
    tokio::pin!(shutdown);

    'accept: loop {
        let (tcp, peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok(accepted) => accepted,
                Err(e) if is_connection_error(&e) => continue,
                Err(e) => {
                    if accept_warn.due() {
                        tracing::warn!(error = %e, "accept error, backing off");
                    }
                    tokio::select! {
                        () = tokio::time::sleep(ACCEPT_BACKOFF) => continue,
                        () = &mut shutdown => break,
                    }
                }
            },
            () = &mut shutdown => break,
        };
        // At the cap, a client is waiting (this one): close the oldest
        // connection without a request, or wait for one to close (later
        // clients wait in the backlog meanwhile). One eviction at a time:
        // the evicted connection's slot is freed when its task ends.
        let mut evicted = false;
        let activity = Arc::new(Activity::new());
        let slot = loop {
            match slots.admit(peer.ip(), &activity) {
                Ok(slot) => break slot,
                Err(Refused::PerAddress) => {
                    if address_warn.due() {
                        tracing::warn!(
                            client = %peer.ip(),
                            max_connections_per_address = limits.max_connections_per_address,
                            "connection limit of one client address reached, closing its new connections"
                        );
                    }
                    continue 'accept;
                }
                Err(Refused::Full) => {}
            }
            if !evicted {
                evicted = slots.evict_oldest_fresh();
                if !evicted && cap_warn.due() {
                    tracing::warn!(
                        max_connections = limits.max_connections,
                        "connection limit reached, not accepting until a connection closes"
                    );
                }
            }
            tokio::select! {
                () = slots.wait_freed() => {}
                () = tokio::time::sleep(EVICT_RETRY) => evicted = false,
                () = &mut shutdown => break 'accept,
            }
        };
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::warn!(error = %e, "cannot set TCP_NODELAY");
        }
        let (shared, stop) = (shared.clone(), stop.clone());
        tracker.spawn(async move {
            let _open = crate::metrics::ConnectionGuard::open();
            serve_connection(tcp, peer, shared, activity, slot, stop).await;
        });
    }

    drop(listener);
    tracing::info!(
        connections = tracker.len(),
        "no longer accepting; waiting for in-flight requests"
    );
    // Idle connections close at once, busy ones after their response.
    slots.stop_all();
    let _ = stop_tx.send(true);
    tracker.close();
    if tokio::time::timeout(limits.shutdown_timeout, tracker.wait())
        .await
        .is_err()
    {
        tracing::warn!(
            timeout_secs = limits.shutdown_timeout.as_secs_f64(),
            "connections still open after the shutdown timeout; abandoning them"
        );
    }
}

/// Serves one connection (after its TLS handshake, when the server has
/// TLS) until it ends, or closes it when [`idle_deadline`] passes or the
/// slots evict it; its slot is freed on return.
async fn serve_connection(
    tcp: TcpStream,
    peer: SocketAddr,
    shared: Arc<Shared>,
    activity: Arc<Activity>,
    _slot: Slot,
    stop: watch::Receiver<bool>,
) {
    let tracked = TrackedIo::new(tcp, activity.clone(), shared.tls.is_none());
    let Some(tls) = shared.tls.clone() else {
        let io = Answering::new(tracked, activity.clone(), peer);
        return serve_io(io, peer, None, shared, activity, stop).await;
    };
    let handshake = tls.acceptor().accept(tracked);
    let stream = match tokio::time::timeout(shared.limits.header_timeout, handshake).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            tracing::debug!(%peer, error = %e, "TLS handshake failed");
            return;
        }
        Err(_) => {
            tracing::debug!(%peer, "TLS handshake timed out");
            return;
        }
    };
    let names = super::tls::client_names(stream.get_ref().1);
    let io = Answering::new(stream, activity.clone(), peer);
    serve_io(io, peer, names, shared, activity, stop).await;
}

/// Serves HTTP on `io` (see [`serve_connection`]): the [`lean`] path
/// first (unless `lean_http1` is off), then hyper for the rest of the
/// connection once a request the lean path does not take arrives.
async fn serve_io<I>(
    io: I,
    peer: SocketAddr,
    names: Option<ClientCertNames>,
    shared: Arc<Shared>,
    activity: Arc<Activity>,
    mut stop: watch::Receiver<bool>,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let lean = shared.limits.lean_http1;
    let lean_phase = std::sync::atomic::AtomicBool::new(lean);
    let conn = async {
        let io = match lean {
            true => lean::serve(io, peer, &names, &shared, &activity).await,
            false => Some(Rewind::new(io, bytes::Bytes::new())),
        };
        if let Some(io) = io {
            lean_phase.store(false, std::sync::atomic::Ordering::Relaxed);
            serve_hyper(io, peer, names, &shared, &activity, &mut stop).await;
        }
    };
    tokio::pin!(conn);
    loop {
        tokio::select! {
            () = &mut conn => return,
            () = idle_deadline(&activity, &shared.limits) => {
                tracing::debug!("closing idle connection");
                return;
            }
            () = activity.close.notified() => {
                if activity.close_requested() {
                    tracing::debug!(client = %peer, "closing a connection without a request to make room");
                    return;
                }
                // The server stops: the lean path closes an idle
                // connection here and a busy one after its response;
                // hyper shuts down gracefully on `stop`.
                if lean_phase.load(std::sync::atomic::Ordering::Relaxed) && activity.idle() {
                    return;
                }
            }
        }
    }
}

/// Serves the rest of a connection with hyper (HTTP/1 or HTTP/2, with
/// upgrades); on `stop`, hyper's graceful shutdown (the request in flight
/// is answered, then the connection closes).
async fn serve_hyper<I>(
    io: Rewind<I>,
    peer: SocketAddr,
    names: Option<ClientCertNames>,
    shared: &Arc<Shared>,
    activity: &Arc<Activity>,
    stop: &mut watch::Receiver<bool>,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (svc_shared, svc_activity) = (shared.clone(), activity.clone());
    let service = hyper::service::service_fn(move |req: Request<Incoming>| {
        handle(req, peer, names.clone(), &svc_shared, &svc_activity)
    });
    let conn = shared
        .builder
        .serve_connection_with_upgrades(TokioIo::new(io), service);
    tokio::pin!(conn);
    let res = tokio::select! {
        res = conn.as_mut() => res,
        () = async { drop(stop.wait_for(|s| *s).await) } => {
            conn.as_mut().graceful_shutdown();
            conn.await
        }
    };
    if let Err(e) = res {
        tracing::debug!(error = %e, "connection ended with an error");
    }
}

/// Accept errors about one failed incoming connection (retry at once), as
/// opposed to resource errors such as `EMFILE` (back off).
fn is_connection_error(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::ConnectionRefused
            | std::io::ErrorKind::ConnectionAborted
            | std::io::ErrorKind::ConnectionReset
    )
}
