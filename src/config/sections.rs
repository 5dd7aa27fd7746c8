//! The config schema: one struct per TOML section. Every field is an
//! `Option` (or an empty collection) so that "not set" can be told from a
//! value: the file, the flags and the `AIRLOCK_*` variables fill them, and
//! [`super::Settings::resolve`] applies the defaults given in each field's
//! documentation.
//!
//! To add a setting: add one field to its section here (doc comment =
//! flag help, `#[arg(long, env)]` = flag and variable, the field name = the
//! TOML key), and read it in `resolve.rs`.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::num::NonZeroU64;
use std::path::{Path, PathBuf};

use clap::builder::BoolishValueParser;

use crate::auth::Role;

/// The whole serve config (top-level keys and sections).
#[derive(Debug, Clone, Default, clap::Args, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    /// Address(es) to listen on (repeatable, or comma-separated in the
    /// variable) [default: 127.0.0.1:5000]. TOML: one string or an array.
    #[arg(long, env = "AIRLOCK_LISTEN", value_delimiter = ',')]
    #[serde(
        default,
        deserialize_with = "one_or_many",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub listen: Vec<SocketAddr>,
    /// Allow plain HTTP on a non-loopback address (without [tls])
    /// [default: false: refuse to start].
    #[arg(long, env = "AIRLOCK_PLAIN_HTTP", num_args = 0..=1, default_missing_value = "true", value_parser = BoolishValueParser::new())]
    pub plain_http: Option<bool>,
    /// HTTP worker threads, each with its own runtime, accept loop and
    /// SO_REUSEPORT socket per listen address (the connection caps stay
    /// global); 0: one shared multi-thread runtime serves every connection
    /// [default: the number of CPUs].
    #[arg(long, env = "AIRLOCK_WORKERS")]
    pub workers: Option<u64>,
    #[command(flatten)]
    #[serde(default)]
    pub store: StoreSection,
    #[command(flatten)]
    #[serde(default)]
    pub tls: TlsSection,
    #[command(flatten)]
    #[serde(default)]
    pub auth: AuthSection,
    /// `[[user]]` entries (file only).
    #[arg(skip)]
    #[serde(default, rename = "user", skip_serializing_if = "Vec::is_empty")]
    pub users: Vec<UserEntry>,
    #[command(flatten)]
    #[serde(default)]
    pub registry: RegistrySection,
    #[command(flatten)]
    #[serde(default)]
    pub limits: LimitsSection,
    #[command(flatten)]
    #[serde(default)]
    pub stacks: StacksSection,
    #[command(flatten)]
    #[serde(default)]
    pub import: ImportSection,
    #[command(flatten)]
    #[serde(default)]
    pub torcx: TorcxSection,
    #[command(flatten)]
    #[serde(default)]
    pub gc: GcSection,
    /// The server's log filter (file only; tracing EnvFilter syntax, e.g.
    /// `info` or `airlock=debug`), applied at start unless `--log` or
    /// `AIRLOCK_LOG` is given, and again on SIGHUP [default: warn].
    #[arg(skip)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log: Option<String>,
    #[command(flatten)]
    #[serde(default)]
    pub ui: UiSection,
    #[command(flatten)]
    #[serde(default)]
    pub scrub: ScrubSection,
    /// `[[webhook]]` entries (file only): where events are POSTed.
    #[arg(skip)]
    #[serde(default, rename = "webhook", skip_serializing_if = "Vec::is_empty")]
    pub webhooks: Vec<crate::events::webhook::WebhookConfig>,
}

/// The `--help` heading of the S3 flags of every store command.
pub const S3_HEADING: &str = "S3 store (with --store s3://BUCKET/PREFIX)";

