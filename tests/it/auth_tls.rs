//! TLS, users and roles, HTTP import and the audit trail with real clients:
//! a test CA made with `openssl`, skopeo pushing and pulling over HTTPS with
//! `--creds` and with client certificates (`--cert-dir`), curl for the
//! status codes, `openssl s_client` for the served certificate.
//!
//! Filesystem only: what these check (TLS, roles, the audit fields) is
//! decided before the store; the pushes, pulls and imports they drive run
//! on S3 in push_clients, e2e_skopeo and bundle_import, and a TLS site
//! whose config names an S3 store in auth_users.

use crate::common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::site::*;
use common::*;

#[test]
fn roles_over_tls_with_skopeo_curl_and_client_certificates() {
    require_tool("skopeo", "skopeo");
    let site = site("[auth]\nmax_failures = 5\n");
    let _server = site.start();
    let addr = site.addr();
    let layout = fixture_layout();
    let want = layout_ref_digest(&layout, "latest");
    let src = format!("oci:{}:latest", layout.display());

    // No credentials: 401 with the Basic challenge, for reads and pushes.
    let (code, heads, body) = site.curl(&["/v2/"]);
    assert_eq!(code, 401, "{body}");
    assert!(
        heads.contains("www-authenticate: basic realm=\"airlock\""),
        "{heads}"
    );
    assert!(body.contains("UNAUTHORIZED"), "{body}");
    let (code, heads, _) = site.curl(&["/v2/stacks/bb/blobs/uploads/", "-X", "POST"]);
    assert_eq!(code, 401);
    assert!(heads.contains("www-authenticate: basic realm=\"airlock\""));
    // A wrong password: 401.
    assert_eq!(site.curl(&["/v2/", "-u", "ops:nope"]).0, 401);
    // The reader may read but not push: 403 DENIED.
    assert_eq!(site.curl(&["/v2/", "-u", "rd:rd-pw"]).0, 200);
    let (code, _, body) = site.curl(&[
        "/v2/stacks/bb/blobs/uploads/",
        "-X",
        "POST",
        "-u",
        "rd:rd-pw",
    ]);
    assert_eq!(code, 403);
    assert!(body.contains("DENIED"), "{body}");

    // skopeo pushes over TLS as the admin, and the reader pulls it back.
    let certs = site.cert_dir("certs", None);
    let dest = format!("docker://{addr}/stacks/bb:v1");
    site.push(&src, "stacks/bb:v1");
    let pulled = site.dir.join("pulled");
    skopeo(&[
        "copy",
        "--src-creds",
        "rd:rd-pw",
        "--src-cert-dir",
        certs.to_str().unwrap(),
        &dest,
        &format!("oci:{}:v1", pulled.display()),
    ]);
    assert_eq!(layout_ref_digest(&pulled, "v1"), want);
    // Without credentials skopeo is refused.
    let (ok, err) = skopeo_status(&[
        "inspect",
        "--raw",
        "--cert-dir",
        certs.to_str().unwrap(),
        &dest,
    ]);
    let lower = err.to_lowercase();
    assert!(!ok, "an anonymous pull was served");
    assert!(
        lower.contains("401")
            || lower.contains("unauthorized")
            || lower.contains("authentication required"),
        "{err}"
    );

    // mTLS: the cell's certificate (CN cell1) pulls; it may not push.
    let cell = site.cert_dir("cell", Some("cell1"));
    let manifest = skopeo(&[
        "inspect",
        "--raw",
        "--cert-dir",
        cell.to_str().unwrap(),
        &dest,
    ]);
    assert!(!manifest.is_empty());
    let (ok, err) = skopeo_status(&[
        "copy",
        "--dest-cert-dir",
        cell.to_str().unwrap(),
        &src,
        &format!("docker://{addr}/stacks/cell:v1"),
    ]);
    assert!(!ok, "a cell pushed");
    assert!(
        err.contains("403") || err.to_lowercase().contains("denied"),
        "{err}"
    );
    // A certificate of another CA with the same CN fails the handshake.
    let (code, _, _) = site.curl(&["/v2/", "--cert", "evil.crt", "--key", "evil.key"]);
    assert_eq!(
        code, 0,
        "a client certificate of an unknown CA was accepted"
    );
    let (code, _, _) = site.curl(&["/v2/", "--cert", "cell1.crt", "--key", "cell1.key"]);
    assert_eq!(code, 200);

    // Prefix limits: stk is admin of stacks/ only.
    assert_eq!(
        site.curl(&[
            "/v2/other/x/blobs/uploads/",
            "-X",
            "POST",
            "-u",
            "stk:ops-pw"
        ])
        .0,
        403
    );
    // Per-user upload sessions (a cap of two): idle ones make room, the
    // least recently active first.
    let mut locations = Vec::new();
    for _ in 0..3 {
        let (code, heads, body) = site.curl(&[
            "/v2/stacks/s/blobs/uploads/",
            "-X",
            "POST",
            "-u",
            "stk:ops-pw",
        ]);
        assert_eq!(code, 202, "{body}");
        let loc = heads
            .lines()
            .find_map(|l| l.strip_prefix("location:"))
            .unwrap()
            .trim()
            .to_string();
        locations.push(loc);
    }
    let (code, _, body) = site.curl(&[&locations[0], "-u", "stk:ops-pw"]);
    assert_eq!(code, 404, "{body}");
    assert!(body.contains("BLOB_UPLOAD_UNKNOWN"), "{body}");
    for loc in &locations[1..] {
        assert_eq!(site.curl(&[loc, "-u", "stk:ops-pw"]).0, 204);
    }

    // Delete by the admin; import over HTTPS by the admin (the reader: 403).
    let (code, _, body) = site.curl(&[
        "/v2/stacks/bb/manifests/v1",
        "-X",
        "DELETE",
        "-u",
        "ops:ops-pw",
    ]);
    assert_eq!(code, 202, "{body}");
    let config = write_config(
        &site.dir,
        &layout,
        &[("latest", "stacks/imported", &["1.0"])],
    );
    let bundle = site.dir.join("b.tar");
    create_bundle(&config, &bundle, &[]);
    let post = [
        "-X",
        "POST",
        "-H",
        "Content-Type: application/x-tar",
        "--data-binary",
        "@b.tar",
    ];
    // HTTP/1.1 with `Expect: 100-continue`: the refusal comes before the
    // body is sent (curl's HTTP/2 reports the server's early answer and
    // RST_STREAM(NO_ERROR) as a framing error).
    let mut as_reader = vec![
        "/admin/v1/imports",
        "-u",
        "rd:rd-pw",
        "--http1.1",
        "-H",
        "Expect: 100-continue",
    ];
    as_reader.extend(post);
    let (code, _, body) = site.curl(&as_reader);
    assert_eq!(code, 403, "{body}");
    let mut as_admin = vec!["/admin/v1/imports", "-u", "ops:ops-pw"];
    as_admin.extend(post);
    let (code, _, body) = site.curl(&as_admin);
    assert_eq!(code, 200, "{body}");
    let report: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(report["images"], 1);
    let imported = skopeo(&[
        "inspect",
        "--raw",
        "--creds",
        "rd:rd-pw",
        "--cert-dir",
        certs.to_str().unwrap(),
        &format!("docker://{addr}/stacks/imported:1.0"),
    ]);
    assert_eq!(
        format!("sha256:{}", sha256_hex(&imported)),
        want,
        "the imported manifest is not the layout's"
    );

    // The audit trail names the user and the address of each change.
    let history = site.history();
    let find = |prefix: &str| {
        history
            .iter()
            .find(|g| g["reason"].as_str().unwrap().starts_with(prefix))
            .unwrap_or_else(|| panic!("no generation {prefix}: {history:#?}"))
            .clone()
    };
    for reason in [
        "push manifest stacks/bb:v1",
        "delete tag stacks/bb:v1",
        "import bundle",
    ] {
        let g = find(reason);
        assert_eq!(g["who"], "ops", "{g}");
        assert!(
            g["address"].as_str().unwrap().starts_with("127.0.0.1:"),
            "{g}"
        );
    }
    assert_eq!(history[0]["generation"], history.len() as u64);
    // ... and the log has each change with who and where.
    let log = std::fs::read_to_string(site.dir.join("serve.log")).unwrap();
    let swaps: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("state root swapped"))
        .collect();
    assert!(
        swaps
            .iter()
            .any(|l| l.contains("\"who\":\"ops\"") && l.contains("\"address\":\"127.0.0.1:")),
        "{swaps:#?}"
    );

    // Failed logins: after 5 failures from one address (one above and 4
    // for stk here), 429 with Retry-After,
    // even with the right password.
    for _ in 0..4 {
        assert_eq!(site.curl(&["/v2/", "-u", "stk:wrong"]).0, 401);
    }
    let (code, heads, _) = site.curl(&["/v2/", "-u", "stk:ops-pw"]);
    assert_eq!(code, 429);
    assert!(heads.contains("retry-after:"), "{heads}");
    // ... but not from another address: failures in a user's name lock out
    // that (user, address) and that address, never the user elsewhere.
    let (code, _, body) = site.curl(&["/v2/", "-u", "stk:ops-pw", "--interface", "127.0.0.2"]);
    assert_eq!(code, 200, "{body}");
    let (code, _, _) = site.curl(&["/v2/", "-u", "stk:ops-pw", "--interface", "127.0.0.3"]);
    assert_eq!(code, 200);
}

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest as _;
    hex::encode(sha2::Sha256::digest(bytes))
}

