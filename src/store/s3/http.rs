//! The S3 client's HTTP transport: hyper-util's pooled HTTP/1.1 client with
//! hyper-rustls (as `aws-smithy-http-client` builds it), on TCP connections
//! that acknowledge what they receive at once.
//!
//! Why not the SDK's own client: an S3 gateway that writes a response's
//! head and body in two `send`s with Nagle's algorithm on (RFC 896; Ceph
//! RGW's beast frontend by default, `tcp_nodelay=0`) holds the body until
//! the head is acknowledged, and Linux delays that acknowledgement by up
//! to 40 ms (RFC 1122 §4.2.3.2 delayed ACK) on a request-response
//! connection. Every response of 8 KiB or less then arrives ~44 ms late:
//! measured on RGW 16.2, a 300-byte `GetObject` took 44.0 ms, and 0.9 ms
//! with the client's `TCP_QUICKACK` set (tcp(7)). airlock's metadata reads
//! (the state root, pages, the turns marker) are all that small, so the
//! connector here sets `TCP_QUICKACK` whenever a read on the socket must
//! wait: the kernel then sends the pending acknowledgement at once and
//! leaves its delayed-ACK ("ping-pong") mode. It costs one `setsockopt`
//! per wait, and needs no setting on the gateway.
//!
//! The rest is what `aws-smithy-http-client` does: connect and read
//! timeouts from the SDK's [`HttpConnectorSettings`], one pool per client,
//! errors classified for the SDK's retries (a connection error or a closed
//! connection is transient I/O), and connection poisoning after a failed
//! attempt.

use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};

use aws_smithy_runtime_api::client::connection::{CaptureSmithyConnection, ConnectionMetadata};
use aws_smithy_runtime_api::client::http::{
    HttpClient, HttpConnector, HttpConnectorFuture, HttpConnectorSettings, SharedHttpConnector,
};
use aws_smithy_runtime_api::client::orchestrator::{HttpRequest, HttpResponse};
use aws_smithy_runtime_api::client::result::ConnectorError;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_types::body::SdkBody;
use aws_smithy_types::retry::ErrorKind;
use hyper::Uri;
use hyper::rt::{Read, ReadBufCursor, Write};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::{Connected, Connection, HttpConnector as TcpConnector};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::net::TcpStream;

/// The SDK's HTTP client for one [`S3Store`](super::S3Store): TLS by
/// `tls` for `https://` endpoints, plain TCP for `http://`. The pool is
/// made on the SDK's first request, with that request's connect and read
/// timeouts (one S3 client has one timeout configuration).
#[derive(Debug, Clone)]
pub(super) struct S3Http {
    tls: Arc<rustls::ClientConfig>,
    pool: Arc<OnceLock<SharedHttpConnector>>,
}

impl S3Http {
    /// A client whose `https://` connections use `tls`.
    pub(super) fn new(tls: rustls::ClientConfig) -> S3Http {
        S3Http {
            tls: Arc::new(tls),
            pool: Arc::default(),
        }
    }
}

impl HttpClient for S3Http {
    fn http_connector(
        &self,
        settings: &HttpConnectorSettings,
        _: &RuntimeComponents,
    ) -> SharedHttpConnector {
        self.pool
            .get_or_init(|| {
                let mut tcp = TcpConnector::new();
                tcp.enforce_http(false);
                tcp.set_nodelay(true);
                tcp.set_connect_timeout(settings.connect_timeout());
                let https = hyper_rustls::HttpsConnectorBuilder::new()
                    .with_tls_config((*self.tls).clone())
                    .https_or_http()
                    .enable_http1()
                    .wrap_connector(QuickAckConnector(tcp));
                let client = Client::builder(TokioExecutor::new())
                    .pool_timer(TokioTimer::new())
                    .build(https);
                SharedHttpConnector::new(Pool {
                    client,
                    read_timeout: settings.read_timeout(),
                })
            })
            .clone()
    }
}

/// One pool of connections and the read timeout for a response head.
#[derive(Clone)]
struct Pool {
    client: Client<HttpsConnector<QuickAckConnector>, SdkBody>,
    read_timeout: Option<std::time::Duration>,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("read_timeout", &self.read_timeout)
            .finish_non_exhaustive()
    }
}