/// `[store]`: where blobs and metadata live.
#[derive(Debug, Clone, Default, clap::Args, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoreSection {
    /// Data directory of the filesystem blobstore [default: ./airlock-data].
    #[arg(long = "data", env = "AIRLOCK_DATA")]
    pub path: Option<PathBuf>,
    /// Blobstore URL instead of `path`: `s3://BUCKET/PREFIX` (S3) or
    /// `file:///path` (the same as `path`).
    #[arg(long = "store", visible_alias = "store-url", env = "AIRLOCK_STORE")]
    pub url: Option<String>,
    /// S3 endpoint URL for `url` (MinIO, Ceph RGW, s3s; unset: AWS).
    #[arg(long, env = "AIRLOCK_S3_ENDPOINT", help_heading = S3_HEADING)]
    pub s3_endpoint: Option<String>,
    /// S3 region for `url` [default: AWS_REGION, AWS_DEFAULT_REGION, the
    /// AWS profile's, else us-east-1].
    #[arg(long, env = "AIRLOCK_S3_REGION", help_heading = S3_HEADING)]
    pub s3_region: Option<String>,
    /// Path-style S3 addressing (`endpoint/bucket/key`) [default: true
    /// when s3_endpoint is set, else virtual-hosted].
    #[arg(long, env = "AIRLOCK_S3_PATH_STYLE", help_heading = S3_HEADING, num_args = 0..=1, default_missing_value = "true", value_parser = BoolishValueParser::new())]
    pub s3_path_style: Option<bool>,
    /// PEM CA bundle trusted for the S3 endpoint (besides the system's).
    #[arg(long, env = "AIRLOCK_S3_CA_FILE", help_heading = S3_HEADING)]
    pub s3_ca_file: Option<PathBuf>,
    /// Multipart part size of S3 writes (at least 5M) [default: 16M].
    #[arg(long, env = "AIRLOCK_S3_PART_SIZE", help_heading = S3_HEADING)]
    pub s3_part_size: Option<Size>,
    /// Deadline for connecting to the S3 endpoint (`5s`) [default: 5s].
    #[arg(long, env = "AIRLOCK_S3_CONNECT_TIMEOUT", help_heading = S3_HEADING)]
    pub s3_connect_timeout: Option<String>,
    /// Deadline from sending an S3 request to its response head, per
    /// attempt, plus 1 s per MiB of the request's body [default: 10s].
    #[arg(long, env = "AIRLOCK_S3_FIRST_BYTE_TIMEOUT", help_heading = S3_HEADING)]
    pub s3_first_byte_timeout: Option<String>,
    /// Deadline between two reads of an S3 response body that wait on the
    /// store; past it a download is cut, never completed short
    /// [default: 20s].
    #[arg(long, env = "AIRLOCK_S3_IDLE_TIMEOUT", help_heading = S3_HEADING)]
    pub s3_idle_timeout: Option<String>,
    /// Deadline of a whole S3 call, every retry included, to its response
    /// head (plus 1 s per MiB of a request body); a request whose call
    /// passes it answers 503 with Retry-After [default: 30s].
    #[arg(long, env = "AIRLOCK_S3_OPERATION_TIMEOUT", help_heading = S3_HEADING)]
    pub s3_operation_timeout: Option<String>,
    /// Accept an S3 server that ignores conditional writes, promising that
    /// only one airlock process writes to the bucket [default: false:
    /// refuse to start on such a server].
    #[arg(long, env = "AIRLOCK_S3_SINGLE_WRITER", help_heading = S3_HEADING, num_args = 0..=1, default_missing_value = "true", value_parser = BoolishValueParser::new())]
    pub s3_single_writer: Option<bool>,
    /// Refuse writes (HTTP 507) that would leave less free space: a size
    /// (`512M`, `2G`), a share (`5%`), `default` (the smaller of 1 GiB and
    /// 1 %) or `0` (off) [default: default].
    #[arg(long, env = "AIRLOCK_MIN_FREE_SPACE")]
    pub min_free_space: Option<String>,
    /// Copies of each metadata object (state document, repository pages,
    /// stacks, torcx and changes documents, pull record) a commit writes:
    /// 1, or 2 so that one damaged object loses nothing (read from its
    /// other copy and written back; the copies of a commit are one pack,
    /// see docs/operations.md) [default: 2 on the filesystem, 1 on S3].
    #[arg(long, env = "AIRLOCK_METADATA_COPIES")]
    pub metadata_copies: Option<u8>,
    /// Notice a state root changed by another process (a CLI import while
    /// the server runs, another replica) within this many milliseconds; 0
    /// checks the root on every request (on the filesystem one stat(2)).
    /// The server's own changes are visible at once either way; on the
    /// filesystem a CLI command waits out the default 1 ms before it exits,
    /// so what it committed is served to the next request
    /// [default: 1 on the filesystem, 1000 on S3].
    #[arg(long, env = "AIRLOCK_ROOT_REFRESH_MS")]
    pub root_refresh_ms: Option<u64>,
    /// How long a replica's lease on a periodic job (scrub, gc) outlives its
    /// last renewal (`30s`; renewed every third of it): after a replica
    /// dies, another continues the job this long later (at least 3s)
    /// [default: 30s].
    #[arg(long, env = "AIRLOCK_LEASE_TTL")]
    pub lease_ttl: Option<String>,
}

