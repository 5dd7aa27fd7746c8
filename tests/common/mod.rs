//! Shared helpers for the integration tests: the real busybox fixture image,
//! running the `airlock` binary, required external tools.
#![allow(dead_code)]

pub mod backend;
pub mod ca;
pub mod ceph;
pub mod deltas;
pub mod haproxy;
pub mod images;
pub mod kpack;
pub mod listener;
pub mod nginx;
pub mod objects;
pub mod pkgdb;
pub mod router;
pub mod site;
pub mod synth;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Fails (never skips) when `tool` is missing, naming the Debian package.
pub fn require_tool(tool: &str, package: &str) {
    require_installed(tool, &format!("apt-get install {package}"));
}

/// Fails (never skips) when `tool` is missing, saying how to install it.
pub fn require_installed(tool: &str, install: &str) {
    let found = Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {tool}"))
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    assert!(found, "`{tool}` is required by this test: {install}");
}

/// Fails (never skips) when the Python module `module` cannot be imported
/// by `python3`, naming what to `pip install`.
pub fn require_python(module: &str, install: &str) {
    let ok = Command::new("python3")
        .args(["-c", &format!("import {module}")])
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        ok,
        "the Python package {module} is required by this test: pip install {install}"
    );
}

/// A directory that lives for the whole test binary.
pub fn shared_dir() -> &'static Path {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    DIR.get_or_init(|| tempfile::tempdir().expect("tempdir"))
        .path()
}

/// The busybox fixture layout (refs `latest` and `multi`), built once per test binary.
pub fn fixture_layout() -> PathBuf {
    static LAYOUT: OnceLock<PathBuf> = OnceLock::new();
    LAYOUT
        .get_or_init(|| {
            require_tool("umoci", "umoci");
            require_tool("jq", "jq");
            assert!(
                Path::new("/bin/busybox").exists(),
                "apt-get install busybox-static"
            );
            let out = shared_dir().join("busybox-layout");
            fixture_script("make-busybox-image.sh", &out);
            out
        })
        .clone()
}

/// A writable copy of the fixture layout at `dir/layout` (for tests that
/// add tags with umoci).
pub fn copy_fixture_layout(dir: &Path) -> PathBuf {
    let layout = dir.join("layout");
    run_ok(
        Command::new("cp")
            .arg("-a")
            .arg(fixture_layout())
            .arg(&layout),
    );
    layout
}

