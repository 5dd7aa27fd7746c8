//! `airlock serve`: the HTTP server (OCI distribution API, stacks API, health).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;

use super::DataArg;

#[derive(clap::Args)]
pub struct ServeArgs {
    #[command(flatten)]
    data: DataArg,
    /// Address to listen on.
    #[arg(long, env = "AIRLOCK_LISTEN", default_value = "127.0.0.1:5000")]
    listen: SocketAddr,
    /// Serve the push endpoints (blob uploads, manifest PUT). Off: 405 UNSUPPORTED.
    #[arg(long, env = "AIRLOCK_ALLOW_PUSH")]
    allow_push: bool,
    /// Serve deletes of manifests, tags and blobs. Off: 405 UNSUPPORTED.
    #[arg(long, env = "AIRLOCK_ALLOW_DELETE")]
    allow_delete: bool,
    /// Serve the stacks admin routes (POST /stacks/v1/<name>/promote,
    /// rollout, rollback, state, default). Off: 403 DENIED.
    #[arg(long, env = "AIRLOCK_ALLOW_ADMIN")]
    allow_admin: bool,
    /// Namespace for reads without `ns=` whose repository does not exist
    /// (docker `registry-mirrors`), e.g. `docker.io`.
    #[arg(long, env = "AIRLOCK_MIRROR_NAMESPACE")]
    mirror_namespace: Option<String>,
    /// Upload sessions older than this many seconds are refused and swept.
    #[arg(long, env = "AIRLOCK_UPLOAD_EXPIRY", default_value_t = 86400, value_parser = clap::value_parser!(u64).range(1..))]
    upload_expiry_secs: u64,
    /// Largest blob accepted by push, in bytes (K, M, G, T suffixes are
    /// powers of 1024); larger: 413 SIZE_INVALID.
    #[arg(long, env = "AIRLOCK_MAX_BLOB_SIZE", default_value = "64G", value_parser = super::parse_size)]
    max_blob_size: u64,
    /// Upload sessions open at once; more: 429 TOOMANYREQUESTS.
    #[arg(long, env = "AIRLOCK_MAX_UPLOAD_SESSIONS", default_value_t = 4096, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    max_upload_sessions: u64,
    /// Upload sessions open at once in one repository; more: 429 TOOMANYREQUESTS.
    #[arg(long, env = "AIRLOCK_MAX_UPLOAD_SESSIONS_PER_REPOSITORY", default_value_t = 256, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    max_upload_sessions_per_repository: u64,
    /// Most entries per page of `tags/list` and `_catalog` (a larger or
    /// absent `n` is clamped; `Link` names the next page).
    #[arg(long, env = "AIRLOCK_MAX_PAGE", default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    max_page: u64,
    /// Most descriptors in one page of the referrers list (a smaller `n`
    /// lowers it; `Link` names the next page).
    #[arg(long, env = "AIRLOCK_MAX_REFERRERS_PAGE", default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    max_referrers_page: u64,
    /// Most bytes of JSON in one page of the referrers list (K, M, G
    /// suffixes; a single larger descriptor still gets its own page).
    #[arg(long, env = "AIRLOCK_MAX_REFERRERS_PAGE_BYTES", default_value = "4M", value_parser = super::parse_size)]
    max_referrers_page_bytes: u64,
    /// Bytes of metadata pages kept in memory (the state's page cache;
    /// K, M, G suffixes).
    #[arg(long, env = "AIRLOCK_CACHE_SIZE", default_value = "64M", value_parser = super::parse_size)]
    cache_size: u64,
    /// Close a connection whose client has not sent a complete request
    /// head within this many seconds (also bounds HTTP/1.1 keep-alive
    /// idling between requests).
    #[arg(long, env = "AIRLOCK_HEADER_TIMEOUT", default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..))]
    header_timeout_secs: u64,
    /// Close a connection with no request in progress and no traffic for
    /// this many seconds.
    #[arg(long, env = "AIRLOCK_IDLE_TIMEOUT", default_value_t = 120, value_parser = clap::value_parser!(u64).range(1..))]
    idle_timeout_secs: u64,
    /// Connections open at once; at the cap, new clients wait until one
    /// closes.
    #[arg(long, env = "AIRLOCK_MAX_CONNECTIONS", default_value_t = 4096, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    max_connections: u64,
    /// Sign the torcx contents of REMOTE with this RSA key:
    /// `REMOTE=KEY.sec.asc` (repeatable; one per remote).
    #[arg(long = "torcx-key", value_name = "REMOTE=KEY.sec.asc")]
    torcx_keys: Vec<String>,
}

pub async fn run(args: ServeArgs) -> Result<()> {
    if let Some(ns) = &args.mirror_namespace {
        let probe: airlock::names::RepositoryName = "x".parse()?;
        airlock::registry::namespace::qualify(ns, &probe).map_err(|_| {
            anyhow::anyhow!("--mirror-namespace {ns:?} cannot prefix a repository name")
        })?;
    }
    let state = args.data.state_with_cache(args.cache_size)?;
    let config = airlock::registry::RegistryConfig {
        allow_push: args.allow_push,
        allow_delete: args.allow_delete,
        mirror_namespace: args.mirror_namespace,
        upload_expiry: Duration::from_secs(args.upload_expiry_secs),
        max_page: args.max_page as usize,
        referrers: airlock::registry::referrers::ReferrersLimits {
            max_descriptors: args.max_referrers_page as usize,
            max_bytes: usize::try_from(args.max_referrers_page_bytes).unwrap_or(usize::MAX),
        },
        uploads: airlock::registry::uploads::UploadLimits {
            max_blob_size: args.max_blob_size,
            max_sessions: args.max_upload_sessions as usize,
            max_sessions_per_repository: args.max_upload_sessions_per_repository as usize,
        },
    };
    let mut torcx_keys = std::collections::BTreeMap::new();
    for spec in &args.torcx_keys {
        let (remote, key) =
            airlock::torcx::api::TorcxConfig::load_key(spec).map_err(anyhow::Error::msg)?;
        if torcx_keys.insert(remote.clone(), key).is_some() {
            anyhow::bail!("--torcx-key: remote {remote} given twice");
        }
    }
    let stacks = airlock::stacks::api::StacksConfig {
        allow_admin: args.allow_admin,
        ..Default::default()
    };
    let mut app = airlock::server::App::with_config(state, config).with_stacks(stacks);
    app.torcx = airlock::torcx::api::TorcxConfig::new(torcx_keys);
    let app = Arc::new(app);
    let limits = airlock::server::Limits {
        header_timeout: Duration::from_secs(args.header_timeout_secs),
        idle_timeout: Duration::from_secs(args.idle_timeout_secs),
        max_connections: args.max_connections as usize,
        ..airlock::server::Limits::default()
    };
    airlock::server::serve(args.listen, app, limits).await
}