/// `[gc]`: retention and garbage collection inside the server (`airlock
/// gc` takes the same values as flags).
#[derive(Debug, Clone, Default, clap::Args, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GcSection {
    /// Run garbage collection every interval inside the server (`24h`;
    /// `0` = never) [default: 0].
    #[arg(long = "gc-interval", env = "AIRLOCK_GC_INTERVAL")]
    pub interval: Option<String>,
    /// Keep the newest N generations (and everything they reach)
    /// [default: 50].
    #[arg(long, env = "AIRLOCK_GC_KEEP_GENERATIONS")]
    pub keep_generations: Option<NonZeroU64>,
    /// Keep every generation committed in the last D days too [default: 30].
    #[arg(long, env = "AIRLOCK_GC_KEEP_DAYS")]
    pub keep_days: Option<u64>,
    /// Keep unreferenced blobs, pushed-blob links and scratch files younger
    /// than this (`90s`, `15m`, `1h`, `7d`) [default: 1h].
    #[arg(long, env = "AIRLOCK_GC_GRACE")]
    pub grace: Option<String>,
    /// Remove manifests untagged for longer than `grace` (with their
    /// referrers) before each collection [default: false].
    #[arg(long = "gc-delete-untagged", env = "AIRLOCK_GC_DELETE_UNTAGGED", num_args = 0..=1, default_missing_value = "true", value_parser = BoolishValueParser::new())]
    pub delete_untagged: Option<bool>,
    /// `[[gc.keep_tags]]` rules (file only): `repositories` (pattern),
    /// `tags` (pattern), `newest`, `pushed_within_days`,
    /// `pulled_within_days`.
    #[arg(skip)]
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub keep_tags: Vec<crate::ops::retention::KeepTags>,
}

/// `[scrub]`: rehash every blob once per interval inside the server, so
/// silent media corruption is found within one interval (reads skip
/// hashing a blob verified at an unchanged file identity).
#[derive(Debug, Clone, Default, clap::Args, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScrubSection {
    /// Start a scrub pass this long after the last one started (`7d`,
    /// `24h`; `0` = never) [default: 7d].
    #[arg(
        id = "scrub_interval",
        long = "scrub-interval",
        env = "AIRLOCK_SCRUB_INTERVAL"
    )]
    pub interval: Option<String>,
    /// Read at most this many MB (10^6 bytes) per second while scrubbing
    /// (`0` = no limit) [default: 20].
    #[arg(id = "scrub_rate", long = "scrub-rate", env = "AIRLOCK_SCRUB_RATE")]
    pub rate: Option<u64>,
}

