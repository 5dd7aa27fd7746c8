//! `SIGHUP`: re-reading the serve config while serving (issue 23 §7).
//!
//! Owns: deciding, key by key, what a changed config changes in a running
//! server, and applying the live part to its [`App`]. Live: users and
//! `[auth]`, `[registry]` and the upload limits, the torcx signing keys,
//! the import keyring, the TLS certificate and key files, webhooks, the
//! periodic GC and the log filter (the last three are applied by the
//! caller, which owns those tasks and the log subscriber: see
//! [`Applied`]). Needing a restart (kept as they are, and named in the
//! log): the listen addresses, `plain_http`, `workers`, the store, turning
//! TLS on or off, the client CA, `[stacks]`, and the connection limits
//! (timeouts, connection caps, request head size, response buffer, cache
//! size). An invalid config changes nothing: the old one stays in force and
//! the error is returned for the log. Never reads signals itself.

use std::path::PathBuf;

use super::{ConfigError, Settings, load, merge};
use crate::server::App;
use crate::server::tls::Tls;

/// What one reload did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Applied {
    /// The sections or keys applied live (`users`, `registry`, ...).
    pub changed: Vec<String>,
    /// Keys that changed but need a restart, kept as they were.
    pub needs_restart: Vec<String>,
    /// The webhooks changed: the caller restarts event delivery.
    pub webhooks: bool,
    /// `[gc]` changed: the caller restarts the periodic GC.
    pub gc: bool,
    /// The new log filter, when `log` changed.
    pub log: Option<String>,
}

/// Re-reads the config file (and the flags given at start, which still
/// override it) on request.
pub struct Reloader {
    path: Option<PathBuf>,
    flags: Settings,
    current: Settings,
}

/// The `[limits]` keys a running listener cannot change.
const CONNECTION_LIMITS: &[&str] = &[
    "header_timeout_secs",
    "idle_timeout_secs",
    "max_connections",
    "max_connections_per_address",
    "min_body_rate",
    "manifest_put_timeout_secs",
    "max_request_head",
    "max_response_buffer",
    "cache_size",
    "shutdown_delay_secs",
    "shutdown_timeout_secs",
    "lean_http1",
];

fn value<T: serde::Serialize>(v: &T) -> toml::Value {
    toml::Value::try_from(v).unwrap_or(toml::Value::Boolean(false))
}

/// Keys of the table `section` whose values differ (absent counts as a value).
fn changed_keys(old: &toml::Value, new: &toml::Value) -> Vec<String> {
    let empty = toml::map::Map::new();
    let (o, n) = (
        old.as_table().unwrap_or(&empty),
        new.as_table().unwrap_or(&empty),
    );
    let mut keys: Vec<String> = o
        .keys()
        .chain(n.keys())
        .filter(|k| o.get(*k) != n.get(*k))
        .cloned()
        .collect();
    keys.sort();
    keys.dedup();
    keys
}

impl Reloader {
    /// A reloader for a server started from `path` (if any) with `flags`,
    /// whose settings in force are `current` (file merged with flags).
    pub fn new(path: Option<PathBuf>, flags: Settings, current: Settings) -> Reloader {
        Reloader {
            path,
            flags,
            current,
        }
    }

