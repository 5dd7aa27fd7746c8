//! HTTP listener: the composition root ([`App`]), the top-level router, and
//! the accept loop with `TCP_NODELAY`, connection [`Limits`] and graceful
//! shutdown.
//!
//! Owns: building shared handles once and handing them to every router as one
//! `Arc<App>`; cross-cutting concerns applied once to every route (request
//! logs, [`access`] control), TLS ([`tls`]). Never implements an API itself:
//! `/v2` lives in `registry`, `/torcx` in `torcx`, `/stacks/v1` in
//! `stacks::api`, `/admin/v1` in `admin`, `/ui/` and `/api/v1/` in `ui`,
//! liveness and readiness in [`health`].

pub mod access;
mod activity;
mod body;
mod budget;
mod conn;
pub mod health;
mod limits;
pub mod metrics;
pub mod routes;
mod slots;
pub mod tls;
pub mod trace;
mod workers;

pub use body::BodyTooSlow;
pub use limits::Limits;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context as _;
use arc_swap::ArcSwap;
use axum::Router;
use axum::routing::get;
use tokio::net::TcpListener;

use crate::registry::{self, RegistryConfig, uploads::Uploads};
use crate::stacks::{
    self,
    api::{StacksConfig, StacksServer},
};
use crate::state::StateStore;
use crate::state::pulls::PullRecorder;

/// The composition root: every shared handle, built once at start-up.
pub struct App {
    /// Metadata and blobs; re-reads `refs/root` on every request, so imports
    /// by other processes are served without a restart.
    pub state: StateStore,
    /// Registry switches (push, delete, mirror namespace, upload expiry);
    /// replaced whole by a config reload ([`App::reload`]).
    pub registry: ArcSwap<RegistryConfig>,
    /// Blob upload sessions (scratch objects under `uploads/`).
    pub uploads: Uploads,
    /// torcx remote signing keys and signed-document cache (`/torcx`).
    pub torcx: crate::torcx::api::TorcxConfig,
    /// The stacks API's switches and rootfs downloads in flight.
    pub stacks: StacksServer,
    /// Who may do what ([`access`]); open (everyone is admin) by default;
    /// replaced whole by a config reload.
    pub auth: ArcSwap<crate::auth::Policy>,
    /// Keyring trusted for `POST /admin/v1/imports`; `None`: off.
    pub import_keyring: ArcSwap<Option<std::path::PathBuf>>,
    /// `[import] max_staleness` in seconds (0: off): how old the newest
    /// imported bundle may be before `/readyz`, the console and `airlock
    /// status` say the site is stale ([`crate::bundle::freshness`]).
    pub max_staleness: std::sync::atomic::AtomicU64,
    /// `[[import.policy]]`: the upstream signatures imports over HTTP
    /// require ([`crate::signatures::SitePolicy`]).
    pub signature_policy: ArcSwap<crate::signatures::SitePolicy>,
    /// The web console (`/ui/`, `/api/v1/`); `None`: off (`[ui] enabled`).
    pub ui: Option<Arc<crate::ui::Console>>,
    /// Manifest GETs noted for `gc`'s `pulled_within_days`, written to the
    /// store by [`spawn_pull_flusher`] and when [`serve`] stops.
    pub pulls: PullRecorder,
    /// Set when [`serve`] got SIGTERM or SIGINT: `/readyz` answers 503 so
    /// that load balancers stop sending requests while they are still
    /// served (`[limits] shutdown_delay_secs`).
    pub stopping: std::sync::atomic::AtomicBool,
    /// The store's write lock as this server last read it (every
    /// [`crate::ops::write_lock::REFRESH`], [`spawn_lock_watch`]): while
    /// held, the access layer answers writes 503 ([`access`]).
    pub write_lock: crate::ops::write_lock::LockView,
}

impl App {
    /// A read-only app serving `state` (the default [`RegistryConfig`]).
    pub fn new(state: StateStore) -> App {
        App::with_config(state, RegistryConfig::default())
    }