/// `[ui]`: the web console under `/ui/` and its JSON API under `/api/v1/`
/// (same listener, TLS, users and roles).
#[derive(Debug, Clone, Default, clap::Args, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UiSection {
    /// Serve the web console (`/ui/`) and its JSON API (`/api/v1/`)
    /// [default: false].
    #[arg(long = "ui", env = "AIRLOCK_UI", num_args = 0..=1, default_missing_value = "true", value_parser = BoolishValueParser::new())]
    pub enabled: Option<bool>,
    /// How often the console samples every stack's cell reports into its
    /// rollout chart (one small write per stack and sample, whatever the
    /// number of cells: `30s`, `1m`, `5m`) [default: 1m].
    #[arg(long = "ui-sample-interval", env = "AIRLOCK_UI_SAMPLE_INTERVAL")]
    pub sample_interval: Option<String>,
    /// How long a console login lasts (`8h`, `1d`) [default: 8h].
    #[arg(long = "ui-session-lifetime", env = "AIRLOCK_UI_SESSION_LIFETIME")]
    pub session_lifetime: Option<String>,
}

/// `[tls]`: serve HTTPS.
#[derive(Debug, Clone, Default, clap::Args, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsSection {
    /// PEM certificate chain (leaf first); with `key`, serve HTTPS
    /// (reloaded on SIGHUP).
    #[arg(long = "tls-cert", env = "AIRLOCK_TLS_CERT")]
    pub cert: Option<PathBuf>,
    /// PEM private key of `cert`.
    #[arg(long = "tls-key", env = "AIRLOCK_TLS_KEY")]
    pub key: Option<PathBuf>,
    /// PEM CA bundle for client certificates (mTLS); the certificate's CN
    /// or a SAN names the user.
    #[arg(long = "tls-client-ca", env = "AIRLOCK_TLS_CLIENT_CA")]
    pub client_ca: Option<PathBuf>,
}

/// `[auth]`: anonymous access and login throttling (users: `[[user]]`).
#[derive(Debug, Clone, Default, clap::Args, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthSection {
    /// Let requests without credentials pull (registry reads, torcx)
    /// when users are configured [default: false].
    #[arg(long, env = "AIRLOCK_ANONYMOUS_READ", num_args = 0..=1, default_missing_value = "true", value_parser = BoolishValueParser::new())]
    pub anonymous_read: Option<bool>,
    /// Failed logins allowed per client address and per user name within
    /// `failure_window_secs`; more: 429 until the window ends [default: 10].
    #[arg(long, env = "AIRLOCK_MAX_AUTH_FAILURES")]
    pub max_failures: Option<NonZeroU64>,
    /// The failed-login window in seconds [default: 60].
    #[arg(long, env = "AIRLOCK_AUTH_FAILURE_WINDOW")]
    pub failure_window_secs: Option<NonZeroU64>,
    /// Answer `/metrics` without credentials when users are configured
    /// (its labels name repositories and stacks); otherwise it needs a
    /// user with the `metrics` or `admin` role [default: false].
    #[arg(long, env = "AIRLOCK_PUBLIC_METRICS", num_args = 0..=1, default_missing_value = "true", value_parser = BoolishValueParser::new())]
    pub public_metrics: Option<bool>,
}

/// One `[[user]]`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UserEntry {
    /// Login name (HTTP Basic), or a client certificate's CN or SAN.
    pub name: String,
    /// PHC argon2 hash from `airlock user hash`; absent: certificate only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password_hash: Option<String>,
    /// `reader`, `cell`, `admin`.
    pub roles: Vec<Role>,
    /// Repository prefixes the roles are limited to; absent: all.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub repositories: Vec<String>,
    /// Cell ids this user may report for, as globs (`*` matches any run of
    /// characters): `["diego-cell/*"]`; absent: any cell id.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cells: Vec<String>,
}

