//! The integration scenarios on every blobstore backend: the filesystem,
//! moto's S3 server and s3s-fs (real servers on loopback, started here;
//! scripts/install-test-deps.sh installs them). Each scenario is written
//! once and run per backend by `on_backends!`; the outage scenario
//! needs data that survives a restart, so it runs on s3s-fs.
//!
//! Values are checked independently: digests by `sha256sum`, pulls and
//! pushes by skopeo, uploads and ranges by curl.

use crate::common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Stdio};

use common::backend::{Backend, Kind, on_backends, settled};
use common::*;

on_backends!([fs, moto, s3s_fs, ceph] import_pull_history, push_and_uploads_across_replicas);

// Concurrent root swaps through two replicas need conditional writes the
// server serializes: the filesystem and moto served one request at a time
// (AWS S3 and Ceph RGW do too; s3s-fs does not, see
// `Kind::serializes_conditional_writes`).
on_backends!([fs, moto, ceph] concurrent_pushes_to_one_tag);

/// `curl -s` against `addr`: (status, headers lower-case, body).
fn curl(addr: &str, path: &str, args: &[&str]) -> (u16, String, Vec<u8>) {
    let o = Command::new("curl")
        .args(["-s", "-D", "/dev/stderr", "-o", "-"])
        .args(args)
        .arg(format!("http://{addr}{path}"))
        .output()
        .expect("curl (apt-get install curl)");
    let head = String::from_utf8_lossy(&o.stderr).to_ascii_lowercase();
    let status = head
        .lines()
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (status, head, o.stdout)
}

fn header_of(head: &str, name: &str) -> String {
    head.lines()
        .find_map(|l| l.strip_prefix(&format!("{name}: ")))
        .unwrap_or_default()
        .trim()
        .to_string()
}

/// A signed bundle of the fixture image `latest` as `stacks/busybox:1.0`.
fn fixture_bundle(dir: &Path) -> std::path::PathBuf {
    let config = write_config(
        dir,
        &fixture_layout(),
        &[("latest", "stacks/busybox", &["1.0"])],
    );
    let bundle = dir.join("b.tar");
    create_bundle(&config, &bundle, &[]);
    bundle
}

/// Import, history, pull by skopeo, ranged GET and HEAD, inventory.
fn import_pull_history(b: Backend) {
    require_tool("skopeo", "skopeo");
    let tmp = tempfile::tempdir().unwrap();
    let (_, public) = test_key();
    let layout = fixture_layout();
    let bundle = fixture_bundle(tmp.path());
    b.import(&public, &bundle);
    let history = b.history();
    assert_eq!(history.len(), 1, "{:?}", b.kind);
    assert!(history[0].1.starts_with("sha256:"));
    let server = b.serve(&[]);
    let want = layout_ref_digest(&layout, "latest");
    let out = tmp.path().join("pulled");
    skopeo(&[
        "copy",
        "--src-tls-verify=false",
        &format!("docker://{}/stacks/busybox:1.0", server.addr),
        &format!("oci:{}:x", out.display()),
    ]);
    let got = layout_ref_digest(&out, "x");
    assert_eq!(got, want);
    assert_eq!(sha256sum(&blob_file(&out, &got)), want);
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(blob_file(&out, &got)).unwrap()).unwrap();
    let layer = manifest["layers"][0]["digest"].as_str().unwrap();
    assert_eq!(sha256sum(&blob_file(&out, layer)), layer);
    // A ranged GET streams exactly those bytes; HEAD gives the size.
    let bytes = std::fs::read(blob_file(&layout, layer)).unwrap();
    let path = format!("/v2/stacks/busybox/blobs/{layer}");
    let (status, head, body) = curl(&server.addr, &path, &["-r", "100-4195"]);
    assert_eq!(status, 206, "{head}");
    assert_eq!(body, &bytes[100..4196]);
    assert_eq!(
        header_of(&head, "content-range"),
        format!("bytes 100-4195/{}", bytes.len())
    );
    let (status, head, _) = curl(&server.addr, &path, &["-I"]);
    assert_eq!(status, 200);
    assert_eq!(header_of(&head, "content-length"), bytes.len().to_string());
    // Redirect mode: S3 answers 307 to a presigned URL that serves the
    // blob; the filesystem has no such URL and serves it itself.
    let redirecting = b.serve(&["--blob-redirect"]);
    let (status, head, _) = curl(&redirecting.addr, &path, &[]);
    let (_, _, body) = curl(&redirecting.addr, &path, &["-L"]);
    if b.kind == Kind::Fs {
        assert_eq!(status, 200);
    } else {
        assert_eq!(status, 307, "{head}");
        assert!(header_of(&head, "location").starts_with("http://127.0.0.1:"));
    }
    assert!(body == bytes, "the redirected blob differs");
    // The inventory names every blob of the image.
    let inv: serde_json::Value = serde_json::from_str(&b.airlock_ok(&["inventory"], &[])).unwrap();
    let listed: Vec<&str> = inv["blobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d.as_str().unwrap())
        .collect();
    assert!(listed.contains(&layer) && listed.contains(&want.as_str()));
}