impl HttpConnector for Pool {
    fn call(&self, request: HttpRequest) -> HttpConnectorFuture {
        let mut request = match request.try_into_http1x() {
            Ok(request) => request,
            Err(e) => return HttpConnectorFuture::ready(Err(ConnectorError::user(e.into()))),
        };
        let captured = hyper_util::client::legacy::connect::capture_connection(&mut request);
        if let Some(capture) = request.extensions().get::<CaptureSmithyConnection>() {
            capture.set_connection_retriever(move || {
                let conn = captured.clone();
                captured.connection_metadata().as_ref().map(|_| {
                    ConnectionMetadata::builder()
                        .proxied(false)
                        .poison_fn(move || {
                            if let Some(c) = conn.connection_metadata().as_ref() {
                                c.poison()
                            }
                        })
                        .build()
                })
            });
        }
        // The first byte is awaited after the body is sent: a request
        // body adds one second per MiB to the deadline.
        let body = request.body().content_length().unwrap_or(0);
        let response = self.client.request(request);
        let read_timeout = self
            .read_timeout
            .map(|t| t + super::S3Timeouts::for_body(body));
        HttpConnectorFuture::new(async move {
            let response = match read_timeout {
                None => response.await,
                Some(limit) => tokio::time::timeout(limit, response)
                    .await
                    .map_err(|e| ConnectorError::timeout(e.into()))?,
            };
            let response = response
                .map_err(connector_error)?
                .map(SdkBody::from_body_1_x);
            HttpResponse::try_from(response).map_err(|e| ConnectorError::other(e.into(), None))
        })
    }
}

/// The SDK's class of a failed request: a connection that could not be
/// made or broke is transient I/O (retried); a request the client could
/// not send is the caller's; anything else is retried as transient only
/// when hyper says the message was cut short.
fn connector_error(e: hyper_util::client::legacy::Error) -> ConnectorError {
    if e.is_connect() {
        return ConnectorError::io(e.into());
    }
    match find_source::<hyper::Error>(&e) {
        Some(h) if h.is_timeout() => ConnectorError::timeout(e.into()),
        Some(h) if h.is_user() => ConnectorError::user(e.into()),
        Some(h) if h.is_closed() || h.is_canceled() => ConnectorError::io(e.into()),
        Some(h) if h.is_incomplete_message() => {
            ConnectorError::other(e.into(), Some(ErrorKind::TransientError))
        }
        _ if find_source::<std::io::Error>(&e).is_some() => ConnectorError::io(e.into()),
        _ => ConnectorError::other(e.into(), None),
    }
}

/// The first error of type `E` in `e`'s chain of causes, `e` included.
fn find_source<'a, E: std::error::Error + 'static>(
    e: &'a (dyn std::error::Error + 'static),
) -> Option<&'a E> {
    let mut cur = Some(e);
    while let Some(err) = cur {
        if let Some(found) = err.downcast_ref::<E>() {
            return Some(found);
        }
        cur = err.source();
    }
    None
}

/// hyper-util's TCP connector whose connections are [`QuickAck`].
#[derive(Clone)]
struct QuickAckConnector(TcpConnector);

impl tower::Service<Uri> for QuickAckConnector {
    type Response = QuickAck;
    type Error = <TcpConnector as tower::Service<Uri>>::Error;
    type Future = Pin<Box<dyn Future<Output = Result<QuickAck, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let connecting = self.0.call(uri);
        Box::pin(async move { connecting.await.map(QuickAck) })
    }
}

/// A TCP connection that sets `TCP_QUICKACK` each time a read must wait
/// (see the module docs). Writes pass through.
struct QuickAck(TokioIo<TcpStream>);

impl QuickAck {
    /// Sends the pending acknowledgement now and leaves delayed-ACK mode
    /// (tcp(7) `TCP_QUICKACK`). A failure costs only latency: ignored.
    fn ack_now(&self) {
        #[cfg(target_os = "linux")]
        {
            use std::os::fd::AsRawFd;
            let on: libc::c_int = 1;
            // SAFETY: a valid socket descriptor owned by `self`, and a
            // pointer to a c_int with its size, as setsockopt(2) requires.
            unsafe {
                libc::setsockopt(
                    self.0.inner().as_raw_fd(),
                    libc::IPPROTO_TCP,
                    libc::TCP_QUICKACK,
                    (&on as *const libc::c_int).cast(),
                    std::mem::size_of::<libc::c_int>() as libc::socklen_t,
                );
            }
        }
    }
}

