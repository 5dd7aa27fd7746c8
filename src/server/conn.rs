//! The accept loop: connection limits, timeouts and graceful shutdown on
//! top of `hyper_util`'s HTTP/1 + HTTP/2 (`auto`) connection builder.
//!
//! Owns: [`Limits`] and their enforcement, so that slow, idle or numerous
//! clients can neither hold sockets forever nor exhaust file descriptors:
//!
//! - header timeout: hyper's own HTTP/1 `header_read_timeout`. hyper 1.x
//!   starts this timer whenever it waits for a request head, including on a
//!   keep-alive connection between requests, so an idle HTTP/1.1 connection
//!   is closed after it too. A connection that has not started a request
//!   within the header timeout after accept is closed here as well (hyper's
//!   protocol sniffing, which runs before its HTTP/1 timer, has no timer).
//! - idle timeout: a connection with no request in progress and no byte read
//!   or written for this long is closed (covers HTTP/2, where hyper has no
//!   idle timeout, and any HTTP/1 case the header timer does not).
//! - connection cap: one semaphore permit per open connection; at the cap
//!   the loop stops accepting (clients wait in the kernel's backlog) until a
//!   connection closes.
//!
//! - TLS ([`super::tls`]): when a [`Tls`] is given, each accepted socket
//!   first completes a handshake within the header timeout (counted against
//!   the same connection permit); the limits above then apply to the TLS
//!   connection, and a verified client certificate's names go into every
//!   request's extensions.
//!
//! Never routes or logs requests (that is [`super::router`]).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, Semaphore};
use tokio::time::Instant;

use super::tls::Tls;

/// Connection limits and timeouts of the HTTP listener (`airlock serve`
/// flags `--header-timeout-secs`, `--idle-timeout-secs`,
/// `--max-connections`).
#[derive(Clone, Debug)]
pub struct Limits {
    /// A client must send a complete request head within this time (from
    /// accept, or from the end of the previous response on a keep-alive
    /// connection), or the connection is closed.
    pub header_timeout: Duration,
    /// A connection with no request in progress and no traffic for this
    /// long is closed.
    pub idle_timeout: Duration,
    /// Connections open at once; at the cap no more are accepted until one
    /// closes. Must be at least 1.
    pub max_connections: usize,
    /// On shutdown, in-flight requests get this long to finish before the
    /// remaining connections are abandoned.
    pub shutdown_timeout: Duration,
}

impl Default for Limits {
    /// Header timeout 30 s, idle timeout 120 s, 4096 connections, 30 s
    /// shutdown grace.
    fn default() -> Limits {
        Limits {
            header_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(120),
            max_connections: 4096,
            shutdown_timeout: Duration::from_secs(30),
        }
    }
}

/// Minimum interval between two "connection limit reached" warnings, and
/// between two logged accept errors.
const WARN_EVERY: Duration = Duration::from_secs(10);
/// Pause after an accept error that is not about one failed connection
/// (e.g. `EMFILE`), so the loop does not spin.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// Accepts on `listener` and serves `router` on every connection under
/// `limits` until `shutdown` completes; then stops accepting and waits up
/// to `limits.shutdown_timeout` for in-flight requests.
pub(super) async fn run(
    listener: TcpListener,
    router: Router,
    limits: Limits,
    tls: Option<Arc<Tls>>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    let mut builder = Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout);
    builder.http2().timer(TokioTimer::new());
    let builder = Arc::new(builder);
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let graceful = GracefulShutdown::new();
    let mut last_cap_warn: Option<Instant> = None;
    let mut last_accept_warn: Option<Instant> = None;
    let due = |last: &mut Option<Instant>| {
        let now = Instant::now();
        let due = last.is_none_or(|t| now.duration_since(t) >= WARN_EVERY);
        if due {
            *last = Some(now);
        }
        due
    };
    tokio::pin!(shutdown);

    loop {
        let permit = match slots.clone().try_acquire_owned() {
            Ok(p) => p,
            Err(_) => {
                if due(&mut last_cap_warn) {
                    tracing::warn!(
                        max_connections = limits.max_connections,
                        "connection limit reached, not accepting until a connection closes"
                    );
                }
                tokio::select! {
                    p = slots.clone().acquire_owned() => p.expect("semaphore never closed"),
                    () = &mut shutdown => break,
                }
            }
        };
        let (tcp, peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok(accepted) => accepted,
                Err(e) if is_connection_error(&e) => continue,
                Err(e) => {
                    if due(&mut last_accept_warn) {
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
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::warn!(error = %e, "cannot set TCP_NODELAY");
        }
        let watcher = graceful.watcher();
        let builder = builder.clone();
        let router = router.clone();
        let limits = limits.clone();
        let tls = tls.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let _open = crate::metrics::ConnectionGuard::open();
            serve_connection(tcp, peer, tls, builder, router, &limits, watcher).await;
        });
    }

    drop(listener);
    tracing::info!(
        connections = graceful.count(),
        "no longer accepting; waiting for in-flight requests"
    );
    if tokio::time::timeout(limits.shutdown_timeout, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            timeout_secs = limits.shutdown_timeout.as_secs_f64(),
            "connections still open after the shutdown timeout; abandoning them"
        );
    }
}

