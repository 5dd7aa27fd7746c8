//! `bundle create` from registries (`docker://`) with real components on
//! loopback: the source registry is `airlock serve --allow-push` or Debian's
//! `docker-registry`, filled by skopeo from the busybox fixture; TLS with a CA
//! made by `openssl` and nginx in front (HTTP Basic, or a bearer challenge
//! whose token comes from a few lines of Python). Every expected digest is
//! computed independently: `sha256sum` of what skopeo pulls and of the bytes
//! `skopeo inspect --raw` prints, never airlock's own figures.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};
use std::time::{Duration, Instant};

use common::backend::{Backend, on_backends};
use common::ca::{SERVER_EXT, issue, make_ca};
use common::*;

/// skopeo pushes `oci:<fixture>:<r>` to `docker://<addr>/<dest>` over plain HTTP.
fn push_fixture(addr: &str, r: &str, dest: &str, all: bool) {
    let layout = fixture_layout();
    let src = format!("oci:{}:{r}", layout.display());
    let dst = format!("docker://{addr}/{dest}");
    let mut args = vec!["copy", "--dest-tls-verify=false"];
    if all {
        args.push("--all");
    }
    args.extend([src.as_str(), dst.as_str()]);
    skopeo(&args);
}

/// The source registry: `airlock serve --allow-push` under `dir` with the
/// fixture's `r` pushed as `dest` by skopeo (`--all` when `all`):
/// (server, the manifest bytes `skopeo inspect --raw` reads back, their
/// sha256 by `sha256sum`).
fn source_registry(dir: &Path, r: &str, dest: &str, all: bool) -> (Server, Vec<u8>, String) {
    fill_source(
        serve(&dir.join("src-data"), &["--allow-push"]),
        dir,
        r,
        dest,
        all,
    )
}

/// [`source_registry`] on the running `src` (scratch files under `dir`).
fn fill_source(
    src: Server,
    dir: &Path,
    r: &str,
    dest: &str,
    all: bool,
) -> (Server, Vec<u8>, String) {
    push_fixture(&src.addr, r, dest, all);
    let raw = raw_manifest(&src.addr, dest);
    let digest = sha256_bytes(dir, &raw);
    (src, raw, digest)
}

/// sha256 of bytes via coreutils `sha256sum` (independent of airlock's hashing).
fn sha256_bytes(dir: &Path, bytes: &[u8]) -> String {
    let p = dir.join("raw.bin");
    std::fs::write(&p, bytes).unwrap();
    sha256sum(&p)
}

/// Runs `bundle create` with extra environment; returns the process output.
fn create_env(config: &Path, out: &Path, extra: &[&str], env: &[(&str, &Path)]) -> Output {
    let (sec, _) = test_key();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_airlock"));
    cmd.args(["bundle", "create", "--config"])
        .arg(config)
        .arg("--sign-key")
        .arg(&sec)
        .arg("-o")
        .arg(out)
        .args(extra)
        .env_remove("REGISTRY_AUTH_FILE")
        .env_remove("DOCKER_CONFIG")
        .env_remove("XDG_RUNTIME_DIR");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run airlock")
}

/// `bundle create --json`, asserting success; the parsed summary.
fn create_json(
    config: &Path,
    out: &Path,
    cache: &Path,
    env: &[(&str, &Path)],
) -> serde_json::Value {
    let o = create_env(
        config,
        out,
        &["--json", "--cache", cache.to_str().unwrap()],
        env,
    );
    assert!(
        o.status.success(),
        "bundle create failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).expect("--json prints JSON")
}

/// Checks every blob file of an OCI layout hashes to its name (`sha256sum`).
fn assert_layout_blobs_hash(layout: &Path) {
    let mut n = 0;
    for e in std::fs::read_dir(layout.join("blobs/sha256")).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_str().unwrap().to_string();
        assert_eq!(sha256sum(&p), format!("sha256:{name}"));
        n += 1;
    }
    assert!(
        n >= 3,
        "expected manifest, config and layers in {}",
        layout.display()
    );
}

/// Imports `bundle` into a fresh store under `dir`, serves it and pulls
/// `mirror/busybox:1.0` back with skopeo: the pulled manifest is `want`
/// and every blob hashes to its name. Returns the server.
fn assert_pulls_back(dir: &Path, bundle: &Path, want: &str) -> Server {
    let (_, public) = test_key();
    let data = dir.join("dst");
    import_bundle(&data, &public, bundle);
    let dst = serve(&data, &[]);
    let pulled = dir.join("pulled");
    skopeo(&[
        "copy",
        "--src-tls-verify=false",
        &format!("docker://{}/mirror/busybox:1.0", dst.addr),
        &format!("oci:{}:x", pulled.display()),
    ]);
    assert_eq!(layout_ref_digest(&pulled, "x"), want);
    assert_layout_blobs_hash(&pulled);
    dst
}

