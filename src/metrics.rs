//! Process metrics for `/metrics` (OpenMetrics text, the format Prometheus
//! scrapes), kept with the `prometheus-client` crate.
//!
//! Owns: the one registry of this process ([`global`]) and its families:
//! HTTP requests by route class and status, bytes served, request latency,
//! open connections, imports (count by outcome, bytes), garbage collection
//! (runs, bytes freed), store errors (including corrupt blobs found) and
//! the current generation. Lower layers record into it; `server::metrics`
//! renders it. Counters live in this process only: an `airlock import` run
//! as its own process is seen by the server as a new generation, not in
//! the import counters.

use std::sync::OnceLock;
use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::{EncodeLabelSet, EncodeMetric, MetricEncoder};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Metric, Registry};

/// Labels of one HTTP request.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// Route class: `manifest`, `blob`, `upload`, `tags`, `catalog`,
    /// `referrers`, `base`, `stacks`, `chunk` (`/stacks/v1/chunks/`), `torcx`, `admin`,
    /// `probe`, `metrics`, `other`.
    pub route: &'static str,
    /// Method: `GET`, `HEAD`, `PUT`, ... (others: `OTHER`).
    pub method: &'static str,
    /// Response status code.
    pub status: u16,
}

/// Labels with a route class only.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteLabels {
    /// Route class, as in [`RequestLabels::route`].
    pub route: &'static str,
}

/// Labels with an outcome.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    /// `ok` or `failed`.
    pub outcome: &'static str,
}

/// Labels of a periodic job ([`crate::ops::lease`]).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct JobLabels {
    /// `scrub` or `gc`.
    pub job: &'static str,
}

/// Labels of store errors.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    /// `io`, `no_space` or `corrupt`.
    pub kind: &'static str,
}

/// Labels of `airlock_stack_vulnerabilities` ([`crate::sbom::report`]).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StackSeverityLabels {
    /// The stack.
    pub stack: String,
    /// `critical`, `high`, `medium`, `low`, `negligible`, `unknown`.
    pub severity: &'static str,
}

/// Every metric of the process.
pub struct Metrics {
    registry: Registry,
    /// `airlock_http_requests_total{route,method,status}`.
    pub requests: Family<RequestLabels, Counter>,
    /// `airlock_http_response_bytes_total{route}`: body bytes sent (by `Content-Length`).
    pub bytes_served: Family<RouteLabels, Counter>,
    /// `airlock_http_request_duration_seconds{route}`: until the response head is ready.
    pub latency: Family<RouteLabels, Histogram, fn() -> Histogram>,
    /// `airlock_http_open_connections`.
    pub open_connections: Gauge,
    /// `airlock_imports_total{outcome}`.
    pub imports: Family<OutcomeLabels, Counter>,
    /// `airlock_import_bytes_total`: blob bytes written by imports.
    pub import_bytes: Counter,
    /// `airlock_gc_runs_total{outcome}`.
    pub gc_runs: Family<OutcomeLabels, Counter>,
    /// `airlock_gc_freed_bytes_total`.
    pub gc_freed_bytes: Counter,
    /// `airlock_store_errors_total{kind}`.
    pub store_errors: Family<ErrorLabels, Counter>,
    /// `airlock_state_generation`: the generation last read.
    pub generation: Gauge<u64, AtomicU64>,
    /// `airlock_newest_bundle_created_seconds`: unix time of the newest
    /// imported bundle's `created` (0: none), refreshed on each scrape
    /// (alert on `time() - airlock_newest_bundle_created_seconds`).
    pub newest_bundle_created: Gauge,
    /// `airlock_stack_vulnerabilities{stack,severity}`: known vulnerabilities
    /// of each stack's active promotion, refreshed on each scrape.
    pub stack_vulnerabilities: Family<StackSeverityLabels, Gauge>,
    /// `airlock_scrub_blobs`: blobs rehashed by the current (or last) scrub pass.
    pub scrub_blobs: Gauge,
    /// `airlock_scrub_bytes`: bytes rehashed by the current (or last) scrub pass.
    pub scrub_bytes: Gauge,
    /// `airlock_scrub_corrupt`: blobs the current (or last) pass quarantined.
    pub scrub_corrupt: Gauge,
    /// `airlock_scrub_last_finished_seconds`: when the last pass ended (Unix time).
    pub scrub_last_finished: Gauge,
    /// `airlock_scrub_corrupt_found_total`: corrupt blobs this process's scrub quarantined.
    pub scrub_corrupt_found: Counter,
    /// `airlock_lease_held{job}`: 1 while this process holds the job's
    /// lease (runs it for every replica of the store), else 0.
    pub lease_held: Family<JobLabels, Gauge>,
    /// `airlock_sendfile_bytes_total`: response body bytes sent with
    /// `sendfile(2)` (zero-copy, plain HTTP/1.1), a part of those counted
    /// in `airlock_http_response_bytes_total`.
    pub sendfile_bytes: Counter,
}

/// A metric of any kind, so that one table can register every family.
#[derive(Debug)]
struct Boxed(Box<dyn Metric>);

impl EncodeMetric for Boxed {
    fn encode(&self, encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        self.0.encode(encoder)
    }

