//! `airlock cell sync` against a running `airlock serve`: installs the
//! promoted rootfs, follows a promotion, rolls back by swapping in the
//! previous file, adds trusted certs after the sha256 check, refuses a
//! rootfs whose sha256 does not match (a proxy corrupts one byte) and
//! honours 429 `Retry-After` (a proxy refuses the first download); over
//! airlock's own HTTPS with a test CA (`--ca-file`) and with a client
//! certificate (mTLS, `--cert`/`--key`).
//! Every sha256 is computed by coreutils' `sha256sum`, every tar read by
//! GNU tar. What the store holds and serves runs on every blobstore
//! backend (`on_backends!`); what happens between the cell and the server
//! alone (a corrupting or refusing proxy, TLS and client certificates) on
//! the filesystem: the backend adds nothing to it.

use crate::common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use common::backend::{Backend, Kind, on_backends, settled};
use common::ca::{CLIENT_EXT, SERVER_EXT, issue, make_ca};
use common::*;

/// A bundle of `stacks/bb:latest` (busybox) and `stacks/bb:v2` (plus
/// `etc/stack-version` and a CA bundle), built once per test binary.
fn bundle() -> &'static Path {
    static B: OnceLock<PathBuf> = OnceLock::new();
    B.get_or_init(|| {
        let dir = Box::leak(Box::new(tempfile::tempdir().unwrap()))
            .path()
            .to_path_buf();
        let layout = copy_fixture_layout(&dir);
        let l = |tag: &str| format!("{}:{tag}", layout.display());
        let work = dir.join("work");
        run_ok(Command::new("umoci").args([
            "unpack",
            "--image",
            &l("latest"),
            work.to_str().unwrap(),
        ]));
        let rootfs = work.join("rootfs");
        std::fs::write(rootfs.join("etc/stack-version"), "2\n").unwrap();
        std::fs::create_dir_all(rootfs.join("etc/ssl/certs")).unwrap();
        std::fs::write(
            rootfs.join("etc/ssl/certs/ca-certificates.crt"),
            "# the distribution's CAs\n",
        )
        .unwrap();
        run_ok(Command::new("umoci").args(["repack", "--image", &l("v2"), work.to_str().unwrap()]));
        let cfg = write_config(
            &dir,
            &layout,
            &[
                ("latest", "stacks/bb", &["latest"]),
                ("v2", "stacks/bb", &["v2"]),
            ],
        );
        let bundle = dir.join("bundle.tar");
        create_bundle(&cfg, &bundle, &[]);
        bundle
    })
}

/// The fresh store `b` with the bundle imported and `stacks/bb:TAG`
/// promoted as stack `bb`, served: (the store, server, its URL).
fn setup_on(b: Backend, tag: &str) -> (Backend, Server, String) {
    b.import(&test_key().1, bundle());
    stack(
        &b,
        &["promote", "bb", "--image", &format!("stacks/bb:{tag}")],
    );
    let server = b.serve(&[]);
    let url = format!("http://{}", server.addr);
    (b, server, url)
}

/// [`setup_on`] the filesystem, for what happens between the cell and
/// the HTTP server only (a corrupting or refusing proxy, the client's
/// certificates): the same on every backend.
fn setup(tag: &str) -> (Backend, Server, String) {
    setup_on(Backend::start(Kind::Fs), tag)
}

/// `airlock stack VERB <store> ARGS...`.
fn stack(b: &Backend, args: &[&str]) {
    b.airlock_ok(&["stack", args[0]], &args[1..]);
}

/// `airlock cell sync --once` of stack `bb` from `url` into `dir` as cell `cell-1`.
fn sync(url: &str, dir: &Path, extra: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_airlock"))
        .args(["cell", "sync", "--once", "--url", url, "--stack", "bb"])
        .args([
            "--install-dir",
            dir.to_str().unwrap(),
            "--cell-id",
            "diego-cell/0a",
        ])
        .args(extra)
        .output()
        .unwrap()
}