// The source registry (skopeo's and oras's pushes) and the destination
// (import, pulls, referrers) on each kind of blobstore: one S3 server each
// (they are covered on both by the push, pull and import suites; here the
// point is the round trip). `bundle create`'s own work (cache, auth, TLS,
// retries, selection) does not touch a store: filesystem only.
on_backends!([fs, s3s_fs] plain_http_tag_and_digest_sources_round_trip);
on_backends!([fs, moto] referrers_come_along_by_api_and_by_tag_schema);

fn plain_http_tag_and_digest_sources_round_trip(b: Backend) {
    require_tool("skopeo", "skopeo");
    let tmp = tempfile::tempdir().unwrap();
    let src = b.serve(&["--allow-push"]);
    push_fixture(&src.addr, "latest", "src/busybox:1.0", false);
    push_fixture(&src.addr, "multi", "src/multi:v1", true);
    let raw_single = raw_manifest(&src.addr, "src/busybox:1.0");
    let want_single = sha256_bytes(tmp.path(), &raw_single);
    let raw_multi = raw_manifest(&src.addr, "src/multi:v1");
    let want_multi = sha256_bytes(tmp.path(), &raw_multi);

    let a = &src.addr;
    let config = mirror_config(
        &tmp.path().join("mirror.toml"),
        &[a],
        &[
            image_toml(
                &format!("docker://{a}/src/busybox:1.0"),
                "mirror/busybox",
                &["1.0"],
                "",
            ),
            image_toml(
                &format!("docker://{a}/src/multi@{want_multi}"),
                "mirror/multi",
                &["v1"],
                "",
            ),
        ],
    );
    let cache = tmp.path().join("cache");
    let bundle = tmp.path().join("b.tar");
    let summary = create_json(&config, &bundle, &cache, &[]);
    assert_eq!(summary["images"][0]["digest"], want_single.as_str());
    assert_eq!(summary["images"][1]["digest"], want_multi.as_str());
    assert_eq!(
        summary["images"][1]["mediaType"],
        "application/vnd.oci.image.index.v1+json"
    );
    let first_bytes = summary["registry"]["bytes_downloaded"].as_u64().unwrap();
    assert!(first_bytes > 100_000, "{summary}");

    // Import into a fresh store and pull back with skopeo.
    let (_, public) = test_key();
    let dst_store = Backend::start(b.kind);
    dst_store.import(&public, &bundle);
    let dst = dst_store.serve(&[]);
    let back = raw_manifest(&dst.addr, "mirror/busybox:1.0");
    assert_eq!(back, raw_single, "manifest bytes changed on the way");
    let back_multi = raw_manifest(&dst.addr, "mirror/multi:v1");
    assert_eq!(sha256_bytes(tmp.path(), &back_multi), want_multi);
    let pulled = tmp.path().join("pulled");
    skopeo(&[
        "copy",
        "--all",
        "--src-tls-verify=false",
        &format!("docker://{}/mirror/multi:v1", dst.addr),
        &format!("oci:{}:multi", pulled.display()),
    ]);
    skopeo(&[
        "copy",
        "--src-tls-verify=false",
        &format!("docker://{}/mirror/busybox:1.0", dst.addr),
        &format!("oci:{}:single", pulled.display()),
    ]);
    assert_eq!(layout_ref_digest(&pulled, "multi"), want_multi);
    assert_eq!(layout_ref_digest(&pulled, "single"), want_single);
    assert_layout_blobs_hash(&pulled);

    // A second run finds every blob in the cache: only the root manifests move.
    let again = create_json(&config, &tmp.path().join("b2.tar"), &cache, &[]);
    let bytes = again["registry"]["bytes_downloaded"].as_u64().unwrap();
    assert_eq!(
        bytes,
        (raw_single.len() + raw_multi.len()) as u64,
        "second run downloaded more than the two root manifests: {again}"
    );
    assert!(
        again["registry"]["cache_hits"].as_u64().unwrap() >= 5,
        "{again}"
    );
    assert_eq!(again["images"], summary["images"]);
}

#[test]
fn bad_sources_fail_cleanly_and_leave_no_output() {
    let tmp = tempfile::tempdir().unwrap();
    let src = serve(&tmp.path().join("src-data"), &["--allow-push"]);
    let cases = [
        (format!("docker://{}/nothing/here:1", src.addr), "not found"),
        ("docker://127.0.0.1:1/a/b:1".to_string(), "127.0.0.1:1"),
        ("docker://host/UPPER:1".to_string(), "invalid"),
    ];
    for (source, want) in cases {
        assert_create_fails(
            tmp.path(),
            &src.addr,
            image_toml(&source, "x/y", &["1"], ""),
            want,
        );
    }
}

