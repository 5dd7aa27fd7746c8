//! Hostile clients against a real listener on 127.0.0.1 (issue 8 §2-§3),
//! each limit set small and every wait bounded: trickled bodies (408),
//! PING-only HTTP/2 connections, silent connections at the cap, the
//! per-address connection cap, the per-client upload-session cap, the
//! expiry sweep beside a never-ending PATCH, a PATCH past its session's
//! expiry, and another client's latency during an attack.

use crate::common;

use std::time::{Duration, Instant};

use airlock::registry::RegistryConfig;
use airlock::registry::uploads::UploadLimits;
use airlock::server::Limits;
use common::backend::{Backend, on_backends};
use common::listener::{
    GET_HEALTHZ, Running, closed_within, get_healthz, h2_healthz_then_closed, read_response,
    request, start, start_on,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Limits with generous timeouts; each test narrows the one it tests.
fn base() -> Limits {
    Limits {
        header_timeout: Duration::from_secs(30),
        idle_timeout: Duration::from_secs(30),
        max_connections: 64,
        max_connections_per_address: 64,
        min_body_rate: 0,
        manifest_put_timeout: Duration::from_secs(30),
        shutdown_timeout: Duration::from_secs(5),
        ..Limits::default()
    }
}

fn push_config(uploads: UploadLimits, expiry: Duration) -> RegistryConfig {
    RegistryConfig {
        allow_push: true,
        upload_expiry: expiry,
        uploads,
        ..RegistryConfig::default()
    }
}

/// The `Location` of a new upload session in `repo` (POST, 202).
async fn open_session(addr: std::net::SocketAddr, repo: &str) -> String {
    let (head, body) = request(addr, &post_session(repo)).await;
    assert!(
        head.starts_with("http/1.1 202"),
        "{head}{}",
        String::from_utf8_lossy(&body)
    );
    head.lines()
        .find_map(|l| l.strip_prefix("location:"))
        .unwrap()
        .trim()
        .to_string()
}

fn post_session(repo: &str) -> Vec<u8> {
    format!("POST /v2/{repo}/blobs/uploads/ HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n")
        .into_bytes()
}

/// A connection that sent the head of a request announcing `len` body bytes.
async fn body_head(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
    ctype: &str,
    len: usize,
) -> TcpStream {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: t\r\nContent-Type: {ctype}\r\nContent-Length: {len}\r\n\r\n"
    );
    s.write_all(head.as_bytes()).await.unwrap();
    s
}

/// Sends one byte every `every` on `s` until the server answers; returns
/// the response and how long it took (at most `within`).
async fn trickle_until_answer(
    s: &mut TcpStream,
    every: Duration,
    within: Duration,
) -> ((String, Vec<u8>), Duration) {
    let started = Instant::now();
    let res = tokio::time::timeout(within, async {
        let mut byte = [0u8; 1];
        loop {
            tokio::select! {
                n = s.peek(&mut byte) => {
                    assert!(n.unwrap() > 0, "closed without an answer");
                    return read_response(s).await;
                }
                () = tokio::time::sleep(every) => {
                    // The server may already have given up on the body.
                    let _ = s.write_all(b"{").await;
                }
            }
        }
    })
    .await
    .expect("answered within the bound");
    (res, started.elapsed())
}

