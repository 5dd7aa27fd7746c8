//! A TLS test site for the auth tests: a test CA, server and client
//! certificates made with `openssl`, users with `airlock user hash`
//! passwords, `airlock serve --config` over HTTPS, curl and skopeo helpers.

use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use super::*;

pub use super::ca::*;

/// `airlock user hash` of `password`.
pub fn hash(password: &str) -> String {
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
pub struct Site {
    _tmp: tempfile::TempDir,
    /// The site's directory (certificates, config, logs).
    pub dir: PathBuf,
    /// The data directory.
    pub data: PathBuf,
    /// The HTTPS port.
    pub port: u16,
    /// The flags that name the store to the CLI (`--data DIR`, or
    /// `--store s3://... --s3-endpoint URL`).
    pub store: Vec<String>,
}

pub fn site(extra_config: &str) -> Site {
    site_with("", "", extra_config)
}

/// A site whose config adds `registry` keys to `[registry]`, `limits`
/// keys to `[limits]` and `extra_config` (new tables, users) at the end.
pub fn site_with(registry: &str, limits: &str, extra_config: &str) -> Site {
    site_on(None, registry, limits, extra_config)
}

/// [`site_with`] on the blobstore `backend` (`None`: `data` beside the
/// config), named by the config file's `[store]` section alone.
pub fn site_on(
    backend: Option<&backend::Backend>,
    registry: &str,
    limits: &str,
    extra_config: &str,
) -> Site {
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
{store_toml}
[tls]
cert = "server.crt"
key = "server.key"
client_ca = "ca.crt"
[registry]
allow_push = true
allow_delete = true
{registry}
[import]
keyring = "keyring.asc"
[limits]
max_upload_sessions_per_user = 2
{limits}
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
        store_toml = backend.map_or("path = \"data\"".to_string(), |b| b.store_toml()),
        ops = hash("ops-pw"),
        rd = hash("rd-pw"),
    );
    std::fs::write(dir.join("airlock.toml"), config).unwrap();
    let (data, store) = match backend {
        None => {
            let data = dir.join("data");
            let args = vec!["--data".into(), data.display().to_string()];
            (data, args)
        }
        Some(b) => (b.key_dir().unwrap_or_else(|| b.data_dir()), b.store_args()),
    };
    Site {
        _tmp: tmp,
        dir,
        data,
        port,
        store,
    }
}

/// `airlock serve --config` as a child process, killed on drop.
pub struct Running(pub Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Site {
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn start(&self) -> Running {
        let child = Command::new(env!("CARGO_BIN_EXE_airlock"))
            .args(["--log", "info", "--log-format", "json", "serve", "--config"])
            .arg(self.dir.join("airlock.toml"))
            .envs(backend::AWS_ENV)
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
    pub fn curl(&self, args: &[&str]) -> (u16, String, String) {
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
    pub fn cert_dir(&self, name: &str, client: Option<&str>) -> PathBuf {
        let d = self.dir.join(name);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::copy(self.dir.join("ca.crt"), d.join("ca.crt")).unwrap();
        if let Some(c) = client {
            std::fs::copy(self.dir.join(format!("{c}.crt")), d.join("client.cert")).unwrap();
            std::fs::copy(self.dir.join(format!("{c}.key")), d.join("client.key")).unwrap();
        }
        d
    }

    /// skopeo copies `src` (e.g. `oci:DIR:TAG`) to `repo_tag` on the site
    /// as the admin `ops`.
    pub fn push(&self, src: &str, repo_tag: &str) {
        let certs = self.cert_dir("certs", None);
        skopeo(&[
            "copy",
            "--dest-creds",
            "ops:ops-pw",
            "--dest-cert-dir",
            certs.to_str().unwrap(),
            src,
            &format!("docker://{}/{repo_tag}", self.addr()),
        ]);
    }

    pub fn history(&self) -> Vec<serde_json::Value> {
        let out = self.airlock_ok(&["history", "--json"]);
        serde_json::from_str(&out).unwrap()
    }

    /// `airlock ARGS... <store flags>` with the AWS variables.
    pub fn airlock(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_airlock"))
            .args(args)
            .args(&self.store)
            .envs(backend::AWS_ENV)
            .output()
            .unwrap()
    }

    /// As [`Site::airlock`], asserting success; returns stdout.
    pub fn airlock_ok(&self, args: &[&str]) -> String {
        let o = self.airlock(args);
        assert!(
            o.status.success(),
            "airlock {args:?} failed: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    }
}

pub fn skopeo_status(args: &[&str]) -> (bool, String) {
    let o = Command::new("skopeo").args(args).output().unwrap();
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// The `password_hash = "..."` line of user `name` in a config `text`.
pub fn hash_line_of(text: &str, name: &str) -> String {
    let at = text
        .find(&format!("name = \"{name}\"\n"))
        .unwrap_or_else(|| panic!("no user {name}"));
    text[at..]
        .lines()
        .find(|l| l.starts_with("password_hash = "))
        .unwrap()
        .to_string()
}