/// `[registry]`: what the OCI API serves.
#[derive(Debug, Clone, Default, clap::Args, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegistrySection {
    /// Serve the push endpoints (blob uploads, manifest PUT). Off: 405
    /// UNSUPPORTED [default: false].
    #[arg(long, env = "AIRLOCK_ALLOW_PUSH", num_args = 0..=1, default_missing_value = "true", value_parser = BoolishValueParser::new())]
    pub allow_push: Option<bool>,
    /// Serve deletes of manifests, tags and blobs. Off: 405 UNSUPPORTED
    /// [default: false].
    #[arg(long, env = "AIRLOCK_ALLOW_DELETE", num_args = 0..=1, default_missing_value = "true", value_parser = BoolishValueParser::new())]
    pub allow_delete: Option<bool>,
    /// Namespace for reads without `ns=` whose repository does not exist
    /// (docker `registry-mirrors`), e.g. `docker.io`.
    #[arg(long, env = "AIRLOCK_MIRROR_NAMESPACE")]
    pub mirror_namespace: Option<String>,
    /// Immutable tag rules (repeatable): `REPOSITORY-PATTERN:TAG-PATTERN`
    /// (`*` within a path segment, `**` across, e.g. `stacks/**:20*`); a
    /// matching tag may be created, never moved or deleted, by a push, an
    /// import or a delete (403 DENIED) [default: none].
    #[arg(long = "immutable-tag", value_name = "RULE")]
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub immutable_tags: Vec<String>,
    /// Answer blob GETs with 307 to a presigned URL of the object store
    /// (S3 only; clients must reach the store) [default: false].
    #[arg(long, env = "AIRLOCK_BLOB_REDIRECT", num_args = 0..=1, default_missing_value = "true", value_parser = BoolishValueParser::new())]
    pub blob_redirect: Option<bool>,
    /// Write the manifest GETs (pulls) noted in memory to the store this
    /// often, and when the server stops, for `gc`'s `pulled_within_days`
    /// (`30s`, `5m`; `0` = do not record pulls) [default: 60s].
    #[arg(long, env = "AIRLOCK_PULL_RECORD_INTERVAL")]
    pub pull_record_interval: Option<String>,
}