fn error_code(body: &[u8]) -> String {
    let v: serde_json::Value = serde_json::from_slice(body).unwrap();
    v["errors"][0]["code"].as_str().unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trickled_bodies_are_answered_408_and_closed() {
    // No progress for the idle timeout (1 s): a PATCH that sends nothing.
    let srv = start(Limits {
        idle_timeout: Duration::from_secs(1),
        ..base()
    })
    .await;
    let loc = open_session(srv.addr, "slow/a").await;
    let mut s = body_head(srv.addr, "PATCH", &loc, "application/octet-stream", 100).await;
    let ((head, body), took) =
        trickle_until_answer(&mut s, Duration::from_secs(60), Duration::from_secs(5)).await;
    assert!(head.starts_with("http/1.1 408"), "{head}");
    assert!(head.contains("connection: close"), "{head}");
    assert_eq!(error_code(&body), "BLOB_UPLOAD_INVALID");
    assert!(took >= Duration::from_millis(900), "too early: {took:?}");
    closed_within(&mut s, Duration::from_secs(2)).await;

    // Below the minimum rate (100 B/s after a 1 s grace): 1 byte / 100 ms.
    let srv = start(Limits {
        header_timeout: Duration::from_secs(1),
        min_body_rate: 100,
        ..base()
    })
    .await;
    let loc = open_session(srv.addr, "slow/b").await;
    let mut s = body_head(srv.addr, "PATCH", &loc, "application/octet-stream", 1000).await;
    let ((head, body), took) =
        trickle_until_answer(&mut s, Duration::from_millis(100), Duration::from_secs(5)).await;
    assert!(head.starts_with("http/1.1 408"), "{head}");
    assert_eq!(error_code(&body), "BLOB_UPLOAD_INVALID");
    assert!(took >= Duration::from_millis(900), "too early: {took:?}");
    let detail = String::from_utf8_lossy(&body).to_string();
    assert!(detail.contains("minimum rate"), "{detail}");

    // A manifest PUT past its overall deadline (1 s), though it progresses.
    let srv = start(Limits {
        manifest_put_timeout: Duration::from_secs(1),
        ..base()
    })
    .await;
    let mut s = body_head(
        srv.addr,
        "PUT",
        "/v2/slow/c/manifests/latest",
        "application/vnd.oci.image.manifest.v1+json",
        1000,
    )
    .await;
    let ((head, body), took) =
        trickle_until_answer(&mut s, Duration::from_millis(100), Duration::from_secs(5)).await;
    assert!(head.starts_with("http/1.1 408"), "{head}");
    assert_eq!(error_code(&body), "MANIFEST_INVALID");
    assert!(took >= Duration::from_millis(900), "too early: {took:?}");
    closed_within(&mut s, Duration::from_secs(2)).await;
    // Nothing was recorded.
    let (head, _) = request(
        srv.addr,
        b"GET /v2/slow/c/manifests/latest HTTP/1.1\r\nHost: t\r\n\r\n",
    )
    .await;
    assert!(head.starts_with("http/1.1 404"), "{head}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_connection_sending_only_pings_is_closed_at_idle_timeout() {
    let srv = start(Limits {
        idle_timeout: Duration::from_secs(1),
        ..base()
    })
    .await;
    // hyper's HTTP/2 client sends a PING every 200 ms, idle or not.
    let mut client = hyper::client::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new());
    client
        .timer(hyper_util::rt::TokioTimer::new())
        .keep_alive_interval(Duration::from_millis(200))
        .keep_alive_timeout(Duration::from_secs(10))
        .keep_alive_while_idle(true);
    let took = h2_healthz_then_closed(&client, srv.addr).await;
    assert!(took >= Duration::from_millis(800), "too early: {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_the_cap_silent_connections_make_room_for_a_new_client() {
    let srv = start(Limits {
        max_connections: 8,
        ..base()
    })
    .await;
    // One client that has sent a request, then 7 silent ones: the cap.
    let mut served = TcpStream::connect(srv.addr).await.unwrap();
    get_healthz(&mut served).await;
    let mut silent = Vec::new();
    for _ in 0..7 {
        silent.push(TcpStream::connect(srv.addr).await.unwrap());
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    // A new client gets in within a second, many times over.
    for i in 0..5 {
        let started = Instant::now();
        let (head, _) = request(srv.addr, GET_HEALTHZ).await;
        assert!(head.starts_with("http/1.1 200"), "{head}");
        let took = started.elapsed();
        assert!(took < Duration::from_secs(1), "client {i} waited {took:?}");
    }
    // The oldest silent connection was closed; the served one was kept.
    closed_within(&mut silent[0], Duration::from_secs(2)).await;
    get_healthz(&mut served).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_beyond_the_per_address_cap_are_closed() {
    let srv = start(Limits {
        max_connections_per_address: 3,
        ..base()
    })
    .await;
    let mut held = Vec::new();
    for _ in 0..3 {
        let mut s = TcpStream::connect(srv.addr).await.unwrap();
        get_healthz(&mut s).await;
        held.push(s);
    }
    let mut fourth = TcpStream::connect(srv.addr).await.unwrap();
    let _ = fourth.write_all(GET_HEALTHZ).await;
    let mut buf = [0u8; 64];
    let n = tokio::time::timeout(Duration::from_secs(2), fourth.read(&mut buf))
        .await
        .expect("fourth connection closed at once");
    assert!(matches!(n, Ok(0) | Err(_)), "fourth was served: {n:?}");
    // The held ones are fine; one closes and a new one is served.
    get_healthz(&mut held[2]).await;
    drop(held.remove(0));
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (head, _) = request(srv.addr, GET_HEALTHZ).await;
    assert!(head.starts_with("http/1.1 200"), "{head}");
}

// Upload sessions live in the store (on S3 shared by every replica):
// their cap, sweep and expiry on the filesystem and on S3 (one server:
// moto adds nothing). The other limits are the listener's own, the same
// whatever the store: filesystem only.
on_backends!(
    async [fs, s3s_fs]
    upload_sessions_are_capped_per_client,
    sweep_is_not_blocked_by_a_never_ending_patch,
    patch_running_past_the_session_expiry_is_refused,
);

async fn upload_sessions_are_capped_per_client(b: Backend) {
    let uploads = UploadLimits {
        max_sessions_per_client: 2,
        ..UploadLimits::default()
    };
    let srv = start_on(b, base(), push_config(uploads, Duration::from_secs(3600))).await;
    let first = open_session(srv.addr, "cap/a").await;
    let second = open_session(srv.addr, "cap/b").await;
    // Both busy (a PATCH body still arriving): a third one from this
    // client, in any repository, is 429.
    let mut busy = Vec::new();
    for loc in [&first, &second] {
        let mut s = body_head(srv.addr, "PATCH", loc, "application/octet-stream", 100).await;
        s.write_all(b"x").await.unwrap();
        busy.push(s);
    }
    busy_until(&srv, |n| n == 2).await;
    let (head, body) = request(srv.addr, &post_session("cap/c")).await;
    assert!(head.starts_with("http/1.1 429"), "{head}");
    assert_eq!(error_code(&body), "TOOMANYREQUESTS");
    // The client goes away: its sessions are idle (once the server has
    // seen both bodies end and put their partial chunks away), and the
    // least recently active one makes room for the next. The bodies end
    // one after the other, more than a file-time tick (4 ms) apart, so
    // the first is the least recently active on every store.
    let second_body = busy.pop();
    drop(busy);
    busy_until(&srv, |n| n == 1).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    drop(second_body);
    busy_until(&srv, |n| n == 0).await;
    open_session(srv.addr, "cap/c").await;
    let status = format!("GET {first} HTTP/1.1\r\nHost: t\r\n\r\n");
    let (head, _) = request(srv.addr, status.as_bytes()).await;
    assert!(head.starts_with("http/1.1 404"), "{head}");
}

/// Waits (up to 20 s: a loaded machine, an object store's abort) until
/// the number of sessions with a request in progress satisfies `ok`.
async fn busy_until(srv: &Running, ok: impl Fn(usize) -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !ok(srv.app.uploads.busy()) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "sessions busy: {}",
            srv.app.uploads.busy()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn sweep_is_not_blocked_by_a_never_ending_patch(b: Backend) {
    let srv = start_on(
        b,
        base(),
        push_config(UploadLimits::default(), Duration::from_secs(1)),
    )
    .await;
    let expired = open_session(srv.addr, "sweep/a").await;
    // Expiry is counted in whole seconds: older than 1 s means 2 s.
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let busy = open_session(srv.addr, "sweep/b").await;
    let mut s = body_head(srv.addr, "PATCH", &busy, "application/octet-stream", 100).await;
    s.write_all(b"x").await.unwrap();
    busy_until(&srv, |n| n == 1).await;
    let removed = tokio::time::timeout(Duration::from_millis(500), srv.app.uploads.sweep())
        .await
        .expect("sweep did not wait for the busy session")
        .unwrap();
    assert_eq!(removed, 1);
    let status = format!("GET {expired} HTTP/1.1\r\nHost: t\r\n\r\n");
    let (head, _) = request(srv.addr, status.as_bytes()).await;
    assert!(head.starts_with("http/1.1 404"), "{head}");
}

async fn patch_running_past_the_session_expiry_is_refused(b: Backend) {
    let srv = start_on(
        b,
        base(),
        push_config(UploadLimits::default(), Duration::from_secs(1)),
    )
    .await;
    let loc = open_session(srv.addr, "expiry/a").await;
    let mut s = body_head(srv.addr, "PATCH", &loc, "application/octet-stream", 1000).await;
    let ((head, body), took) =
        trickle_until_answer(&mut s, Duration::from_millis(100), Duration::from_secs(5)).await;
    assert!(head.starts_with("http/1.1 404"), "{head}");
    assert_eq!(error_code(&body), "BLOB_UPLOAD_UNKNOWN");
    assert!(took < Duration::from_millis(2600), "refused late: {took:?}");
    let status = format!("GET {loc} HTTP/1.1\r\nHost: t\r\n\r\n");
    let (head, _) = request(srv.addr, status.as_bytes()).await;
    assert!(head.starts_with("http/1.1 404"), "{head}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_clients_stay_fast_during_a_trickled_manifest_put_attack() {
    let srv = start(Limits {
        max_connections: 256,
        max_connections_per_address: 256,
        manifest_put_timeout: Duration::from_secs(2),
        ..base()
    })
    .await;
    // 150 manifest PUTs trickling one byte every 200 ms.
    let mut attack = Vec::new();
    for i in 0..150 {
        let addr = srv.addr;
        attack.push(tokio::spawn(async move {
            let mut s = body_head(
                addr,
                "PUT",
                &format!("/v2/attack/r{i}/manifests/t"),
                "application/vnd.oci.image.manifest.v1+json",
                100_000,
            )
            .await;
            trickle_until_answer(&mut s, Duration::from_millis(200), Duration::from_secs(10))
                .await
                .0
                .0
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut took = Vec::new();
    for _ in 0..20 {
        let started = Instant::now();
        let (head, _) = request(srv.addr, b"GET /v2/ HTTP/1.1\r\nHost: t\r\n\r\n").await;
        took.push(started.elapsed());
        assert!(head.starts_with("http/1.1 200"), "{head}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    took.sort();
    let p90 = took[took.len() * 9 / 10];
    assert!(
        p90 < Duration::from_millis(100),
        "p90 latency {p90:?} during the attack (all: {took:?})"
    );
    for a in attack {
        let head = a.await.unwrap();
        assert!(head.starts_with("http/1.1 408"), "{head}");
    }
}

/// Reads everything until the server closes the connection (5 s at most).
async fn read_to_close(s: &mut TcpStream) -> Vec<u8> {
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut out))
        .await
        .expect("server closed the connection")
        .ok();
    out
}

/// Requests hyper refuses before routing (issue 23 §8) get what the
/// router's errors get: an OCI error body naming the cause with the
/// spec's code, `X-Request-Id`, the API version header; also on a
/// keep-alive connection after a good request, and a 416 for a blob range.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_requests_get_oci_error_bodies() {
    let srv = start(Limits {
        max_request_head: 8 << 10,
        ..base()
    })
    .await;
    let big = format!(
        "GET /v2/ HTTP/1.1\r\nHost: t\r\nX-Big: {}\r\n\r\n",
        "a".repeat(20_000)
    );
    let cases: Vec<(Vec<u8>, &str, &str)> = vec![
        (b"PUT /v2/a/manifests/x HTTP/1.1\r\nHost: t\r\nContent-Length: -1\r\n\r\n".to_vec(), "400", "SIZE_INVALID"),
        (b"PUT /v2/a/manifests/x HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd".to_vec(), "400", "SIZE_INVALID"),
        (b"PUT /v2/a/manifests/x HTTP/1.1\r\nHost: t\r\nContent-Length: 99999999999999999999999\r\n\r\n".to_vec(), "400", "SIZE_INVALID"),
        (b"GET /v2/a\xff\xfe/tags/list HTTP/1.1\r\nHost: t\r\n\r\n".to_vec(), "400", "NAME_INVALID"),
        (b"GET /v2/ HTTP/1.1\r\nHost: t\r\nthis line has no colon\r\n\r\n".to_vec(), "400", "UNSUPPORTED"),
        (b"GET /v2/ HTTP/1.1\r\nHost: t\r\nX-Nul: a\0b\r\n\r\n".to_vec(), "400", "UNSUPPORTED"),
        (big.into_bytes(), "431", "UNSUPPORTED"),
    ];
    for (req, status, code) in cases {
        let mut s = TcpStream::connect(srv.addr).await.unwrap();
        s.write_all(&req).await.unwrap();
        let raw = read_to_close(&mut s).await;
        let text = String::from_utf8_lossy(&raw).to_string();
        let shown = String::from_utf8_lossy(&req[..req.len().min(80)]).to_string();
        assert!(
            text.starts_with(&format!("HTTP/1.1 {status} ")),
            "{shown}: {text}"
        );
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        let head = head.to_ascii_lowercase();
        assert!(head.contains("\r\nx-request-id: "), "{shown}: {head}");
        assert!(
            head.contains("\r\ncontent-type: application/json"),
            "{shown}: {head}"
        );
        assert!(
            head.contains("\r\ndocker-distribution-api-version: registry/2.0"),
            "{head}"
        );
        assert!(
            head.contains(&format!("\r\ncontent-length: {}", body.len())),
            "{head}"
        );
        let v: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(v["errors"][0]["code"], code, "{shown}: {body}");
        assert!(
            v["errors"][0]["detail"]["reason"]
                .as_str()
                .is_some_and(|r| !r.is_empty())
        );
    }
    // After a good request on the same connection, still a body.
    let mut s = TcpStream::connect(srv.addr).await.unwrap();
    get_healthz(&mut s).await;
    s.write_all(b"GET /v2/ HTTP/1.1\r\nHost: t\r\nno colon\r\n\r\n")
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&read_to_close(&mut s).await).to_string();
    assert!(text.starts_with("HTTP/1.1 400 "), "{text}");
    assert!(text.contains("\"code\":\"UNSUPPORTED\""), "{text}");

    // 416 for a range past the end of a blob: a body too.
    let blob = b"0123456789".to_vec();
    let digest = common::images::sha256(&blob);
    let mut post = format!(
        "POST /v2/r/blobs/uploads/?digest={digest} HTTP/1.1\r\nHost: t\r\nContent-Length: 10\r\n\r\n"
    )
    .into_bytes();
    post.extend_from_slice(&blob);
    let (head, _) = request(srv.addr, &post).await;
    assert!(head.starts_with("http/1.1 201"), "{head}");
    let get = format!("GET /v2/r/blobs/{digest} HTTP/1.1\r\nHost: t\r\nRange: bytes=20-30\r\n\r\n");
    let (head, body) = request(srv.addr, get.as_bytes()).await;
    assert!(head.starts_with("http/1.1 416"), "{head}");
    assert!(head.contains("content-range: bytes */10"), "{head}");
    assert_eq!(error_code(&body), "SIZE_INVALID");
}

/// A TLS ClientHello on the plain-HTTP listener (what crane, podman,
/// skopeo and docker send first) is logged once per address per minute as
/// what it is, not as a malformed request per attempt (issue 36).
#[test]
fn tls_probes_on_a_plain_listener_are_logged_once() {
    use std::io::{Read, Write};
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let log = tmp.path().join("serve.log");
    let addr = format!("127.0.0.1:{}", common::free_port());
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_airlock"))
        .args(["--log", "info", "--log-format", "json", "serve", "--data"])
        .arg(&data)
        .args(["--listen", &addr])
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while std::net::TcpStream::connect(&addr).is_err() {
        assert!(std::time::Instant::now() < deadline, "serve did not start");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    // The first bytes of a TLS 1.2/1.3 ClientHello record.
    let hello = [
        0x16, 0x03, 0x01, 0x00, 0xc8, 0x01, 0x00, 0x00, 0xc4, 0x03, 0x03, 0x55, 0x1a,
    ];
    for _ in 0..5 {
        let mut s = std::net::TcpStream::connect(&addr).unwrap();
        s.write_all(&hello).unwrap();
        s.write_all(&[0u8; 200]).unwrap();
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out);
        assert!(
            out.starts_with(b"HTTP/1.1 400 "),
            "{}",
            String::from_utf8_lossy(&out)
        );
    }
    std::thread::sleep(std::time::Duration::from_millis(300));
    common::terminate(&mut child, std::time::Duration::from_secs(20));
    let text = std::fs::read_to_string(&log).unwrap();
    let probes = text
        .lines()
        .filter(|l| l.contains("TLS handshake on a plain-HTTP listener from 127.0.0.1"))
        .count();
    assert_eq!(probes, 1, "{text}");
    assert!(!text.contains("request refused before routing"), "{text}");
}