/// SHA-256 fingerprint of the certificate the server sends on a new connection.
fn served_fingerprint(site: &Site) -> String {
    let o = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "openssl s_client -connect {} -servername localhost </dev/null 2>/dev/null | openssl x509 -noout -fingerprint -sha256",
            site.addr()
        ))
        .output()
        .unwrap();
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

fn file_fingerprint(path: &Path) -> String {
    let o = Command::new("openssl")
        .args(["x509", "-noout", "-fingerprint", "-sha256", "-in"])
        .arg(path)
        .output()
        .unwrap();
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

#[test]
fn sighup_reloads_the_certificate_for_new_connections() {
    let site = site("");
    let server = site.start();
    let old = file_fingerprint(&site.dir.join("server.crt"));
    assert!(old.contains("Fingerprint="), "{old}");
    assert_eq!(served_fingerprint(&site), old);
    // A keep-alive connection opened before the reload stays usable.
    issue(&site.dir, "ca", "server2", "localhost", SERVER_EXT);
    std::fs::rename(site.dir.join("server2.crt"), site.dir.join("server.crt")).unwrap();
    std::fs::rename(site.dir.join("server2.key"), site.dir.join("server.key")).unwrap();
    let new = file_fingerprint(&site.dir.join("server.crt"));
    assert_ne!(new, old);
    // Before SIGHUP the old certificate is still served.
    assert_eq!(served_fingerprint(&site), old);
    run_ok(Command::new("kill").args(["-HUP", &server.0.id().to_string()]));
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let now = served_fingerprint(&site);
        if now == new {
            break;
        }
        assert!(Instant::now() < deadline, "still serving {now}, want {new}");
        std::thread::sleep(Duration::from_millis(100));
    }
    // The server is still up and answers with the new certificate.
    assert_eq!(site.curl(&["/healthz"]).0, 200);
}

