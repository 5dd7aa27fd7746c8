//! `airlock serve`: the HTTP server (OCI distribution API, stacks API,
//! torcx remote, admin API, health), configured by `--config FILE` and
//! flags / `AIRLOCK_*` variables over it (see `airlock::config`).

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context as _, Result};

use airlock::config::{self, Settings};
use airlock::state::StateStore;

#[derive(clap::Args)]
pub struct ServeArgs {
    /// The serve config (TOML; see mirror-config/airlock.toml). Flags and
    /// AIRLOCK_* variables override its values.
    #[arg(long, env = "AIRLOCK_CONFIG")]
    config: Option<PathBuf>,
    /// Check the config (and the files it names) and exit: 0 when it is
    /// good, else 1 with the cause.
    #[arg(long)]
    check_config: bool,
    #[command(flatten)]
    settings: Settings,
}

pub async fn run(args: ServeArgs) -> Result<()> {
    let file = match &args.config {
        Some(path) => config::load(path)?,
        None => Settings::default(),
    };
    let settings = config::merge(file, &args.settings)?;
    let resolved = settings.clone().resolve()?;
    if args.check_config {
        println!(
            "config ok: listen {}, {}, {} users",
            resolved
                .listen
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", "),
            if resolved.tls.is_some() {
                "TLS"
            } else {
                "plain HTTP"
            },
            resolved.policy.user_count(),
        );
        return Ok(());
    }
    if let Some(filter) = &settings.log
        && let Err(e) = super::set_log_filter(filter)
    {
        anyhow::bail!("config key log = {filter:?}: {e}");
    }
    let opened = resolved
        .store
        .open(true)
        .await
        .with_context(|| format!("opening the blobstore {}", resolved.store.url))?;
    opened.sweep_scratch().await;
    if let Some(writes) = opened.describe_writes() {
        tracing::info!(target: STARTUP, store = %resolved.store.url, "{writes}");
    }
    let state = StateStore::with_cache_bytes(opened.blobstore(), resolved.cache_size)
        .with_root_refresh(resolved.root_refresh);
    let leases = airlock::ops::lease::Leases::new(state.blobstore().clone(), resolved.lease_ttl);
    let mut tasks = Background {
        opened: opened.clone(),
        state: state.clone(),
        leases: leases.clone(),
        webhooks: None,
        gc: None,
    };
    tasks.start_webhooks(&resolved.webhooks);
    tasks.start_gc(resolved.gc.clone());
    let scrub = resolved.scrub.map(|o| {
        AbortOnDrop(airlock::ops::scrub::spawn(
            state.blobstore().clone(),
            o,
            leases.job("scrub"),
        ))
    });
    tracing::info!(target: STARTUP, "{}", startup_line(&resolved));
    let (app, limits, listen, tls) = resolved.into_app(state);
    let mut reloader = config::reload::Reloader::new(args.config.clone(), args.settings, settings);
    let hangup: airlock::server::HangupHook = Box::new(move |app, tls| {
        match reloader.reload(app, tls) {
            Ok(applied) => {
                if applied.webhooks || applied.gc {
                    match reloader.current().clone().resolve() {
                        Ok(r) => {
                            if applied.webhooks {
                                tasks.start_webhooks(&r.webhooks);
                            }
                            if applied.gc {
                                tasks.start_gc(r.gc);
                            }
                        }
                        Err(e) => {
                            tracing::error!(error = %e, "config reload: cannot restart webhooks or gc")
                        }
                    }
                }
                if let Some(filter) = &applied.log
                    && let Err(e) = super::set_log_filter(filter)
                {
                    tracing::error!(error = %e, filter, "config reload: log filter not changed");
                }
                if applied.needs_restart.is_empty() {
                    tracing::info!(changes = %applied, "config reloaded (SIGHUP)");
                } else {
                    tracing::warn!(changes = %applied, "config reloaded (SIGHUP)");
                }
            }
            Err(e) => tracing::error!(
                error = %e,
                "config reload (SIGHUP) failed; keeping the running config"
            ),
        }
    });
    let served = airlock::server::serve(&listen, Arc::new(app), limits, tls, Some(hangup)).await;
    // Stop the scrub, then hand the periodic jobs to another replica now,
    // not after the lease's ttl.
    drop(scrub);
    leases.release_all().await;
    served
}

