//! Upload session caps under real use (issue 23 §1): sessions nobody uses
//! never lock a client out, replicas on one store agree on what is open,
//! idle sessions expire, and a client whose every session is streaming
//! still gets its 429. Real servers on 127.0.0.1, raw HTTP/1.1 over TCP;
//! digests computed here with `sha2`.

use std::net::SocketAddr;
use std::time::Duration;

use airlock::registry::RegistryConfig;
use airlock::registry::uploads::UploadLimits;
use airlock::server::Limits;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::common;
use common::backend::{Backend, Kind, on_backends};
use common::images::sha256;
use common::listener::{read_response, request, serve_store, start_on};

on_backends!(
    async [fs, moto, s3s_fs]
    abandoned_sessions_never_lock_a_client_out,
    replicas_agree_on_what_is_open,
);

fn push_config() -> RegistryConfig {
    RegistryConfig {
        allow_push: true,
        ..RegistryConfig::default()
    }
}

/// `METHOD path` with `body` on a new connection: (status, lower-cased head, body).
async fn call(addr: SocketAddr, method: &str, path: &str, body: &[u8]) -> (u16, String, Vec<u8>) {
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: t\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    req.extend_from_slice(body);
    let (head, body) = request(addr, &req).await;
    let status = head[9..12].parse().unwrap();
    (status, head, body)
}

fn header<'a>(head: &'a str, name: &str) -> &'a str {
    head.lines()
        .find_map(|l| l.strip_prefix(&format!("{name}:")))
        .map_or("", str::trim)
}

/// POST a new session in `repo`: (status, Location).
async fn open(addr: SocketAddr, repo: &str) -> (u16, String, Vec<u8>) {
    let (status, head, body) = call(addr, "POST", &format!("/v2/{repo}/blobs/uploads/"), b"").await;
    (status, header(&head, "location").to_string(), body)
}

/// A whole chunked push of `blob` to `repo`: POST, PATCH, PUT. Returns the
/// statuses.
async fn push(addr: SocketAddr, repo: &str, blob: &[u8]) -> [u16; 3] {
    let (post, loc, _) = open(addr, repo).await;
    if post != 202 {
        return [post, 0, 0];
    }
    let (patch, head, _) = call(addr, "PATCH", &loc, blob).await;
    let loc = header(&head, "location").to_string();
    let (put, _, _) = call(addr, "PUT", &format!("{loc}?digest={}", sha256(blob)), b"").await;
    [post, patch, put]
}

/// The sessions the store holds (`uploads/<id>/info.json`).
async fn stored_sessions(b: &Backend) -> usize {
    let store = b.open_store().await;
    store
        .list("uploads/")
        .await
        .unwrap()
        .iter()
        .filter(|k| k.ends_with("/info.json"))
        .count()
}

/// 200 sessions opened from one address and abandoned: each POST past the
/// per-client cap (128) removes the least recently active idle one, and a
/// push from the same address right after succeeds; the store never holds
/// more than the cap.
async fn abandoned_sessions_never_lock_a_client_out(b: Backend) {
    let server = start_on(b, Limits::default(), push_config()).await;
    let mut first = None;
    for i in 0..200 {
        let (status, loc, body) = open(server.addr, "ci/app").await;
        assert_eq!(status, 202, "POST {i}: {}", String::from_utf8_lossy(&body));
        first.get_or_insert(loc);
    }
    assert_eq!(stored_sessions(&server.backend).await, 128);
    // The first (least recently active) session was removed to make room.
    let (status, _, body) = call(server.addr, "GET", &first.unwrap(), b"").await;
    assert_eq!(status, 404, "{}", String::from_utf8_lossy(&body));
    assert!(String::from_utf8_lossy(&body).contains("BLOB_UPLOAD_UNKNOWN"));
    let blob = b"a layer pushed after 200 abandoned sessions".to_vec();
    assert_eq!(push(server.addr, "ci/app", &blob).await, [202, 202, 201]);
    let (status, _, got) = call(
        server.addr,
        "GET",
        &format!("/v2/ci/app/blobs/{}", sha256(&blob)),
        b"",
    )
    .await;
    assert_eq!((status, sha256(&got)), (200, sha256(&blob)));
}

