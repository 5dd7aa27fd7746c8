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
    /// Upload sessions open at once opened by one client IP address; more:
    /// 429 TOOMANYREQUESTS.
    #[arg(long, env = "AIRLOCK_MAX_UPLOAD_SESSIONS_PER_CLIENT", default_value_t = 128, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    max_upload_sessions_per_client: u64,
    /// Most entries per page of `tags/list` and `_catalog` (a larger or
    /// absent `n` is clamped; `Link` names the next page).
    #[arg(long, env = "AIRLOCK_MAX_PAGE", default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    max_page: u64,
    /// Close a connection whose client has not sent a complete request
    /// head within this many seconds (also bounds HTTP/1.1 keep-alive
    /// idling between requests).
    #[arg(long, env = "AIRLOCK_HEADER_TIMEOUT", default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..))]
    header_timeout_secs: u64,
    /// Close a connection with no request in progress and no traffic for
    /// this many seconds.
    #[arg(long, env = "AIRLOCK_IDLE_TIMEOUT", default_value_t = 120, value_parser = clap::value_parser!(u64).range(1..))]
    idle_timeout_secs: u64,
    /// Connections open at once; at the cap, the oldest connection that
    /// has not sent a request is closed for a new client, and if there is
    /// none new clients wait until one closes.
    #[arg(long, env = "AIRLOCK_MAX_CONNECTIONS", default_value_t = 4096, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    max_connections: u64,
    /// Connections open at once from one client IP address; more are
    /// closed as soon as they are accepted.
    #[arg(long, env = "AIRLOCK_MAX_CONNECTIONS_PER_ADDRESS", default_value_t = 256, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    max_connections_per_address: u64,
    /// Minimum average rate of a request body in bytes per second, after
    /// a grace of the header timeout; slower: 408. 0 = no minimum.
    #[arg(long, env = "AIRLOCK_MIN_BODY_RATE", default_value_t = 1024)]
    min_body_rate: u64,
    /// A manifest PUT's body must arrive within this many seconds of its
    /// head, else 408.
    #[arg(long, env = "AIRLOCK_MANIFEST_PUT_TIMEOUT", default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..))]
    manifest_put_timeout_secs: u64,
    /// Largest request head in bytes (K, M suffixes are powers of 1024;
    /// at least 8K); larger: 431.
    #[arg(long, env = "AIRLOCK_MAX_REQUEST_HEAD", default_value = "64K", value_parser = super::parse_size)]
    max_request_head: u64,
    /// Bytes of responses held in memory at once over all clients (K, M,
    /// G suffixes); at the cap, responses wait for slow readers to drain.
    #[arg(long, env = "AIRLOCK_MAX_RESPONSE_BUFFER", default_value = "256M", value_parser = super::parse_size)]
    max_response_buffer: u64,
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
    let state = args.data.state()?;
    let config = airlock::registry::RegistryConfig {
        allow_push: args.allow_push,
        allow_delete: args.allow_delete,
        mirror_namespace: args.mirror_namespace,
        upload_expiry: Duration::from_secs(args.upload_expiry_secs),
        max_page: args.max_page as usize,
        uploads: airlock::registry::uploads::UploadLimits {
            max_blob_size: args.max_blob_size,
            max_sessions: args.max_upload_sessions as usize,
            max_sessions_per_repository: args.max_upload_sessions_per_repository as usize,
            max_sessions_per_client: args.max_upload_sessions_per_client as usize,
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
        max_connections_per_address: args.max_connections_per_address as usize,
        min_body_rate: args.min_body_rate,
        manifest_put_timeout: Duration::from_secs(args.manifest_put_timeout_secs),
        max_request_head: args.max_request_head.clamp(8 << 10, 64 << 20) as usize,
        max_response_buffer: args.max_response_buffer,
        ..airlock::server::Limits::default()
    };
    airlock::server::serve(args.listen, app, limits).await
}
