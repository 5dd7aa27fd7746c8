//! A real listener on 127.0.0.1 (`server::serve_on`) and raw HTTP/1.1 over
//! TCP, for the connection-limit and hostile-client tests.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::backend::{Backend, Kind};
use airlock::registry::RegistryConfig;
use airlock::server::{self, App, Limits};
use airlock::state::StateStore;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// A server running on a port of 127.0.0.1 over a fresh store.
pub struct Running {
    /// The store (lives as long as the server).
    pub backend: Backend,
    pub addr: SocketAddr,
    pub app: Arc<App>,
    pub stop: Option<oneshot::Sender<()>>,
    pub task: JoinHandle<anyhow::Result<()>>,
}

/// A push-enabled server under `limits`.
pub async fn start(limits: Limits) -> Running {
    let config = RegistryConfig {
        allow_push: true,
        ..RegistryConfig::default()
    };
    start_with(limits, config).await
}

/// A server under `limits` with registry `config`, on the filesystem.
pub async fn start_with(limits: Limits, config: RegistryConfig) -> Running {
    start_on(Backend::start(Kind::Fs), limits, config).await
}

/// A server under `limits` with registry `config` on the fresh store `backend`.
pub async fn start_on(backend: Backend, limits: Limits, config: RegistryConfig) -> Running {
    let replica = serve_store(&backend, limits, config).await;
    Running {
        backend,
        addr: replica.addr,
        app: replica.app,
        stop: replica.stop,
        task: replica.task,
    }
}

/// A server that shares another's store (a replica behind a load balancer).
pub struct Replica {
    pub addr: SocketAddr,
    pub app: Arc<App>,
    pub stop: Option<oneshot::Sender<()>>,
    pub task: JoinHandle<anyhow::Result<()>>,
}

/// Serves `backend`'s store (a client of its own) on a new port of 127.0.0.1.
pub async fn serve_store(backend: &Backend, limits: Limits, config: RegistryConfig) -> Replica {
    let store = backend.open_store().await;
    let app = Arc::new(App::with_config(StateStore::new(store), config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(server::serve_on(listener, app.clone(), limits, async {
        let _ = stopped.await;
    }));
    Replica {
        addr,
        app,
        stop: Some(stop),
        task,
    }
}

pub const GET_HEALTHZ: &[u8] = b"GET /healthz HTTP/1.1\r\nHost: test\r\n\r\n";

/// Reads one HTTP/1.1 response (head and `Content-Length` body); returns the
/// head (lower-cased) and body.
pub async fn read_response(s: &mut TcpStream) -> (String, Vec<u8>) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = s.read(&mut chunk).await.unwrap();
        assert!(n > 0, "EOF before response head: {buf:?}");
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
    let len: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .map(|v| v.trim().parse().unwrap())
        .unwrap_or(0);
    while buf.len() < head_end + len {
        let n = s.read(&mut chunk).await.unwrap();
        assert!(n > 0, "EOF in response body");
        buf.extend_from_slice(&chunk[..n]);
    }
    (head, buf[head_end..head_end + len].to_vec())
}

/// Sends `request` on a new connection to `addr` and reads the response
/// (within 5 s).
pub async fn request(addr: SocketAddr, request: &[u8]) -> (String, Vec<u8>) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(request).await.unwrap();
    tokio::time::timeout(Duration::from_secs(5), read_response(&mut s))
        .await
        .expect("response within 5 s")
}

/// GET /healthz on `s`, which must answer 200 within 5 s; returns the head.
pub async fn get_healthz(s: &mut TcpStream) -> String {
    s.write_all(GET_HEALTHZ).await.unwrap();
    let (head, _) = tokio::time::timeout(Duration::from_secs(5), read_response(s))
        .await
        .expect("response within 5 s");
    assert!(head.starts_with("http/1.1 200"), "{head}");
    head
}

/// Waits (at most `within`) for the server to close `s`; returns how long
/// that took. Any bytes the server sends first (e.g. a 408) are skipped.
pub async fn closed_within(s: &mut TcpStream, within: Duration) -> Duration {
    let started = Instant::now();
    let mut chunk = [0u8; 1024];
    tokio::time::timeout(within, async {
        loop {
            match s.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await
    .expect("server closed the connection in time");
    started.elapsed()
}

/// Connects to `addr` with the HTTP/2 client `builder`, sends one GET
/// /healthz (must answer 200), then waits at most 5 s for the server to
/// close the connection; returns how long that took.
pub async fn h2_healthz_then_closed(
    builder: &hyper::client::conn::http2::Builder<hyper_util::rt::TokioExecutor>,
    addr: SocketAddr,
) -> Duration {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (mut send, conn) = builder
        .handshake(hyper_util::rt::TokioIo::new(tcp))
        .await
        .unwrap();
    let conn = tokio::spawn(conn);
    let req = hyper::Request::get("http://test/healthz")
        .body(http_body_util::Empty::<bytes::Bytes>::new())
        .unwrap();
    let res = send.send_request(req).await.unwrap();
    assert_eq!(res.status(), 200);
    drop(res);
    let started = Instant::now();
    tokio::time::timeout(Duration::from_secs(5), conn)
        .await
        .expect("server closed the HTTP/2 connection within 5 s")
        .unwrap()
        .ok();
    started.elapsed()
}
