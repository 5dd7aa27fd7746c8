//! HTTP listener: the composition root ([`App`]), the top-level router, and
//! the accept loop with `TCP_NODELAY` and graceful shutdown.
//!
//! Owns: building shared handles once and handing them to every router as one
//! `Arc<App>`; cross-cutting concerns applied once to every route (request
//! logs). Never implements an API itself: `/v2` lives in `registry`,
//! liveness and readiness in [`health`].

pub mod health;
pub mod trace;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context as _;
use axum::Router;
use axum::routing::get;
use axum::serve::ListenerExt;
use tokio::net::TcpListener;

use crate::registry;
use crate::state::StateStore;

/// The composition root: every shared handle, built once at start-up.
pub struct App {
    /// Metadata and blobs; re-reads `refs/root` on every request, so imports
    /// by other processes are served without a restart.
    pub state: StateStore,
}

impl App {
    /// An app serving `state`.
    pub fn new(state: StateStore) -> App {
        App { state }
    }
}

impl registry::Context for App {
    fn state(&self) -> &StateStore {
        &self.state
    }
}

/// The whole HTTP surface: `/healthz`, `/readyz` and the OCI `/v2` API,
/// with a request log (method, path, status, duration) around every route.
pub fn router(app: Arc<App>) -> Router {
    Router::new()
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .with_state(app.clone())
        .merge(registry::router(app))
        .layer(axum::middleware::from_fn(trace::log_request))
}

/// Binds `listen` and serves [`router`] until SIGINT or SIGTERM, then stops
/// accepting and waits for in-flight requests to finish.
///
/// Errors: the address cannot be bound, or the accept loop fails.
pub async fn serve(listen: SocketAddr, app: Arc<App>) -> anyhow::Result<()> {
    let listener = TcpListener::bind(listen)
        .await
        .with_context(|| format!("cannot listen on {listen}"))?;
    serve_on(listener, app, shutdown_signal()).await
}

/// Serves [`router`] on an already bound `listener` until `shutdown`
/// completes (graceful: in-flight requests finish). Every accepted socket
/// gets `TCP_NODELAY`, so a response is never held back by Nagle's
/// algorithm waiting for the client's delayed ACK.
///
/// Errors: the listener's address cannot be read, or the server fails.
pub async fn serve_on(
    listener: TcpListener,
    app: Arc<App>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let addr = listener
        .local_addr()
        .context("listener has no local address")?;
    tracing::info!(%addr, "serving HTTP");
    let listener = listener.tap_io(|tcp| {
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::warn!(error = %e, "cannot set TCP_NODELAY");
        }
    });
    axum::serve(listener, router(app))
        .with_graceful_shutdown(shutdown)
        .await
        .context("HTTP server failed")?;
    tracing::info!(%addr, "server stopped");
    Ok(())
}

/// Completes on the first SIGINT (Ctrl-C) or SIGTERM. If a handler cannot
/// be installed, that signal is logged and ignored, the other still works.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        if let Err(e) = tokio::signal::ctrl_c().await {
            tracing::warn!(error = %e, "cannot listen for SIGINT");
            std::future::pending::<()>().await;
        }
    };
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        () = ctrl_c => tracing::info!("SIGINT received, shutting down"),
        () = term => tracing::info!("SIGTERM received, shutting down"),
    }
}