    /// Reads the config again and applies what can change live to `app`
    /// (and `tls`, the running listener's). The settings in force become
    /// the new ones, except the keys named in [`Applied::needs_restart`].
    ///
    /// Errors: the file cannot be read, or the config is invalid (a
    /// one-line cause); nothing is changed then.
    pub fn reload(&mut self, app: &App, tls: Option<&Tls>) -> Result<Applied, ConfigError> {
        let file = match &self.path {
            Some(p) => load(p)?,
            None => Settings::default(),
        };
        let new = merge(file, &self.flags)?;
        let resolved = new.clone().resolve()?;
        let old = &self.current;
        let mut applied = Applied::default();
        let mut restart = |key: &str| applied.needs_restart.push(key.to_string());

        // What a running listener and store cannot change.
        if old.listen != new.listen {
            restart("listen");
        }
        if old.plain_http != new.plain_http {
            restart("plain_http");
        }
        if old.workers != new.workers {
            restart("workers");
        }
        for k in changed_keys(&value(&old.store), &value(&new.store)) {
            restart(&format!("store.{k}"));
        }
        if value(&old.stacks) != value(&new.stacks) {
            restart("stacks");
        }
        let limits = changed_keys(&value(&old.limits), &value(&new.limits));
        for k in limits
            .iter()
            .filter(|k| CONNECTION_LIMITS.contains(&k.as_str()))
        {
            restart(&format!("limits.{k}"));
        }
        let tls_files = |s: &Settings| (s.tls.cert.clone(), s.tls.key.clone());
        match (tls, &resolved.tls) {
            (Some(running), Some(t)) if old.tls.client_ca == new.tls.client_ca => {
                // Always: a certificate renewed in place has the same paths.
                running.replace_with(t);
                if tls_files(old) != tls_files(&new) {
                    applied.changed.push("tls".into());
                }
            }
            (Some(_), Some(_)) => restart("tls.client_ca"),
            (None, None) => {}
            _ => restart("tls"),
        }

        // What a running server takes at once.
        if value(&old.users) != value(&new.users) || value(&old.auth) != value(&new.auth) {
            app.auth.store(std::sync::Arc::new(resolved.policy));
            applied.changed.push("users".into());
        }
        let upload_limits = limits
            .iter()
            .any(|k| !CONNECTION_LIMITS.contains(&k.as_str()));
        if value(&old.registry) != value(&new.registry) || upload_limits {
            app.set_registry(resolved.registry);
            applied.changed.push("registry".into());
        }
        if value(&old.torcx) != value(&new.torcx) {
            app.torcx.replace_keys(resolved.torcx);
            applied.changed.push("torcx".into());
        }
        if value(&old.import) != value(&new.import) {
            app.import_keyring
                .store(std::sync::Arc::new(resolved.import_keyring));
            app.signature_policy
                .store(std::sync::Arc::new(resolved.signature_policy));
            app.max_staleness.store(
                resolved.max_staleness.map_or(0, |d| d.as_secs()),
                std::sync::atomic::Ordering::Relaxed,
            );
            applied.changed.push("import".into());
        }
        if value(&old.webhooks) != value(&new.webhooks) {
            applied.webhooks = true;
            applied.changed.push("webhook".into());
        }
        if value(&old.gc) != value(&new.gc) {
            applied.gc = true;
            applied.changed.push("gc".into());
        }
        if old.log != new.log {
            applied.log = new.log.clone();
            applied.changed.push("log".into());
        }

        // The keys that need a restart keep their running values.
        let mut kept = new;
        if !applied.needs_restart.is_empty() {
            kept.listen.clone_from(&old.listen);
            kept.plain_http = old.plain_http;
            kept.workers = old.workers;
            kept.store = old.store.clone();
            kept.stacks = old.stacks.clone();
            kept.tls.client_ca.clone_from(&old.tls.client_ca);
            if tls.is_none() {
                kept.tls = old.tls.clone();
            }
            keep_connection_limits(&mut kept, old);
        }
        self.current = kept;
        Ok(applied)
    }

    /// The settings in force.
    pub fn current(&self) -> &Settings {
        &self.current
    }
}

/// `new` with `old`'s connection limits (they need a restart).
fn keep_connection_limits(new: &mut Settings, old: &Settings) {
    let (o, n) = (&old.limits, &mut new.limits);
    n.header_timeout_secs = o.header_timeout_secs;
    n.idle_timeout_secs = o.idle_timeout_secs;
    n.max_connections = o.max_connections;
    n.max_connections_per_address = o.max_connections_per_address;
    n.min_body_rate = o.min_body_rate;
    n.manifest_put_timeout_secs = o.manifest_put_timeout_secs;
    n.max_request_head = o.max_request_head;
    n.max_response_buffer = o.max_response_buffer;
    n.cache_size = o.cache_size;
    n.shutdown_delay_secs = o.shutdown_delay_secs;
    n.shutdown_timeout_secs = o.shutdown_timeout_secs;
    n.lean_http1 = o.lean_http1;
}

impl std::fmt::Display for Applied {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.changed.is_empty() {
            f.write_str("nothing changed")?;
        } else {
            write!(f, "applied: {}", self.changed.join(", "))?;
        }
        if !self.needs_restart.is_empty() {
            write!(
                f,
                "; needs a restart (kept as running): {}",
                self.needs_restart.join(", ")
            )?;
        }
        Ok(())
    }
}