/// Serves one connection (after its TLS handshake, when `tls` is given)
/// until it ends, or closes it when [`idle_deadline`] passes.
async fn serve_connection(
    tcp: TcpStream,
    peer: std::net::SocketAddr,
    tls: Option<Arc<Tls>>,
    builder: Arc<Builder<TokioExecutor>>,
    router: Router,
    limits: &Limits,
    watcher: hyper_util::server::graceful::Watcher,
) {
    let activity = Arc::new(Activity::new());
    let tracked = TrackedIo {
        inner: tcp,
        activity: activity.clone(),
    };
    let Some(tls) = tls else {
        let io = TokioIo::new(tracked);
        return serve_io(io, peer, None, activity, builder, router, limits, watcher).await;
    };
    let handshake = tls.acceptor().accept(tracked);
    let stream = match tokio::time::timeout(limits.header_timeout, handshake).await {
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
    let io = TokioIo::new(stream);
    serve_io(io, peer, names, activity, builder, router, limits, watcher).await;
}

/// Serves HTTP on `io` under `limits` (see [`serve_connection`]).
#[allow(clippy::too_many_arguments)]
async fn serve_io<I>(
    io: TokioIo<I>,
    peer: std::net::SocketAddr,
    names: Option<super::tls::ClientCertNames>,
    activity: Arc<Activity>,
    builder: Arc<Builder<TokioExecutor>>,
    router: Router,
    limits: &Limits,
    watcher: hyper_util::server::graceful::Watcher,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let svc_activity = activity.clone();
    let service = hyper::service::service_fn(move |mut req: hyper::Request<Incoming>| {
        req.extensions_mut().insert(super::trace::ClientAddr(peer));
        if let Some(n) = &names {
            req.extensions_mut().insert(n.clone());
        }
        let router = router.clone();
        let guard = svc_activity.begin_request();
        async move {
            let res = tower::ServiceExt::oneshot(router, req).await;
            drop(guard);
            res
        }
    });
    let conn = watcher.watch(builder.serve_connection_with_upgrades(io, service));
    tokio::select! {
        res = conn => {
            if let Err(e) = res {
                tracing::debug!(error = %e, "connection ended with an error");
            }
        }
        () = idle_deadline(&activity, limits) => {
            tracing::debug!("closing idle connection");
        }
    }
}

/// Completes when the connection should be closed: no request started
/// within the header timeout after accept, or no request in progress and
/// no traffic for the idle timeout.
async fn idle_deadline(activity: &Activity, limits: &Limits) {
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
        tokio::select! {
            () = tokio::time::sleep_until(deadline) => {}
            () = activity.changed.notified() => {}
        }
    }
}

/// Per-connection bookkeeping shared by [`TrackedIo`], the service and
/// [`idle_deadline`].
struct Activity {
    started: Instant,
    /// Milliseconds after `started` of the last read or write.
    last_ms: AtomicU64,
    /// Requests started on this connection.
    requests: AtomicU64,
    /// Requests whose response head is not ready yet.
    in_flight: AtomicUsize,
    /// Signalled when a request starts or ends (the deadline changes).
    changed: Notify,
}

impl Activity {
    fn new() -> Activity {
        Activity {
            started: Instant::now(),
            last_ms: AtomicU64::new(0),
            requests: AtomicU64::new(0),
            in_flight: AtomicUsize::new(0),
            changed: Notify::new(),
        }
    }

    fn touch(&self) {
        let ms = self.started.elapsed().as_millis() as u64;
        self.last_ms.fetch_max(ms, Ordering::Release);
    }

    fn last(&self) -> Instant {
        self.started + Duration::from_millis(self.last_ms.load(Ordering::Acquire))
    }

    fn begin_request(self: &Arc<Self>) -> RequestGuard {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        self.requests.fetch_add(1, Ordering::AcqRel);
        self.changed.notify_one();
        RequestGuard(self.clone())
    }
}

/// One request in progress; on drop the idle clock restarts from now.
struct RequestGuard(Arc<Activity>);

impl Drop for RequestGuard {
    fn drop(&mut self) {
        self.0.touch();
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
        self.0.changed.notify_one();
    }
}

/// A socket that records the time of every successful read and write.
struct TrackedIo {
    inner: TcpStream,
    activity: Arc<Activity>,
}

impl AsyncRead for TrackedIo {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let res = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(res, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.activity.touch();
        }
        res
    }
}

impl AsyncWrite for TrackedIo {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let res = Pin::new(&mut self.inner).poll_write(cx, buf);
        if matches!(res, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        res
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let res = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if matches!(res, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        res
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Accept errors about one failed incoming connection (retry at once), as
/// opposed to resource errors such as `EMFILE` (back off).
fn is_connection_error(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    )
}
