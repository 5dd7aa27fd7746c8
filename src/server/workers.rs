//! The per-core layout: `n` worker threads, each running its own
//! current-thread tokio runtime with its own `SO_REUSEPORT` listening
//! socket on every listen address and its own accept loop, the way nginx
//! runs its worker processes. The kernel spreads new connections over the
//! sockets of one address; a connection then lives and dies on the thread
//! that accepted it (no cross-thread wake-ups, no work stealing).
//!
//! Owns: binding the sockets, starting and joining the worker threads.
//! What the loops share (connection slots and caps, the response budget,
//! the router and its [`super::App`], TLS) is one [`Shared`]; metrics are
//! process-wide. Background tasks (upload sweeper, periodic GC, root
//! refresh, TLS reload) stay on the caller's runtime.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context as _;
use tokio::net::{TcpListener, TcpSocket};
use tokio::sync::{oneshot, watch};

use super::conn::{self, Shared};

/// The listening backlog of every socket (tokio's `TcpListener::bind`'s).
const BACKLOG: u32 = 1024;

/// One listening socket per worker for every address of `listen`, bound
/// with `SO_REUSEADDR` and `SO_REUSEPORT`; an address with port 0 gets its
/// port from its first socket. `Ok(None)` when the OS refuses
/// `SO_REUSEPORT` (the caller falls back to one shared runtime).
///
/// An address another socket already listens on is refused first
/// ([`probe`]): `SO_REUSEPORT` would otherwise let a second server bind it
/// too and the kernel would split the connections between the two.
///
/// Errors: an address cannot be bound (in use, not local, no permission).
pub(super) fn bind(
    listen: &[SocketAddr],
    workers: usize,
) -> anyhow::Result<Option<Vec<Vec<std::net::TcpListener>>>> {
    let mut per_worker: Vec<Vec<std::net::TcpListener>> =
        (0..workers).map(|_| Vec::new()).collect();
    for &wanted in listen {
        probe(wanted)?;
        let mut addr = wanted;
        for sockets in &mut per_worker {
            let socket = if addr.is_ipv4() {
                TcpSocket::new_v4()
            } else {
                TcpSocket::new_v6()
            }
            .with_context(|| format!("cannot listen on {wanted}"))?;
            socket
                .set_reuseaddr(true)
                .with_context(|| format!("cannot listen on {wanted}"))?;
            if let Err(e) = socket.set_reuseport(true) {
                tracing::warn!(error = %e, "SO_REUSEPORT unavailable: one shared runtime serves HTTP");
                return Ok(None);
            }
            socket
                .bind(addr)
                .with_context(|| format!("cannot listen on {wanted}"))?;
            let listener = socket
                .listen(BACKLOG)
                .with_context(|| format!("cannot listen on {wanted}"))?;
            addr = listener
                .local_addr()
                .with_context(|| format!("cannot listen on {wanted}"))?;
            sockets.push(
                listener
                    .into_std()
                    .with_context(|| format!("cannot listen on {wanted}"))?,
            );
        }
    }
    Ok(Some(per_worker))
}

/// Refuses `addr` when any socket already listens on it: a bind with
/// `SO_REUSEADDR` but without `SO_REUSEPORT` fails with `EADDRINUSE` then,
/// whatever options the other socket has. The probe is closed before the
/// workers bind. Port 0 (a fresh ephemeral port) needs no probe.
///
/// Errors: one line naming the address (in use, not local, no permission).
pub(super) fn probe(addr: SocketAddr) -> anyhow::Result<()> {
    if addr.port() == 0 {
        return Ok(());
    }
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()
    } else {
        TcpSocket::new_v6()
    }
    .with_context(|| format!("cannot listen on {addr}"))?;
    socket
        .set_reuseaddr(true)
        .with_context(|| format!("cannot listen on {addr}"))?;
    match socket.bind(addr) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => Err(anyhow::anyhow!(
            "cannot listen on {addr}: another process already listens on it"
        )),
        Err(e) => Err(e).with_context(|| format!("cannot listen on {addr}")),
    }
}

/// Runs one worker thread per element of `sockets` (see [`bind`]), each
/// serving `shared` on its sockets until `stop` turns true, then draining
/// its connections (at most `limits.shutdown_timeout`). Completes when
/// every worker has stopped.
///
/// Errors: a thread or its runtime cannot be started, a socket cannot be
/// registered with the runtime, a worker panicked.
pub(super) async fn run(
    sockets: Vec<Vec<std::net::TcpListener>>,
    shared: Arc<Shared>,
    stop: watch::Receiver<bool>,
) -> anyhow::Result<()> {
    let mut done = Vec::new();
    // Every worker keeps its runtime until all have drained: a client
    // shared by all (the S3 store's connection pool) runs each connection
    // on the runtime that opened it, so a runtime dropped early would fail
    // another worker's request still in flight ("dispatch task is gone").
    let drained = Arc::new(tokio::sync::Barrier::new(sockets.len()));
    for (i, sockets) in sockets.into_iter().enumerate() {
        let (tx, rx) = oneshot::channel();
        let (shared, stop, drained) = (shared.clone(), stop.clone(), drained.clone());
        std::thread::Builder::new()
            .name(format!("airlock-http-{i}"))
            .spawn(move || {
                let _ = tx.send(worker(sockets, shared, stop, drained));
            })
            .context("cannot start an HTTP worker thread")?;
        done.push(rx);
    }
    let mut result = Ok(());
    for rx in done {
        match rx.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => result = Err(e),
            Err(_) => result = Err(anyhow::anyhow!("an HTTP worker thread panicked")),
        }
    }
    result
}

/// One worker thread's life: a current-thread runtime running one accept
/// loop per socket; once drained, it waits (at most
/// [`DRAIN_TOGETHER_MAX`]) at `drained` for the other workers before its
/// runtime is dropped.
fn worker(
    sockets: Vec<std::net::TcpListener>,
    shared: Arc<Shared>,
    stop: watch::Receiver<bool>,
    drained: Arc<tokio::sync::Barrier>,
) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start an HTTP worker runtime")?;
    runtime.block_on(async move {
        let served = async {
            let mut loops = tokio::task::JoinSet::new();
            for socket in sockets {
                let listener = TcpListener::from_std(socket)
                    .context("cannot register a listening socket with the runtime")?;
                let mut stop = stop.clone();
                let shutdown = async move {
                    let _ = stop.wait_for(|s| *s).await;
                };
                loops.spawn(conn::run(listener, shared.clone(), shutdown));
            }
            while loops.join_next().await.is_some() {}
            anyhow::Ok(())
        }
        .await;
        let _ = tokio::time::timeout(DRAIN_TOGETHER_MAX, drained.wait()).await;
        served
    })
}

/// How long a drained worker keeps its runtime for the others at most.
const DRAIN_TOGETHER_MAX: std::time::Duration = std::time::Duration::from_secs(60);
