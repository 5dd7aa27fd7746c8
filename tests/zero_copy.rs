//! Zero-copy blob GETs (issue 26 §3): over plain HTTP/1.1 a verified large
//! blob goes out with `sendfile(2)` (counted in `airlock_sendfile_bytes_total`),
//! whole and ranged, and the bytes a client gets are the file's exactly
//! (sha256 computed here over the file on disk); a byte flipped on disk
//! after it was verified is never served, however it would have been sent.
//!
//! Filesystem only: `sendfile(2)` sends from the filesystem store's files
//! (an S3 store relays or redirects). The tests of this binary take
//! [`SERIAL`] so that the process-wide counter moves only by what each does.

mod common;

use std::io::{Seek, SeekFrom, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use airlock::server::Limits;
use common::images::{bytes_of, push_blob, sha256};
use common::listener::{Running, read_response, start};
use common::objects::{blob_key, quarantine_key};
use sha2::{Digest as _, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Held by each test: the sendfile counter is process-wide.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A large blob: past the 4 MiB of blobs verified whole in memory, so it is
/// streamed from its file (a few dozen mapped windows).
const SIZE: usize = 12 << 20;

fn sent_with_sendfile() -> u64 {
    airlock::metrics::global().sendfile_bytes.get()
}

/// A push-enabled server holding one large blob in `zc/big`; its digest and
/// its file in the data directory.
async fn server_with_blob(seed: u32) -> (Running, String, PathBuf) {
    let srv = start(Limits::default()).await;
    let router = airlock::server::router(srv.app.clone());
    let blob = bytes_of(SIZE, seed);
    let digest = push_blob(&router, "zc/big", &blob).await;
    assert_eq!(digest, sha256(&blob));
    let file = srv.backend.data_dir().join(blob_key(&digest));
    (srv, digest, file)
}

/// `sha256:<hex>` of the file at `path`, hashed here.
fn file_sha256(path: &PathBuf) -> String {
    let bytes = std::fs::read(path).unwrap();
    format!("sha256:{}", hex::encode(Sha256::digest(&bytes)))
}

/// GET of `path` (with extra header lines `extra`) on a new plain HTTP/1.1
/// connection: the lower-cased head and the body (within 20 s).
async fn get(addr: SocketAddr, path: &str, extra: &str) -> (String, Vec<u8>) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let req = format!("GET {path} HTTP/1.1\r\nHost: test\r\n{extra}\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    tokio::time::timeout(Duration::from_secs(20), read_response(&mut s))
        .await
        .expect("response within 20 s")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verified_blob_goes_out_with_sendfile_whole_and_ranged_exact() {
    let _serial = SERIAL.lock().await;
    let (srv, digest, file) = server_with_blob(26).await;
    let url = format!("/v2/zc/big/blobs/{digest}");
    let on_disk = std::fs::read(&file).unwrap();
    assert_eq!(file_sha256(&file), digest, "the stored file is the blob");

    // The first full read hashes the blob as it streams: not sent from the file.
    let before = sent_with_sendfile();
    let (head, body) = get(srv.addr, &url, "").await;
    assert!(head.starts_with("http/1.1 200"), "{head}");
    assert_eq!(sha256(&body), digest);
    assert_eq!(
        sent_with_sendfile(),
        before,
        "the hashing (first) read went through sendfile"
    );

    // Verified now: the whole blob leaves through sendfile, bytes exact.
    let before = sent_with_sendfile();
    let (head, body) = get(srv.addr, &url, "").await;
    assert!(head.starts_with("http/1.1 200"), "{head}");
    assert_eq!(body.len(), SIZE);
    assert_eq!(sha256(&body), digest, "whole body through sendfile");
    assert_eq!(
        sent_with_sendfile() - before,
        SIZE as u64,
        "every body byte went through sendfile"
    );

    // A range that starts and ends inside windows (not page aligned).
    let (start, end) = (1_000_003usize, 9_437_185usize);
    let before = sent_with_sendfile();
    let range = format!("Range: bytes={start}-{end}\r\n");
    let (head, body) = get(srv.addr, &url, &range).await;
    assert!(head.starts_with("http/1.1 206"), "{head}");
    assert!(
        head.contains(&format!("content-range: bytes {start}-{end}/{SIZE}")),
        "{head}"
    );
    assert_eq!(
        sha256(&body),
        sha256(&on_disk[start..=end]),
        "ranged body through sendfile"
    );
    assert_eq!(
        sent_with_sendfile() - before,
        (end + 1 - start) as u64,
        "every byte of the range went through sendfile"
    );

    // Keep-alive: several responses on one connection stay framed.
    let mut s = TcpStream::connect(srv.addr).await.unwrap();
    for _ in 0..3 {
        let req = format!("GET {url} HTTP/1.1\r\nHost: test\r\n\r\n");
        s.write_all(req.as_bytes()).await.unwrap();
        let (head, body) = read_response(&mut s).await;
        assert!(head.starts_with("http/1.1 200"), "{head}");
        assert_eq!(sha256(&body), digest, "keep-alive body");
    }
}

/// Reads a response until the connection closes or 20 s pass: the
/// lower-cased head (if it came) and the body bytes received.
async fn read_until_closed(s: &mut TcpStream) -> (String, Vec<u8>) {
    let mut buf = Vec::new();
    let mut chunk = vec![0u8; 1 << 16];
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        match tokio::time::timeout_at(deadline, s.read(&mut chunk)).await {
            Ok(Ok(0)) | Ok(Err(_)) => break,
            Ok(Ok(n)) => buf.extend_from_slice(&chunk[..n]),
            Err(_) => panic!("connection neither closed nor finished within 20 s"),
        }
    }
    let end = buf
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map_or(0, |i| i + 4);
    let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
    (head, buf[end..].to_vec())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn byte_flipped_after_verification_is_never_served() {
    let _serial = SERIAL.lock().await;
    let (srv, digest, file) = server_with_blob(27).await;
    let url = format!("/v2/zc/big/blobs/{digest}");
    // Verified (first read), then served through sendfile.
    let (_, body) = get(srv.addr, &url, "").await;
    assert_eq!(sha256(&body), digest);
    let before = sent_with_sendfile();
    let (_, body) = get(srv.addr, &url, "").await;
    assert_eq!(sha256(&body), digest);
    assert!(
        sent_with_sendfile() > before,
        "the verified read used sendfile"
    );

    // A byte flipped in place, as `dd conv=notrunc` would: same inode, new
    // mtime and ctime, so the recorded identity no longer matches.
    let at = SIZE as u64 / 2 + 12_345;
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&file)
        .unwrap();
    let mut byte = [0u8; 1];
    f.seek(SeekFrom::Start(at)).unwrap();
    std::io::Read::read_exact(&mut f, &mut byte).unwrap();
    byte[0] ^= 0x01;
    f.seek(SeekFrom::Start(at)).unwrap();
    f.write_all(&byte).unwrap();
    f.sync_all().unwrap();
    drop(f);
    assert_ne!(
        file_sha256(&file),
        digest,
        "the file on disk is corrupt now"
    );

    let before = sent_with_sendfile();
    let mut s = TcpStream::connect(srv.addr).await.unwrap();
    let req = format!("GET {url} HTTP/1.1\r\nHost: test\r\n\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let (head, body) = read_until_closed(&mut s).await;
    assert!(
        body.len() < SIZE,
        "a complete body of a corrupt blob was served ({head})"
    );
    assert_eq!(
        sent_with_sendfile(),
        before,
        "bytes of a blob whose identity changed were sent from the file"
    );
    let quarantined = srv.backend.data_dir().join(quarantine_key(&digest));
    assert!(quarantined.exists(), "the corrupt blob was not quarantined");
    let (head, _) = get(srv.addr, &url, "").await;
    assert!(head.starts_with("http/1.1 404"), "{head}");
}