    /// An app serving `state` with `registry` switches.
    pub fn with_config(state: StateStore, registry: RegistryConfig) -> App {
        let uploads = Uploads::with_limits(
            state.blobstore().clone(),
            registry.upload_expiry,
            registry.uploads,
        );
        let pulls = PullRecorder::default();
        pulls.set_on(!registry.pull_record_interval.is_zero());
        App {
            state,
            pulls,
            registry: ArcSwap::from_pointee(registry),
            uploads,
            torcx: Default::default(),
            stacks: StacksServer::default(),
            auth: ArcSwap::from_pointee(crate::auth::Policy::open()),
            import_keyring: ArcSwap::from_pointee(None),
            max_staleness: Default::default(),
            signature_policy: ArcSwap::from_pointee(Default::default()),
            ui: None,
            stopping: Default::default(),
            write_lock: Default::default(),
        }
    }

    /// Replaces the registry switches and upload caps (a config reload):
    /// requests that start from now on see them; sessions keep their
    /// objects, counted under the new caps.
    pub fn set_registry(&self, registry: RegistryConfig) {
        self.uploads
            .set_limits(registry.upload_expiry, registry.uploads);
        self.pulls.set_on(!registry.pull_record_interval.is_zero());
        self.registry.store(Arc::new(registry));
    }

    /// `[import] max_staleness` (`None`: off; see [`crate::bundle::freshness`]).
    pub fn staleness_bound(&self) -> Option<std::time::Duration> {
        match self
            .max_staleness
            .load(std::sync::atomic::Ordering::Relaxed)
        {
            0 => None,
            secs => Some(std::time::Duration::from_secs(secs)),
        }
    }

    /// The console's sessions, for the access layer (`None`: `[ui]` off).
    pub fn console_sessions(&self) -> Option<&dyn access::ConsoleSessions> {
        self.ui
            .as_deref()
            .map(|c| c as &dyn access::ConsoleSessions)
    }

    /// Whether `req` came over TLS ([`tls::OverTls`]).
    pub fn tls_request(&self, req: &axum::extract::Request) -> bool {
        req.extensions().get::<tls::OverTls>().is_some()
    }

    /// The same app with the stacks API's switches set to `config`.
    pub fn with_stacks(mut self, config: StacksConfig) -> App {
        self.stacks = StacksServer::new(config);
        self
    }
}

impl stacks::api::Context for App {
    fn state(&self) -> &StateStore {
        &self.state
    }

    fn stacks(&self) -> &StacksServer {
        &self.stacks
    }
}

impl registry::Context for App {
    fn state(&self) -> &StateStore {
        &self.state
    }

    fn config(&self) -> registry::ConfigGuard {
        self.registry.load()
    }

    fn uploads(&self) -> &Uploads {
        &self.uploads
    }

    fn pulls(&self) -> &PullRecorder {
        &self.pulls
    }
}

impl crate::admin::Context for App {
    fn state(&self) -> &StateStore {
        &self.state
    }

    fn import_keyring(&self) -> Option<std::path::PathBuf> {
        self.import_keyring.load().as_ref().clone()
    }

    fn immutable_tags(&self) -> Vec<String> {
        self.registry.load().immutable_tags.clone()
    }

    fn signature_policy(&self) -> crate::signatures::SitePolicy {
        self.signature_policy.load().as_ref().clone()
    }
}

impl crate::sbom::api::Context for App {
    fn state(&self) -> &StateStore {
        &self.state
    }
}

impl crate::ui::Context for App {
    fn state(&self) -> &StateStore {
        &self.state
    }

    fn stacks(&self) -> &StacksServer {
        &self.stacks
    }

    fn policy(&self) -> Arc<crate::auth::Policy> {
        self.auth.load_full()
    }

    fn console(&self) -> Option<&crate::ui::Console> {
        self.ui.as_deref()
    }

    fn max_staleness(&self) -> Option<std::time::Duration> {
        self.staleness_bound()
    }
}

impl crate::torcx::api::Context for App {
    fn state(&self) -> &StateStore {
        &self.state
    }

    fn torcx(&self) -> &crate::torcx::api::TorcxConfig {
        &self.torcx
    }
}

/// Sweeps expired and idle upload sessions every
/// [`Uploads::sweep_period`] until the process ends; failures are logged
/// and retried at the next tick.
pub fn spawn_upload_sweeper(app: Arc<App>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            // Read each time: a config reload may change the timeouts.
            tokio::time::sleep(app.uploads.sweep_period()).await;
            match app.uploads.sweep().await {
                Ok(0) => {}
                Ok(n) => tracing::info!(sessions = n, "expired or idle upload sessions removed"),
                Err(e) => tracing::warn!(error = %e, "upload sweep failed"),
            }
        }
    })
}

