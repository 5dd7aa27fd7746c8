//! The accept loop: connection limits, timeouts and graceful shutdown;
//! each connection is served by the [`lean`] HTTP/1.1 path until a request
//! it does not take arrives, then by `hyper_util`'s HTTP/1 + HTTP/2
//! (`auto`) connection builder for the rest of it.
//!
//! Owns: [`Limits`] and their enforcement, so that slow, idle or numerous
//! clients can neither hold sockets forever, exhaust file descriptors and
//! memory, nor lock other clients out:
//!
//! - header timeout: on the lean path, [`idle_deadline`] closes a
//!   connection whose next request head is not complete within it after
//!   the previous response ([`Activity::await_head`]); under hyper, its own
//!   HTTP/1 `header_read_timeout`, which hyper 1.x starts whenever it waits
//!   for a request head, including on a keep-alive connection between
//!   requests. Either way an idle HTTP/1.1 connection is closed after it
//!   too. A connection that has not started a request within the header
//!   timeout after accept is closed here as well (hyper's protocol
//!   sniffing, which runs before its HTTP/1 timer, has no timer).
//! - request head size: hyper's HTTP/1 `max_buf_size` and HTTP/2
//!   `max_header_list_size` (`max_request_head`); a larger head is refused
//!   (431) and its buffer never grows past the cap.
//! - idle timeout: a connection with no request in progress and no
//!   activity for this long is closed. Over HTTP/1 any byte read or written
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
//!   held in memory at once ([`super::body::ResponseBudget`]).
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

mod activity;
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

pub(super) use self::activity::Activity;
use self::activity::idle_deadline;
use self::handle::handle;
use self::io::TrackedIo;
use self::malformed::Answering;
use self::rewind::Rewind;
use super::App;
use super::body::ResponseBudget;
use super::slots::{Refused, Slot, Slots};
use super::tls::{ClientCertNames, Tls};

/// Connection limits and timeouts of the HTTP listener (`airlock serve`
/// flags `--header-timeout-secs`, `--idle-timeout-secs`,
/// `--max-connections`, `--max-connections-per-address`,
/// `--min-body-rate`, `--manifest-put-timeout-secs`, `--max-request-head`,
/// `--max-response-buffer`).
#[derive(Clone, Debug)]
pub struct Limits {
    /// A client must send a complete request head within this time (from
    /// accept, or from the end of the previous response on a keep-alive
    /// connection), or the connection is closed. Also the grace period
    /// before `min_body_rate` applies to a request body.
    pub header_timeout: Duration,
    /// A connection with no request in progress and no activity for this
    /// long is closed; a request body that makes no progress for this long
    /// is answered 408.
    pub idle_timeout: Duration,
    /// Connections open at once (at least 1). At the cap the oldest
    /// connection that has not sent a request is closed for a new one; if
    /// there is none, no more are accepted until one closes.
    pub max_connections: usize,
    /// Connections open at once from one client IP address (at least 1);
    /// more are closed as soon as they are accepted.
    pub max_connections_per_address: usize,
    /// A request body must average at least this many bytes per second
    /// after the header timeout (`n` bytes are due `header_timeout + n /
    /// min_body_rate` after the body started), else 408; 0 = no minimum.
    pub min_body_rate: u64,
    /// A manifest PUT's body must have arrived this long after its head,
    /// else 408.
    pub manifest_put_timeout: Duration,
    /// Largest request head in bytes (HTTP/1 read buffer, HTTP/2 header
    /// list); at least 8 KiB.
    pub max_request_head: usize,
    /// Bytes of response bodies held in memory at once, over all
    /// connections (at least 64 KiB); at the cap, responses wait for room.
    pub max_response_buffer: u64,
    /// On SIGTERM or SIGINT, `/readyz` answers 503 while requests are
    /// still served for this long (for load balancers to take the replica
    /// out), before the listeners close.
    pub shutdown_delay: Duration,
    /// On shutdown, in-flight requests get this long to finish before the
    /// remaining connections are abandoned.
    pub shutdown_timeout: Duration,
    /// Worker threads of `serve` (`--workers`): each runs its own
    /// current-thread runtime and accept loop on its own `SO_REUSEPORT`
    /// socket ([`super::workers`]). `None`: one per CPU
    /// (`available_parallelism`); `Some(0)`: the accept loops run on the
    /// caller's (multi-thread) runtime instead. [`super::serve_on`] and
    /// [`super::serve_listener`] ignore it (their listener is given).
    pub workers: Option<usize>,
}

impl Default for Limits {
    /// Header timeout 30 s, idle timeout 120 s, 4096 connections, 256 per
    /// client address, bodies at least 1 KiB/s, manifest PUTs within 60 s,
    /// 64 KiB request heads, 256 MiB of buffered responses, no shutdown
    /// delay, 30 s shutdown grace, one worker thread per CPU.
    fn default() -> Limits {
        Limits {
            header_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(120),
            max_connections: 4096,
            max_connections_per_address: 256,
            min_body_rate: 1024,
            manifest_put_timeout: Duration::from_secs(60),
            max_request_head: 64 << 10,
            max_response_buffer: 256 << 20,
            shutdown_delay: Duration::ZERO,
            shutdown_timeout: Duration::from_secs(30),
            workers: None,
        }
    }
}

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
        builder
            .http1()
            .timer(TokioTimer::new())
            .header_read_timeout(limits.header_timeout)
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
/// first, then hyper for the rest of the connection once a request the
/// lean path does not take arrives.
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
    let lean_phase = std::sync::atomic::AtomicBool::new(true);
    let conn = async {
        if let Some(io) = lean::serve(io, peer, &names, &shared, &activity).await {
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