/// `[limits]`: caps and timeouts (one key per serve flag).
#[derive(Debug, Clone, Default, clap::Args, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsSection {
    /// Upload sessions older than this many seconds are refused and swept
    /// [default: 86400].
    #[arg(long, env = "AIRLOCK_UPLOAD_EXPIRY")]
    pub upload_expiry_secs: Option<NonZeroU64>,
    /// Upload sessions without any request for this many seconds are
    /// removed by the next sweep [default: 3600].
    #[arg(long, env = "AIRLOCK_UPLOAD_IDLE")]
    pub upload_idle_secs: Option<NonZeroU64>,
    /// Largest blob accepted by push, in bytes (K, M, G, T suffixes are
    /// powers of 1024); larger: 413 SIZE_INVALID [default: 64G].
    #[arg(long, env = "AIRLOCK_MAX_BLOB_SIZE")]
    pub max_blob_size: Option<Size>,
    /// Upload sessions open at once; at the cap the least recently active
    /// idle session is removed for a new one, and only when every one has
    /// a request in progress is the new one 429 TOOMANYREQUESTS
    /// [default: 4096].
    #[arg(long, env = "AIRLOCK_MAX_UPLOAD_SESSIONS")]
    pub max_upload_sessions: Option<NonZeroU64>,
    /// Upload sessions open at once in one repository (at the cap as
    /// max_upload_sessions) [default: 256].
    #[arg(long, env = "AIRLOCK_MAX_UPLOAD_SESSIONS_PER_REPOSITORY")]
    pub max_upload_sessions_per_repository: Option<NonZeroU64>,
    /// Upload sessions one user has open at once (when users are
    /// configured; at the cap as max_upload_sessions) [default: 64].
    #[arg(long, env = "AIRLOCK_MAX_UPLOAD_SESSIONS_PER_USER")]
    pub max_upload_sessions_per_user: Option<NonZeroU64>,
    /// Bytes one user may hold in open upload sessions, counting chunks
    /// being received (K, M, G, T suffixes; 0: no cap; when users are
    /// configured); more: 413 DENIED [default: 128G].
    #[arg(long, env = "AIRLOCK_MAX_UPLOAD_BYTES_PER_USER")]
    pub max_upload_bytes_per_user: Option<Size>,
    /// Upload sessions open at once opened by one client IP address (at
    /// the cap as max_upload_sessions) [default: 128].
    #[arg(long, env = "AIRLOCK_MAX_UPLOAD_SESSIONS_PER_CLIENT")]
    pub max_upload_sessions_per_client: Option<NonZeroU64>,
    /// Most entries per page of `tags/list` and `_catalog` (a larger or
    /// absent `n` is clamped; `Link` names the next page) [default: 1000].
    #[arg(long, env = "AIRLOCK_MAX_PAGE")]
    pub max_page: Option<NonZeroU64>,
    /// Most descriptors in one page of the referrers list (a smaller `n`
    /// lowers it; `Link` names the next page) [default: 1000].
    #[arg(long, env = "AIRLOCK_MAX_REFERRERS_PAGE")]
    pub max_referrers_page: Option<NonZeroU64>,
    /// Most bytes of JSON in one page of the referrers list (K, M, G
    /// suffixes; a single larger descriptor still gets its own page)
    /// [default: 4M].
    #[arg(long, env = "AIRLOCK_MAX_REFERRERS_PAGE_BYTES")]
    pub max_referrers_page_bytes: Option<Size>,
    /// Bytes of metadata pages kept in memory (the state's page cache; K,
    /// M, G suffixes) [default: 64M].
    #[arg(long, env = "AIRLOCK_CACHE_SIZE")]
    pub cache_size: Option<Size>,
    /// Close a connection whose client has not sent a complete request
    /// head (or TLS handshake) within this many seconds (also bounds
    /// HTTP/1.1 keep-alive idling between requests) [default: 30].
    #[arg(long, env = "AIRLOCK_HEADER_TIMEOUT")]
    pub header_timeout_secs: Option<NonZeroU64>,
    /// Close a connection with no request in progress and no traffic for
    /// this many seconds [default: 120].
    #[arg(long, env = "AIRLOCK_IDLE_TIMEOUT")]
    pub idle_timeout_secs: Option<NonZeroU64>,
    /// Connections open at once; at the cap, the oldest connection that
    /// has not sent a request is closed for a new client, and if there is
    /// none new clients wait until one closes [default: 4096].
    #[arg(long, env = "AIRLOCK_MAX_CONNECTIONS")]
    pub max_connections: Option<NonZeroU64>,
    /// Connections open at once from one client IP address; more are
    /// closed as soon as they are accepted [default: 256].
    #[arg(long, env = "AIRLOCK_MAX_CONNECTIONS_PER_ADDRESS")]
    pub max_connections_per_address: Option<NonZeroU64>,
    /// Minimum average rate of a request body in bytes per second, after a
    /// grace of the header timeout; slower: 408. 0 = no minimum
    /// [default: 1024].
    #[arg(long, env = "AIRLOCK_MIN_BODY_RATE")]
    pub min_body_rate: Option<u64>,
    /// A manifest PUT's body must arrive within this many seconds of its
    /// head, else 408 [default: 60].
    #[arg(long, env = "AIRLOCK_MANIFEST_PUT_TIMEOUT")]
    pub manifest_put_timeout_secs: Option<NonZeroU64>,
    /// Largest request head in bytes (K, M suffixes; at least 8K); larger:
    /// 431 [default: 64K].
    #[arg(long, env = "AIRLOCK_MAX_REQUEST_HEAD")]
    pub max_request_head: Option<Size>,
    /// Bytes of responses held in memory at once over all clients (K, M, G
    /// suffixes); at the cap, responses wait for slow readers to drain
    /// [default: 256M].
    #[arg(long, env = "AIRLOCK_MAX_RESPONSE_BUFFER")]
    pub max_response_buffer: Option<Size>,
    /// On SIGTERM or SIGINT, answer 503 on /readyz and keep serving for
    /// this many seconds before closing the listeners, so that a load
    /// balancer's health check takes the replica out first (at least the
    /// balancer's fall x interval plus one interval, e.g. 6 for HAProxy
    /// `inter 2s fall 2`). A second signal ends the wait [default: 0].
    #[arg(long, env = "AIRLOCK_SHUTDOWN_DELAY")]
    pub shutdown_delay_secs: Option<u64>,
    /// After the shutdown delay, the listeners close and requests already
    /// in flight (a pull's body still being sent, a push's still being
    /// received) get this many seconds to finish before the process exits
    /// anyway; a second signal does not shorten it. The BOSH job sets it to
    /// `airlock.drain.timeout_secs`, since its drain script waits that long
    /// [default: 30].
    #[arg(long, env = "AIRLOCK_SHUTDOWN_TIMEOUT")]
    pub shutdown_timeout_secs: Option<NonZeroU64>,
    /// Answer body-less HTTP/1.1 GETs and HEADs on the lean path (fewer
    /// instructions per small request); off: hyper serves every
    /// connection from its first byte. The answers are the same either way
    /// (tested against each other); off is for comparison, or as a way out
    /// should a client meet a difference [default: true].
    #[arg(long, env = "AIRLOCK_LEAN_HTTP1", num_args = 0..=1, default_missing_value = "true", value_parser = BoolishValueParser::new())]
    pub lean_http1: Option<bool>,
}

