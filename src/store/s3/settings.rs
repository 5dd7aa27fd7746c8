//! How to reach the bucket ([`S3Settings`]) and the aws-sdk-s3 client built
//! from it: endpoint, region, path-style addressing, the standard AWS
//! credential chain, a CA bundle for private endpoints (rustls with ring,
//! the one TLS stack of airlock), retries and timeouts.

use std::path::PathBuf;
use std::time::Duration;

use aws_sdk_s3::Client;
use aws_sdk_s3::config::{Region, RequestChecksumCalculation, ResponseChecksumValidation};

use super::{DEFAULT_PARALLEL_PARTS, DEFAULT_PART_SIZE, MIN_PART_SIZE, S3Store};
use crate::store::{Result, StoreError};

/// How to reach the bucket. Built from `--store s3://BUCKET/PREFIX` and the
/// `--s3-*` flags or `[store]` keys (see [`super::open`]).
#[derive(Debug, Clone, PartialEq)]
pub struct S3Settings {
    /// The bucket (must exist).
    pub bucket: String,
    /// Key prefix inside the bucket: empty, or `/`-terminated (`site/`).
    pub prefix: String,
    /// Endpoint URL (`http://127.0.0.1:9000`, `https://rgw.internal`);
    /// `None`: AWS S3 for the region.
    pub endpoint: Option<String>,
    /// Region; `None`: `AWS_REGION`, `AWS_DEFAULT_REGION`, the profile,
    /// else `us-east-1`.
    pub region: Option<String>,
    /// Path-style addressing (`endpoint/bucket/key`); `None`: on when an
    /// endpoint is given (MinIO, Ceph, s3s), virtual-hosted for AWS.
    pub path_style: Option<bool>,
    /// PEM CA bundle trusted for the endpoint, in addition to the system's.
    pub ca_file: Option<PathBuf>,
    /// Multipart part size in bytes (at least 5 MiB) [default: 16 MiB].
    pub part_size: u64,
    /// Parts of one object uploaded in parallel [default: 4].
    pub parallel_parts: usize,
    /// The operator acknowledges that only one process writes to the
    /// bucket: a server that ignores conditional writes is accepted.
    pub single_writer: bool,
    /// Retries of a failed request (5xx, throttling, connection errors) [default: 4].
    pub max_retries: u32,
    /// Copies of each metadata blob a commit writes, 1 or 2
    /// ([`crate::store::copies`]) [default: 1: the object store keeps its
    /// own redundancy].
    pub metadata_copies: u8,
    /// Deadlines of every request to the object store.
    pub timeouts: S3Timeouts,
}

/// Deadlines of every object-store call (issue 62): a store that hangs
/// (a stopped gateway, a network that drops packets) fails each call
/// within them, as [`crate::store::StoreError::Unavailable`] (HTTP 503
/// with `Retry-After`), instead of holding the request for minutes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct S3Timeouts {
    /// Making a TCP (and TLS) connection [default: 5 s].
    pub connect: Duration,
    /// From sending a request to its response head, per attempt, plus one
    /// second per MiB of the request's body (a 16 MiB part: 16 s more)
    /// [default: 10 s].
    pub first_byte: Duration,
    /// Between two reads of a response body that wait on the store (a
    /// streamed blob): past it the body fails and a download is cut, never
    /// completed short; time the client spends not reading does not count
    /// [default: 20 s].
    pub idle: Duration,
    /// A whole call, every retry included, to its response head (plus one
    /// second per MiB of a request body, as `first_byte`)
    /// [default: 30 s].
    pub operation: Duration,
}

impl Default for S3Timeouts {
    fn default() -> S3Timeouts {
        S3Timeouts {
            connect: Duration::from_secs(5),
            first_byte: Duration::from_secs(10),
            idle: Duration::from_secs(20),
            operation: Duration::from_secs(30),
        }
    }
}

impl S3Timeouts {
    /// The time a request body of `bytes` adds to a deadline: one second
    /// per MiB (an upload at 1 MiB/s or faster never times out).
    pub fn for_body(bytes: u64) -> Duration {
        Duration::from_secs(bytes.div_ceil(1 << 20))
    }

