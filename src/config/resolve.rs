//! From [`Settings`] to the server's parts: defaults applied, every value
//! checked, files loaded (TLS, keys, keyring), nothing opened for writing.

use std::net::SocketAddr;
use std::num::NonZeroU64;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::{ConfigError, Settings, StoreSection};
use crate::auth::{Policy, ThrottleLimits, User};
use crate::registry::RegistryConfig;
use crate::registry::uploads::UploadLimits;
use crate::server::{App, Limits, tls};
use crate::stacks::api::StacksConfig;
use crate::state::StateStore;
use crate::store::s3::S3Settings;
use crate::store::space::FreeSpaceFloor;
use crate::store::{OpenedStore, StoreUrl};
use crate::torcx::api::TorcxConfig;

/// Most HTTP worker threads `workers` may ask for.
const MAX_WORKERS: u64 = 1024;

/// A checked config, ready to serve.
pub struct Resolved {
    /// Addresses to listen on.
    pub listen: Vec<SocketAddr>,
    /// The blobstore: which, and how to open it.
    pub store: StoreTarget,
    /// Registry switches and upload caps.
    pub registry: RegistryConfig,
    /// `/stacks/v1` switches.
    pub stacks: StacksConfig,
    /// torcx signing keys.
    pub torcx: TorcxConfig,
    /// Connection limits.
    pub limits: Limits,
    /// TLS, when configured.
    pub tls: Option<Arc<tls::Tls>>,
    /// Users and roles.
    pub policy: Policy,
    /// Keyring for `POST /admin/v1/imports`.
    pub import_keyring: Option<PathBuf>,
    /// `[import] max_staleness` (`None`: off).
    pub max_staleness: Option<Duration>,
    /// `[[import.policy]]`, keys read.
    pub signature_policy: crate::signatures::SitePolicy,
    /// Where events are delivered (checked).
    pub webhooks: Vec<crate::events::webhook::WebhookConfig>,
    /// Bytes of metadata pages kept in memory.
    pub cache_size: u64,
    /// How stale the state root may be when another process changed it
    /// ([`StateStore::with_root_refresh`]).
    pub root_refresh: Duration,
    /// Garbage collection inside the server: its options and interval
    /// (`None`: never).
    pub gc: Option<(crate::ops::gc::GcOptions, Duration)>,
    /// The web console (`None`: off).
    pub ui: Option<crate::ui::UiConfig>,
    /// The scrub inside the server (`None`: never).
    pub scrub: Option<crate::ops::scrub::ScrubOptions>,
    /// How long a lease on a periodic job outlives its last renewal
    /// ([`crate::ops::lease`]).
    pub lease_ttl: Duration,
}

/// Which blobstore to open and how ([`StoreSection::target`]).
#[derive(Debug, Clone)]
pub struct StoreTarget {
    /// `store.url`, else `store.path` [default: ./airlock-data].
    pub url: StoreUrl,
    /// The S3 settings (used when `url` is `s3://`).
    pub s3: S3Settings,
    /// The free-space floor of the filesystem store.
    pub min_free_space: FreeSpaceFloor,
    /// `store.metadata_copies` (1 or 2); `None`: the backend's default.
    pub metadata_copies: Option<u8>,
}

impl StoreTarget {
    /// Opens the store (see [`crate::store::open`]); a filesystem
    /// directory is created when `create`, else it must exist.
    pub async fn open(&self, create: bool) -> crate::store::Result<OpenedStore> {
        crate::store::open(
            &self.url,
            &self.s3,
            self.min_free_space,
            self.metadata_copies,
            create,
        )
        .await
    }
}