/// `[stacks]`: the `/stacks/v1` API.
#[derive(Debug, Clone, Default, clap::Args, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StacksSection {
    /// Serve the stacks admin routes (POST /stacks/v1/<name>/promote,
    /// rollout, rollback, state, default) to admins. Off: 403 DENIED
    /// [default: false].
    #[arg(long, env = "AIRLOCK_ALLOW_ADMIN", num_args = 0..=1, default_missing_value = "true", value_parser = BoolishValueParser::new())]
    pub allow_admin: Option<bool>,
    /// Who may register custom stacks: `off`, `admin-only` or `on`
    /// (RFC-0040) [default: off].
    #[arg(long, env = "AIRLOCK_CUSTOM_STACKS")]
    pub custom_stacks: Option<crate::stacks::custom::CustomPolicy>,
}

/// `[import]`: imports over HTTP.
#[derive(Debug, Clone, Default, clap::Args, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ImportSection {
    /// Armored public keys trusted to sign bundles imported with
    /// `POST /admin/v1/imports`; absent: imports over HTTP are off.
    #[arg(long = "import-keyring", env = "AIRLOCK_IMPORT_KEYRING")]
    pub keyring: Option<PathBuf>,
    /// How old the newest imported bundle (by its `created`) may be before
    /// `/readyz`, `/metrics`, the console and `airlock status` say the
    /// site is stale (`14d`, `36h`; absent: never). A site fed only old
    /// media keeps serving; it says so.
    #[arg(long = "import-max-staleness", env = "AIRLOCK_IMPORT_MAX_STALENESS")]
    pub max_staleness: Option<String>,
    /// The site's upstream signature policy: `[[import.policy]]` rules,
    /// each `repositories` (globs) and the cosign public `keys` (PEM) one
    /// of which must have signed every image a bundle brings into them
    /// (the signatures travel in the bundle; see docs/trust.md). Applies
    /// to `airlock import --config` and `POST /admin/v1/imports`.
    #[arg(skip)]
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub policy: Vec<crate::signatures::SiteRule>,
}