/// The protocol version and cipher suite `openssl s_client` (with `args`)
/// negotiates with `site`, from its "New, TLSv1.3, Cipher is ..." line.
fn negotiated(site: &Site, args: &str) -> String {
    let o = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "openssl s_client -connect {} -servername localhost {args} </dev/null 2>/dev/null",
            site.addr()
        ))
        .output()
        .expect("openssl not found: apt-get install openssl");
    let out = String::from_utf8_lossy(&o.stdout);
    out.lines()
        .find(|l| l.starts_with("New, "))
        .unwrap_or_default()
        .to_string()
}

#[test]
fn server_order_prefers_aes_128_gcm() {
    let site = site("");
    let _server = site.start();
    // OpenSSL offers AES-256-GCM first (TLS 1.3 and 1.2); the server's order wins.
    assert_eq!(
        negotiated(&site, "-tls1_3"),
        "New, TLSv1.3, Cipher is TLS_AES_128_GCM_SHA256"
    );
    let v12 = negotiated(&site, "-tls1_2");
    assert!(
        v12.starts_with("New, TLSv1.2, Cipher is ECDHE-") && v12.ends_with("-AES128-GCM-SHA256"),
        "{v12}"
    );
    // A client that offers only AES-256-GCM or only ChaCha20 still gets it.
    assert_eq!(
        negotiated(&site, "-tls1_3 -ciphersuites TLS_AES_256_GCM_SHA384"),
        "New, TLSv1.3, Cipher is TLS_AES_256_GCM_SHA384"
    );
    assert_eq!(
        negotiated(&site, "-tls1_3 -ciphersuites TLS_CHACHA20_POLY1305_SHA256"),
        "New, TLSv1.3, Cipher is TLS_CHACHA20_POLY1305_SHA256"
    );
    // TLS 1.1 and older are refused.
    assert_eq!(
        negotiated(&site, "-tls1_1"),
        "New, (NONE), Cipher is (NONE)"
    );
}