/// `bundle create` of `image` (from the plain-HTTP registry `host`) fails
/// naming `want`, without a panic and leaving no output.
fn assert_create_fails(dir: &Path, host: &str, image: String, want: &str) {
    let config = mirror_config(&dir.join("bad.toml"), &[host], std::slice::from_ref(&image));
    let out = dir.join("bad.tar");
    let cache = dir.join("cache");
    let o = create_env(&config, &out, &["--cache", cache.to_str().unwrap()], &[]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{image}: succeeded");
    assert!(err.contains(want), "{image}: {err}");
    assert!(!err.contains("panicked"), "{image}: {err}");
    assert!(!out.exists(), "{image}: partial output left");
}

/// A child process killed on drop.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A test CA and a server certificate for 127.0.0.1 and localhost
/// ([`common::ca`]): (ca.crt, srv.crt, srv.key).
fn make_certs(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    make_ca(dir, "ca");
    issue(dir, "ca", "srv", "127.0.0.1", SERVER_EXT);
    let p = |n: &str| dir.join(n);
    (p("ca.crt"), p("srv.crt"), p("srv.key"))
}

/// Waits until `GET /v2/` on plain HTTP `addr` answers.
fn wait_http(addr: &str, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if http(addr, "GET", "/v2/", &[]).is_ok() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("{what} did not answer on {addr}");
}

/// Debian's `docker-registry` (CNCF distribution) on plain HTTP loopback, no auth.
fn docker_registry(dir: &Path) -> (Proc, String) {
    require_tool("docker-registry", "docker-registry");
    let addr = format!("127.0.0.1:{}", free_port());
    let cfg = dir.join("registry.yml");
    std::fs::write(
        &cfg,
        format!(
            "version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: {}\nhttp:\n  addr: {addr}\n",
            dir.join("registry-data").display()
        ),
    )
    .unwrap();
    let child = Command::new("docker-registry")
        .arg("serve")
        .arg(&cfg)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let p = Proc(child);
    wait_http(&addr, "docker-registry");
    (p, addr)
}

/// nginx on TLS (`cert`, `key`) in front of `upstream`, with `v2_rules` in
/// `location /v2/` (`__ADDR__` there becomes nginx's own address) and
/// `/token` proxied to `token` when given.
fn nginx(
    dir: &Path,
    upstream: &str,
    cert: &Path,
    key: &Path,
    v2_rules: &str,
    token: Option<&str>,
) -> (common::nginx::Nginx, String) {
    let v2_rules = v2_rules.replace("__ADDR__", "127.0.0.1:__PORT__");
    let token_loc = token
        .map(|t| format!("location = /token {{ proxy_pass http://{t}; }}"))
        .unwrap_or_default();
    let n = common::nginx::start(
        dir,
        &format!(
            r#"listen 127.0.0.1:__PORT__ ssl;
    ssl_certificate {cert};
    ssl_certificate_key {key};
    client_max_body_size 0;
    {token_loc}
    location /v2/ {{
      {v2_rules}
      proxy_pass http://{upstream};
      proxy_set_header Host $http_host;
      proxy_buffering off;
    }}"#,
            cert = cert.display(),
            key = key.display(),
        ),
    );
    let addr = n.addr.clone();
    (n, addr)
}

fn b64(s: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(s)
}

/// A containers/docker credentials file with one `auths` entry.
fn auth_file(path: &Path, host: &str, user: &str, password: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(
        path,
        format!(
            r#"{{"auths":{{"{host}":{{"auth":"{}"}}}}}}"#,
            b64(&format!("{user}:{password}"))
        ),
    )
    .unwrap();
}

/// The mirror config for `docker://<addr>/src/busybox:1.0`, with `registry` tables.
fn tls_config(dir: &Path, addr: &str, registry: &str) -> PathBuf {
    let config = dir.join("mirror.toml");
    std::fs::write(
        &config,
        format!(
            "{registry}\n[[image]]\nsource = \"docker://{addr}/src/busybox:1.0\"\nrepository = \"mirror/busybox\"\ntags = [\"1.0\"]\n"
        ),
    )
    .unwrap();
    config
}

#[test]
fn tls_with_a_site_ca_and_basic_auth_from_registry_auth_file() {
    require_tool("skopeo", "skopeo");
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let (ca, cert, key) = make_certs(tmp.path());
    let (_reg, reg_addr) = docker_registry(tmp.path());
    push_fixture(&reg_addr, "latest", "src/busybox:1.0", false);
    let raw = raw_manifest(&reg_addr, "src/busybox:1.0");
    let want = sha256_bytes(tmp.path(), &raw);
    let o = Command::new("openssl")
        .args(["passwd", "-apr1", "s3cret pass"])
        .output()
        .unwrap();
    assert!(o.status.success());
    let htpasswd = tmp.path().join("htpasswd");
    std::fs::write(
        &htpasswd,
        format!("mirror:{}", String::from_utf8_lossy(&o.stdout)),
    )
    .unwrap();
    let rules = format!(
        "auth_basic \"registry\"; auth_basic_user_file {};",
        htpasswd.display()
    );
    let (_nginx, addr) = nginx(tmp.path(), &reg_addr, &cert, &key, &rules, None);
    let cache = tmp.path().join("cache");
    let out = tmp.path().join("b.tar");
    let good = tmp.path().join("auth.json");
    auth_file(&good, &addr, "mirror", "s3cret pass");

    // Without the site CA the certificate is refused, at once and cleanly.
    let config = tls_config(tmp.path(), &addr, "");
    let o = create_env(
        &config,
        &out,
        &["--cache", cache.to_str().unwrap()],
        &[("REGISTRY_AUTH_FILE", &good), ("HOME", &home)],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("certificate"), "{err}");
    assert!(!out.exists());

    // With the CA (relative to the config file) but no credentials: unauthorized, naming where it looked.
    let config = tls_config(
        tmp.path(),
        &addr,
        &format!("[[registry]]\nhost = \"{addr}\"\nca_file = \"ca.crt\"\n"),
    );
    assert!(tmp.path().join("ca.crt") == ca);
    let o = create_env(
        &config,
        &out,
        &["--cache", cache.to_str().unwrap()],
        &[("HOME", &home)],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("password") && err.contains("auth.json"),
        "{err}"
    );
    assert!(!out.exists());

    // $REGISTRY_AUTH_FILE comes before docker's config.json (which holds a wrong password).
    let docker_cfg = tmp.path().join("docker");
    auth_file(&docker_cfg.join("config.json"), &addr, "mirror", "wrong");
    let summary = create_json(
        &config,
        &out,
        &cache,
        &[
            ("REGISTRY_AUTH_FILE", &good),
            ("DOCKER_CONFIG", &docker_cfg),
            ("HOME", &home),
        ],
    );
    assert_eq!(summary["images"][0]["digest"], want.as_str());
    // Alone, the wrong docker password is refused.
    let o = create_env(
        &config,
        &tmp.path().join("c.tar"),
        &["--cache", tmp.path().join("cache2").to_str().unwrap()],
        &[("DOCKER_CONFIG", &docker_cfg), ("HOME", &home)],
    );
    assert!(!o.status.success(), "wrong password accepted");

    let dst = assert_pulls_back(tmp.path(), &out, &want);
    assert_eq!(raw_manifest(&dst.addr, "mirror/busybox:1.0"), raw);
}

/// A token server (Python): answers `GET /token` with `{"token": TOKEN}` when
/// the Basic credentials are `user:pw` and the scope asks to pull
/// `src/busybox`; logs each query to `log`.
fn token_server(dir: &Path, token: &str) -> (Proc, String, PathBuf) {
    require_tool("python3", "python3");
    let port = free_port();
    let log = dir.join("token.log");
    let script = format!(
        r#"
import base64, http.server, json, urllib.parse
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        q = urllib.parse.urlparse(self.path)
        args = urllib.parse.parse_qs(q.query)
        with open({log:?}, "a") as f:
            f.write(q.query + "\n")
        want = "Basic " + base64.b64encode(b"user:pw").decode()
        ok = (q.path == "/token" and self.headers.get("Authorization") == want
              and args.get("scope") == ["repository:src/busybox:pull"]
              and args.get("service") == ["test-registry"])
        body = json.dumps({{"token": {token:?}}} if ok else {{"errors": ["denied"]}}).encode()
        self.send_response(200 if ok else 401)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
http.server.HTTPServer(("127.0.0.1", {port}), H).serve_forever()
"#,
        log = log.display().to_string(),
    );
    let child = Command::new("python3")
        .arg("-c")
        .arg(script)
        .spawn()
        .unwrap();
    let addr = format!("127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(&addr).is_err() {
        assert!(Instant::now() < deadline, "token server did not listen");
        std::thread::sleep(Duration::from_millis(50));
    }
    (Proc(child), addr, log)
}

#[test]
fn bearer_token_flow_with_docker_config_json() {
    require_tool("skopeo", "skopeo");
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let (_ca, cert, key) = make_certs(tmp.path());
    let (_reg, reg_addr) = docker_registry(tmp.path());
    push_fixture(&reg_addr, "latest", "src/busybox:1.0", false);
    let raw = raw_manifest(&reg_addr, "src/busybox:1.0");
    let want = sha256_bytes(tmp.path(), &raw);
    let token = format!("tok-{}", std::process::id());
    let (_tok, tok_addr, log) = token_server(tmp.path(), &token);
    // nginx issues the bearer challenge and admits only the token; the realm is nginx's own /token.
    let rules = format!(
        "if ($http_authorization != \"Bearer {token}\") {{ add_header WWW-Authenticate 'Bearer realm=\"https://__ADDR__/token\",service=\"test-registry\",scope=\"repository:src/busybox:pull\"' always; return 401; }}"
    );
    let (_nginx, addr) = nginx(tmp.path(), &reg_addr, &cert, &key, &rules, Some(&tok_addr));
    // docker's config.json under $HOME/.docker, keyed docker-style by URL.
    auth_file(
        &home.join(".docker/config.json"),
        &format!("https://{addr}/v1/"),
        "user",
        "pw",
    );
    let config = tls_config(
        tmp.path(),
        &addr,
        &format!("[[registry]]\nhost = \"{addr}\"\nca_file = \"ca.crt\"\n"),
    );
    let out = tmp.path().join("b.tar");
    let summary = create_json(&config, &out, &tmp.path().join("cache"), &[("HOME", &home)]);
    assert_eq!(summary["images"][0]["digest"], want.as_str());
    let queries = std::fs::read_to_string(&log).unwrap();
    assert!(
        queries.contains("scope=repository%3Asrc%2Fbusybox%3Apull"),
        "{queries}"
    );

    assert_pulls_back(tmp.path(), &out, &want);
}

/// A proxy (Python) in front of `upstream` that logs `path attempt range`
/// for each blob GET to the returned file. With `faults`, each blob's first
/// GET gets 503 (`Retry-After: 0`), its second gets half the body and then
/// the connection is cut; later GETs (with `Range`) pass through.
fn proxy(dir: &Path, upstream: &str, faults: bool) -> (Proc, String, PathBuf) {
    require_tool("python3", "python3");
    let port = free_port();
    let log = dir.join("proxy.log");
    let script = format!(
        r#"
import http.client, http.server, socket, threading
seen = {{}}
faults = {faults}
lock = threading.Lock()
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        n = 0
        if "/blobs/" in self.path:
            with lock:
                n = seen.get(self.path, 0)
                seen[self.path] = n + 1
                with open({log:?}, "a") as f:
                    f.write("%s %d %s\n" % (self.path, n, self.headers.get("Range")))
            if n == 0 and faults:
                self.send_response(503)
                self.send_header("Retry-After", "0")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
        c = http.client.HTTPConnection({upstream:?})
        hdrs = {{k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}}
        c.request("GET", self.path, headers=hdrs)
        r = c.getresponse()
        data = r.read()
        self.send_response(r.status)
        for k, v in r.getheaders():
            if k.lower() not in ("connection", "transfer-encoding", "keep-alive"):
                self.send_header(k, v)
        self.end_headers()
        if n == 1 and faults and r.status == 200 and len(data) > 1000:
            self.wfile.write(data[: len(data) // 2])
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        self.wfile.write(data)
    def log_message(self, *a):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", {port}), H).serve_forever()
"#,
        log = log.display().to_string(),
        faults = if faults { "True" } else { "False" },
    );
    let child = Command::new("python3")
        .arg("-c")
        .arg(script)
        .spawn()
        .unwrap();
    let addr = format!("127.0.0.1:{port}");
    wait_http(&addr, "proxy");
    (Proc(child), addr, log)
}

#[test]
fn retries_503_and_resumes_a_cut_download_with_range() {
    require_tool("skopeo", "skopeo");
    let tmp = tempfile::tempdir().unwrap();
    let (src, _, want) = source_registry(tmp.path(), "latest", "src/busybox:1.0", false);
    let (_proxy, addr, log) = proxy(tmp.path(), &src.addr, true);
    let config = tls_config(
        tmp.path(),
        &addr,
        &format!("[[registry]]\nhost = \"{addr}\"\ntls_verify = false\n"),
    );
    let out = tmp.path().join("b.tar");
    let summary = create_json(&config, &out, &tmp.path().join("cache"), &[]);
    assert_eq!(summary["images"][0]["digest"], want.as_str());
    let lines = std::fs::read_to_string(&log).unwrap();
    // Every blob was refused once, cut once; the big ones resumed from the middle.
    let resumed: Vec<&str> = lines.lines().filter(|l| l.contains(" 2 bytes=")).collect();
    assert!(
        !resumed.is_empty(),
        "no Range request after a cut:\n{lines}"
    );
    for l in &resumed {
        let from: u64 = l
            .rsplit("bytes=")
            .next()
            .unwrap()
            .trim_end_matches('-')
            .parse()
            .unwrap();
        assert!(from > 0, "{l}");
    }
    assert!(
        summary["registry"]["retries"].as_u64().unwrap() >= 2,
        "{summary}"
    );

    assert_pulls_back(tmp.path(), &out, &want);
}

/// Pushes an SBOM artifact whose `subject` is `subject` (size `size`) with
/// oras-py; returns the artifact manifest digest the registry answered.
const ORAS_PUSH: &str = r#"
import sys, oras.client, oras.oci
addr, repo, subject, size, path, tag = sys.argv[1:7]
c = oras.client.OrasClient(hostname=addr, insecure=True)
r = c.push(
    target=f"{addr}/{repo}:{tag}",
    files=[path + ":application/spdx+json"],
    manifest_config="none:application/vnd.example.sbom.v1+json",
    manifest_annotations={"org.example.kind": "sbom"},
    subject=oras.oci.Subject(mediaType="application/vnd.oci.image.manifest.v1+json", digest=subject, size=int(size)),
    disable_path_validation=True,
    quiet=True,
)
assert r.status_code == 201, r.status_code
print(r.headers["Docker-Content-Digest"])
"#;

/// A tiny client (Python, urllib) that writes what a registry without the
/// referrers API holds after a tag-schema push: an artifact manifest with a
/// `subject`, and the index tagged `sha256-<hex>` listing it. Prints the
/// artifact manifest's digest.
const TAG_SCHEMA_PUSH: &str = r#"
import hashlib, json, sys, urllib.request
addr, repo, subject, size = sys.argv[1:5]
base = f"http://{addr}/v2/{repo}"
def put_blob(data):
    d = "sha256:" + hashlib.sha256(data).hexdigest()
    loc = urllib.request.urlopen(urllib.request.Request(base + "/blobs/uploads/", method="POST")).headers["Location"]
    if loc.startswith("/"):
        loc = f"http://{addr}" + loc
    sep = "&" if "?" in loc else "?"
    urllib.request.urlopen(urllib.request.Request(loc + sep + "digest=" + d, data=data, method="PUT",
        headers={"Content-Type": "application/octet-stream"}))
    return {"digest": d, "size": len(data)}
def put_manifest(ref, body, mt):
    urllib.request.urlopen(urllib.request.Request(base + "/manifests/" + ref, data=body, method="PUT",
        headers={"Content-Type": mt}))
    return "sha256:" + hashlib.sha256(body).hexdigest()
cfg = put_blob(b"{}")
layer = put_blob(b"signature bytes\n")
man = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
    "artifactType": "application/vnd.example.signature",
    "config": dict(cfg, mediaType="application/vnd.oci.empty.v1+json"),
    "layers": [dict(layer, mediaType="application/octet-stream")],
    "subject": {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": subject, "size": int(size)}}).encode()
mt = "application/vnd.oci.image.manifest.v1+json"
d = put_manifest(hashlib.sha256(man).hexdigest()[:20], man, mt)
idx = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
    "manifests": [{"mediaType": mt, "digest": d, "size": len(man), "artifactType": "application/vnd.example.signature"}]}).encode()
put_manifest(subject.replace(":", "-"), idx, "application/vnd.oci.image.index.v1+json")
print(d)
"#;

fn python_ok(script: &str, args: &[&str]) -> String {
    let o = Command::new("python3")
        .arg("-c")
        .arg(script)
        .args(args)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "python: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

/// The digests the referrers API of `addr` lists for `subject` in `repo`.
fn referrers_of(addr: &str, repo: &str, subject: &str) -> Vec<String> {
    let (st, _, body) = http(addr, "GET", &format!("/v2/{repo}/referrers/{subject}"), &[]).unwrap();
    assert_eq!(st, 200);
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    let mut d: Vec<String> = v["manifests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["digest"].as_str().unwrap().to_string())
        .collect();
    d.sort();
    d
}

fn referrers_come_along_by_api_and_by_tag_schema(store: Backend) {
    require_tool("skopeo", "skopeo");
    let ok = Command::new("python3")
        .args(["-c", "import oras.client"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    assert!(
        ok,
        "the oras Python package is required by this test: pip install oras==0.2.43"
    );
    let tmp = tempfile::tempdir().unwrap();
    // Source A: airlock (referrers API); an SBOM pushed by oras.
    let (src, raw, subject) = fill_source(
        store.serve(&["--allow-push"]),
        tmp.path(),
        "latest",
        "src/busybox:1.0",
        false,
    );
    let sbom = tmp.path().join("sbom.spdx.json");
    std::fs::write(&sbom, "{\"spdxVersion\":\"SPDX-2.3\"}\n").unwrap();
    let size = raw.len().to_string();
    let sbom_digest = python_ok(
        ORAS_PUSH,
        &[
            &src.addr,
            "src/busybox",
            &subject,
            &size,
            sbom.to_str().unwrap(),
            "sbom",
        ],
    );
    // Source B: docker-registry (no referrers API); a signature by the tag schema.
    let (_reg, reg_addr) = docker_registry(tmp.path());
    push_fixture(&reg_addr, "latest", "src/busybox:1.0", false);
    let sig_digest = python_ok(
        TAG_SCHEMA_PUSH,
        &[&reg_addr, "src/busybox", &subject, &size],
    );
    let (st, _, _) = http(
        &reg_addr,
        "GET",
        &format!("/v2/src/busybox/referrers/{subject}"),
        &[],
    )
    .unwrap();
    assert_eq!(
        st, 404,
        "docker-registry grew a referrers API: the fallback is untested"
    );

    let (a, b) = (&src.addr, &reg_addr);
    let config = mirror_config(
        &tmp.path().join("mirror.toml"),
        &[a, b],
        &[
            image_toml(
                &format!("docker://{a}/src/busybox:1.0"),
                "a/busybox",
                &["1.0"],
                "",
            ),
            image_toml(
                &format!("docker://{b}/src/busybox:1.0"),
                "b/busybox",
                &["1.0"],
                "",
            ),
            image_toml(
                &format!("docker://{b}/src/busybox:1.0"),
                "c/busybox",
                &["1.0"],
                "referrers = false",
            ),
        ],
    );
    let out = tmp.path().join("b.tar");
    create_json(&config, &out, &tmp.path().join("cache"), &[]);
    let (_, public) = test_key();
    let dst_store = Backend::start(store.kind);
    dst_store.import(&public, &out);
    let dst = dst_store.serve(&[]);
    assert_eq!(
        referrers_of(&dst.addr, "a/busybox", &subject),
        vec![sbom_digest.clone()]
    );
    assert_eq!(
        referrers_of(&dst.addr, "b/busybox", &subject),
        vec![sig_digest.clone()]
    );
    assert!(referrers_of(&dst.addr, "c/busybox", &subject).is_empty());
    // The carried SBOM manifest is the source's, byte for byte.
    let (st, _, body) = http(
        &dst.addr,
        "GET",
        &format!("/v2/a/busybox/manifests/{sbom_digest}"),
        &[],
    )
    .unwrap();
    assert_eq!(st, 200);
    assert_eq!(sha256_bytes(tmp.path(), &body), sbom_digest);
}

#[test]
fn tags_and_tag_pattern_select_source_tags() {
    require_tool("skopeo", "skopeo");
    let tmp = tempfile::tempdir().unwrap();
    let src = serve(&tmp.path().join("src-data"), &["--allow-push"]);
    for t in ["1.0", "1.2", "1.10", "2.0-rc.1", "latest"] {
        push_fixture(&src.addr, "latest", &format!("src/busybox:{t}"), false);
    }
    push_fixture(&src.addr, "multi", "src/busybox:1.9", true);
    let digest_of = |t: &str| {
        let raw = raw_manifest(&src.addr, &format!("src/busybox:{t}"));
        sha256_bytes(tmp.path(), &raw)
    };
    let source = format!("docker://{}/src/busybox", src.addr);
    let config = mirror_config(
        &tmp.path().join("mirror.toml"),
        &[&src.addr],
        &[
            image_toml(&source, "picked/busybox", &["latest", "1.0"], ""),
            image_toml(
                &source,
                "newest/busybox",
                &[],
                "tag_pattern = '^1\\.[0-9]+$'\nmax_tags = 2",
            ),
        ],
    );
    let out = tmp.path().join("b.tar");
    let summary = create_json(&config, &out, &tmp.path().join("cache"), &[]);
    let got: Vec<(String, String, String)> = summary["images"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            (
                i["repository"].as_str().unwrap().to_string(),
                i["tags"][0].as_str().unwrap().to_string(),
                i["digest"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let want: Vec<(String, String, String)> = [
        ("picked/busybox", "latest"),
        ("picked/busybox", "1.0"),
        ("newest/busybox", "1.10"),
        ("newest/busybox", "1.9"),
    ]
    .iter()
    .map(|(r, t)| (r.to_string(), t.to_string(), digest_of(t)))
    .collect();
    assert_eq!(got, want);

    let (_, public) = test_key();
    let data = tmp.path().join("dst");
    import_bundle(&data, &public, &out);
    let dst = serve(&data, &[]);
    let (st, _, body) = http(&dst.addr, "GET", "/v2/newest/busybox/tags/list", &[]).unwrap();
    assert_eq!(st, 200);
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["tags"], serde_json::json!(["1.10", "1.9"]));

    // Bad selections fail with one line and no output.
    for (extra, want) in [
        ("tag_pattern = '^9'", "matches none"),
        ("tag_pattern = '('", "tag_pattern"),
        (
            "max_tags = 1\ntags = [\"1.0\"]",
            "max_tags needs tag_pattern",
        ),
    ] {
        assert_create_fails(
            tmp.path(),
            &src.addr,
            image_toml(&source, "x/y", &[], extra),
            want,
        );
    }
}

#[test]
fn delta_with_have_downloads_only_new_blobs() {
    require_tool("skopeo", "skopeo");
    let tmp = tempfile::tempdir().unwrap();
    let src = serve(&tmp.path().join("src-data"), &["--allow-push"]);
    push_fixture(&src.addr, "latest", "src/busybox:1.0", false);
    let (_proxy, addr, log) = proxy(tmp.path(), &src.addr, false);
    let write = |tags: &[&str]| {
        let source = format!("docker://{addr}/src/busybox");
        mirror_config(
            &tmp.path().join("mirror.toml"),
            &[&addr],
            &[image_toml(&source, "mirror/busybox", tags, "")],
        )
    };
    // Night 1: a full bundle, imported on the other side.
    let first = tmp.path().join("full.tar");
    create_json(&write(&["1.0"]), &first, &tmp.path().join("cache1"), &[]);
    let (_, public) = test_key();
    let data = tmp.path().join("dst");
    import_bundle(&data, &public, &first);
    let inv = tmp.path().join("have.json");
    airlock_ok(&[
        "inventory",
        "--data",
        data.to_str().unwrap(),
        "-o",
        inv.to_str().unwrap(),
    ]);
    // Night 2: a new tag (the two-platform index, sharing the 1.0 image) and a fresh cache.
    push_fixture(&src.addr, "multi", "src/busybox:1.1", true);
    std::fs::remove_file(&log).unwrap();
    let delta = tmp.path().join("delta.tar");
    let summary = create_json_have(
        &write(&["1.0", "1.1"]),
        &delta,
        &tmp.path().join("cache2"),
        &inv,
    );
    let doc: serde_json::Value = serde_json::from_str(&airlock_ok(&[
        "bundle",
        "inspect",
        "--json",
        delta.to_str().unwrap(),
    ]))
    .unwrap();
    let carried: std::collections::BTreeSet<String> = doc["blobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["digest"].as_str().unwrap().to_string())
        .collect();
    assert!(!doc["required"].as_array().unwrap().is_empty(), "{doc}");
    let requested: std::collections::BTreeSet<String> = std::fs::read_to_string(&log)
        .unwrap_or_default()
        .lines()
        .map(|l| {
            l.split(' ')
                .next()
                .unwrap()
                .rsplit('/')
                .next()
                .unwrap()
                .to_string()
        })
        .collect();
    let inventory: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&inv).unwrap()).unwrap();
    let have: std::collections::BTreeSet<String> = inventory["blobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d.as_str().unwrap().to_string())
        .collect();
    assert!(!requested.is_empty());
    assert!(
        requested.is_disjoint(&have),
        "downloaded blobs the destination has: {requested:?}"
    );
    assert!(
        requested.is_subset(&carried),
        "{requested:?} vs {carried:?}"
    );
    assert!(summary["registry"]["bytes_downloaded"].as_u64().unwrap() > 0);
    // The delta imports on top, and the new tag pulls with its own digest.
    import_bundle(&data, &public, &delta);
    let dst = serve(&data, &[]);
    let raw_src = raw_manifest(&src.addr, "src/busybox:1.1");
    let raw_dst = raw_manifest(&dst.addr, "mirror/busybox:1.1");
    assert_eq!(raw_src, raw_dst);
}

/// `bundle create --json --have INV`, asserting success.
fn create_json_have(config: &Path, out: &Path, cache: &Path, have: &Path) -> serde_json::Value {
    let o = create_env(
        config,
        out,
        &[
            "--json",
            "--cache",
            cache.to_str().unwrap(),
            "--have",
            have.to_str().unwrap(),
        ],
        &[],
    );
    assert!(
        o.status.success(),
        "bundle create failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).unwrap()
}

#[test]
fn platforms_carry_some_children_and_keep_the_index_bytes() {
    require_tool("skopeo", "skopeo");
    let tmp = tempfile::tempdir().unwrap();
    let (src, raw, index_digest) = source_registry(tmp.path(), "multi", "src/multi:v1", true);
    let index: serde_json::Value = serde_json::from_slice(&raw).unwrap();
    let child = |arch: &str| {
        index["manifests"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["platform"]["architecture"] == arch)
            .map(|m| m["digest"].as_str().unwrap().to_string())
            .unwrap()
    };
    let (amd64, arm64) = (child("amd64"), child("arm64"));
    let config = mirror_config(
        &tmp.path().join("mirror.toml"),
        &[&src.addr],
        &[image_toml(
            &format!("docker://{}/src/multi:v1", src.addr),
            "mirror/multi",
            &["v1"],
            "platforms = [\"linux/arm64\"]",
        )],
    );
    let out = tmp.path().join("b.tar");
    let summary = create_json(&config, &out, &tmp.path().join("cache"), &[]);
    assert_eq!(summary["images"][0]["digest"], index_digest.as_str());
    let doc: serde_json::Value = serde_json::from_str(&airlock_ok(&[
        "bundle",
        "inspect",
        "--json",
        out.to_str().unwrap(),
    ]))
    .unwrap();
    assert_eq!(doc["images"][0]["absent"], serde_json::json!([amd64]));
    let carried: Vec<&str> = doc["blobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["digest"].as_str().unwrap())
        .collect();
    assert!(carried.contains(&arm64.as_str()) && !carried.contains(&amd64.as_str()));

    let (_, public) = test_key();
    let data = tmp.path().join("dst");
    import_bundle(&data, &public, &out);
    let dst = serve(&data, &[]);
    let (st, _, body) = http(&dst.addr, "GET", "/v2/mirror/multi/manifests/v1", &[]).unwrap();
    assert_eq!((st, body), (200, raw.clone()), "index bytes changed");
    let (st, _, body) = http(
        &dst.addr,
        "GET",
        &format!("/v2/mirror/multi/manifests/{arm64}"),
        &[],
    )
    .unwrap();
    assert_eq!(st, 200);
    assert_eq!(sha256_bytes(tmp.path(), &body), arm64);
    let (st, _, body) = http(
        &dst.addr,
        "GET",
        &format!("/v2/mirror/multi/manifests/{amd64}"),
        &[],
    )
    .unwrap();
    assert_eq!(st, 404);
    assert!(String::from_utf8_lossy(&body).contains("MANIFEST_UNKNOWN"));
    let pulled = tmp.path().join("pulled");
    skopeo(&[
        "copy",
        "--override-os",
        "linux",
        "--override-arch",
        "arm64",
        "--src-tls-verify=false",
        &format!("docker://{}/mirror/multi:v1", dst.addr),
        &format!("oci:{}:arm", pulled.display()),
    ]);
    assert_eq!(layout_ref_digest(&pulled, "arm"), arm64);
    assert_layout_blobs_hash(&pulled);
}