/// `[torcx]`: signing keys of the torcx remotes, and whether hosts fetch without credentials.
#[derive(Debug, Clone, Default, clap::Args, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TorcxSection {
    /// Remote → RSA secret key file (`keys = { "stable" = "k.sec.asc" }`).
    #[arg(skip)]
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub keys: BTreeMap<String, PathBuf>,
    /// Sign the torcx contents of REMOTE with this RSA key:
    /// `REMOTE=KEY.sec.asc` (repeatable; one per remote; over the file's
    /// `keys`).
    #[arg(long = "torcx-key", value_name = "REMOTE=KEY.sec.asc")]
    #[serde(skip)]
    pub key_flags: Vec<String>,
    /// Serve torcx contents and archives (`/torcx/...` GET and HEAD)
    /// without credentials even when users are configured: both are signed
    /// and every host verifies them, so no host needs a shared password in
    /// its world-readable `remote.json` [default: false].
    #[arg(long = "torcx-public", env = "AIRLOCK_TORCX_PUBLIC", num_args = 0..=1, default_missing_value = "true", value_parser = BoolishValueParser::new())]
    pub public: Option<bool>,
}

/// A size in bytes: an integer, or a string with a K, M, G or T suffix
/// (powers of 1024), e.g. `"64G"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(transparent)]
pub struct Size(pub u64);

impl std::str::FromStr for Size {
    type Err = String;
    fn from_str(s: &str) -> Result<Size, String> {
        parse_size(s).map(Size)
    }
}

impl<'de> serde::Deserialize<'de> for Size {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Size, D::Error> {
        #[derive(serde::Deserialize)]
        #[serde(untagged)]
        enum Raw {
            N(u64),
            S(String),
        }
        match Raw::deserialize(d)? {
            Raw::N(0) => Err(serde::de::Error::custom("a size must be positive")),
            Raw::N(n) => Ok(Size(n)),
            Raw::S(s) => s.parse().map_err(serde::de::Error::custom),
        }
    }
}

/// Parses `123`, `4K`, `700M`, `4G`, `1T` (powers of 1024; positive).
///
/// Errors: not a positive number with an optional suffix, or too large.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let (num, mult) = match s.chars().last() {
        Some('K' | 'k') => (&s[..s.len() - 1], 1u64 << 10),
        Some('M' | 'm') => (&s[..s.len() - 1], 1 << 20),
        Some('G' | 'g') => (&s[..s.len() - 1], 1 << 30),
        Some('T' | 't') => (&s[..s.len() - 1], 1 << 40),
        _ => (s, 1),
    };
    let n: u64 = num.parse().map_err(|_| format!("invalid size {s:?}"))?;
    n.checked_mul(mult)
        .filter(|&v| v > 0)
        .ok_or_else(|| format!("invalid size {s:?}"))
}

/// A size for people, in the units [`parse_size`] reads (powers of 1024):
/// `512 B`, `12.3 KiB`, `700.0 MiB`, `4.0 GiB`, `1.0 TiB`. Every size airlock
/// prints goes through here, so one unit style is used everywhere.
pub fn format_size(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

fn one_or_many<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<SocketAddr>, D::Error> {
    use serde::Deserialize as _;
    #[derive(serde::Deserialize)]
    #[serde(untagged)]
    enum Raw {
        One(SocketAddr),
        Many(Vec<SocketAddr>),
    }
    Ok(match Raw::deserialize(d)? {
        Raw::One(a) => vec![a],
        Raw::Many(v) => v,
    })
}

impl Settings {
    /// Makes the relative paths of a file read from `dir` relative to it.
    pub fn resolve_paths(&mut self, dir: &Path) {
        let fix = |p: &mut Option<PathBuf>| {
            if let Some(path) = p
                && path.is_relative()
            {
                *path = dir.join(&*path);
            }
        };
        fix(&mut self.store.path);
        fix(&mut self.store.s3_ca_file);
        fix(&mut self.tls.cert);
        fix(&mut self.tls.key);
        fix(&mut self.tls.client_ca);
        fix(&mut self.import.keyring);
        for w in &mut self.webhooks {
            fix(&mut w.ca_file);
        }
        for p in self.torcx.keys.values_mut() {
            if p.is_relative() {
                *p = dir.join(&*p);
            }
        }
    }
}