/// Writes the pulls noted by the registry to the store every
/// `pull_record_interval` (read each time: a config reload may change it;
/// zero: nothing is noted, what was is written within a minute), or sooner when the notes
/// fill up, until the process ends; failures are logged and retried at the
/// next tick with the notes kept. [`serve`] flushes once more when it stops.
pub fn spawn_pull_flusher(app: Arc<App>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            let interval = app.registry.load().pull_record_interval;
            let wait = if interval.is_zero() {
                registry::config::DEFAULT_PULL_RECORD_INTERVAL
            } else {
                interval
            };
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                () = app.pulls.filling() => {}
            }
            // Also when off: notes taken before a reload turned it off.
            flush_pulls(&app).await;
        }
    })
}

/// Reads the store's write lock every [`crate::ops::write_lock::REFRESH`]
/// into [`App::write_lock`] until the process ends; a failed read is
/// logged and the view kept (a lock seen stays counted until its ttl).
pub fn spawn_lock_watch(app: Arc<App>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            if let Err(e) = app.write_lock.refresh(&**app.state.blobstore()).await {
                tracing::warn!(error = %e, "write lock not read; retried");
            }
            tokio::time::sleep(crate::ops::write_lock::REFRESH).await;
        }
    })
}

/// Writes the pulls noted so far to the store; a failure is logged.
async fn flush_pulls(app: &App) {
    match app.pulls.flush(&**app.state.blobstore()).await {
        Ok(0) => {}
        Ok(n) => tracing::debug!(notes = n, "pull record written"),
        Err(e) => tracing::warn!(error = %e, "pull record not written; retried at the next flush"),
    }
}

/// The whole HTTP surface: `/healthz`, `/readyz`, `/metrics`, the OCI `/v2`
/// API, the torcx remote `/torcx`, the `/stacks/v1` API, the `/admin/v1`
/// API and, when on, the console (`/ui/`, `/api/v1/`), behind the [`access`] layer (users and roles), with a request log
/// (method, path, status, duration) around every route.
pub fn router(app: Arc<App>) -> Router {
    let console = match app.ui {
        Some(_) => crate::ui::router(app.clone()),
        None => Router::new(),
    };
    Router::new()
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .route("/metrics", get(metrics::metrics))
        .with_state(app.clone())
        .merge(crate::torcx::api::router(app.clone()))
        .merge(stacks::api::router(app.clone()))
        .merge(crate::admin::router(app.clone()))
        .merge(crate::sbom::api::router(app.clone()))
        .merge(console)
        .merge(registry::router(app.clone()))
        .layer(axum::middleware::from_fn_with_state(app, front))
}

/// The cross-cutting concerns every request passes through, outermost
/// first: metrics ([`metrics::record`]), the request log
/// ([`trace::log_request`]) and access control ([`access::check`]). One
/// middleware calling the three in turn, so that a request pays for one
/// layer (axum boxes the inner service and the future of each), not three.
async fn front(
    axum::extract::State(app): axum::extract::State<Arc<App>>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    front_with(app, req, |req| next.run(req)).await
}

/// [`front`] around `inner`. Not an `async fn` (nor are the layers): each
/// would hold the request beside its inner future, and the whole is
/// copied into a box per request.
fn front_with<F>(
    app: Arc<App>,
    req: axum::extract::Request,
    inner: impl FnOnce(axum::extract::Request) -> F,
) -> impl Future<Output = axum::response::Response>
where
    F: Future<Output = axum::response::Response>,
{
    metrics::record(req, |req| {
        trace::log_request(req, |req| access::check(app, req, inner))
    })
}

/// Whether [`router`] sends a request for `path` to the registry: `/v2`,
/// `/v2/` and `/v2/{*path}`.
fn is_registry_path(path: &str) -> bool {
    path == "/v2" || path.starts_with("/v2/")
}

/// Serves a request [`is_registry_path`] as [`router`] does ([`front`],
/// then [`registry::serve`]), without the router: no route matching, no
/// path parameters, no boxed layers. As axum's router does, the body of a
/// HEAD response is dropped after its `Content-Length` is set.
fn serve_registry(
    app: Arc<App>,
    req: axum::extract::Request,
) -> impl Future<Output = axum::response::Response> {
    let head = req.method() == axum::http::Method::HEAD;
    let ctx = app.clone();
    let inner = front_with(app, req, |req| registry::serve_owned(ctx, req));
    futures_util::FutureExt::map(inner, move |res| without_head_body(res, head))
}