/// A task stopped when the server stops.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The server's background tasks that a config reload may restart.
struct Background {
    opened: airlock::store::OpenedStore,
    state: StateStore,
    leases: airlock::ops::lease::Leases,
    webhooks: Option<tokio::task::JoinHandle<()>>,
    gc: Option<tokio::task::JoinHandle<()>>,
}

impl Background {
    /// (Re)starts event delivery to `webhooks` (none: stopped). Queued
    /// events stay in the store, so a restart loses none.
    fn start_webhooks(&mut self, webhooks: &[airlock::events::webhook::WebhookConfig]) {
        if let Some(t) = self.webhooks.take() {
            t.abort();
        }
        if webhooks.is_empty() {
            return;
        }
        match airlock::events::deliver::Deliverer::new(
            self.state.blobstore().clone(),
            webhooks.to_vec(),
            airlock::events::deliver::DeliverySettings::default(),
        ) {
            Ok(d) => self.webhooks = Some(tokio::spawn(d.run())),
            Err(e) => tracing::error!(error = %e, "webhooks not started"),
        }
    }

    /// (Re)starts the periodic GC (`None`: stopped).
    fn start_gc(&mut self, gc: Option<(airlock::ops::gc::GcOptions, std::time::Duration)>) {
        if let Some(t) = self.gc.take() {
            t.abort();
        }
        if gc.is_none() {
            // Off here: let a replica that collects hold the lease.
            let leases = self.leases.clone();
            tokio::spawn(async move { leases.release("gc").await });
        }
        self.gc = gc.map(|(opts, interval)| {
            airlock::ops::gc::spawn_periodic(
                self.opened.clone(),
                self.state.clone(),
                opts,
                interval,
                self.leases.job("gc"),
            )
        });
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        for t in [self.webhooks.take(), self.gc.take()].into_iter().flatten() {
            t.abort();
        }
    }
}

/// The tracing target of the start-up line, shown at the default log level
/// (`--log` defaults to `warn,airlock::startup=info`).
pub const STARTUP: &str = "airlock::startup";

/// One line saying what `serve` serves: its addresses, the store, and each
/// surface with who may use it.
pub fn startup_line(r: &config::Resolved) -> String {
    let scheme = if r.tls.is_some() { "https" } else { "http" };
    let listen: Vec<String> = r.listen.iter().map(|a| format!("{scheme}://{a}")).collect();
    let who = if r.policy.is_open() {
        "no users: everyone is admin".to_string()
    } else {
        format!(
            "{} users{}",
            r.policy.user_count(),
            if r.policy.anonymous_read {
                ", anonymous pull"
            } else {
                ""
            }
        )
    };
    let on = |b: bool| if b { "on" } else { "off" };
    let remotes = r.torcx.remotes();
    let torcx = if remotes.is_empty() {
        "off (no --torcx-key)".to_string()
    } else {
        format!(
            "{}{}",
            remotes.join(","),
            if r.torcx.public() { ", public" } else { "" }
        )
    };
    format!(
        "airlock serving on {} (store {}; {who}): registry /v2 (push {}, delete {}), stacks /stacks/v1 (admin routes {}), torcx /torcx ({torcx}), imports /admin/v1/imports ({}), /metrics, /healthz, /readyz",
        listen.join(" "),
        r.store.url,
        on(r.registry.allow_push),
        on(r.registry.allow_delete),
        on(r.stacks.allow_admin),
        on(r.import_keyring.is_some()),
    )
}
