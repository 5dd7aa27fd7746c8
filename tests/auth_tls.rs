//! TLS, users and roles, HTTP import and the audit trail with real clients:
//! a test CA made with `openssl`, skopeo pushing and pulling over HTTPS with
//! `--creds` and with client certificates (`--cert-dir`), curl for the
//! status codes, `openssl s_client` for the served certificate.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::ca::*;
use common::*;

/// `airlock user hash` of `password`.
fn hash(password: &str) -> String {
    use std::io::Write;
    let mut child = Command::new(env!("CARGO_BIN_EXE_airlock"))
        .args(["user", "hash"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    writeln!(child.stdin.take().unwrap(), "{password}").unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let line = String::from_utf8(out.stdout).unwrap();
    let line = line.trim();
    assert!(
        line.starts_with("password_hash = \"$argon2id$v=19$"),
        "{line}"
    );
    line.to_string()
}

/// The test site: CA, server and client certificates, keyring, config.
struct Site {
    _tmp: tempfile::TempDir,
    dir: PathBuf,
    data: PathBuf,
    port: u16,
}

fn site(extra_config: &str) -> Site {
    require_tool("openssl", "openssl");
    require_tool("curl", "curl");
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_path_buf();
    make_ca(&dir, "ca");
    make_ca(&dir, "rogue");
    issue(&dir, "ca", "server", "localhost", SERVER_EXT);
    issue(&dir, "ca", "cell1", "cell1", CLIENT_EXT);
    issue(&dir, "rogue", "evil", "cell1", CLIENT_EXT);
    let (_, public) = test_key();
    std::fs::copy(&public, dir.join("keyring.asc")).unwrap();
    let port = free_port();
    let config = format!(
        r#"# relative paths: against this file's directory
listen = "127.0.0.1:{port}"
[store]
path = "data"
[tls]
cert = "server.crt"
key = "server.key"
client_ca = "ca.crt"
[registry]
allow_push = true
allow_delete = true
[import]
keyring = "keyring.asc"
[limits]
max_upload_sessions_per_user = 2
[[user]]
name = "ops"
{ops}
roles = ["admin"]
[[user]]
name = "rd"
{rd}
roles = ["reader"]
[[user]]
name = "cell1"
roles = ["cell"]
[[user]]
name = "stk"
{ops}
roles = ["admin"]
repositories = ["stacks/"]
{extra_config}"#,
        ops = hash("ops-pw"),
        rd = hash("rd-pw"),
    );
    std::fs::write(dir.join("airlock.toml"), config).unwrap();
    let data = dir.join("data");
    Site {
        _tmp: tmp,
        dir,
        data,
        port,
    }
}

/// `airlock serve --config` as a child process, killed on drop.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Site {
    fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    fn start(&self) -> Running {
        let child = Command::new(env!("CARGO_BIN_EXE_airlock"))
            .args(["--log", "info", "--log-format", "json", "serve", "--config"])
            .arg(self.dir.join("airlock.toml"))
            .stderr(std::fs::File::create(self.dir.join("serve.log")).unwrap())
            .spawn()
            .unwrap();
        let running = Running(child);
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if self.curl(&["/healthz"]).0 == 200 {
                return running;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("airlock serve did not answer on https://{}", self.addr());
    }

    /// curl over HTTPS trusting the test CA: (status or 0 when the
    /// connection failed, headers lower-cased, body).
    fn curl(&self, args: &[&str]) -> (u16, String, String) {
        let (path, rest) = args.split_first().unwrap();
        let headers = self.dir.join("curl.headers");
        let o = Command::new("curl")
            .args(["-sS", "--cacert"])
            .arg(self.dir.join("ca.crt"))
            .arg("-D")
            .arg(&headers)
            .args(["-o", "-", "-w", "\n%{http_code}"])
            .args(rest)
            .arg(format!("https://{}{path}", self.addr()))
            .current_dir(&self.dir)
            .output()
            .unwrap();
        let out = String::from_utf8_lossy(&o.stdout).into_owned();
        let (body, code) = out.rsplit_once('\n').unwrap_or(("", "0"));
        let heads = std::fs::read_to_string(&headers)
            .unwrap_or_default()
            .to_ascii_lowercase();
        let _ = std::fs::remove_file(&headers);
        let code = code.trim().parse().unwrap_or(0);
        if code == 0 {
            // No answer: the body says why (curl's error).
            return (0, heads, String::from_utf8_lossy(&o.stderr).into_owned());
        }
        (code, heads, body.to_string())
    }

    /// A directory for skopeo's `--cert-dir`: the CA, and a client
    /// certificate pair when `client` names one.
    fn cert_dir(&self, name: &str, client: Option<&str>) -> PathBuf {
        let d = self.dir.join(name);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::copy(self.dir.join("ca.crt"), d.join("ca.crt")).unwrap();
        if let Some(c) = client {
            std::fs::copy(self.dir.join(format!("{c}.crt")), d.join("client.cert")).unwrap();
            std::fs::copy(self.dir.join(format!("{c}.key")), d.join("client.key")).unwrap();
        }
        d
    }

    fn history(&self) -> Vec<serde_json::Value> {
        let out = airlock_ok(&["history", "--json", "--data", self.data.to_str().unwrap()]);
        serde_json::from_str(&out).unwrap()
    }
}

fn skopeo_status(args: &[&str]) -> (bool, String) {
    let o = Command::new("skopeo").args(args).output().unwrap();
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

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
    skopeo(&[
        "copy",
        "--dest-creds",
        "ops:ops-pw",
        "--dest-cert-dir",
        certs.to_str().unwrap(),
        &src,
        &dest,
    ]);
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
    // Per-user upload sessions: two open, the third 429.
    for _ in 0..2 {
        assert_eq!(
            site.curl(&[
                "/v2/stacks/s/blobs/uploads/",
                "-X",
                "POST",
                "-u",
                "stk:ops-pw"
            ])
            .0,
            202
        );
    }
    let (code, _, body) = site.curl(&[
        "/v2/stacks/s/blobs/uploads/",
        "-X",
        "POST",
        "-u",
        "stk:ops-pw",
    ]);
    assert_eq!(code, 429, "{body}");

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