impl Connection for QuickAck {
    fn connected(&self) -> Connected {
        self.0.connected()
    }
}

impl Read for QuickAck {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: ReadBufCursor<'_>,
    ) -> Poll<std::io::Result<()>> {
        let polled = Pin::new(&mut self.0).poll_read(cx, buf);
        if polled.is_pending() {
            self.ack_now();
        }
        polled
    }
}

impl Write for QuickAck {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.0.is_write_vectored()
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.0).poll_write_vectored(cx, bufs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read as _, Write as _};
    use std::net::{TcpListener, TcpStream as StdTcpStream};
    use std::time::{Duration, Instant};

    const BODY: usize = 300;
    const REQUESTS: usize = 12;

    /// An HTTP/1.1 server on loopback that answers every request with a
    /// 300-byte body, writing the head and the body in two `send`s with
    /// Nagle's algorithm on, as Ceph RGW's beast frontend does by default.
    fn nagle_server() -> std::net::SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { return };
                std::thread::spawn(move || {
                    let mut buf = Vec::new();
                    let mut chunk = [0u8; 4096];
                    loop {
                        while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                            buf.drain(..end + 4);
                            let head = format!(
                                "HTTP/1.1 200 OK\r\nContent-Length: {BODY}\r\nETag: \"e\"\r\n\r\n"
                            );
                            if conn.write_all(head.as_bytes()).is_err()
                                || conn.write_all(&[b'x'; BODY]).is_err()
                            {
                                return;
                            }
                        }
                        match conn.read(&mut chunk) {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    }
                });
            }
        });
        addr
    }

    fn median(mut times: Vec<Duration>) -> Duration {
        times.sort();
        times[times.len() / 2]
    }

    /// A plain client on one keep-alive connection: what the server does
    /// to a client that acknowledges late (the delay this module avoids).
    fn plain_get_times(addr: std::net::SocketAddr) -> Vec<Duration> {
        let mut conn = StdTcpStream::connect(addr).unwrap();
        conn.set_nodelay(true).unwrap();
        let mut times = Vec::new();
        for _ in 0..REQUESTS {
            let start = Instant::now();
            conn.write_all(b"GET /b/k HTTP/1.1\r\nHost: x\r\n\r\n")
                .unwrap();
            let mut got = Vec::new();
            let mut chunk = [0u8; 4096];
            while !got.ends_with(&[b'x'; BODY]) {
                let n = conn.read(&mut chunk).unwrap();
                assert!(n > 0, "the test server closed the connection");
                got.extend_from_slice(&chunk[..n]);
            }
            times.push(start.elapsed());
        }
        times
    }

    /// The S3 client's GETs of a small object from a server that writes
    /// head and body apart with Nagle on arrive without the delayed-ACK
    /// wait (~40 ms per response) a plain client gets from the same server.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn small_responses_are_not_held_for_a_delayed_ack() {
        let addr = nagle_server();
        let plain = tokio::task::spawn_blocking(move || median(plain_get_times(addr)))
            .await
            .unwrap();
        assert!(
            plain >= Duration::from_millis(30),
            "the test server does not reproduce the delayed-ACK wait (plain client median {plain:?}): the test proves nothing"
        );

        let tls = crate::http_client::tls_config(&Default::default()).unwrap();
        let config = aws_sdk_s3::Config::builder()
            .behavior_version(aws_sdk_s3::config::BehaviorVersion::latest())
            .http_client(S3Http::new(tls))
            .credentials_provider(aws_sdk_s3::config::Credentials::new(
                "key", "secret", None, None, "test",
            ))
            .region(aws_sdk_s3::config::Region::new("us-east-1"))
            .endpoint_url(format!("http://{addr}"))
            .force_path_style(true)
            .build();
        let client = aws_sdk_s3::Client::from_conf(config);
        let mut times = Vec::new();
        for _ in 0..REQUESTS {
            let start = Instant::now();
            let got = client
                .get_object()
                .bucket("b")
                .key("k")
                .send()
                .await
                .unwrap();
            let body = got.body.collect().await.unwrap().into_bytes();
            times.push(start.elapsed());
            assert_eq!(body.len(), BODY);
        }
        let ours = median(times);
        assert!(
            ours < Duration::from_millis(15),
            "S3 client median {ours:?} per small GET, plain client {plain:?}: the body waited for a delayed ACK"
        );
    }
}