impl StoreSection {
    /// Checks the `[store]` keys: one of `url` and `path`, a valid URL,
    /// part size and free-space floor.
    ///
    /// Errors: [`ConfigError::Value`] naming the key.
    pub fn target(&self) -> Result<StoreTarget, ConfigError> {
        let url = match (&self.url, &self.path) {
            (Some(_), Some(_)) => {
                return Err(ConfigError::value(
                    "store.url",
                    "set store.url (--store) or store.path (--data), not both",
                ));
            }
            (Some(u), None) => u
                .parse::<StoreUrl>()
                .map_err(|e| ConfigError::value("store.url", e))?,
            (None, Some(p)) => StoreUrl::File(p.clone()),
            (None, None) => StoreUrl::File("./airlock-data".into()),
        };
        let (bucket, prefix) = match &url {
            StoreUrl::S3 { bucket, prefix } => (bucket.as_str(), prefix.as_str()),
            StoreUrl::File(_) => ("", ""),
        };
        let mut s3 = S3Settings::new(bucket, prefix);
        s3.endpoint = self.s3_endpoint.clone();
        s3.region = self.s3_region.clone();
        s3.path_style = self.s3_path_style;
        if let Some(ca) = &self.s3_ca_file {
            let pem = std::fs::read_to_string(ca).map_err(|e| {
                ConfigError::value("store.s3_ca_file", format!("{}: {e}", ca.display()))
            })?;
            if !pem.contains("-----BEGIN CERTIFICATE-----") {
                return Err(ConfigError::value(
                    "store.s3_ca_file",
                    format!("{}: no PEM certificate found", ca.display()),
                ));
            }
        }
        s3.ca_file = self.s3_ca_file.clone();
        s3.single_writer = self.s3_single_writer.unwrap_or(false);
        s3.timeouts = self.s3_timeouts()?;
        if let Some(size) = &self.s3_part_size {
            if size.0 < 5 << 20 {
                return Err(ConfigError::value("store.s3_part_size", "at least 5M"));
            }
            s3.part_size = size.0;
        }
        let min_free_space =
            FreeSpaceFloor::parse(self.min_free_space.as_deref().unwrap_or("default"))
                .map_err(|e| ConfigError::value("store.min_free_space", e))?;
        let metadata_copies = match self.metadata_copies {
            None => None,
            Some(n @ (1 | 2)) => Some(n),
            Some(n) => {
                return Err(ConfigError::value(
                    "store.metadata_copies",
                    format!("{n}: must be 1 or 2"),
                ));
            }
        };
        Ok(StoreTarget {
            url,
            s3,
            min_free_space,
            metadata_copies,
        })
    }
}

impl StoreSection {
    /// The S3 deadlines of `[store] s3_*_timeout` (each at least 1 s,
    /// defaults of [`crate::store::s3::S3Timeouts`]).
    ///
    /// Errors: [`ConfigError::Value`] naming the key.
    fn s3_timeouts(&self) -> Result<crate::store::s3::S3Timeouts, ConfigError> {
        let mut t = crate::store::s3::S3Timeouts::default();
        for (key, v, slot) in [
            (
                "store.s3_connect_timeout",
                &self.s3_connect_timeout,
                &mut t.connect,
            ),
            (
                "store.s3_first_byte_timeout",
                &self.s3_first_byte_timeout,
                &mut t.first_byte,
            ),
            ("store.s3_idle_timeout", &self.s3_idle_timeout, &mut t.idle),
            (
                "store.s3_operation_timeout",
                &self.s3_operation_timeout,
                &mut t.operation,
            ),
        ] {
            let Some(v) = v else { continue };
            let d = crate::ops::parse_duration(v).map_err(|e| ConfigError::value(key, e))?;
            if d < Duration::from_secs(1) {
                return Err(ConfigError::value(key, "at least 1s"));
            }
            *slot = d;
        }
        // An operation deadline set below the default first-byte one
        // bounds that one too; both set, the operation's must be the larger.
        if self.s3_first_byte_timeout.is_none() {
            t.first_byte = t.first_byte.min(t.operation);
        }
        if t.operation < t.first_byte {
            return Err(ConfigError::value(
                "store.s3_operation_timeout",
                "at least store.s3_first_byte_timeout",
            ));
        }
        Ok(t)
    }
}

fn get(v: Option<NonZeroU64>, default: u64) -> u64 {
    v.map_or(default, NonZeroU64::get)
}

