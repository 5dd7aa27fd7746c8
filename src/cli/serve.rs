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
    };
    let stacks = airlock::stacks::api::StacksConfig {
        allow_admin: args.allow_admin,
        ..Default::default()
    };
    let app = Arc::new(airlock::server::App::with_config(state, config).with_stacks(stacks));
    let limits = airlock::server::Limits {
        header_timeout: Duration::from_secs(args.header_timeout_secs),
        idle_timeout: Duration::from_secs(args.idle_timeout_secs),
        max_connections: args.max_connections as usize,
        ..airlock::server::Limits::default()
    };
    airlock::server::serve(args.listen, app, limits).await
}