/// Sessions opened through server A and finished through server B (one
/// store, no affinity) stop counting on A: A reconciles with the store at
/// its cap instead of removing its own sessions that are still open.
async fn replicas_agree_on_what_is_open(b: Backend) {
    let config = RegistryConfig {
        uploads: UploadLimits {
            max_sessions_per_client: 4,
            ..UploadLimits::default()
        },
        ..push_config()
    };
    let a = start_on(b, Limits::default(), config.clone()).await;
    let b_server = serve_store(&a.backend, Limits::default(), config).await;
    // Two older sessions that stay open, then two that B finishes.
    let mut kept = Vec::new();
    for _ in 0..2 {
        let (status, loc, _) = open(a.addr, "lb/app").await;
        assert_eq!(status, 202);
        kept.push(loc);
    }
    tokio::time::sleep(Duration::from_millis(1100)).await;
    for i in 0..2u8 {
        let (status, loc, _) = open(a.addr, "lb/app").await;
        assert_eq!(status, 202);
        let blob = vec![i; 100];
        let (put, _, body) = call(
            b_server.addr,
            "PUT",
            &format!("{loc}?digest={}", sha256(&blob)),
            &blob,
        )
        .await;
        assert_eq!(put, 201, "{}", String::from_utf8_lossy(&body));
    }
    // A is at its cap of 4 by its own count; two of them are gone.
    for _ in 0..2 {
        assert_eq!(open(a.addr, "lb/app").await.0, 202);
    }
    for loc in &kept {
        let (status, _, body) = call(a.addr, "GET", loc, b"").await;
        assert_eq!(status, 204, "{loc}: {}", String::from_utf8_lossy(&body));
    }
    // Sessions opened through B and finished through A count nowhere.
    for _ in 0..8 {
        let (status, loc, _) = open(b_server.addr, "lb/other").await;
        assert_eq!(status, 202);
        let (status, _, _) = call(a.addr, "DELETE", &loc, b"").await;
        assert_eq!(status, 204);
    }
    for loc in &kept {
        assert_eq!(call(b_server.addr, "GET", loc, b"").await.0, 204);
    }
}

/// A long sequence of ordinary client cases on one long-running server
/// (abandoned sessions, cancelled sessions, whole pushes, monolithic
/// pushes, failed digests) never gets a 429 it did not earn.
#[tokio::test(flavor = "multi_thread")]
async fn a_long_running_server_never_refuses_an_idle_client() {
    let server = start_on(Backend::start(Kind::Fs), Limits::default(), push_config()).await;
    for i in 0..400u32 {
        let repo = format!("seq/r{}", i % 3);
        let blob = format!("blob {i}").into_bytes();
        match i % 5 {
            0 | 1 => assert_eq!(open(server.addr, &repo).await.0, 202, "case {i}"),
            2 => {
                let (status, loc, _) = open(server.addr, &repo).await;
                assert_eq!(status, 202, "case {i}");
                assert_eq!(call(server.addr, "DELETE", &loc, b"").await.0, 204);
            }
            3 => assert_eq!(push(server.addr, &repo, &blob).await, [202, 202, 201]),
            _ => {
                let path = format!("/v2/{repo}/blobs/uploads/?digest={}", sha256(b"other"));
                assert_eq!(call(server.addr, "POST", &path, &blob).await.0, 400);
            }
        }
    }
}

/// A client whose every counted session has a request in progress gets
/// its 429 (nothing is removed under it); once the bodies end, it may open
/// sessions again.
#[tokio::test(flavor = "multi_thread")]
async fn a_client_streaming_at_its_cap_gets_429() {
    let server = start_on(Backend::start(Kind::Fs), Limits::default(), push_config()).await;
    let mut streams = Vec::new();
    for _ in 0..128 {
        let (status, loc, _) = open(server.addr, "busy/app").await;
        assert_eq!(status, 202);
        let mut s = TcpStream::connect(server.addr).await.unwrap();
        let head = format!(
            "PATCH {loc} HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n400\r\n{}\r\n",
            "x".repeat(1024)
        );
        s.write_all(head.as_bytes()).await.unwrap();
        streams.push(s);
    }
    // Every PATCH has reached the server and holds its session.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (status, _, body) = open(server.addr, "busy/app").await;
    let body = String::from_utf8_lossy(&body).into_owned();
    assert_eq!(status, 429, "{body}");
    let err: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(err["errors"][0]["code"], "TOOMANYREQUESTS");
    assert_eq!(err["errors"][0]["detail"]["max"], 128);
    assert_eq!(err["errors"][0]["detail"]["scope"], "client");
    for s in &mut streams {
        s.write_all(b"0\r\n\r\n").await.unwrap();
    }
    for s in &mut streams {
        let (head, _) = tokio::time::timeout(Duration::from_secs(10), read_response(s))
            .await
            .unwrap();
        assert!(head.starts_with("http/1.1 202"), "{head}");
        assert_eq!(header(&head, "range"), "0-1023");
    }
    // Idle now: a new session takes the place of the least recently active.
    assert_eq!(open(server.addr, "busy/app").await.0, 202);
}

/// A session without any request for the idle timeout is removed by the
/// sweep, separately from the maximum age; one with a recent chunk stays.
#[tokio::test(flavor = "multi_thread")]
async fn idle_sessions_are_swept() {
    let config = RegistryConfig {
        uploads: UploadLimits {
            idle_timeout: Duration::from_secs(2),
            ..UploadLimits::default()
        },
        ..push_config()
    };
    let server = start_on(Backend::start(Kind::Fs), Limits::default(), config).await;
    let (_, idle, _) = open(server.addr, "idle/app").await;
    let (_, busy, _) = open(server.addr, "idle/app").await;
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_millis(1100)).await;
        let (status, _, _) = call(server.addr, "PATCH", &busy, b"").await;
        assert_eq!(status, 202);
    }
    assert_eq!(server.app.uploads.sweep().await.unwrap(), 1);
    assert_eq!(call(server.addr, "GET", &idle, b"").await.0, 404);
    assert_eq!(call(server.addr, "GET", &busy, b"").await.0, 204);
}
