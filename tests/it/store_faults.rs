//! The site's object store on a bad day (issue 62).
//!
//! - A hung store: a freeze proxy between airlock and the test S3 server
//!   (it keeps accepting connections, then stops forwarding a byte).
//!   With `--s3-first-byte-timeout 1s --s3-idle-timeout 2s
//!   --s3-operation-timeout 3s`: a manifest GET, a blob HEAD and a
//!   manifest PUT answer 503 `UNAVAILABLE` with `Retry-After` within the
//!   operation deadline (plus a margin for a loaded machine), never 500;
//!   `/readyz` answers 503 within its own 3 s deadline; a blob download
//!   under way is cut (the connection closes short of its
//!   `Content-Length`) within the idle deadline, never completed short;
//!   once the store answers again, `/readyz` is 200 and every read works,
//!   without a restart.
//! - Read-after-write across replicas: two servers on one bucket (the
//!   S3 root refresh of 1 s); 200 times an image is pushed through one and
//!   pulled through the other at once (manifest by tag, then by digest, its
//!   config and layer): every one is found, with the digest the push was
//!   told.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::backup_restore::{Pushed, push_http};
use crate::common;

use common::backend::{AWS_ENV, Backend, Kind};
use common::images::sha256;
use common::{header, http, http_body};

/// A TCP proxy to `upstream` that can be frozen: while frozen it accepts
/// connections and reads nothing, forwards nothing (a hung gateway, or a
/// network dropping packets); thawed, it forwards again.
struct FreezeProxy {
    addr: String,
    frozen: Arc<AtomicBool>,
}

impl FreezeProxy {
    fn start(upstream: &str) -> FreezeProxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let frozen = Arc::new(AtomicBool::new(false));
        let upstream = upstream.to_string();
        let f = frozen.clone();
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                let Ok(server) = TcpStream::connect(&upstream) else {
                    continue;
                };
                for (from, to) in [
                    (client.try_clone().unwrap(), server.try_clone().unwrap()),
                    (server, client),
                ] {
                    let f = f.clone();
                    std::thread::spawn(move || pump(from, to, &f));
                }
            }
        });
        FreezeProxy { addr, frozen }
    }

    fn freeze(&self) {
        self.frozen.store(true, Ordering::SeqCst);
    }

    fn thaw(&self) {
        self.frozen.store(false, Ordering::SeqCst);
    }
}

/// Copies `from` to `to` in small reads, none while `frozen`.
fn pump(mut from: TcpStream, mut to: TcpStream, frozen: &AtomicBool) {
    let mut buf = [0u8; 16 << 10];
    loop {
        while frozen.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(20));
        }
        match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                // Held back whole while frozen (a read made just before).
                while frozen.load(Ordering::SeqCst) {
                    std::thread::sleep(Duration::from_millis(20));
                }
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
        }
    }
    let _ = to.shutdown(std::net::Shutdown::Write);
}

/// `airlock serve` on `b`'s bucket through `endpoint`, pushes allowed.
fn serve_via(b: &Backend, endpoint: &str, extra: &[&str]) -> common::Server {
    let bucket = b.s3.as_ref().unwrap().bucket.clone();
    let addr = format!("127.0.0.1:{}", common::free_port());
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_airlock"))
        .args(["serve", "--store", &format!("s3://{bucket}/site")])
        .args(["--s3-endpoint", &format!("http://{endpoint}")])
        .args(["--listen", &addr, "--allow-push"])
        .args(extra)
        .envs(AWS_ENV)
        .spawn()
        .unwrap();
    common::adopt_server(child, &addr, &b.data_dir(), false)
}

/// Asserts `reply` is 503 `UNAVAILABLE` with `Retry-After`, and that it
/// came within `within` of `since`.
fn assert_unavailable(reply: &common::Reply, since: Instant, within: Duration, what: &str) {
    let (status, headers, body) = reply;
    let body = String::from_utf8_lossy(body);
    assert_eq!(*status, 503, "{what}: {body}");
    assert!(
        body.is_empty() || body.contains("UNAVAILABLE"),
        "{what}: {body}"
    );
    assert!(
        header(headers, "retry-after").is_some(),
        "{what}: no Retry-After"
    );
    assert!(
        since.elapsed() < within,
        "{what}: answered after {:?}, past {within:?}",
        since.elapsed()
    );
}