fn sync_ok(url: &str, dir: &Path, extra: &[&str]) -> String {
    let o = sync(url, dir, extra);
    assert!(
        o.status.success(),
        "cell sync: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// What the API assigns to the cell: (rootfs_digest, digest).
fn assigned(addr: &str) -> (String, String) {
    let (status, _, body) = http(addr, "GET", "/stacks/v1/bb?cell=diego-cell/0a", &[]).unwrap();
    assert_eq!(status, 200);
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    (
        v["rootfs_digest"].as_str().unwrap().into(),
        v["digest"].as_str().unwrap().into(),
    )
}

/// The rootfs tar the server sends for the cell, saved to `to`.
fn served_rootfs(addr: &str, to: &Path) {
    let (status, _, body) = http(
        addr,
        "GET",
        "/stacks/v1/bb/rootfs.tar?cell=diego-cell/0a",
        &[],
    )
    .unwrap();
    assert_eq!(status, 200);
    std::fs::write(to, body).unwrap();
}

fn tar_cat(tar: &Path, member: &str) -> Vec<u8> {
    let o = Command::new("tar")
        .arg("-xOf")
        .arg(tar)
        .arg(member)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "tar -xOf {member}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    o.stdout
}

fn tar_list(tar: &Path) -> Vec<String> {
    let o = Command::new("tar")
        .args(["--numeric-owner", "-tvf"])
        .arg(tar)
        .output()
        .unwrap();
    assert!(o.status.success());
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(String::from)
        .collect()
}

/// What a [`Proxy`] does to rootfs downloads.
#[derive(Clone, Copy, PartialEq)]
enum Mode {
    /// Flips the last byte of each rootfs body (tar and chunk index alike: a
    /// cell with a seed finds the index unusable and downloads the tar).
    Corrupt,
    /// Answers the first rootfs request 429 with `Retry-After: 2`.
    BusyOnce,
}

/// A one-request-per-connection HTTP proxy in front of `airlock serve`.
struct Proxy {
    url: String,
    rootfs_requests: Arc<AtomicUsize>,
    times: Arc<Mutex<Vec<Instant>>>,
    /// Every request's `Authorization` header ("" when absent).
    authorization: Arc<Mutex<Vec<String>>>,
}

fn read_head(s: &mut TcpStream) -> Vec<u8> {
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if s.read(&mut b).unwrap_or(0) == 0 {
            break;
        }
        head.push(b[0]);
    }
    head
}

fn proxy(upstream: String, mode: Mode) -> Proxy {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let rootfs_requests = Arc::new(AtomicUsize::new(0));
    let times = Arc::new(Mutex::new(Vec::new()));
    let authorization = Arc::new(Mutex::new(Vec::new()));
    let (count, t, a) = (
        rootfs_requests.clone(),
        times.clone(),
        authorization.clone(),
    );
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut client) = conn else { return };
            let head = String::from_utf8_lossy(&read_head(&mut client)).into_owned();
            let path = head.split_whitespace().nth(1).unwrap_or("").to_string();
            let length: usize = head
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|v| v.trim().parse().unwrap_or(0))
                })
                .unwrap_or(0);
            let auth = head
                .lines()
                .find(|l| l.to_ascii_lowercase().starts_with("authorization:"))
                .map(|l| l["authorization:".len()..].trim().to_string())
                .unwrap_or_default();
            a.lock().unwrap().push(auth);
            let mut body = vec![0u8; length];
            client.read_exact(&mut body).unwrap();
            let rootfs = path.contains("/rootfs.");
            if rootfs {
                t.lock().unwrap().push(Instant::now());
                if count.fetch_add(1, Ordering::SeqCst) == 0 && mode == Mode::BusyOnce {
                    let _ = client.write_all(b"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 2\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
                    continue;
                }
            }
            let mut req: Vec<u8> = head
                .split("\r\n")
                .filter(|l| !l.is_empty() && !l.to_ascii_lowercase().starts_with("connection:"))
                .flat_map(|l| format!("{l}\r\n").into_bytes())
                .collect();
            req.extend_from_slice(b"Connection: close\r\n\r\n");
            req.extend_from_slice(&body);
            let mut up = TcpStream::connect(&upstream).unwrap();
            up.write_all(&req).unwrap();
            let mut resp = Vec::new();
            up.read_to_end(&mut resp).unwrap();
            if rootfs && mode == Mode::Corrupt && resp.starts_with(b"HTTP/1.1 200") {
                let last = resp.len() - 1;
                resp[last] ^= 0xff;
            }
            let _ = client.write_all(&resp);
        }
    });
    Proxy {
        url,
        rootfs_requests,
        times,
        authorization,
    }
}

