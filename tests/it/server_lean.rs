//! The lean HTTP/1.1 path (issue 40) over real sockets on 127.0.0.1: a
//! body-less GET or HEAD is answered by the lean loop, anything else is
//! handed to hyper with the bytes already read, and the two answer alike.
//! Every request here is raw bytes, so what the server gets is exactly
//! what is written: pipelined heads, a push behind GETs on one connection,
//! `Connection: close`, a head that trickles in, a stop with kept
//! connections open.

use crate::common;

use std::time::Duration;

use airlock::server::Limits;
use common::listener::{closed_within, get_healthz, request, start};
use sha2::{Digest as _, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

fn limits(header: Duration) -> Limits {
    Limits {
        header_timeout: header,
        idle_timeout: Duration::from_secs(60),
        max_connections: 64,
        max_connections_per_address: 1000,
        shutdown_timeout: Duration::from_secs(10),
        ..Limits::default()
    }
}

/// A response read off a byte stream: the head (lowercase) and the body.
struct Answer {
    head: String,
    body: Vec<u8>,
}

impl Answer {
    fn status(&self) -> &str {
        &self.head[9..12]
    }

    /// The head without the lines that differ per response (`date`,
    /// `x-request-id`), sorted.
    fn stable_head(&self) -> Vec<String> {
        let mut lines: Vec<String> = self
            .head
            .lines()
            .filter(|l| !l.is_empty() && !l.starts_with("date:") && !l.starts_with("x-request-id:"))
            .map(str::to_string)
            .collect();
        lines.sort();
        lines
    }
}

/// Splits `wire` into the responses to requests whose methods were
/// `heads` (true: HEAD, whose answer has a length and no body);
/// `Content-Length` framing only (what these routes send).
fn split(mut wire: &[u8], heads: &[bool]) -> Vec<Answer> {
    let mut out = Vec::new();
    for &head_only in heads {
        let end = wire
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .unwrap_or_else(|| panic!("no head in {:?}", String::from_utf8_lossy(wire)))
            + 4;
        let head = String::from_utf8_lossy(&wire[..end]).to_ascii_lowercase();
        let len: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .map_or(0, |v| v.trim().parse().unwrap());
        let len = if head_only { 0 } else { len };
        out.push(Answer {
            head,
            body: wire[end..end + len].to_vec(),
        });
        wire = &wire[end + len..];
    }
    assert!(
        wire.is_empty(),
        "bytes left over: {:?}",
        String::from_utf8_lossy(wire)
    );
    out
}

/// Writes `bytes` on a new connection and reads until the server closes it.
async fn exchange(addr: std::net::SocketAddr, bytes: &[u8]) -> Vec<u8> {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(bytes).await.unwrap();
    let mut wire = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut wire))
        .await
        .expect("the server closes the connection within 10 s")
        .unwrap();
    wire
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_requests_and_a_push_behind_them_are_answered_in_order() {
    let srv = start(limits(Duration::from_secs(5))).await;
    let blob = b"pipelined blob bytes".to_vec();
    let digest = format!("sha256:{}", hex::encode(Sha256::digest(&blob)));
    // One write: two GETs and a HEAD for the lean path, then a monolithic
    // push (a body: hyper's), then a GET of what was pushed (hyper's now:
    // the connection stays with it) with `Connection: close`.
    let mut bytes = Vec::new();
    bytes.extend_from_slice(b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n");
    bytes.extend_from_slice(b"GET /v2/ HTTP/1.1\r\nHost: t\r\n\r\n");
    bytes.extend_from_slice(
        format!("HEAD /v2/lean/blobs/{digest} HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes(),
    );
    bytes.extend_from_slice(
        format!(
            "POST /v2/lean/blobs/uploads/?digest={digest} HTTP/1.1\r\nHost: t\r\n\
             Content-Type: application/octet-stream\r\nContent-Length: {}\r\n\r\n",
            blob.len()
        )
        .as_bytes(),
    );
    bytes.extend_from_slice(&blob);
    bytes.extend_from_slice(
        format!("GET /v2/lean/blobs/{digest} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
            .as_bytes(),
    );
    let wire = exchange(srv.addr, &bytes).await;
    let answers = split(&wire, &[false, false, true, false, false]);
    let statuses: Vec<&str> = answers.iter().map(Answer::status).collect();
    assert_eq!(
        statuses,
        ["200", "200", "404", "201", "200"],
        "{}",
        String::from_utf8_lossy(&wire)
    );
    assert_eq!(answers[1].body, b"{}");
    assert_eq!(answers[4].body, blob);
    assert!(
        answers[4]
            .head
            .contains(&format!("docker-content-digest: {digest}\r\n"))
    );
    assert!(
        answers[4].head.contains("connection: close\r\n"),
        "{}",
        answers[4].head
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lean_path_and_hyper_answer_alike() {
    let srv = start(limits(Duration::from_secs(5))).await;
    let blob = b"the same bytes either way".to_vec();
    let digest = format!("sha256:{}", hex::encode(Sha256::digest(&blob)));
    let push = format!(
        "POST /v2/alike/blobs/uploads/?digest={digest} HTTP/1.1\r\nHost: t\r\nContent-Length: {}\r\n\r\n",
        blob.len()
    );
    let (head, _) = request(srv.addr, &[push.as_bytes(), &blob].concat()).await;
    assert!(head.starts_with("http/1.1 201"), "{head}");
    for (method, target) in [
        ("GET", "/v2/".to_string()),
        ("GET", "/healthz".to_string()),
        ("HEAD", "/healthz".to_string()),
        ("HEAD", "/v2/".to_string()),
        ("GET", format!("/v2/alike/blobs/{digest}")),
        ("HEAD", format!("/v2/alike/blobs/{digest}")),
        ("GET", "/v2/alike/tags/list".to_string()),
        ("GET", "/v2/alike/manifests/missing".to_string()),
        ("HEAD", "/v2/nobody/manifests/missing".to_string()),
        ("GET", "/v2/alike/blobs/sha256:abc".to_string()),
        ("GET", "/metrics-nowhere".to_string()),
    ] {
        let lean = format!("{method} {target} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
        // `Content-Length: 0` sends the same request to hyper.
        let hyper = format!(
            "{method} {target} HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        );
        let head_only = method == "HEAD";
        let a = split(&exchange(srv.addr, lean.as_bytes()).await, &[head_only]).remove(0);
        let b = split(&exchange(srv.addr, hyper.as_bytes()).await, &[head_only]).remove(0);
        assert_eq!(a.stable_head(), b.stable_head(), "{method} {target}");
        assert_eq!(a.body, b.body, "{method} {target}");
        assert!(
            a.head.contains("\r\ndate: "),
            "{method} {target}: {}",
            a.head
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_trickling_in_on_a_kept_connection_is_closed_after_the_header_timeout() {
    let srv = start(limits(Duration::from_secs(1))).await;
    let mut s = TcpStream::connect(srv.addr).await.unwrap();
    get_healthz(&mut s).await;
    let started = std::time::Instant::now();
    s.write_all(b"GET /healthz HTTP/1.1\r\nX-Slow: ")
        .await
        .unwrap();
    // A byte every 200 ms is activity, but no complete head: the header
    // timeout counts from the end of the previous response regardless.
    let mut closed = false;
    for _ in 0..25 {
        tokio::time::sleep(Duration::from_millis(200)).await;
        if s.write_all(b"a").await.is_err() {
            closed = true;
            break;
        }
        let mut probe = [0u8; 1];
        if let Ok(Ok(0)) = tokio::time::timeout(Duration::from_millis(1), s.read(&mut probe)).await
        {
            closed = true;
            break;
        }
    }
    let took = started.elapsed();
    assert!(closed, "still open after {took:?}");
    assert!(
        took >= Duration::from_millis(800),
        "closed too early: {took:?}"
    );
    assert!(
        took < Duration::from_millis(2500),
        "closed too late: {took:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_closes_kept_connections_at_once() {
    let mut srv = start(limits(Duration::from_secs(30))).await;
    let mut kept = Vec::new();
    for _ in 0..4 {
        let mut s = TcpStream::connect(srv.addr).await.unwrap();
        let head = get_healthz(&mut s).await;
        assert!(!head.contains("connection: close"), "{head}");
        kept.push(s);
    }
    let started = std::time::Instant::now();
    srv.stop.take().unwrap().send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(5), srv.task)
        .await
        .expect("the server stops without waiting for kept connections")
        .unwrap()
        .unwrap();
    // The shutdown timeout is 10 s: idle kept connections did not hold it.
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    for s in &mut kept {
        closed_within(s, Duration::from_secs(2)).await;
    }
}