#[test]
fn a_hung_store_answers_503_within_the_deadlines() {
    let b = Backend::start(Kind::S3sFs);
    let upstream = b.s3.as_ref().unwrap().endpoint.clone();
    let proxy = FreezeProxy::start(upstream.trim_start_matches("http://"));
    let server = serve_via(
        &b,
        &proxy.addr,
        &[
            "--s3-first-byte-timeout",
            "1s",
            "--s3-idle-timeout",
            "2s",
            "--s3-operation-timeout",
            "3s",
        ],
    );
    let addr = server.addr.clone();
    let accept = [("accept", "application/vnd.oci.image.manifest.v1+json")];
    let Pushed::Acked(digest) = push_http(&addr, "hung/app", "v1", 62) else {
        panic!("push refused before the freeze");
    };
    // A 40 MiB blob to download while the store hangs.
    let big: Vec<u8> = (0..40u32 << 20)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect();
    let big_digest = sha256(&big);
    let path = format!("/v2/hung/app/blobs/uploads/?digest={big_digest}");
    let (status, _, _) = http_body(&addr, "POST", &path, &[], &big).unwrap();
    assert_eq!(status, 201);
    assert_eq!(http(&addr, "GET", "/readyz", &[]).unwrap().0, 200);

    // A download under way: 1 MiB read, then the store hangs.
    let mut s = TcpStream::connect(&addr).unwrap();
    write!(
        s,
        "GET /v2/hung/app/blobs/{big_digest} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut got = vec![0u8; 1 << 20];
    s.read_exact(&mut got).unwrap();
    proxy.freeze();
    let frozen_at = Instant::now();
    let mut rest = Vec::new();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let _ = s.read_to_end(&mut rest);
    let cut_after = frozen_at.elapsed();
    assert!(
        (got.len() + rest.len()) < big.len(),
        "the download was completed while the store hung"
    );
    assert!(
        cut_after < Duration::from_secs(15),
        "cut after {cut_after:?}"
    );

    // Past the root refresh (1 s), every request meets the store.
    std::thread::sleep(Duration::from_millis(1200));
    let margin = Duration::from_secs(3 + 4);
    let t = Instant::now();
    let r = http(&addr, "GET", "/v2/hung/app/manifests/v1", &accept).unwrap();
    assert_unavailable(&r, t, margin, "manifest GET");
    let t = Instant::now();
    let r = http(
        &addr,
        "HEAD",
        &format!("/v2/hung/app/blobs/{big_digest}"),
        &[],
    )
    .unwrap();
    assert_unavailable(&r, t, margin, "blob HEAD");
    let t = Instant::now();
    match push_http(&addr, "hung/app", "v2", 63) {
        Pushed::Refused(503, Some(_)) => {}
        Pushed::Refused(status, retry) => panic!("push: {status} {retry:?}"),
        Pushed::Acked(_) => panic!("a push was acknowledged while the store hung"),
    }
    assert!(
        t.elapsed() < margin * 2,
        "push refused after {:?}",
        t.elapsed()
    );
    let t = Instant::now();
    let (status, _, body) = http(&addr, "GET", "/readyz", &[]).unwrap();
    assert_eq!(status, 503, "{}", String::from_utf8_lossy(&body));
    assert!(
        t.elapsed() < Duration::from_secs(3 + 2),
        "/readyz after {:?}",
        t.elapsed()
    );

    // The store answers again: ready, and every read works, no restart.
    proxy.thaw();
    common::backend::settled(Duration::from_secs(20), &200, || {
        http(&addr, "GET", "/readyz", &[]).unwrap().0
    });
    let (status, headers, _) = http(&addr, "GET", "/v2/hung/app/manifests/v1", &accept).unwrap();
    assert_eq!(status, 200);
    assert_eq!(
        header(&headers, "docker-content-digest"),
        Some(digest.as_str())
    );
    let (status, _, body) = http(
        &addr,
        "GET",
        &format!("/v2/hung/app/blobs/{big_digest}"),
        &[],
    )
    .unwrap();
    assert_eq!(status, 200);
    assert_eq!(sha256(&body), big_digest);
    assert!(server.terminate().success());
}

/// Pushes image `i` through `push` and pulls it through `pull` at once:
/// the manifest by tag (with the digest the push was told), then its
/// config and layer by digest.
fn push_then_pull(push: &str, pull: &str, i: u32) {
    let accept = [("accept", "application/vnd.oci.image.manifest.v1+json")];
    let repo = format!("raw/r{}", i % 7);
    let tag = format!("t{i}");
    let Pushed::Acked(digest) = push_http(push, &repo, &tag, 6200 + i) else {
        panic!("push {i} refused");
    };
    let (status, headers, body) =
        http(pull, "GET", &format!("/v2/{repo}/manifests/{tag}"), &accept).unwrap();
    assert_eq!(
        status,
        200,
        "{repo}:{tag}: {}",
        String::from_utf8_lossy(&body)
    );
    assert_eq!(
        header(&headers, "docker-content-digest"),
        Some(digest.as_str())
    );
    assert_eq!(sha256(&body), digest);
    let manifest: serde_json::Value = serde_json::from_slice(&body).unwrap();
    let blobs = [
        &manifest["config"]["digest"],
        &manifest["layers"][0]["digest"],
    ];
    for d in blobs.map(|d| d.as_str().unwrap().to_string()) {
        let (status, _, body) = http(pull, "GET", &format!("/v2/{repo}/blobs/{d}"), &[]).unwrap();
        assert_eq!(status, 200, "{repo}@{d}");
        assert_eq!(sha256(&body), d);
    }
}

#[test]
fn a_push_through_one_replica_is_pulled_through_another_at_once() {
    let b = Backend::start(Kind::S3sFs);
    let endpoint = b.s3.as_ref().unwrap().endpoint.clone();
    let endpoint = endpoint.trim_start_matches("http://");
    let one = serve_via(&b, endpoint, &[]);
    let two = serve_via(&b, endpoint, &[]);
    // 4 loops at once, 50 images each, alternating the replica pushed to.
    let loops: Vec<_> = (0..4u32)
        .map(|l| {
            let (a, b) = (one.addr.clone(), two.addr.clone());
            std::thread::spawn(move || {
                for n in 0..50u32 {
                    let i = l * 50 + n;
                    match i % 2 {
                        0 => push_then_pull(&a, &b, i),
                        _ => push_then_pull(&b, &a, i),
                    }
                }
            })
        })
        .collect();
    for l in loops {
        l.join().expect("a pull missed what its push was told");
    }
    assert!(one.terminate().success());
    assert!(two.terminate().success());
}