/// `res` with its body dropped for a HEAD request (`head`), after its
/// `Content-Length` is set from the body's exact size when it has none.
fn without_head_body(mut res: axum::response::Response, head: bool) -> axum::response::Response {
    if head {
        let hint = axum::body::HttpBody::size_hint(res.body());
        if let Some(len) = hint.exact()
            && !res
                .headers()
                .contains_key(axum::http::header::CONTENT_LENGTH)
        {
            res.headers_mut()
                .insert(axum::http::header::CONTENT_LENGTH, len.into());
        }
        *res.body_mut() = axum::body::Body::empty();
    }
    res
}

/// What `serve` does on SIGHUP: called with the app and the running TLS
/// (a config reload, see `config::reload`). Without one, SIGHUP is logged
/// and ignored; it never stops the server.
pub type HangupHook = Box<dyn FnMut(&App, Option<&tls::Tls>) + Send>;

/// Binds every address of `listen` and serves [`router`] on each (over TLS
/// when `tls` is given) under `limits` until SIGINT or SIGTERM; then
/// `/readyz` answers 503 while requests are still served for
/// `limits.shutdown_delay` ([`lame_duck`]), then it stops accepting and
/// waits (at most `limits.shutdown_timeout`) for in-flight requests to
/// finish, then writes the pulls noted since the last flush.
/// Expired upload sessions are swept meanwhile
/// ([`spawn_upload_sweeper`]), pulls written ([`spawn_pull_flusher`]);
/// each SIGHUP runs `hangup`.
///
/// Layout: `limits.workers` worker threads, each with its own runtime and
/// `SO_REUSEPORT` socket per address ([`workers`]); with `Some(0)` workers,
/// or when the OS refuses `SO_REUSEPORT`, one listener per address served
/// on the caller's runtime. Connection caps and the response budget are
/// global either way.
///
/// Errors: an address cannot be bound (another process listens on it, not
/// local, no permission), SIGHUP cannot be watched, a worker thread cannot
/// be started.
pub async fn serve(
    listen: &[SocketAddr],
    app: Arc<App>,
    limits: Limits,
    tls: Option<Arc<tls::Tls>>,
    hangup: Option<HangupHook>,
) -> anyhow::Result<()> {
    let workers = limits.workers.unwrap_or_else(|| {
        std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
    });
    let sockets = match workers {
        0 => None,
        n => workers::bind(listen, n)?,
    };
    let mut listeners = Vec::new();
    if sockets.is_none() {
        for addr in listen {
            listeners.push(
                TcpListener::bind(addr)
                    .await
                    .with_context(|| format!("cannot listen on {addr}"))?,
            );
        }
    }
    let reloader = spawn_hangup(app.clone(), tls.clone(), hangup)?;
    let sweeper = spawn_upload_sweeper(app.clone());
    let flusher = spawn_pull_flusher(app.clone());
    let lock_watch = spawn_lock_watch(app.clone());
    let sampler = crate::ui::spawn_sampler(app.clone());
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let mut servers = tokio::task::JoinSet::new();
    let limits_delay = limits.shutdown_delay;
    let shared = conn::Shared::new(app.clone(), limits, tls);
    if let Some(sockets) = sockets {
        for l in sockets.first().into_iter().flatten() {
            log_serving(l.local_addr().ok(), &shared, sockets.len());
        }
        servers.spawn(workers::run(sockets, shared, stopped));
    } else {
        for listener in listeners {
            log_serving(listener.local_addr().ok(), &shared, 0);
            let mut stopped = stopped.clone();
            let shutdown = async move {
                let _ = stopped.wait_for(|s| *s).await;
            };
            let shared = shared.clone();
            servers.spawn(async move {
                conn::run(listener, shared, shutdown).await;
                Ok(())
            });
        }
    }
    shutdown_signal().await;
    lame_duck(&app, limits_delay).await;
    let _ = stop.send(true);
    let mut result = Ok(());
    while let Some(r) = servers.join_next().await {
        if let Ok(Err(e)) = r {
            result = Err(e);
        }
    }
    flusher.abort();
    lock_watch.abort();
    flush_pulls(&app).await;
    tracing::info!("server stopped");
    sweeper.abort();
    reloader.abort();
    if let Some(s) = sampler {
        s.abort();
    }
    result
}

