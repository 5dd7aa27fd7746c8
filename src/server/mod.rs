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

use crate::registry::{self, RegistryConfig, uploads::Uploads};
use crate::state::StateStore;

/// The composition root: every shared handle, built once at start-up.
pub struct App {
    /// Metadata and blobs; re-reads `refs/root` on every request, so imports
    /// by other processes are served without a restart.
    pub state: StateStore,
    /// Registry switches (push, delete, mirror namespace, upload expiry).
    pub registry: RegistryConfig,
    /// Blob upload sessions (scratch objects under `uploads/`).
    pub uploads: Uploads,
}

impl App {
    /// A read-only app serving `state` (the default [`RegistryConfig`]).
    pub fn new(state: StateStore) -> App {
        App::with_config(state, RegistryConfig::default())
    }

    /// An app serving `state` with `registry` switches.
    pub fn with_config(state: StateStore, registry: RegistryConfig) -> App {
        let uploads = Uploads::new(state.blobstore().clone(), registry.upload_expiry);
        App {
            state,
            registry,
            uploads,
        }
    }
}

impl registry::Context for App {
    fn state(&self) -> &StateStore {
        &self.state
    }

    fn config(&self) -> &RegistryConfig {
        &self.registry
    }

    fn uploads(&self) -> &Uploads {
        &self.uploads
    }
}

/// Sweeps expired upload sessions every `min(expiry / 4, 1 h)` (at least
/// every second) until the process ends; failures are logged and retried
/// at the next tick.
pub fn spawn_upload_sweeper(app: Arc<App>) -> tokio::task::JoinHandle<()> {
    let period = (app.registry.upload_expiry / 4)
        .min(std::time::Duration::from_secs(3600))
        .max(std::time::Duration::from_secs(1));
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(period);
        loop {
            tick.tick().await;
            match app.uploads.sweep().await {
                Ok(0) => {}
                Ok(n) => tracing::info!(sessions = n, "expired upload sessions removed"),
                Err(e) => tracing::warn!(error = %e, "upload sweep failed"),
            }
        }
    })
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
/// accepting and waits for in-flight requests to finish. Expired upload
/// sessions are swept meanwhile ([`spawn_upload_sweeper`]).
///
/// Errors: the address cannot be bound, or the accept loop fails.
pub async fn serve(listen: SocketAddr, app: Arc<App>) -> anyhow::Result<()> {
    let listener = TcpListener::bind(listen)
        .await
        .with_context(|| format!("cannot listen on {listen}"))?;
    let sweeper = spawn_upload_sweeper(app.clone());
    let result = serve_on(listener, app, shutdown_signal()).await;
    sweeper.abort();
    result
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
