//! [`Limits`]: the connection limits and timeouts of the HTTP listener, as
//! the operator sets them (`airlock serve` flags, `[limits]`). A plain
//! value: [`super::activity`] applies the timeouts, `conn` the caps.

use std::time::Duration;

/// Connection limits and timeouts of the HTTP listener (`airlock serve`
/// flags `--header-timeout-secs`, `--idle-timeout-secs`,
/// `--max-connections`, `--max-connections-per-address`,
/// `--min-body-rate`, `--manifest-put-timeout-secs`, `--max-request-head`,
/// `--max-response-buffer`).
#[derive(Clone, Debug)]
pub struct Limits {
    /// A client must send a complete request head within this time (from
    /// accept, or from the end of the previous response on a keep-alive
    /// connection), or the connection is closed. Also the grace period
    /// before `min_body_rate` applies to a request body.
    pub header_timeout: Duration,
    /// A connection with no request in progress and no activity for this
    /// long is closed; a request body that makes no progress for this long
    /// is answered 408.
    pub idle_timeout: Duration,
    /// Connections open at once (at least 1). At the cap the oldest
    /// connection that has not sent a request is closed for a new one; if
    /// there is none, no more are accepted until one closes.
    pub max_connections: usize,
    /// Connections open at once from one client IP address (at least 1);
    /// more are closed as soon as they are accepted.
    pub max_connections_per_address: usize,
    /// A request body must average at least this many bytes per second
    /// after the header timeout (`n` bytes are due `header_timeout + n /
    /// min_body_rate` after the body started), else 408; 0 = no minimum.
    pub min_body_rate: u64,
    /// A manifest PUT's body must have arrived this long after its head,
    /// else 408.
    pub manifest_put_timeout: Duration,
    /// Largest request head in bytes (HTTP/1 read buffer, HTTP/2 header
    /// list); at least 8 KiB.
    pub max_request_head: usize,
    /// Bytes of response bodies held in memory at once, over all
    /// connections (at least 64 KiB); at the cap, responses wait for room.
    pub max_response_buffer: u64,
    /// On SIGTERM or SIGINT, `/readyz` answers 503 while requests are
    /// still served for this long (for load balancers to take the replica
    /// out), before the listeners close.
    pub shutdown_delay: Duration,
    /// On shutdown, in-flight requests get this long to finish before the
    /// remaining connections are abandoned.
    pub shutdown_timeout: Duration,
    /// Worker threads of `serve` (`--workers`): each runs its own
    /// current-thread runtime and accept loop on its own `SO_REUSEPORT`
    /// socket ([`super::workers`]). `None`: one per CPU
    /// (`available_parallelism`); `Some(0)`: the accept loops run on the
    /// caller's (multi-thread) runtime instead. [`super::serve_on`] and
    /// [`super::serve_listener`] ignore it (their listener is given).
    pub workers: Option<usize>,
    /// Serve body-less HTTP/1.1 GETs and HEADs on the lean path
    /// (`[limits] lean_http1`); `false`: hyper serves every connection from
    /// its first byte (the same answers, more instructions per request).
    pub lean_http1: bool,
}

impl Default for Limits {
    /// Header timeout 30 s, idle timeout 120 s, 4096 connections, 256 per
    /// client address, bodies at least 1 KiB/s, manifest PUTs within 60 s,
    /// 64 KiB request heads, 256 MiB of buffered responses, no shutdown
    /// delay, 30 s shutdown grace, one worker thread per CPU, the lean
    /// HTTP/1.1 path on.
    fn default() -> Limits {
        Limits {
            header_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(120),
            max_connections: 4096,
            max_connections_per_address: 256,
            min_body_rate: 1024,
            manifest_put_timeout: Duration::from_secs(60),
            max_request_head: 64 << 10,
            max_response_buffer: 256 << 20,
            shutdown_delay: Duration::ZERO,
            shutdown_timeout: Duration::from_secs(30),
            workers: None,
            lean_http1: true,
        }
    }
}
