//! The airlock job's lifecycle as a BOSH director runs it (issue 42 §1,
//! part): on a VM's `/var/vcap` laid out in a temp dir
//! ([`crate::bosh_vm::Vm`]), `pre-start` makes the job's directories, the
//! process starts as bpm starts it (`config/bpm.yml`), `post-start` returns
//! once `/readyz` answers 200 (and fails naming the URL when nothing
//! does), `drain` runs while pulls of a large blob are in flight and
//! returns only after every one of them ended, and the process then stops
//! on SIGTERM (bpm stop) with every pull that started before the drain
//! whole, checked against the blob's digest.

use crate::bosh_vm::{Vm, fs_props};
use crate::common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sha2::Digest as _;

use common::images::{bytes_of, sha256};
use common::*;

fn props(data: &Path, port: u16, post_start_secs: u64) -> Value {
    let mut p = fs_props(data, port);
    p["airlock"]["drain"] = json!({"timeout_secs": 120});
    p["airlock"]["post_start"] = json!({"timeout_secs": post_start_secs});
    p
}

/// GET `path` on `addr`, reading 256 KiB every 20 ms (a slow client, so
/// the server's send queue stays full); returns (status line, body
/// sha256, body length, when it ended). `started` is sent once the first
/// bytes arrived.
fn slow_pull(
    addr: &str,
    path: &str,
    started: std::sync::mpsc::Sender<()>,
) -> (String, String, u64, Instant) {
    let mut s = TcpStream::connect(addr).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = Vec::new();
    let mut buf = vec![0; 256 << 10];
    let mut hasher = sha2::Sha256::new();
    let mut head = None;
    let mut len = 0u64;
    let mut first = Some(started);
    loop {
        let n = s.read(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        if let Some(tx) = first.take() {
            tx.send(()).unwrap();
        }
        match head {
            Some(_) => {
                hasher.update(&buf[..n]);
                len += n as u64;
            }
            None => {
                raw.extend_from_slice(&buf[..n]);
                if let Some(end) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
                    let text = String::from_utf8_lossy(&raw[..end]).into_owned();
                    hasher.update(&raw[end + 4..]);
                    len += (raw.len() - end - 4) as u64;
                    head = Some(text);
                }
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let status = head
        .unwrap_or_default()
        .lines()
        .next()
        .unwrap_or("")
        .to_string();
    (
        status,
        format!("sha256:{}", hex::encode(hasher.finalize())),
        len,
        Instant::now(),
    )
}

#[test]
fn airlock_job_starts_as_bosh_runs_it_and_drains_pulls_in_flight() {
    let site = tempfile::tempdir().unwrap();
    let data = site.path().join("store");

    // post-start with no server: fails after its timeout, naming the URL.
    let port = free_port();
    let idle = Vm::new(&props(&data, port, 2));
    let o = idle.run("post-start", &[]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(&format!(
            "not ready after 2 s: http://127.0.0.1:{port}/readyz"
        )),
        "{err}"
    );

    let vm = Vm::new(&props(&data, port, 60));
    vm.run_ok("pre-start", &[]);
    for dir in ["data/airlock/tmp", "data/airlock/torcx"] {
        assert!(vm.path().join(dir).is_dir(), "pre-start made {dir}");
    }
    assert!(data.is_dir(), "pre-start made the store directory");
    let addr = format!("127.0.0.1:{port}");
    let server = vm.start(&addr, &data);
    let out = vm.run_ok("post-start", &[]);
    assert!(out.contains("airlock: ready"), "{out}");

    // A blob larger than the socket buffers on both ends.
    let blob = bytes_of(48 << 20, 5);
    let digest = sha256(&blob);
    let (status, _, body) = http_body(
        &addr,
        "POST",
        &format!("/v2/drain/app/blobs/uploads/?digest={digest}"),
        &[],
        &blob,
    )
    .unwrap();
    assert_eq!(status, 201, "{}", String::from_utf8_lossy(&body));
    drop(blob);

    let (tx, rx) = std::sync::mpsc::channel();
    let pulls: Vec<_> = (0..4)
        .map(|_| {
            let (addr, tx) = (addr.clone(), tx.clone());
            let path = format!("/v2/drain/app/blobs/{digest}");
            std::thread::spawn(move || slow_pull(&addr, &path, tx))
        })
        .collect();
    for _ in 0..4 {
        rx.recv_timeout(Duration::from_secs(30)).unwrap();
    }
    let out = vm.run_ok("drain", &[]);
    let drained = Instant::now();
    assert_eq!(out.trim(), "0", "drain prints 0: stop now");
    for p in pulls {
        let (status, got, len, ended) = p.join().unwrap();
        assert!(status.contains(" 200 "), "{status}");
        assert_eq!((got.as_str(), len), (digest.as_str(), 48 << 20));
        assert!(ended <= drained, "a pull ended after drain returned");
    }
    // bpm stop: SIGTERM, a graceful stop.
    assert!(server.terminate().success());
}