    fn metric_type(&self) -> MetricType {
        self.0.metric_type()
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

fn latency_histogram() -> Histogram {
    // 0.5 ms .. ~65 s.
    Histogram::new(exponential_buckets(0.0005, 4.0, 9))
}

impl Metrics {
    fn new() -> Metrics {
        let mut registry = Registry::with_prefix("airlock");
        let m = Metrics {
            requests: Family::default(),
            bytes_served: Family::default(),
            latency: Family::new_with_constructor(latency_histogram as fn() -> Histogram),
            open_connections: Gauge::default(),
            imports: Family::default(),
            import_bytes: Counter::default(),
            gc_runs: Family::default(),
            gc_freed_bytes: Counter::default(),
            store_errors: Family::default(),
            generation: Gauge::default(),
            newest_bundle_created: Gauge::default(),
            stack_vulnerabilities: Family::default(),
            scrub_blobs: Gauge::default(),
            scrub_bytes: Gauge::default(),
            scrub_corrupt: Gauge::default(),
            scrub_last_finished: Gauge::default(),
            scrub_corrupt_found: Counter::default(),
            lease_held: Family::default(),
            sendfile_bytes: Counter::default(),
            registry: Registry::default(),
        };
        // (name without the `airlock_` prefix, help, metric): the kind is the metric's type.
        let families: [(&str, &str, Box<dyn Metric>); 19] = [
            (
                "http_requests",
                "HTTP requests by route class, method and status",
                Box::new(m.requests.clone()),
            ),
            (
                "http_response_bytes",
                "Response body bytes sent, by route class",
                Box::new(m.bytes_served.clone()),
            ),
            (
                "http_request_duration_seconds",
                "Time until the response head is ready, by route class",
                Box::new(m.latency.clone()),
            ),
            (
                "http_open_connections",
                "Client connections open",
                Box::new(m.open_connections.clone()),
            ),
            (
                "imports",
                "Bundle imports run in this process, by outcome",
                Box::new(m.imports.clone()),
            ),
            (
                "import_bytes",
                "Blob bytes written by imports in this process",
                Box::new(m.import_bytes.clone()),
            ),
            (
                "gc_runs",
                "Garbage collection runs, by outcome",
                Box::new(m.gc_runs.clone()),
            ),
            (
                "gc_freed_bytes",
                "Bytes freed by garbage collection",
                Box::new(m.gc_freed_bytes.clone()),
            ),
            (
                "store_errors",
                "Blobstore errors seen by requests, by kind (io, no_space, corrupt)",
                Box::new(m.store_errors.clone()),
            ),
            (
                "state_generation",
                "The state generation last read",
                Box::new(m.generation.clone()),
            ),
            (
                "newest_bundle_created_seconds",
                "Unix time of the newest imported bundle's creation (0: none imported)",
                Box::new(m.newest_bundle_created.clone()),
            ),
            (
                "stack_vulnerabilities",
                "Known vulnerabilities of each stack's active promotion, by severity (imported feeds)",
                Box::new(m.stack_vulnerabilities.clone()),
            ),
            (
                "scrub_blobs",
                "Blobs rehashed by the current or last scrub pass",
                Box::new(m.scrub_blobs.clone()),
            ),
            (
                "scrub_bytes",
                "Bytes rehashed by the current or last scrub pass",
                Box::new(m.scrub_bytes.clone()),
            ),
            (
                "scrub_corrupt",
                "Blobs the current or last scrub pass found corrupt and quarantined",
                Box::new(m.scrub_corrupt.clone()),
            ),
            (
                "scrub_last_finished_seconds",
                "When the last scrub pass ended (Unix time)",
                Box::new(m.scrub_last_finished.clone()),
            ),
            (
                "scrub_corrupt_found",
                "Corrupt blobs this process's scrub found and quarantined",
                Box::new(m.scrub_corrupt_found.clone()),
            ),
            (
                "lease_held",
                "1 while this process holds the job's lease (runs it for every replica of the store)",
                Box::new(m.lease_held.clone()),
            ),
            (
                "sendfile_bytes",
                "Response body bytes sent with sendfile(2) from the store's files (zero-copy)",
                Box::new(m.sendfile_bytes.clone()),
            ),
        ];
        for (name, help, metric) in families {
            registry.register(name, help, Boxed(metric));
        }
        Metrics { registry, ..m }
    }

    /// The OpenMetrics text exposition of every metric (ends with `# EOF`).
    pub fn render(&self) -> String {
        let mut out = String::new();
        if prometheus_client::encoding::text::encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }

    /// Counts one import outcome and the bytes it wrote.
    pub fn import_done(&self, ok: bool, bytes: u64) {
        let outcome = if ok { "ok" } else { "failed" };
        self.imports.get_or_create(&OutcomeLabels { outcome }).inc();
        self.import_bytes.inc_by(bytes);
    }

    /// Counts one store error of `kind` (`io`, `no_space`, `corrupt`).
    pub fn store_error(&self, kind: &'static str) {
        self.store_errors.get_or_create(&ErrorLabels { kind }).inc();
    }
}

/// The process's metrics.
pub fn global() -> &'static Metrics {
    static M: OnceLock<Metrics> = OnceLock::new();
    M.get_or_init(Metrics::new)
}

/// Keeps [`Metrics::open_connections`] up while it lives (one per connection).
pub struct ConnectionGuard(());

impl ConnectionGuard {
    /// Counts a connection as open until the guard is dropped.
    pub fn open() -> ConnectionGuard {
        global().open_connections.inc();
        ConnectionGuard(())
    }
}

impl Drop for ConnectionGuard {
    fn drop(&mut self) {
        global().open_connections.dec();
    }
}