/// Pushes by skopeo through one replica and pulls through another (one
/// root swap per manifest, none per blob); a chunked upload opened on one
/// replica, continued and finished on the other; two PATCHes racing for
/// one offset through both: exactly one lands.
fn push_and_uploads_across_replicas(b: Backend) {
    require_tool("skopeo", "skopeo");
    let tmp = tempfile::tempdir().unwrap();
    let (_, public) = test_key();
    b.import(&public, &fixture_bundle(tmp.path()));
    let (a, c) = (b.serve(&["--allow-push"]), b.serve(&["--allow-push"]));
    let layout = fixture_layout();
    let want = layout_ref_digest(&layout, "latest");
    let before = b.history().len();
    skopeo(&[
        "copy",
        "--dest-tls-verify=false",
        &format!("oci:{}:latest", layout.display()),
        &format!("docker://{}/pushed/busybox:v1", a.addr),
    ]);
    assert_eq!(b.history().len(), before + 1, "blobs need no root swap");
    let out = tmp.path().join("back");
    skopeo(&[
        "copy",
        "--src-tls-verify=false",
        &format!("docker://{}/pushed/busybox:v1", c.addr),
        &format!("oci:{}:x", out.display()),
    ]);
    assert_eq!(layout_ref_digest(&out, "x"), want);

    // A chunked upload: POST on A, PATCH on C, PATCH on A, PUT on C.
    let blob: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect();
    let file = tmp.path().join("blob");
    std::fs::write(&file, &blob).unwrap();
    let digest = sha256sum(&file);
    let (status, head, _) = curl(&a.addr, "/v2/up/blob/blobs/uploads/", &["-X", "POST"]);
    assert_eq!(status, 202, "{head}");
    let loc = header_of(&head, "location");
    // PATCH of blob[range] through `addr`: (status, Range header).
    let patch = |addr: &str, n: std::ops::Range<usize>| {
        let p = tmp.path().join(format!("part-{}", n.start));
        std::fs::write(&p, &blob[n.clone()]).unwrap();
        let range = format!("Content-Range: {}-{}", n.start, n.end - 1);
        let data = format!("@{}", p.display());
        let args = ["-X", "PATCH", "-H", &range, "--data-binary", &data];
        let (status, head, _) = curl(addr, &loc, &args);
        (status, header_of(&head, "range"))
    };
    assert_eq!(patch(&c.addr, 0..100_000), (202, "0-99999".into()));
    assert_eq!(patch(&a.addr, 100_000..250_000), (202, "0-249999".into()));
    // A stale offset through the other replica is refused with the current size.
    assert_eq!(patch(&c.addr, 100_000..250_000), (416, "0-249999".into()));
    // Two PATCHes racing for one offset need conditional writes that the
    // server serializes (`If-None-Match: *`): the filesystem (`link(2)`),
    // AWS S3 and moto served one request at a time do; s3s-fs 0.14.1 checks
    // and writes without a lock, so there the last chunk goes in alone.
    if b.kind.serializes_conditional_writes() {
        // Two PATCHes for one offset, both past the size check before either
        // lands: their bodies are held back until both are in flight.
        let p3 = &blob[250_000..];
        let racers: Vec<TcpStream> = [&a.addr, &c.addr]
            .iter()
            .map(|addr| {
                let mut s = TcpStream::connect(addr).unwrap();
                let head = format!(
                    "PATCH {loc} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Range: 250000-299999\r\nContent-Length: {}\r\n\r\n",
                    p3.len()
                );
                s.write_all(head.as_bytes()).unwrap();
                s.write_all(&p3[..10]).unwrap();
                s
            })
            .collect();
        std::thread::sleep(std::time::Duration::from_millis(500));
        let statuses: Vec<u16> = racers
            .into_iter()
            .map(|mut s| {
                s.write_all(&p3[10..]).unwrap();
                let mut reply = String::new();
                s.read_to_string(&mut reply).unwrap();
                reply.split_whitespace().nth(1).unwrap().parse().unwrap()
            })
            .collect();
        let mut sorted = statuses.clone();
        sorted.sort();
        assert_eq!(sorted, [202, 416], "{:?}: {statuses:?}", b.kind);
    } else {
        assert_eq!(patch(&c.addr, 250_000..300_000), (202, "0-299999".into()));
    }
    let (status, head, _) = curl(
        &c.addr,
        &format!("{loc}?digest={digest}"),
        &["-X", "PUT", "-H", "Content-Length: 0"],
    );
    assert_eq!(status, 201, "{head}");
    let (status, _, body) = curl(&a.addr, &format!("/v2/up/blob/blobs/{digest}"), &[]);
    assert_eq!(status, 200);
    assert!(body == blob, "the blob read back differs");
}