fn check(site: &Site, config: &str) -> (bool, String) {
    let path = site.dir.join("check.toml");
    std::fs::write(&path, config).unwrap();
    let o = airlock(&[
        "serve",
        "--config",
        path.to_str().unwrap(),
        "--check-config",
    ]);
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(err.lines().count() <= 1, "more than one line: {err}");
    (o.status.success(), err)
}

#[test]
fn check_config_accepts_good_files_and_names_bad_keys() {
    let site = site("");
    let good = std::fs::read_to_string(site.dir.join("airlock.toml")).unwrap();
    assert!(check(&site, &good).0);
    let (ok, err) = check(&site, &good.replace("client_ca = ", "client_cas = "));
    assert!(!ok);
    assert!(err.contains("tls.client_cas"), "{err}");
    let (ok, err) = check(&site, &format!("{good}\n[limits.deep]\nx = 1\n"));
    assert!(!ok);
    assert!(err.contains("limits.deep"), "{err}");
    let (ok, err) = check(
        &site,
        &good.replace("roles = [\"reader\"]", "roles = [\"root\"]"),
    );
    assert!(!ok);
    assert!(err.contains("user[1].roles"), "{err}");
    let (ok, err) = check(&site, "listen = \"0.0.0.0:5000\"\n");
    assert!(!ok);
    assert!(err.contains("not a loopback address"), "{err}");
    assert!(check(&site, "listen = \"0.0.0.0:5000\"\nplain_http = true\n").0);
    let (ok, err) = check(&site, &good.replace("server.key", "missing.key"));
    assert!(!ok);
    assert!(err.contains("missing.key"), "{err}");
    // The example config of the repository is valid once its files exist.
    let example = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("mirror-config/airlock.toml"),
    )
    .unwrap();
    let parsed = airlock::config::parse(&example, "mirror-config/airlock.toml").unwrap();
    assert_eq!(parsed.users.len(), 3);
    // Flags override the file: a bad file value fixed on the command line.
    let path = site.dir.join("check.toml");
    std::fs::write(&path, "listen = \"0.0.0.0:5000\"\n").unwrap();
    let o = airlock(&[
        "serve",
        "--config",
        path.to_str().unwrap(),
        "--listen",
        "127.0.0.1:5000",
        "--check-config",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

#[test]
fn plain_http_is_refused_on_a_public_address() {
    let dir = tempfile::tempdir().unwrap();
    let o = airlock(&[
        "serve",
        "--data",
        dir.path().to_str().unwrap(),
        "--listen",
        "0.0.0.0:0",
    ]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("plain_http = true"), "{err}");
}