    /// A per-call configuration override carrying the deadlines of a
    /// request with a body of `body` bytes (an upload: its operation
    /// deadline grows with its size).
    pub(super) fn override_for(&self, body: u64) -> aws_sdk_s3::config::Builder {
        aws_sdk_s3::config::Builder::default().timeout_config(self.sdk(body))
    }

    /// The SDK's timeout configuration for a request with a body of
    /// `body` bytes (0: none).
    pub(super) fn sdk(&self, body: u64) -> aws_smithy_types::timeout::TimeoutConfig {
        aws_smithy_types::timeout::TimeoutConfig::builder()
            .connect_timeout(self.connect)
            .read_timeout(self.first_byte)
            .operation_timeout(self.operation + S3Timeouts::for_body(body))
            .build()
    }
}

impl S3Settings {
    /// Settings for `bucket` and `prefix` with every default.
    pub fn new(bucket: &str, prefix: &str) -> S3Settings {
        let prefix = prefix.trim_matches('/');
        S3Settings {
            bucket: bucket.to_string(),
            prefix: if prefix.is_empty() {
                String::new()
            } else {
                format!("{prefix}/")
            },
            endpoint: None,
            region: None,
            path_style: None,
            ca_file: None,
            part_size: DEFAULT_PART_SIZE,
            parallel_parts: DEFAULT_PARALLEL_PARTS,
            single_writer: false,
            max_retries: 4,
            metadata_copies: 1,
            timeouts: S3Timeouts::default(),
        }
    }

    /// `s3://bucket/prefix`, for messages.
    pub fn url(&self) -> String {
        format!("s3://{}/{}", self.bucket, self.prefix)
    }
}

impl S3Store {
    /// The client alone, without the checks of [`S3Store::open`].
    pub(super) async fn connect(settings: &S3Settings) -> Result<S3Store> {
        if settings.part_size < MIN_PART_SIZE {
            return Err(StoreError::Io(std::io::Error::other(format!(
                "S3 part size {} is below the minimum of 5 MiB",
                settings.part_size
            ))));
        }
        let tls = crate::http_client::tls_config(&crate::http_client::TlsOptions {
            ca_file: settings.ca_file.clone(),
            ..Default::default()
        })
        .map_err(|e| std::io::Error::other(format!("S3 TLS settings: {e:#}")))?;
        let http = super::http::S3Http::new(tls);
        let region = aws_config::meta::region::RegionProviderChain::first_try(
            settings.region.clone().map(Region::new),
        )
        .or_default_provider()
        .or_else(Region::from_static("us-east-1"));
        let retry = aws_smithy_types::retry::RetryConfig::standard()
            .with_max_attempts(settings.max_retries + 1)
            .with_initial_backoff(Duration::from_millis(200))
            .with_max_backoff(Duration::from_secs(5));
        let timeouts = settings.timeouts.sdk(0);
        let sdk = aws_config::defaults(aws_config::BehaviorVersion::latest())
            .http_client(http)
            .region(region)
            .retry_config(retry)
            .timeout_config(timeouts)
            .load()
            .await;
        let mut config = aws_sdk_s3::config::Builder::from(&sdk)
            .force_path_style(settings.path_style.unwrap_or(settings.endpoint.is_some()))
            // Checksums only where S3 requires them: not every S3-compatible
            // server speaks the flexible-checksum trailers.
            .request_checksum_calculation(RequestChecksumCalculation::WhenRequired)
            .response_checksum_validation(ResponseChecksumValidation::WhenRequired);
        if let Some(url) = &settings.endpoint {
            config = config.endpoint_url(url);
        }
        Ok(S3Store {
            client: Client::from_conf(config.build()),
            bucket: settings.bucket.clone(),
            prefix: settings.prefix.clone(),
            part_size: settings.part_size,
            parallel_parts: settings.parallel_parts.max(1),
            unconditional: false,
            etag_form: Default::default(),
            hot: Default::default(),
            verified: Default::default(),
            copies: settings.metadata_copies.clamp(1, 2),
            repairs: Default::default(),
            damage: Default::default(),
            timeouts: settings.timeouts,
        })
    }
}
