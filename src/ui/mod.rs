//! The web console: server-rendered pages under `/ui/` and the JSON they
//! are made of under `/api/v1/`, served by `airlock serve` on its own
//! listener, TLS, users and roles when `[ui] enabled = true`.
//!
//! Owns: the console's routes ([`router`]), its login sessions and CSRF
//! tokens ([`session`]), the read models every page shows ([`api`]: one
//! JSON document per page, built from `state`, `stacks`, `torcx`, `auth`
//! and `ops`; a page never shows more than its JSON), the HTML ([`pages`],
//! `maud`, escaped by default) with its compiled-in assets ([`assets`]), the
//! rollout chart (SVG drawn on the server, [`chart`]) and the per-stack
//! series of cell-report samples it draws ([`series`]), and the stack
//! actions' confirmation step ([`actions`]).
//!
//! Never decides a permission: every console route is declared in
//! `server::routes` and the access layer (`server::access`) enforces it
//! before a handler runs, handing the handler the caller's grant, with
//! which read models filter lists and pages decide which forms to offer.
//! The console sits on top of the access layer: it gives it its sessions
//! ([`crate::server::access::ConsoleSessions`]) and never the other way
//! round. Never changes state except through the
//! functions the other surfaces call (`stacks::ops`, `ops::rollback`,
//! `auth::tokens`), and never loads anything from another origin: every
//! page carries a `Content-Security-Policy` without inline scripts or
//! styles.

pub mod actions;
pub mod api;
pub mod assets;
pub mod chart;
mod http;
pub mod pages;
mod routes;
pub mod series;
pub mod session;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

pub use http::{UiError, Viewer};
pub use routes::{login_redirect, router};

use crate::auth::Policy;
use crate::stacks::api::StacksServer;
use crate::state::StateStore;
use crate::store::StoreUrl;

/// What `[ui]` configures.
#[derive(Debug, Clone)]
pub struct UiConfig {
    /// How often every stack's cell reports are sampled ([`series`]).
    pub sample_interval: Duration,
    /// How long a login lasts.
    pub session_lifetime: Duration,
    /// Whether the server speaks TLS: session cookies are then `Secure`
    /// and named with the `__Host-` prefix.
    pub tls: bool,
    /// The blobstore the server serves, for the overview.
    pub store: StoreInfo,
}

impl Default for UiConfig {
    /// Samples every minute, logins for 8 hours, plain HTTP, an unnamed store.
    fn default() -> UiConfig {
        UiConfig {
            sample_interval: Duration::from_secs(60),
            session_lifetime: Duration::from_secs(8 * 3600),
            tls: false,
            store: StoreInfo::default(),
        }
    }
}

/// The blobstore as the overview names it.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct StoreInfo {
    /// `filesystem` or `s3`.
    pub backend: String,
    /// The directory or `s3://BUCKET/PREFIX`.
    pub location: String,
    /// The directory of a filesystem store (for its free space).
    #[serde(skip)]
    pub path: Option<PathBuf>,
}

impl StoreInfo {
    /// The store `url` names.
    pub fn of(url: &StoreUrl) -> StoreInfo {
        match url {
            StoreUrl::File(p) => StoreInfo {
                backend: "filesystem".into(),
                location: p.display().to_string(),
                path: Some(p.clone()),
            },
            StoreUrl::S3 { .. } => StoreInfo {
                backend: "s3".into(),
                location: url.to_string(),
                path: None,
            },
        }
    }
}

/// The console's share of the server: its settings, session keys, the
/// rollout sampler and the caches of its read models.
pub struct Console {
    /// The settings.
    pub config: UiConfig,
    /// Session signing key and logged-out sessions.
    pub sessions: session::Sessions,
    /// The latest cell-report sample of every stack.
    pub rollout: series::Sampler,
    /// Read models cached by state generation or for a few seconds.
    pub(crate) cache: api::Cache,
}

impl Console {
    /// A console with `config`.
    pub fn new(config: UiConfig) -> Console {
        Console {
            sessions: session::Sessions::new(config.session_lifetime, config.tls),
            rollout: series::Sampler::default(),
            cache: api::Cache::default(),
            config,
        }
    }
}

impl crate::server::access::ConsoleSessions for Console {
    fn user<'a>(
        &'a self,
        policy: &'a Policy,
        state: &'a StateStore,
        headers: &'a axum::http::HeaderMap,
        tls: bool,
    ) -> futures_util::future::BoxFuture<'a, Option<crate::auth::User>> {
        Box::pin(session::user(&self.sessions, policy, state, headers, tls))
    }

    fn login_redirect(&self, uri: &axum::http::Uri) -> axum::response::Response {
        login_redirect(uri)
    }
}

/// What the console needs from the composition root (`server::App`).
pub trait Context: Send + Sync + 'static {
    /// The state it shows.
    fn state(&self) -> &StateStore;
    /// The stacks API's switches and cached stack table.
    fn stacks(&self) -> &StacksServer;
    /// Users and roles, as loaded now (a SIGHUP may replace them).
    fn policy(&self) -> std::sync::Arc<Policy>;
    /// The console (`None` when `[ui]` is off: every console route is 404).
    fn console(&self) -> Option<&Console>;
    /// `[import] max_staleness` (`None`: off; see [`crate::bundle::freshness`]).
    fn max_staleness(&self) -> Option<std::time::Duration> {
        None
    }
}

/// Samples every stack's cell reports each `config.sample_interval` until
/// the process ends ([`series::sample_all`]); failures are logged and the
/// next tick tries again.
pub fn spawn_sampler(ctx: Arc<dyn Context>) -> Option<tokio::task::JoinHandle<()>> {
    let period = ctx.console()?.config.sample_interval;
    Some(tokio::spawn(async move {
        let mut tick = tokio::time::interval(period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            if let Err(e) = series::sample_all(&*ctx).await {
                tracing::warn!(error = %e, "console: sampling cell reports failed");
            }
        }
    }))
}