/// Runs `tests/fixtures/SCRIPT OUT`, asserting success.
pub fn fixture_script(script: &str, out: &Path) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(script);
    let o = Command::new("bash")
        .arg(&path)
        .arg(out)
        .output()
        .expect("run fixture script");
    assert!(
        o.status.success(),
        "fixture script {script} failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// Runs `cmd`, asserting success (the command and its stderr otherwise).
pub fn run_ok(cmd: &mut Command) {
    let o = cmd.output().expect("run command");
    assert!(
        o.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// A signing key pair made by `airlock keys generate`, once per test binary: (secret, public).
pub fn test_key() -> (PathBuf, PathBuf) {
    static KEY: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    KEY.get_or_init(|| keypair(shared_dir(), "release")).clone()
}

/// A fresh key pair under `dir` named `name`.
pub fn keypair(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
    let prefix = dir.join(name);
    let o = airlock(&[
        "keys",
        "generate",
        "--uid",
        "Release <release@example.org>",
        "--out",
        prefix.to_str().unwrap(),
    ]);
    assert!(
        o.status.success(),
        "keys generate: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    (
        dir.join(format!("{name}.sec.asc")),
        dir.join(format!("{name}.pub.asc")),
    )
}

/// Runs the airlock binary.
pub fn airlock(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_airlock"))
        .args(args)
        .output()
        .expect("run airlock")
}

/// Runs airlock and asserts success; returns stdout.
pub fn airlock_ok(args: &[&str]) -> String {
    stdout_ok(&airlock(args), &format!("airlock {args:?} failed"))
}

/// The stdout of a finished command, asserting it succeeded (`what`, its
/// stdout and stderr otherwise).
pub fn stdout_ok(o: &Output, what: &str) -> String {
    assert!(
        o.status.success(),
        "{what}: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Writes a mirror config naming `oci:LAYOUT:REF` images: (ref, repository, tags).
pub fn write_config(dir: &Path, layout: &Path, images: &[(&str, &str, &[&str])]) -> PathBuf {
    let mut text = String::new();
    for (r, repo, tags) in images {
        let tags: Vec<String> = tags.iter().map(|t| format!("{t:?}")).collect();
        text.push_str(&format!(
            "[[image]]\nsource = \"oci:{}:{r}\"\nrepository = \"{repo}\"\ntags = [{}]\n\n",
            layout.display(),
            tags.join(", ")
        ));
    }
    let path = dir.join("mirror.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// sha256 of a file by coreutils' `sha256sum`, as `sha256:<hex>`.
pub fn sha256sum(path: &Path) -> String {
    let o = Command::new("sha256sum")
        .arg(path)
        .output()
        .expect("sha256sum");
    let s = String::from_utf8_lossy(&o.stdout);
    format!("sha256:{}", s.split_whitespace().next().unwrap())
}

/// The manifest digest a layout's index.json names for `ref_name`.
pub fn layout_ref_digest(layout: &Path, ref_name: &str) -> String {
    let index: serde_json::Value =
        serde_json::from_slice(&std::fs::read(layout.join("index.json")).unwrap()).unwrap();
    index["manifests"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["annotations"]["org.opencontainers.image.ref.name"] == ref_name)
        .map(|m| m["digest"].as_str().unwrap().to_string())
        .unwrap()
}

/// The generation rows of `airlock history`'s text: not its header, nor
/// the lines under each row saying what the generation changed.
pub fn history_rows(text: &str) -> Vec<&str> {
    text.lines()
        .filter(|l| {
            let mut t = l.split_whitespace();
            let (Some(g), Some(time)) = (t.next(), t.next()) else {
                return false;
            };
            g.parse::<u64>().is_ok() && time.ends_with('Z') && time.contains('T')
        })
        .collect()
}

/// The content of `refs/root` (the state digest), or "" for an empty store.
pub fn root_of(data: &Path) -> String {
    std::fs::read_to_string(data.join("refs/root"))
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// The arguments of `airlock bundle create` of `config` into `out`, signed
/// with [`test_key`].
fn create_args(config: &Path, out: &Path) -> Vec<String> {
    let (sec, _) = test_key();
    [
        "bundle",
        "create",
        "--config",
        config.to_str().unwrap(),
        "--sign-key",
        sec.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ]
    .map(String::from)
    .to_vec()
}

/// `airlock bundle create` of `config` into `out`, signed with [`test_key`], plus `extra` args; returns stdout.
pub fn create_bundle(config: &Path, out: &Path, extra: &[&str]) -> String {
    let mut args = create_args(config, out);
    args.extend(extra.iter().map(|a| a.to_string()));
    airlock_ok(&args.iter().map(String::as_str).collect::<Vec<_>>())
}

/// `airlock bundle create` of `config` into `out`, signed with [`test_key`],
/// whatever its outcome (for tests of refused configs).
pub fn create_bundle_output(config: &Path, out: &Path) -> Output {
    airlock(
        &create_args(config, out)
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
    )
}

/// `airlock import` of `bundle` into `data` trusting `keyring`; returns stdout.
pub fn import_bundle(data: &Path, keyring: &Path, bundle: &Path) -> String {
    airlock_ok(&[
        "import",
        "--data",
        data.to_str().unwrap(),
        "--keyring",
        keyring.to_str().unwrap(),
        bundle.to_str().unwrap(),
    ])
}

/// `airlock serve` as a child process, killed on drop.
pub struct Server {
    child: Child,
    /// `127.0.0.1:PORT`.
    pub addr: String,
    /// Its data directory.
    pub data: PathBuf,
    /// A temporary directory that lives as long as the server.
    pub keep: Option<tempfile::TempDir>,
}

impl Server {
    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGTERM (a graceful stop), then the exit status (within 20 s).
    pub fn terminate(mut self) -> std::process::ExitStatus {
        terminate(&mut self.child, Duration::from_secs(20))
    }

    /// The exit status of a server something else stopped (within `within`).
    pub fn wait_exit(mut self, within: Duration) -> std::process::ExitStatus {
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(Instant::now() < deadline, "still running after {within:?}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// Sends SIGTERM to `child` and waits (at most `within`) for its exit status.
pub fn terminate(child: &mut Child, within: Duration) -> std::process::ExitStatus {
    let pid = i32::try_from(child.id()).unwrap();
    // SAFETY: kill(2) on our own child's pid with a valid signal.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    let deadline = Instant::now() + within;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        assert!(
            Instant::now() < deadline,
            "still running {within:?} after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A port free on loopback right now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Starts `airlock serve --data DATA` plus `extra` on a free port and waits until `/v2/` answers 200.
pub fn serve(data: &Path, extra: &[&str]) -> Server {
    start_serve(data, extra, false)
}

/// Starts `airlock serve --data DATA` plus `extra` (which sets up TLS, e.g.
/// `--config FILE` with a `[tls]` section) on a free port and waits until
/// it accepts connections.
pub fn serve_tls(data: &Path, extra: &[&str]) -> Server {
    start_serve(data, extra, true)
}

fn start_serve(data: &Path, extra: &[&str], tls: bool) -> Server {
    let addr = format!("127.0.0.1:{}", free_port());
    let child = Command::new(env!("CARGO_BIN_EXE_airlock"))
        .args(["serve", "--data", data.to_str().unwrap(), "--listen", &addr])
        .args(extra)
        .spawn()
        .unwrap();
    wait_for_server_tls(
        Server {
            child,
            addr,
            data: data.to_path_buf(),
            keep: None,
        },
        tls,
    )
}

/// `child` (an `airlock serve` listening on `addr`, e.g. started as bpm
/// would start it) once it answers 200 on `/v2/`, or with `tls` once it
/// accepts connections; `data` is its store.
pub fn adopt_server(child: Child, addr: &str, data: &Path, tls: bool) -> Server {
    wait_for_server_tls(
        Server {
            child,
            addr: addr.to_string(),
            data: data.to_path_buf(),
            keep: None,
        },
        tls,
    )
}

/// Waits until `server` answers 200 on `/v2/` (20 s at most).
pub fn wait_for_server(server: Server) -> Server {
    wait_for_server_tls(server, false)
}

/// Waits until `server` answers 200 on `/v2/`, or with `tls` until it
/// accepts connections (20 s at most).
fn wait_for_server_tls(server: Server, tls: bool) -> Server {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        let ready = if tls {
            TcpStream::connect(&server.addr).is_ok()
        } else {
            http(&server.addr, "GET", "/v2/", &[]).is_ok_and(|(status, _, _)| {
                assert_eq!(status, 200);
                true
            })
        };
        if ready {
            return server;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("airlock serve did not answer on {}", server.addr);
}

/// (status, headers with lower-case names, body).
pub type Reply = (u16, Vec<(String, String)>, Vec<u8>);

/// A minimal HTTP/1.1 request without a body, over a fresh connection.
pub fn http(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> std::io::Result<Reply> {
    http_body(addr, method, path, headers, &[])
}

/// [`http`] with `body` (sent with its `Content-Length` when not empty).
pub fn http_body(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> std::io::Result<Reply> {
    let mut s = TcpStream::connect(addr)?;
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    if !body.is_empty() {
        req.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes())?;
    s.write_all(body)?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)?;
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| std::io::Error::other("no header end"))?;
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let mut lines = head.lines();
    let status: u16 = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| std::io::Error::other("bad status line"))?;
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    Ok((status, headers, raw[split + 4..].to_vec()))
}

/// `POST /admin/v1/imports` of the bundle file `bundle` to `addr`:
/// (status, the JSON body).
pub fn post_import(addr: &str, bundle: &Path) -> (u16, serde_json::Value) {
    let tar = std::fs::read(bundle).unwrap();
    let (code, _, body) = http_body(addr, "POST", "/admin/v1/imports", &[], &tar).unwrap();
    let body = serde_json::from_slice(&body)
        .unwrap_or_else(|_| serde_json::Value::String(String::from_utf8_lossy(&body).into()));
    (code, body)
}

/// The first header `name` (lower case) of a reply.
pub fn header<'a>(h: &'a [(String, String)], name: &str) -> Option<&'a str> {
    h.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
}

/// Runs skopeo, asserting success; returns stdout.
pub fn skopeo(args: &[&str]) -> Vec<u8> {
    let o = Command::new("skopeo").args(args).output().unwrap();
    assert!(
        o.status.success(),
        "skopeo {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    o.stdout
}

/// The manifest bytes of `docker://ADDR/REFERENCE` as `skopeo inspect
/// --raw` prints them (plain HTTP).
pub fn raw_manifest(addr: &str, reference: &str) -> Vec<u8> {
    skopeo(&[
        "inspect",
        "--raw",
        "--tls-verify=false",
        &format!("docker://{addr}/{reference}"),
    ])
}

/// One `[[image]]` table of a mirror config: `source`, `repository`,
/// `tags` (left out when empty), then `extra` TOML lines as given.
pub fn image_toml(source: &str, repository: &str, tags: &[&str], extra: &str) -> String {
    let mut t = format!("[[image]]\nsource = \"{source}\"\nrepository = \"{repository}\"\n");
    if !tags.is_empty() {
        let quoted: Vec<String> = tags.iter().map(|t| format!("\"{t}\"")).collect();
        t.push_str(&format!("tags = [{}]\n", quoted.join(", ")));
    }
    if !extra.is_empty() {
        t.push_str(extra);
        t.push('\n');
    }
    t
}

/// Writes the mirror config `path`: a plain-HTTP `[[registry]]`
/// (`tls_verify = false`) per host of `hosts`, then `images`
/// ([`image_toml`]); returns `path`.
pub fn mirror_config(path: &Path, hosts: &[&str], images: &[String]) -> PathBuf {
    let mut text = String::new();
    for h in hosts {
        text.push_str(&format!(
            "[[registry]]\nhost = \"{h}\"\ntls_verify = false\n\n"
        ));
    }
    text.push_str(&images.join("\n"));
    std::fs::write(path, text).unwrap();
    path.to_path_buf()
}

/// The file of blob `digest` in an OCI layout.
pub fn blob_file(layout: &Path, digest: &str) -> PathBuf {
    layout
        .join("blobs/sha256")
        .join(digest.strip_prefix("sha256:").unwrap())
}

/// A self-signed P-256 certificate for `cn` made by `openssl req -x509`,
/// valid one day: (`DIR/NAME.crt`, `DIR/NAME.key`), both PEM.
pub fn self_signed_cert(dir: &Path, name: &str, cn: &str) -> (PathBuf, PathBuf) {
    require_tool("openssl", "openssl");
    let (crt, key) = (
        dir.join(format!("{name}.crt")),
        dir.join(format!("{name}.key")),
    );
    run_ok(
        Command::new("openssl")
            .args([
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
            ])
            .args(["-nodes", "-days", "1", "-subj", &format!("/CN={cn}")])
            .arg("-keyout")
            .arg(&key)
            .arg("-out")
            .arg(&crt),
    );
    (crt, key)
}

/// `impl Blobstore for $ty` for a test wrapper whose field `inner: Arc<dyn
/// Blobstore>` does the work: every method is forwarded to `inner`
/// except `writer` and `put_blobs`, which the wrapper writes in `{ ... }`
/// (each may also forward), so a test store states only how it differs.
#[macro_export]
macro_rules! forwarding_store {
    ($ty:ty { $($own:tt)* }) => {
        #[async_trait::async_trait]
        impl airlock::store::Blobstore for $ty {
            async fn stat(&self, key: &str) -> airlock::store::Result<Option<u64>> {
                self.inner.stat(key).await
            }
            async fn read(
                &self,
                key: &str,
                range: Option<(u64, u64)>,
            ) -> airlock::store::Result<airlock::store::BoxRead> {
                self.inner.read(key, range).await
            }
            async fn stream(
                &self,
                key: &str,
                range: Option<(u64, u64)>,
            ) -> airlock::store::Result<airlock::store::ByteStream> {
                self.inner.stream(key, range).await
            }
            async fn delete(&self, key: &str) -> airlock::store::Result<()> {
                self.inner.delete(key).await
            }
            fn forget_verified(&self, key: &str) {
                self.inner.forget_verified(key)
            }
            fn metadata_copies(&self) -> u8 {
                self.inner.metadata_copies()
            }
            async fn put_copy_pack(
                &self,
                digest: &airlock::digest::Digest,
                bytes: bytes::Bytes,
            ) -> airlock::store::Result<()> {
                self.inner.put_copy_pack(digest, bytes).await
            }
            fn repairs(&self) -> Option<&airlock::store::copies::Repairs> {
                self.inner.repairs()
            }
            fn damage(&self) -> Option<&airlock::store::damage::Notes> {
                self.inner.damage()
            }
            async fn rename(&self, from: &str, to: &str) -> airlock::store::Result<()> {
                self.inner.rename(from, to).await
            }
            async fn list(&self, prefix: &str) -> airlock::store::Result<Vec<String>> {
                self.inner.list(prefix).await
            }
            async fn sync(&self) -> airlock::store::Result<()> {
                self.inner.sync().await
            }
            async fn read_root(
                &self,
            ) -> airlock::store::Result<Option<airlock::store::RootVersion>> {
                self.inner.read_root().await
            }
            async fn swap_root(
                &self,
                expected: Option<&airlock::store::RootVersion>,
                value: &str,
            ) -> airlock::store::Result<bool> {
                self.inner.swap_root(expected, value).await
            }
            async fn read_versioned(
                &self,
                key: &str,
            ) -> airlock::store::Result<Option<airlock::store::RootVersion>> {
                self.inner.read_versioned(key).await
            }
            async fn swap(
                &self,
                key: &str,
                expected: Option<&airlock::store::RootVersion>,
                value: &str,
            ) -> airlock::store::Result<bool> {
                self.inner.swap(key, expected, value).await
            }
            $($own)*
        }
    };
}

/// Parses an exposition with `prometheus_client`'s OpenMetrics parser;
/// returns every sample as (name, labels, value).
pub fn openmetrics(text: &str) -> Vec<(String, serde_json::Value, f64)> {
    let script = r#"
import json, sys
try:
    from prometheus_client.openmetrics.parser import text_string_to_metric_families
except ImportError:
    sys.exit("python3 module prometheus_client missing: pip install prometheus-client (scripts/install-test-deps.sh)")
out = []
for fam in text_string_to_metric_families(sys.stdin.read()):
    for s in fam.samples:
        out.append([s.name, s.labels, s.value])
print(json.dumps(out))
"#;
    let mut child = Command::new("python3")
        .args(["-c", script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 (apt-get install python3)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let o = child.wait_with_output().unwrap();
    assert!(
        o.status.success(),
        "parser refused the exposition: {}\n{text}",
        String::from_utf8_lossy(&o.stderr)
    );
    let rows: Vec<(String, serde_json::Value, f64)> = serde_json::from_slice(&o.stdout).unwrap();
    rows
}

/// A torcx addon `hello:1.0` (an empty image manifest) packed by `tar`
/// under `dir`, and its `[[addon]]` table for a mirror config (remote
/// `com.example.stable`, board `amd64-usr`, default for OS 3033.2.0).
pub fn hello_addon(dir: &Path) -> String {
    let addon = dir.join("hello:1.0.torcx.tgz");
    let root = dir.join("addon");
    std::fs::create_dir_all(root.join(".torcx")).unwrap();
    std::fs::write(
        root.join(".torcx/manifest.json"),
        r#"{"kind":"image-manifest-v0","value":{"bin":[]}}"#,
    )
    .unwrap();
    run_ok(
        Command::new("tar")
            .arg("-C")
            .arg(&root)
            .arg("-czf")
            .arg(&addon)
            .arg("."),
    );
    format!(
        "[[addon]]\nremote = \"com.example.stable\"\nname = \"hello\"\nversion = \"1.0\"\nformat = \"tgz\"\nsource = {:?}\nboards = [\"amd64-usr\"]\nos_versions = [\"3033.2.0\"]\ndefault_for = [\"3033.2.0\"]\n",
        addon.to_str().unwrap()
    )
}

/// Asserts that the server at `addr` is ready (`/readyz` 200) and answers
/// each `(repository, tag, digest)` with that digest; `what` starts every
/// failure. HEAD requests: a GET would add to the pull record.
pub fn assert_tags_served(addr: &str, tags: &[(String, String, String)], what: &str) {
    let (status, _, body) = http(addr, "GET", "/readyz", &[]).unwrap();
    assert_eq!(status, 200, "{what}: {}", String::from_utf8_lossy(&body));
    for (repo, tag, digest) in tags {
        let (status, got) = head_manifest(addr, repo, tag);
        assert_eq!(status, 200, "{what}: {repo}:{tag}");
        assert_eq!(
            got.as_deref(),
            Some(digest.as_str()),
            "{what}: {repo}:{tag}"
        );
    }
}

/// `HEAD /v2/<repo>/manifests/<tag>` on `addr` (accepting an OCI image
/// manifest): the status and the `Docker-Content-Digest` header.
pub fn head_manifest(addr: &str, repo: &str, tag: &str) -> (u16, Option<String>) {
    let (status, headers, _) = http(
        addr,
        "HEAD",
        &format!("/v2/{repo}/manifests/{tag}"),
        &[("accept", "application/vnd.oci.image.manifest.v1+json")],
    )
    .unwrap();
    (
        status,
        header(&headers, "docker-content-digest").map(String::from),
    )
}