/// Runs `hangup` on every SIGHUP until the process ends (without one, logs
/// that nothing is reloaded). Errors: SIGHUP cannot be watched.
fn spawn_hangup(
    app: Arc<App>,
    tls: Option<Arc<tls::Tls>>,
    mut hangup: Option<HangupHook>,
) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    let mut hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
        .context("cannot listen for SIGHUP")?;
    Ok(tokio::spawn(async move {
        while hup.recv().await.is_some() {
            match hangup.as_mut() {
                Some(f) => f(&app, tls.as_deref()),
                None => tracing::info!("SIGHUP received: no config file to reload"),
            }
        }
    }))
}

/// Serves [`router`] on an already bound `listener` until `shutdown`
/// completes (graceful: no new connections, in-flight requests finish
/// within `limits.shutdown_timeout`). Every accepted socket gets
/// `TCP_NODELAY`, so a response is never held back by Nagle's algorithm
/// waiting for the client's delayed ACK. Slow, idle and surplus clients are
/// handled as [`Limits`] describes; accept errors (e.g. `EMFILE`) are
/// logged and retried after a short pause.
///
/// Errors: the listener's address cannot be read.
pub async fn serve_on(
    listener: TcpListener,
    app: Arc<App>,
    limits: Limits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    serve_listener(listener, app, limits, None, shutdown).await
}

/// [`serve_on`], over TLS when `tls` is given.
///
/// Errors: the listener's address cannot be read.
pub async fn serve_listener(
    listener: TcpListener,
    app: Arc<App>,
    limits: Limits,
    tls: Option<Arc<tls::Tls>>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let addr = listener
        .local_addr()
        .context("listener has no local address")?;
    let shared = conn::Shared::new(app, limits, tls);
    log_serving(Some(addr), &shared, 0);
    conn::run(listener, shared, shutdown).await;
    tracing::info!(%addr, "server stopped");
    Ok(())
}

/// The start-up log line of one listen address (`workers` 0: served on the
/// caller's runtime).
fn log_serving(addr: Option<SocketAddr>, shared: &conn::Shared, workers: usize) {
    let limits = shared.limits();
    tracing::info!(
        addr = ?addr,
        tls = shared.tls(),
        workers,
        header_timeout_secs = limits.header_timeout.as_secs_f64(),
        idle_timeout_secs = limits.idle_timeout.as_secs_f64(),
        max_connections = limits.max_connections,
        "serving HTTP"
    );
}

/// The stop's first phase: `/readyz` answers 503 from now on while every
/// request is still served for `delay`, so that a load balancer's health
/// check takes the replica out before its listeners close (a connection
/// the balancer opened just before would otherwise be reset: 502). A
/// second SIGINT or SIGTERM ends the wait.
async fn lame_duck(app: &App, delay: std::time::Duration) {
    app.stopping
        .store(true, std::sync::atomic::Ordering::Release);
    if delay.is_zero() {
        return;
    }
    tracing::info!(
        delay_secs = delay.as_secs_f64(),
        "not ready (503 on /readyz); still serving until the shutdown delay has passed"
    );
    tokio::select! {
        () = tokio::time::sleep(delay) => {}
        () = shutdown_signal() => {}
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// What a registry request's future may weigh: it is copied whole into
    /// its box on every request (once 10 KiB, a third of a small GET's
    /// instructions). A rare await that grows it belongs in a box where it
    /// is awaited (see docs/architecture.md, "Where the speed comes from").
    const MAX_REQUEST_FUTURE: usize = 4096;

    #[test]
    fn a_registry_request_future_stays_small() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn crate::store::Blobstore> =
            Arc::new(crate::store::fs::FsStore::open(dir.path()).unwrap());
        let app = Arc::new(App::new(StateStore::new(store)));
        let req = axum::extract::Request::new(axum::body::Body::empty());
        let fut = serve_registry(app, req);
        let size = std::mem::size_of_val(&fut);
        eprintln!("registry request future: {size} bytes");
        assert!(
            size <= MAX_REQUEST_FUTURE,
            "the registry request future is {size} bytes (at most {MAX_REQUEST_FUTURE})"
        );
    }
}