impl Settings {
    /// Applies defaults, checks every value and loads the files the
    /// settings name (TLS certificate and key, client CA, torcx keys, import
    /// keyring), without touching the store.
    ///
    /// Errors: [`ConfigError::Value`] naming the key and the cause.
    pub fn resolve(self) -> Result<Resolved, ConfigError> {
        let listen = if self.listen.is_empty() {
            vec![SocketAddr::from(([127, 0, 0, 1], 5000))]
        } else {
            self.listen
        };
        let store = self.store.target()?;
        let root_refresh = match self.store.root_refresh_ms {
            Some(ms) => Duration::from_millis(ms),
            None if self.store.url.is_some() => crate::state::DEFAULT_REMOTE_ROOT_REFRESH,
            None => crate::store::fs::DEFAULT_ROOT_REFRESH,
        };

        let tls = match (self.tls.cert, self.tls.key) {
            (Some(cert), Some(key)) => {
                let files = tls::TlsFiles {
                    cert,
                    key,
                    client_ca: self.tls.client_ca,
                };
                Some(Arc::new(
                    tls::Tls::load(files)
                        .map_err(|e| ConfigError::value("tls", format!("{e:#}")))?,
                ))
            }
            (None, None) if self.tls.client_ca.is_some() => {
                return Err(ConfigError::value(
                    "tls.client_ca",
                    "needs tls.cert and tls.key",
                ));
            }
            (None, None) => None,
            (Some(_), None) => {
                return Err(ConfigError::value("tls.key", "missing (tls.cert is set)"));
            }
            (None, Some(_)) => {
                return Err(ConfigError::value("tls.cert", "missing (tls.key is set)"));
            }
        };
        if tls.is_none()
            && !self.plain_http.unwrap_or(false)
            && let Some(a) = listen.iter().find(|a| !a.ip().is_loopback())
        {
            return Err(ConfigError::value(
                "listen",
                format!(
                    "{a} is not a loopback address: configure [tls] cert and key, or set plain_http = true"
                ),
            ));
        }

        let mirror_namespace = self.registry.mirror_namespace;
        if let Some(ns) = &mirror_namespace {
            let probe: crate::names::RepositoryName = "x"
                .parse()
                .map_err(|e: crate::names::NameError| ConfigError::value("-", e))?;
            crate::registry::namespace::qualify(ns, &probe).map_err(|_| {
                ConfigError::value(
                    "registry.mirror_namespace",
                    format!("{ns:?} cannot prefix a repository name"),
                )
            })?;
        }
        let l = &self.limits;
        let upload_expiry = Duration::from_secs(get(l.upload_expiry_secs, 86_400));
        let registry = RegistryConfig {
            allow_push: self.registry.allow_push.unwrap_or(false),
            allow_delete: self.registry.allow_delete.unwrap_or(false),
            mirror_namespace,
            upload_expiry,
            max_page: get(l.max_page, 1000) as usize,
            referrers: crate::registry::referrers::ReferrersLimits {
                max_descriptors: get(l.max_referrers_page, 1000) as usize,
                max_bytes: usize::try_from(l.max_referrers_page_bytes.map_or(4 << 20, |s| s.0))
                    .unwrap_or(usize::MAX),
            },
            uploads: UploadLimits {
                max_blob_size: l.max_blob_size.map_or(64 << 30, |s| s.0),
                max_sessions: get(l.max_upload_sessions, 4096) as usize,
                max_sessions_per_repository: get(l.max_upload_sessions_per_repository, 256)
                    as usize,
                max_sessions_per_client: get(l.max_upload_sessions_per_client, 128) as usize,
                max_sessions_per_user: get(l.max_upload_sessions_per_user, 64) as usize,
                max_bytes_per_user: l
                    .max_upload_bytes_per_user
                    .map_or(UploadLimits::default().max_bytes_per_user, |s| s.0),
                idle_timeout: Duration::from_secs(get(l.upload_idle_secs, 3600)),
            },
            blob_redirect: self.registry.blob_redirect.unwrap_or(false),
            immutable_tags: self.registry.immutable_tags.clone(),
            pull_record_interval: match &self.registry.pull_record_interval {
                None => crate::registry::config::DEFAULT_PULL_RECORD_INTERVAL,
                Some(v) => crate::ops::parse_duration(v)
                    .map_err(|e| ConfigError::value("registry.pull_record_interval", e))?,
            },
        };
        if self.workers.is_some_and(|n| n > MAX_WORKERS) {
            return Err(ConfigError::value(
                "workers",
                format!("at most {MAX_WORKERS} worker threads"),
            ));
        }
        let limits = Limits {
            header_timeout: Duration::from_secs(get(l.header_timeout_secs, 30)),
            idle_timeout: Duration::from_secs(get(l.idle_timeout_secs, 120)),
            max_connections: get(l.max_connections, 4096) as usize,
            max_connections_per_address: get(l.max_connections_per_address, 256) as usize,
            min_body_rate: l.min_body_rate.unwrap_or(1024),
            manifest_put_timeout: Duration::from_secs(get(l.manifest_put_timeout_secs, 60)),
            max_request_head: l
                .max_request_head
                .map_or(64 << 10, |s| s.0)
                .clamp(8 << 10, 64 << 20) as usize,
            max_response_buffer: l.max_response_buffer.map_or(256 << 20, |s| s.0),
            shutdown_delay: Duration::from_secs(l.shutdown_delay_secs.unwrap_or(0)),
            shutdown_timeout: Duration::from_secs(get(l.shutdown_timeout_secs, 30)),
            workers: self.workers.map(|n| n as usize),
            lean_http1: l.lean_http1.unwrap_or(true),
        };
        let stacks = StacksConfig {
            allow_admin: self.stacks.allow_admin.unwrap_or(false),
            custom_stacks: self.stacks.custom_stacks.unwrap_or_default(),
            ..Default::default()
        };

        let mut torcx_keys = std::collections::BTreeMap::new();
        let file_specs = self
            .torcx
            .keys
            .iter()
            .map(|(r, p)| format!("{r}={}", p.display()));
        for spec in file_specs.chain(self.torcx.key_flags.iter().cloned()) {
            let (remote, key) =
                TorcxConfig::load_key(&spec).map_err(|e| ConfigError::value("torcx.keys", e))?;
            torcx_keys.insert(remote, key);
        }
        let torcx = TorcxConfig::new(torcx_keys).with_public(self.torcx.public.unwrap_or(false));

        if let Some(k) = &self.import.keyring {
            crate::bundle::sign::Keyring::load(k).map_err(|e| {
                ConfigError::value("import.keyring", format!("{}: {e}", k.display()))
            })?;
        }

        let signature_policy = crate::signatures::SitePolicy::load(&self.import.policy)
            .map_err(|e| ConfigError::value("import.policy", format!("{e:#}")))?;

        let duration = |key: &str, v: &Option<String>, default: &str| {
            crate::ops::parse_duration(v.as_deref().unwrap_or(default))
                .map_err(|e| ConfigError::value(key, e))
        };
        let max_staleness = self
            .import
            .max_staleness
            .as_deref()
            .map(|v| {
                crate::ops::parse_positive_duration(v).map_err(|e| {
                    ConfigError::value(
                        "import.max_staleness",
                        format!("{e} (leave it out for never)"),
                    )
                })
            })
            .transpose()?;
        let interval = duration("gc.interval", &self.gc.interval, "0")?;
        let grace = duration("gc.grace", &self.gc.grace, "1h")?;
        for (i, rule) in self.gc.keep_tags.iter().enumerate() {
            if let Some(p) = rule.problem() {
                return Err(ConfigError::value(&format!("gc.keep_tags[{i}]"), p));
            }
        }
        let gc_options = crate::ops::gc::GcOptions {
            retention: crate::ops::Retention {
                keep_generations: get(self.gc.keep_generations, 50) as usize,
                keep_days: self.gc.keep_days.unwrap_or(30),
            },
            rules: crate::ops::retention::Rules {
                delete_untagged: self.gc.delete_untagged.unwrap_or(false),
                keep_tags: self.gc.keep_tags.clone(),
                grace,
                immutable_tags: self.registry.immutable_tags.clone(),
            },
            grace,
            dry_run: false,
        };
        let gc = (!interval.is_zero()).then_some((gc_options, interval));
        let scrub_interval = duration("scrub.interval", &self.scrub.interval, "7d")?;
        let scrub = (!scrub_interval.is_zero()).then_some(crate::ops::scrub::ScrubOptions {
            interval: scrub_interval,
            rate: self.scrub.rate.unwrap_or(20).saturating_mul(1_000_000),
        });
        let lease_ttl = duration("store.lease_ttl", &self.store.lease_ttl, "30s")?;
        if lease_ttl < Duration::from_secs(3) {
            return Err(ConfigError::value("store.lease_ttl", "at least 3s"));
        }
        let ui = match self.ui.enabled {
            Some(true) => {
                let sample_interval =
                    duration("ui.sample_interval", &self.ui.sample_interval, "1m")?;
                let session_lifetime =
                    duration("ui.session_lifetime", &self.ui.session_lifetime, "8h")?;
                if sample_interval.is_zero() {
                    return Err(ConfigError::value("ui.sample_interval", "at least 1s"));
                }
                if session_lifetime < Duration::from_secs(60) {
                    return Err(ConfigError::value("ui.session_lifetime", "at least 1m"));
                }
                Some(crate::ui::UiConfig {
                    sample_interval,
                    session_lifetime,
                    tls: tls.is_some(),
                    store: crate::ui::StoreInfo::of(&store.url),
                })
            }
            _ => None,
        };
        for (i, w) in self.webhooks.iter().enumerate() {
            w.check()
                .map_err(|e| ConfigError::value(&format!("webhook[{i}]"), e))?;
        }
        let users = self
            .users
            .into_iter()
            .map(|u| User {
                name: u.name,
                password_hash: u.password_hash,
                roles: u.roles,
                repositories: u.repositories,
                cells: u.cells,
            })
            .collect();
        let throttle = ThrottleLimits {
            max_failures: get(self.auth.max_failures, 10).min(u32::MAX as u64) as u32,
            window: Duration::from_secs(get(self.auth.failure_window_secs, 60)),
        };
        let mut policy = Policy::new(users, self.auth.anonymous_read.unwrap_or(false), throttle)
            .map_err(|e| ConfigError::value("user", e))?;
        policy.public_metrics = self.auth.public_metrics.unwrap_or(false);
        Ok(Resolved {
            listen,
            store,
            registry,
            stacks,
            torcx,
            limits,
            tls,
            policy,
            import_keyring: self.import.keyring,
            max_staleness,
            signature_policy,
            webhooks: self.webhooks,
            root_refresh,
            gc,
            ui,
            scrub,
            lease_ttl,
            cache_size: l
                .cache_size
                .map_or(crate::state::DEFAULT_CACHE_BYTES, |s| s.0),
        })
    }
}

impl Resolved {
    /// The server's composition root over `state`, and the connection
    /// limits, listen addresses and TLS to serve it with.
    pub fn into_app(
        self,
        state: StateStore,
    ) -> (App, Limits, Vec<SocketAddr>, Option<Arc<tls::Tls>>) {
        let mut app = App::with_config(state, self.registry).with_stacks(self.stacks);
        app.torcx = self.torcx;
        app.auth = arc_swap::ArcSwap::from_pointee(self.policy);
        app.import_keyring = arc_swap::ArcSwap::from_pointee(self.import_keyring);
        app.max_staleness = self.max_staleness.map_or(0, |d| d.as_secs()).into();
        app.signature_policy = arc_swap::ArcSwap::from_pointee(self.signature_policy);
        app.ui = self.ui.map(|c| Arc::new(crate::ui::Console::new(c)));
        (app, self.limits, self.listen, self.tls)
    }
}