/// Two different images pushed at once through two replicas to one tag:
/// the tag ends at one of them, and every blob and manifest of both is
/// still there.
fn concurrent_pushes_to_one_tag(b: Backend) {
    require_tool("skopeo", "skopeo");
    let tmp = tempfile::tempdir().unwrap();
    let (layout, refs) = synth::layout(tmp.path(), "race", 2, 7);
    let (a, c) = (b.serve(&["--allow-push"]), b.serve(&["--allow-push"]));
    let pushes: Vec<_> = [&a.addr, &c.addr]
        .iter()
        .zip(&refs)
        .map(|(addr, r)| {
            Command::new("skopeo")
                .args(["copy", "--preserve-digests", "--dest-tls-verify=false"])
                .arg(format!("oci:{}:{r}", layout.display()))
                .arg(format!("docker://{addr}/race/app:tag"))
                .stdout(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    for mut p in pushes {
        assert!(p.wait().unwrap().success());
    }
    let digests: Vec<String> = refs[..2]
        .iter()
        .map(|r| layout_ref_digest(&layout, r))
        .collect();
    for server in [&a, &c] {
        let tagged = curl(
            &server.addr,
            "/v2/race/app/manifests/tag",
            &[
                "-I",
                "-H",
                "Accept: application/vnd.oci.image.manifest.v1+json",
            ],
        );
        let winner = header_of(&tagged.1, "docker-content-digest");
        assert!(digests.contains(&winner), "{winner} {digests:?}");
        for d in &digests {
            let m = std::fs::read(blob_file(&layout, d)).unwrap();
            // The other replica's push is seen within the root refresh.
            let (status, body) = settled(b.refresh_bound(), &(200, m.clone()), || {
                let (status, _, body) = curl(
                    &server.addr,
                    &format!("/v2/race/app/manifests/{d}"),
                    &["-H", "Accept: application/vnd.oci.image.manifest.v1+json"],
                );
                (status, body)
            });
            assert_eq!((status, &body), (200, &m), "manifest {d} lost");
            let manifest: serde_json::Value = serde_json::from_slice(&m).unwrap();
            let layers = manifest["layers"].as_array().unwrap().iter();
            for blob in layers.chain([&manifest["config"]]) {
                let bd = blob["digest"].as_str().unwrap();
                let (status, _, body) =
                    curl(&server.addr, &format!("/v2/race/app/blobs/{bd}"), &[]);
                assert_eq!(status, 200, "blob {bd} lost");
                assert!(body == std::fs::read(blob_file(&layout, bd)).unwrap());
            }
        }
    }
}

/// The S3 server stops in the middle of an import: the import fails with
/// a clear error, the root is unchanged, and the same import succeeds once
/// the server is back.
#[test]
fn s3_outage_during_import_changes_nothing() {
    let mut b = Backend::start(Kind::S3sFs);
    let tmp = tempfile::tempdir().unwrap();
    let (_, public) = test_key();
    b.import(&public, &fixture_bundle(tmp.path()));
    let before = b.history();
    let (bundle, _) = synth::bundle(tmp.path(), "big", 24, 3);
    let bytes = std::fs::read(&bundle).unwrap();
    let mut import = b
        .command(&["import"], &["--keyring", public.to_str().unwrap(), "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = import.stdin.take().unwrap();
    stdin.write_all(&bytes[..bytes.len() / 2]).unwrap();
    stdin.flush().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1500));
    b.s3.as_mut().unwrap().stop();
    let _ = stdin.write_all(&bytes[bytes.len() / 2..]);
    drop(stdin);
    let out = import.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "import must fail: {stderr}");
    let last = stderr.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("airlock: error: ") && last.contains("S3"),
        "one clear line naming S3: {stderr}"
    );
    b.s3.as_mut().unwrap().restart();
    assert_eq!(b.history(), before, "the root must not change");
    b.import(&public, &bundle);
    assert_eq!(b.history().len(), before.len() + 1);
}

/// A server that ignores conditional writes is refused unless the
/// single-writer mode is acknowledged; a missing bucket is named.
#[test]
fn s3_missing_bucket_is_a_clear_error() {
    let b = Backend::start(Kind::S3sFs);
    let mut args = b.store_args();
    args[1] = "s3://no-such-bucket/x".into();
    let o = Command::new(env!("CARGO_BIN_EXE_airlock"))
        .arg("history")
        .args(args)
        .envs(common::backend::AWS_ENV)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(stderr.contains("no-such-bucket does not exist"), "{stderr}");
}

/// An `https://` endpoint with a private CA (moto behind nginx with TLS):
/// with `--s3-ca-file` the store opens (its start-up probe writes and
/// reads over TLS) and an import lands and reads back by digest; without
/// the CA it is refused in one line that names the certificate.
#[test]
fn s3_over_tls_trusts_the_ca_file() {
    let b = Backend::start(Kind::Moto);
    let tmp = tempfile::tempdir().unwrap();
    common::ca::make_ca(tmp.path(), "ca");
    common::ca::issue(tmp.path(), "ca", "rgw", "127.0.0.1", common::ca::SERVER_EXT);
    let moto =
        b.s3.as_ref()
            .unwrap()
            .endpoint
            .trim_start_matches("http://");
    let proxy = common::nginx::start(
        tmp.path(),
        &format!(
            r#"listen 127.0.0.1:__PORT__ ssl;
    ssl_certificate {dir}/rgw.crt;
    ssl_certificate_key {dir}/rgw.key;
    client_max_body_size 0;
    location / {{
      proxy_set_header Host $http_host;
      proxy_pass http://{moto};
      proxy_buffering off;
      proxy_request_buffering off;
    }}"#,
            dir = tmp.path().display()
        ),
    );
    let tls_args = |ca: bool| {
        let mut args = b.store_args();
        let endpoint = args.iter().position(|a| a == "--s3-endpoint").unwrap() + 1;
        args[endpoint] = format!("https://{}", proxy.addr);
        if ca {
            args.push("--s3-ca-file".into());
            args.push(tmp.path().join("ca.crt").display().to_string());
        }
        args
    };
    let airlock = |cmd: &[&str], ca: bool| {
        Command::new(env!("CARGO_BIN_EXE_airlock"))
            .args(cmd)
            .args(tls_args(ca))
            .envs(common::backend::AWS_ENV)
            .output()
            .unwrap()
    };

    let o = airlock(&["history"], false);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success(),
        "an untrusted certificate must be refused"
    );
    let last = stderr.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("airlock: error: ") && last.to_lowercase().contains("certificate"),
        "one line naming the certificate: {stderr}"
    );

    let (_, public) = test_key();
    let bundle = fixture_bundle(tmp.path());
    let o = airlock(
        &[
            "import",
            "--keyring",
            public.to_str().unwrap(),
            bundle.to_str().unwrap(),
        ],
        true,
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // The blob the import wrote, read back over TLS, by the digest of the
    // fixture's own bytes.
    let manifest = layout_ref_digest(&fixture_layout(), "latest");
    let o = airlock(&["history", "--json"], true);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let rows: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(rows.as_array().unwrap().len(), 1, "{rows}");
    let addr = format!("127.0.0.1:{}", free_port());
    let mut server = Command::new(env!("CARGO_BIN_EXE_airlock"))
        .arg("serve")
        .args(tls_args(true))
        .args(["--listen", &addr])
        .envs(common::backend::AWS_ENV)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while TcpStream::connect(&addr).is_err() {
        assert!(std::time::Instant::now() < deadline, "serve did not listen");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let (status, _, body) = curl(
        &addr,
        &format!("/v2/stacks/busybox/manifests/{manifest}"),
        &["-H", "Accept: application/vnd.oci.image.manifest.v1+json"],
    );
    let _ = server.kill();
    let _ = server.wait();
    assert_eq!(status, 200);
    let served = tmp.path().join("served");
    std::fs::write(&served, body).unwrap();
    assert_eq!(sha256sum(&served), manifest);
}
