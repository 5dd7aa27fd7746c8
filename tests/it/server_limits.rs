//! The listener's connection limits over real sockets on 127.0.0.1
//! (`server::serve_on` with small [`Limits`]): header timeout for partial
//! and silent clients, idle timeout for keep-alive connections, the
//! connection cap, and graceful shutdown with a request in flight. Every
//! test is bounded by explicit timeouts.
//!
//! Filesystem only: these are the listener's limits, met before a request
//! reaches the store (upload sessions, which live in the store, run on S3
//! too in hostile_clients.rs).

use crate::common;

use std::time::Duration;

use airlock::server::Limits;
use common::listener::{
    GET_HEALTHZ, closed_within, get_healthz, h2_healthz_then_closed, read_response, start,
};
use sha2::{Digest as _, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

fn limits(header: Duration, idle: Duration, max_connections: usize) -> Limits {
    Limits {
        header_timeout: header,
        idle_timeout: idle,
        max_connections,
        max_connections_per_address: 1000,
        shutdown_timeout: Duration::from_secs(5),
        ..Limits::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partial_request_is_closed_after_header_timeout() {
    let srv = start(limits(Duration::from_secs(1), Duration::from_secs(60), 16)).await;
    let mut s = TcpStream::connect(srv.addr).await.unwrap();
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: te")
        .await
        .unwrap();
    let took = closed_within(&mut s, Duration::from_secs(5)).await;
    assert!(
        took >= Duration::from_millis(800),
        "closed too early: {took:?}"
    );
    // The server itself is fine.
    let mut ok = TcpStream::connect(srv.addr).await.unwrap();
    get_healthz(&mut ok).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_client_is_closed_after_header_timeout() {
    let srv = start(limits(Duration::from_secs(1), Duration::from_secs(60), 16)).await;
    let mut s = TcpStream::connect(srv.addr).await.unwrap();
    let took = closed_within(&mut s, Duration::from_secs(5)).await;
    assert!(
        took >= Duration::from_millis(800),
        "closed too early: {took:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_keep_alive_is_closed_after_idle_timeout() {
    // Header timeout well above the idle timeout: the idle timer closes it.
    let srv = start(limits(Duration::from_secs(20), Duration::from_secs(1), 16)).await;
    let mut s = TcpStream::connect(srv.addr).await.unwrap();
    let head = get_healthz(&mut s).await;
    assert!(!head.contains("connection: close"), "{head}");
    // Activity keeps it open: a second request after half the idle time.
    tokio::time::sleep(Duration::from_millis(500)).await;
    get_healthz(&mut s).await;
    let took = closed_within(&mut s, Duration::from_secs(5)).await;
    assert!(
        took >= Duration::from_millis(800),
        "closed too early: {took:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_keep_alive_is_also_bounded_by_header_timeout() {
    // hyper 1.x starts its header-read timer while waiting for the next
    // request on a keep-alive connection, so it closes an idle HTTP/1.1
    // connection after the header timeout even with a long idle timeout.
    let srv = start(limits(Duration::from_secs(1), Duration::from_secs(60), 16)).await;
    let mut s = TcpStream::connect(srv.addr).await.unwrap();
    get_healthz(&mut s).await;
    let took = closed_within(&mut s, Duration::from_secs(5)).await;
    assert!(
        took >= Duration::from_millis(800),
        "closed too early: {took:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_http2_connection_is_closed_after_idle_timeout() {
    // hyper has no HTTP/2 idle timeout; the listener's own timer closes it.
    let srv = start(limits(Duration::from_secs(20), Duration::from_secs(1), 16)).await;
    let client = hyper::client::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new());
    let took = h2_healthz_then_closed(&client, srv.addr).await;
    assert!(
        took >= Duration::from_millis(800),
        "closed too early: {took:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_cap_queues_the_next_client_until_one_closes() {
    let srv = start(limits(Duration::from_secs(30), Duration::from_secs(30), 4)).await;
    let mut held = Vec::new();
    for _ in 0..4 {
        let mut s = TcpStream::connect(srv.addr).await.unwrap();
        get_healthz(&mut s).await;
        held.push(s);
    }
    // The fifth connects (kernel backlog) but is not served...
    let mut fifth = TcpStream::connect(srv.addr).await.unwrap();
    fifth.write_all(GET_HEALTHZ).await.unwrap();
    let mut byte = [0u8; 1];
    let early = tokio::time::timeout(Duration::from_millis(800), fifth.read(&mut byte)).await;
    assert!(
        early.is_err(),
        "fifth client served above the cap: {early:?}"
    );
    // ...while the connected ones still are.
    get_healthz(&mut held[1]).await;
    // One closes: the fifth is accepted and answered.
    drop(held.remove(0));
    let (head, _) = tokio::time::timeout(Duration::from_secs(5), read_response(&mut fifth))
        .await
        .expect("fifth client served once a slot is free");
    assert!(head.starts_with("http/1.1 200"), "{head}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_idle_keep_alive_connections_stay_served() {
    let srv = start(Limits {
        max_connections_per_address: 1000,
        ..Limits::default()
    })
    .await;
    let mut conns = Vec::new();
    for _ in 0..500 {
        let mut s = TcpStream::connect(srv.addr).await.unwrap();
        s.write_all(b"GET /v2/ HTTP/1.1\r\nHost: test\r\n\r\n")
            .await
            .unwrap();
        conns.push(s);
    }
    for s in &mut conns {
        let (head, _) = tokio::time::timeout(Duration::from_secs(10), read_response(s))
            .await
            .unwrap();
        assert!(head.starts_with("http/1.1 200"), "{head}");
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    for s in conns.iter_mut().step_by(50) {
        get_healthz(s).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_shutdown_lets_an_in_flight_request_finish() {
    let mut srv = start(limits(Duration::from_secs(5), Duration::from_secs(5), 16)).await;
    let blob = b"0123456789abcdef".to_vec();
    let digest = format!("sha256:{}", hex::encode(Sha256::digest(&blob)));
    let mut s = TcpStream::connect(srv.addr).await.unwrap();
    let head = format!(
        "POST /v2/test/blobs/uploads/?digest={digest} HTTP/1.1\r\nHost: test\r\nContent-Type: application/octet-stream\r\nContent-Length: {}\r\n\r\n",
        blob.len()
    );
    s.write_all(head.as_bytes()).await.unwrap();
    s.write_all(&blob[..8]).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;

    srv.stop.take().unwrap().send(()).unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !srv.task.is_finished(),
        "server did not wait for the request"
    );
    assert!(
        TcpStream::connect(srv.addr).await.is_err(),
        "still accepting after shutdown"
    );

    s.write_all(&blob[8..]).await.unwrap();
    let (head, _) = tokio::time::timeout(Duration::from_secs(5), read_response(&mut s))
        .await
        .expect("in-flight request answered");
    assert!(head.starts_with("http/1.1 201"), "{head}");
    tokio::time::timeout(Duration::from_secs(5), srv.task)
        .await
        .expect("server stops once the request is done")
        .unwrap()
        .unwrap();
}