// What the store holds and serves (the rootfs, the cell's reports, a
// promotion and a rollback by another process): on every backend.
on_backends!([fs, moto, s3s_fs, ceph] installs_follows_promotions_and_rolls_back);

/// The rootfs the API assigns once the server has seen another process's
/// change (within its root refresh: [`Backend::refresh_bound`]).
fn assigned_rootfs_after(b: &Backend, addr: &str, old: &str) -> String {
    let changed = settled(b.refresh_bound(), &false, || assigned(addr).0 == old);
    assert!(!changed, "the server still assigns {old}");
    assigned(addr).0
}

fn installs_follows_promotions_and_rolls_back(b: Backend) {
    require_tool("tar", "tar");
    let (store, server, url) = setup_on(b, "latest");
    let tmp = &store.dir;
    let cells = tmp.path().join("cells");
    let rootfs = cells.join("bb/rootfs.tar");
    let previous = cells.join("bb/rootfs.tar.previous");

    // First install: what the API published, byte for byte what it serves.
    let (v1, _) = assigned(&server.addr);
    let out = sync_ok(&url, &cells, &[]);
    assert!(out.contains("bb: installed"), "{out}");
    assert_eq!(sha256sum(&rootfs), v1);
    let served = tmp.path().join("served-v1.tar");
    served_rootfs(&server.addr, &served);
    assert_eq!(sha256sum(&served), v1);
    assert!(!previous.exists());
    // The cell reported what it runs.
    let (_, digest) = assigned(&server.addr);
    let (_, _, body) = http(&server.addr, "GET", "/stacks/v1/bb/status", &[]).unwrap();
    let status: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(status["cells"], 1, "{status}");
    assert_eq!(status["digests"][&digest], 1, "{status}");
    assert_eq!(status["on_latest"], 1, "{status}");
    // Nothing changed: no download.
    assert!(sync_ok(&url, &cells, &[]).contains("bb: up to date"));

    // A promotion reaches the cell; the old rootfs is kept.
    stack(&store, &["promote", "bb", "--image", "stacks/bb:v2"]);
    let v2 = assigned_rootfs_after(&store, &server.addr, &v1);
    assert_ne!(v1, v2);
    assert!(sync_ok(&url, &cells, &[]).contains("bb: installed"));
    assert_eq!(sha256sum(&rootfs), v2);
    assert_eq!(sha256sum(&previous), v1);
    assert_eq!(tar_cat(&rootfs, "etc/stack-version"), b"2\n");

    // A rollback swaps the previous file back in, without a download.
    stack(&store, &["rollback", "bb", "--reason", "test"]);
    assert_eq!(assigned_rootfs_after(&store, &server.addr, &v2), v1);
    let p = proxy(server.addr.clone(), Mode::Corrupt);
    let out = sync_ok(&p.url, &cells, &[]);
    assert!(out.contains("bb: switched to the previous rootfs"), "{out}");
    assert_eq!(p.rootfs_requests.load(Ordering::SeqCst), 0);
    assert_eq!(sha256sum(&rootfs), v1);
    assert_eq!(sha256sum(&previous), v2);
    let leftovers: Vec<_> = std::fs::read_dir(cells.join("bb"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        // `.lock` stays: the one-sync-at-a-time lock file (flock), not a leftover.
        .filter(|n| n.starts_with('.') && n != ".lock")
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[test]
fn refuses_a_rootfs_whose_sha256_does_not_match() {
    let (b, server, url) = setup("latest");
    let cells = b.dir.path().join("cells");
    let (v1, _) = assigned(&server.addr);
    sync_ok(&url, &cells, &[]);
    stack(&b, &["promote", "bb", "--image", "stacks/bb:v2"]);

    let p = proxy(server.addr.clone(), Mode::Corrupt);
    let o = sync(&p.url, &cells, &[]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("content hashes to"), "{err}");
    assert!(p.rootfs_requests.load(Ordering::SeqCst) >= 1);
    // The installed rootfs is untouched and no partial file is left.
    assert_eq!(sha256sum(&cells.join("bb/rootfs.tar")), v1);
    assert!(!cells.join("bb/rootfs.tar.previous").exists());
    assert!(!cells.join("bb/.rootfs.tar.download").exists());
}

#[test]
fn honours_429_retry_after() {
    let (b, server, _) = setup("latest");
    let tmp = &b.dir;
    let cells = tmp.path().join("cells");
    let p = proxy(server.addr.clone(), Mode::BusyOnce);
    // With credentials: HTTP Basic on every request.
    let password = tmp.path().join("password");
    std::fs::write(&password, "s3cret\n").unwrap();
    let args = [
        "--user",
        "cell",
        "--password-file",
        password.to_str().unwrap(),
    ];
    sync_ok(&p.url, &cells, &args);
    assert_eq!(p.rootfs_requests.load(Ordering::SeqCst), 2);
    let o = Command::new("sh")
        .args(["-c", "printf cell:s3cret | base64"])
        .output()
        .unwrap();
    let basic = format!("Basic {}", String::from_utf8_lossy(&o.stdout).trim());
    let seen = p.authorization.lock().unwrap().clone();
    assert!(seen.len() >= 4, "{seen:?}"); // resolve, 429, download, report
    assert!(seen.iter().all(|h| *h == basic), "{seen:?} != {basic}");
    let t = p.times.lock().unwrap().clone();
    let waited = t[1] - t[0];
    assert!(waited >= Duration::from_secs(2), "retried after {waited:?}");
    assert!(waited < Duration::from_secs(10), "retried after {waited:?}");
    assert_eq!(
        sha256sum(&cells.join("bb/rootfs.tar")),
        assigned(&server.addr).0
    );
}

#[test]
fn adds_trusted_certs_after_the_check() {
    let (b, server, url) = setup("v2");
    let tmp = &b.dir;
    let (pem, _) = self_signed_cert(tmp.path(), "site-ca", "site CA");
    let pem_bytes = std::fs::read(&pem).unwrap();
    let cells = tmp.path().join("cells");
    let rootfs = cells.join("bb/rootfs.tar");
    let certs_arg = ["--trusted-certs", pem.to_str().unwrap()];
    assert!(sync_ok(&url, &cells, &certs_arg).contains("bb: installed"));

    let served = tmp.path().join("served.tar");
    served_rootfs(&server.addr, &served);
    let mut want = b"# the distribution's CAs\n".to_vec();
    want.extend_from_slice(&pem_bytes);
    assert_eq!(tar_cat(&rootfs, "etc/ssl/certs/ca-certificates.crt"), want);
    // Every other entry is as served (names, modes, owners, sizes, mtimes).
    let strip = |l: Vec<String>| -> Vec<String> {
        l.into_iter()
            .filter(|e| !e.ends_with("etc/ssl/certs/ca-certificates.crt"))
            .collect()
    };
    assert_eq!(strip(tar_list(&rootfs)), strip(tar_list(&served)));
    assert_eq!(tar_list(&rootfs).len(), tar_list(&served).len());
    assert_eq!(tar_cat(&rootfs, "etc/stack-version"), b"2\n");
    // Same certs: up to date; without certs: the plain rootfs again.
    assert!(sync_ok(&url, &cells, &certs_arg).contains("bb: up to date"));
    assert!(sync_ok(&url, &cells, &[]).contains("bb: installed"));
    assert_eq!(sha256sum(&rootfs), sha256sum(&served));

    // A rootfs without a CA bundle gets one.
    stack(&b, &["promote", "bb", "--image", "stacks/bb:latest"]);
    assert!(sync_ok(&url, &cells, &certs_arg).contains("bb: installed"));
    assert_eq!(
        tar_cat(&rootfs, "etc/ssl/certs/ca-certificates.crt"),
        pem_bytes
    );

    // A file without a certificate is refused before anything is fetched.
    std::fs::write(tmp.path().join("empty.pem"), "not a certificate\n").unwrap();
    let o = sync(
        &url,
        &cells,
        &[
            "--trusted-certs",
            tmp.path().join("empty.pem").to_str().unwrap(),
        ],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1));
    assert!(err.contains("no PEM certificate"), "{err}");
}

/// curl over HTTPS trusting `dir/ca.crt`, with the client certificate
/// `dir/NAME.crt` when `client` names one: (status, body).
fn curl_tls(dir: &Path, addr: &str, path: &str, client: Option<&str>) -> (u16, Vec<u8>) {
    require_tool("curl", "curl");
    let mut cmd = Command::new("curl");
    cmd.current_dir(dir).args([
        "-sS",
        "--cacert",
        "ca.crt",
        "-o",
        "body",
        "-w",
        "%{http_code}",
    ]);
    if let Some(c) = client {
        cmd.args(["--cert", &format!("{c}.crt"), "--key", &format!("{c}.key")]);
    }
    let o = cmd.arg(format!("https://{addr}{path}")).output().unwrap();
    let code = String::from_utf8_lossy(&o.stdout)
        .trim()
        .parse()
        .unwrap_or(0);
    (code, std::fs::read(dir.join("body")).unwrap_or_default())
}

#[test]
fn syncs_over_https_with_a_site_ca_and_with_a_client_certificate() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    make_ca(dir, "ca");
    issue(dir, "ca", "server", "localhost", SERVER_EXT);
    issue(dir, "ca", "cell1", "cell1", CLIENT_EXT);
    let data = dir.join("data");
    import_bundle(&data, &test_key().1, bundle());
    airlock_ok(&[
        "stack",
        "promote",
        "--data",
        data.to_str().unwrap(),
        "bb",
        "--image",
        "stacks/bb:latest",
    ]);
    let config = dir.join("airlock.toml");
    std::fs::write(
        &config,
        r#"[tls]
cert = "server.crt"
key = "server.key"
client_ca = "ca.crt"
[[user]]
name = "cell1"
roles = ["cell"]
"#,
    )
    .unwrap();
    let server = serve_tls(&data, &["--config", config.to_str().unwrap()]);
    let url = format!("https://{}", server.addr);
    let ca = dir.join("ca.crt");
    let ca = ca.to_str().unwrap();
    let (crt, key) = (dir.join("cell1.crt"), dir.join("cell1.key"));
    let client = [
        "--cert",
        crt.to_str().unwrap(),
        "--key",
        key.to_str().unwrap(),
    ];
    let cells = dir.join("cells");
    let fails = |extra: &[&str], why: &str| {
        let o = sync(&url, &cells, extra);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{extra:?}: {err}");
        // One line per failed stack, naming the cause.
        assert!(
            err.lines()
                .any(|l| l.starts_with("airlock: bb: ") && l.contains(why)),
            "{extra:?}: {err}"
        );
        assert!(!cells.join("bb/rootfs.tar").exists());
    };

    // A certificate refused in the TLS handshake is final, not retried:
    // the server's, without the site CA, and the cell's, from another CA.
    make_ca(dir, "rogue");
    issue(dir, "rogue", "evil", "cell1", CLIENT_EXT);
    let (evil_crt, evil_key) = (dir.join("evil.crt"), dir.join("evil.key"));
    let rogue = [
        "--ca-file",
        ca,
        "--cert",
        evil_crt.to_str().unwrap(),
        "--key",
        evil_key.to_str().unwrap(),
    ];
    for (extra, why) in [(&[][..], "invalid peer certificate"), (&rogue[..], "alert")] {
        let t0 = std::time::Instant::now();
        fails(extra, why);
        // Retried, it would take minutes (30 attempts with backoff).
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(20),
            "{extra:?}: retried for {:?}",
            t0.elapsed()
        );
    }

    // Trusted, but without a client certificate the cell is anonymous.
    fails(&["--ca-file", ca], "401");

    // With both: installed, byte for byte what the API published (curl
    // with the same client certificate reads the assignment).
    let mut ok = vec!["--ca-file", ca];
    ok.extend_from_slice(&client);
    let out = sync_ok(&url, &cells, &ok);
    assert!(out.contains("bb: installed"), "{out}");
    let (status, body) = curl_tls(
        dir,
        &server.addr,
        "/stacks/v1/bb?cell=diego-cell/0a",
        Some("cell1"),
    );
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        sha256sum(&cells.join("bb/rootfs.tar")),
        v["rootfs_digest"].as_str().unwrap()
    );
    assert_eq!(
        curl_tls(dir, &server.addr, "/stacks/v1/bb?cell=x", None).0,
        401
    );
    // Nothing changed: the second pass downloads nothing.
    assert!(sync_ok(&url, &cells, &ok).contains("bb: up to date"));
}

/// The airlock-rootfs job as a BOSH director runs it on a cell (issue 42
/// §1), on a VM's `/var/vcap` in a temp dir: `pre-start` installs the
/// promoted rootfs before garden and rep would start, the process started
/// as bpm starts it installs the next promotion within its poll interval,
/// stops on SIGTERM (bpm stop) with the rootfs whole, and a restart keeps
/// the installed rootfs: no download when nothing changed, and when
/// airlock cannot be reached pre-start keeps it (a stack with nothing
/// installed fails, naming it).
#[test]
fn airlock_rootfs_job_installs_at_pre_start_follows_promotions_and_keeps_its_rootfs_across_restarts()
 {
    use crate::bosh_vm::Vm;
    use std::os::unix::fs::MetadataExt;
    let (store, server, url) = setup("latest");
    let props = |url: &str, stacks: &[&str]| {
        serde_json::json!({"airlock_rootfs": {
            "stacks": stacks, "url": url, "interval_secs": 1, "cell_id": "diego-cell/0a",
            "pre_start_timeout_secs": 5}})
    };
    let vm = Vm::with_job(
        "airlock-rootfs",
        &props(&url, &["bb"]),
        &serde_json::json!({}),
    );
    let rootfs = vm.path().join("data/airlock-rootfs/bb/rootfs.tar");
    let (v1, _) = assigned(&server.addr);

    vm.run_ok("pre-start", &[]);
    assert_eq!(
        sha256sum(&rootfs),
        v1,
        "pre-start installed the promoted rootfs"
    );

    let mut process = vm.spawn();
    stack(&store, &["promote", "bb", "--image", "stacks/bb:v2"]);
    let v2 = assigned_rootfs_after(&store, &server.addr, &v1);
    let installed = settled(Duration::from_secs(30), &v2, || sha256sum(&rootfs));
    assert_eq!(installed, v2, "the bpm process installed the promotion");
    assert_eq!(tar_cat(&rootfs, "etc/stack-version"), b"2\n");
    terminate(&mut process, Duration::from_secs(20));
    assert_eq!(sha256sum(&rootfs), v2, "whole after bpm stop");

    // Restart with nothing changed: the same file, not downloaded again.
    let before = std::fs::metadata(&rootfs).unwrap();
    let out = vm.run_ok("pre-start", &[]);
    assert!(out.contains("bb: up to date"), "{out}");
    let after = std::fs::metadata(&rootfs).unwrap();
    assert_eq!(
        (before.ino(), before.mtime_nsec()),
        (after.ino(), after.mtime_nsec())
    );

    // Restart while airlock is down: the installed rootfs is kept.
    let down = format!("http://127.0.0.1:{}", free_port());
    let vm_down = Vm::with_job(
        "airlock-rootfs",
        &props(&down, &["bb"]),
        &serde_json::json!({}),
    );
    let dir = vm_down.path().join("data/airlock-rootfs/bb");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(&rootfs, dir.join("rootfs.tar")).unwrap();
    let o = vm_down.run("pre-start", &[]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains("keeping the installed rootfs of every stack"),
        "{err}"
    );
    assert_eq!(sha256sum(&dir.join("rootfs.tar")), v2);
    // A stack with nothing installed fails the deploy, naming it.
    let vm_new = Vm::with_job(
        "airlock-rootfs",
        &props(&down, &["bb"]),
        &serde_json::json!({}),
    );
    let o = vm_new.run("pre-start", &[]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(err.contains("no rootfs installed for bb"), "{err}");
}
