//! Blobstore backends for integration tests: the filesystem, and real
//! S3-compatible servers started on loopback (moto's server, data in
//! memory; s3s-fs, data on disk; Ceph's RADOS Gateway, one cluster per
//! test process, [`super::ceph`]). A scenario takes a [`Backend`] and runs
//! the `airlock` binary through it, so one scenario runs on every backend.

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{Server, free_port, wait_for_server};

/// Which blobstore a scenario runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `--data DIR`.
    Fs,
    /// `--store s3://...` on moto's S3 server (pip `moto[server]`), run
    /// one request at a time ([`MOTO_SERIAL`]).
    Moto,
    /// `--store s3://...` on `s3s-fs` (cargo `s3s-fs --features binary`).
    S3sFs,
    /// `--store s3://...` on Ceph RGW 16.2 (Debian's packages), a bucket
    /// of its own on the shared test cluster ([`super::ceph`]).
    Ceph,
}

impl Kind {
    /// The kind a test is named after: `fs`, `moto`, `s3s_fs` or `ceph`
    /// (the names [`on_backends!`](crate::on_backends) generates).
    pub fn named(name: &str) -> Kind {
        match name {
            "fs" => Kind::Fs,
            "moto" => Kind::Moto,
            "s3s_fs" => Kind::S3sFs,
            "ceph" => Kind::Ceph,
            other => panic!("no backend named {other}"),
        }
    }

    /// Whether two racing conditional writes (`If-Match`, `If-None-Match:
    /// *`) have exactly one winner, as on AWS S3 and Ceph RGW (which
    /// takes `If-Match` unquoted): the filesystem and moto served one
    /// request at a time, not s3s-fs 0.14.1 (it checks the condition and
    /// writes without a lock).
    pub fn serializes_conditional_writes(self) -> bool {
        self != Kind::S3sFs
    }
}

/// moto's S3 server as `moto_server` starts it, but answering one request
/// at a time (werkzeug without threads, HTTP/1.0), so that a conditional
/// write's check and write are never interleaved with another request's:
/// moto checks `If-Match` and `If-None-Match` without a lock, and threaded
/// it let 16 and 15 of 16 racing conditional PUTs succeed (moto 5.2.1).
/// Arguments: host, port.
pub const MOTO_SERIAL: &str = "import sys
from werkzeug.serving import run_simple
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
run_simple(sys.argv[1], int(sys.argv[2]), DomainDispatcherApplication(create_backend_app), threaded=False)
";

/// Credentials of the test servers, given to airlock through the standard
/// AWS variables.
pub const AWS_ENV: [(&str, &str); 3] = [
    ("AWS_ACCESS_KEY_ID", "airlocktest"),
    ("AWS_SECRET_ACCESS_KEY", "airlocktestsecret"),
    ("AWS_REGION", "us-east-1"),
];

/// The bucket moto and s3s-fs serve (Ceph: [`super::ceph::new_bucket`]).
pub const BUCKET: &str = "airlock-test";

/// A running S3-compatible server, killed on drop.
pub struct S3Server {
    kind: Kind,
    child: Option<Child>,
    /// `http://127.0.0.1:PORT`.
    pub endpoint: String,
    /// The bucket of this server's stores.
    pub bucket: String,
    port: u16,
    /// s3s-fs's root directory (one subdirectory per bucket).
    root: PathBuf,
}

impl Drop for S3Server {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Fails (never skips) when `tool` is missing, naming how to install it.
fn require(tool: &str, install: &str) {
    super::require_installed(tool, &format!("{install} (scripts/install-test-deps.sh)"));
}

impl S3Server {
    /// Starts `kind` (Moto or S3sFs) on a free loopback port, data under
    /// `dir` (s3s-fs), and creates [`BUCKET`].
    pub fn start(kind: Kind, dir: &Path) -> S3Server {
        let root = dir.join("s3root");
        if kind == Kind::Ceph {
            return S3Server {
                kind,
                child: None,
                endpoint: super::ceph::endpoint().to_string(),
                bucket: super::ceph::new_bucket(),
                port: 0,
                root,
            };
        }
        std::fs::create_dir_all(root.join(BUCKET)).unwrap();
        let mut server = S3Server {
            kind,
            child: None,
            endpoint: String::new(),
            bucket: BUCKET.to_string(),
            port: free_port(),
            root,
        };
        server.endpoint = format!("http://127.0.0.1:{}", server.port);
        server.restart();
        if kind == Kind::Moto {
            // moto accepts connections before it answers them on a loaded
            // machine: the bucket PUT is retried until it succeeds.
            let url = format!("{}/{BUCKET}", server.endpoint);
            let deadline = Instant::now() + Duration::from_secs(30);
            loop {
                let o = Command::new("curl")
                    .args(["-sS", "-f", "-m", "10", "-X", "PUT", &url])
                    .output()
                    .unwrap();
                if o.status.success() {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "creating the bucket on moto failed: {}",
                    String::from_utf8_lossy(&o.stderr).trim()
                );
                std::thread::sleep(Duration::from_millis(200));
            }
        }
        server
    }

    /// Starts the server again on the same port (and, for s3s-fs, the
    /// same data) after [`S3Server::stop`].
    pub fn restart(&mut self) {
        let port = self.port.to_string();
        let mut cmd = match self.kind {
            Kind::Moto => {
                require("moto_server", "pip install 'moto[server]'");
                let mut c = Command::new("python3");
                c.args(["-c", MOTO_SERIAL, "127.0.0.1", &port]);
                c
            }
            Kind::S3sFs => {
                require(
                    "s3s-fs",
                    "cargo install s3s-fs@0.14.1 --features binary --locked",
                );
                let mut c = Command::new("s3s-fs");
                c.args(["--host", "127.0.0.1", "--port", &port])
                    .args(["--access-key", AWS_ENV[0].1, "--secret-key", AWS_ENV[1].1])
                    .arg(&self.root);
                c
            }
            Kind::Fs => panic!("the filesystem backend has no server"),
            Kind::Ceph => panic!("the shared Ceph cluster is not restarted by a test"),
        };
        let child = cmd
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(30);
        while TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(Instant::now() < deadline, "{:?} did not start", self.kind);
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Settings for the store at `prefix` in this server's bucket.
    pub fn settings(&self, prefix: &str) -> airlock::store::s3::S3Settings {
        let mut settings = airlock::store::s3::S3Settings::new(&self.bucket, prefix);
        settings.endpoint = Some(self.endpoint.clone());
        settings
    }

    /// Kills the server (an outage).
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A blobstore for one scenario: a directory, or a prefix in a bucket of
/// a fresh server.
pub struct Backend {
    /// Which one.
    pub kind: Kind,
    /// A scratch directory living as long as the backend.
    pub dir: tempfile::TempDir,
    /// The S3 server, for S3 kinds.
    pub s3: Option<S3Server>,
}

impl Backend {
    /// A fresh, empty store of `kind`.
    pub fn start(kind: Kind) -> Backend {
        let dir = tempfile::tempdir().unwrap();
        let s3 = (kind != Kind::Fs).then(|| S3Server::start(kind, dir.path()));
        Backend { kind, dir, s3 }
    }

    /// The flags that name this store (`--data DIR` or `--store ...
    /// --s3-endpoint ...`).
    pub fn store_args(&self) -> Vec<String> {
        match &self.s3 {
            None => vec!["--data".into(), self.data_dir().display().to_string()],
            Some(s) => vec![
                "--store".into(),
                format!("s3://{}/site", s.bucket),
                "--s3-endpoint".into(),
                s.endpoint.clone(),
            ],
        }
    }

    /// The `[store]` keys of a serve config file that name this store
    /// (`path`, or `url` and `s3_endpoint`): switching a site to S3 is a
    /// config change alone.
    pub fn store_toml(&self) -> String {
        match &self.s3 {
            None => format!("path = {:?}", self.data_dir().display().to_string()),
            Some(s) => format!(
                "url = \"s3://{}/site\"\ns3_endpoint = {:?}",
                s.bucket, s.endpoint
            ),
        }
    }

    /// The filesystem store's directory (also the servers' scratch).
    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// Where the store's keys are files, for checks from outside: the data
    /// directory, or s3s-fs's directory of the prefix; `None` on moto
    /// (in memory).
    pub fn key_dir(&self) -> Option<PathBuf> {
        match (self.kind, &self.s3) {
            (Kind::Fs, _) => Some(self.data_dir()),
            (Kind::S3sFs, Some(s)) => Some(s.root.join(BUCKET).join("site")),
            _ => None,
        }
    }

    /// `airlock SUBCOMMAND <store args> ARGS...` with the AWS variables.
    pub fn command(&self, subcommand: &[&str], args: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_airlock"));
        c.args(subcommand).args(self.store_args()).args(args);
        c.envs(AWS_ENV);
        c
    }

    /// Runs `airlock SUBCOMMAND <store args> ARGS...`.
    pub fn airlock(&self, subcommand: &[&str], args: &[&str]) -> Output {
        self.command(subcommand, args).output().unwrap()
    }

    /// As [`Backend::airlock`], asserting success; returns stdout.
    pub fn airlock_ok(&self, subcommand: &[&str], args: &[&str]) -> String {
        super::stdout_ok(
            &self.airlock(subcommand, args),
            &format!("{:?}: airlock {subcommand:?} {args:?} failed", self.kind),
        )
    }

    /// `airlock import` of `bundle` trusting `keyring`; returns stdout.
    pub fn import(&self, keyring: &Path, bundle: &Path) -> String {
        self.airlock_ok(
            &["import"],
            &[
                "--keyring",
                keyring.to_str().unwrap(),
                bundle.to_str().unwrap(),
            ],
        )
    }

    /// `airlock history --json`: (generation, digest), newest first.
    pub fn history(&self) -> Vec<(u64, String)> {
        let out = self.airlock_ok(&["history"], &["--json"]);
        let rows: serde_json::Value = serde_json::from_str(&out).unwrap();
        rows.as_array()
            .unwrap()
            .iter()
            .map(|r| {
                (
                    r["generation"].as_u64().unwrap(),
                    r["digest"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    }

    /// The state root: the newest generation's digest, or "" for an empty
    /// store (the store-independent [`super::root_of`]).
    pub fn root(&self) -> String {
        if self.kind == Kind::Fs {
            // `history` refuses a data directory that does not exist yet.
            return super::root_of(&self.data_dir());
        }
        self.history()
            .first()
            .map(|(_, d)| d.clone())
            .unwrap_or_default()
    }

    /// How long after another process's commit (a CLI command, the other
    /// replica) this backend's servers may still answer from the root they
    /// had: `root_refresh_ms`'s default (1 ms on the filesystem, 1 s on S3)
    /// plus a margin for a loaded machine.
    pub fn refresh_bound(&self) -> Duration {
        match self.kind {
            Kind::Fs => Duration::from_millis(500),
            Kind::Moto | Kind::S3sFs | Kind::Ceph => Duration::from_millis(3000),
        }
    }

    /// `airlock serve` on this store (plus `extra`) on a free port.
    pub fn serve(&self, extra: &[&str]) -> Server {
        self.serve_on(&format!("127.0.0.1:{}", free_port()), extra)
    }

    /// [`Backend::serve`] on `addr` (a replica started again where a
    /// balancer expects it).
    pub fn serve_on(&self, addr: &str, extra: &[&str]) -> Server {
        let addr = addr.to_string();
        let child = self
            .command(&["serve"], &["--listen", &addr])
            .args(extra)
            .spawn()
            .unwrap();
        wait_for_server(Server {
            child,
            addr,
            data: self.data_dir(),
            keep: None,
        })
    }
}

impl Backend {
    /// The store opened in this process (for in-process router and state
    /// tests): a [`FsStore`](airlock::store::fs::FsStore) on
    /// [`Backend::data_dir`], or an S3 store on the same bucket and prefix
    /// as [`Backend::store_args`].
    pub async fn open_store(&self) -> Arc<dyn airlock::store::Blobstore> {
        self.open_opened().await.blobstore()
    }

    /// [`Backend::open_store`] as the backend it is (what `gc` takes).
    pub async fn open_opened(&self) -> airlock::store::OpenedStore {
        use airlock::store::OpenedStore;
        use airlock::store::s3::S3Store;
        match &self.s3 {
            None => OpenedStore::Fs(airlock::store::fs::FsStore::open(&self.data_dir()).unwrap()),
            Some(server) => {
                set_aws_env();
                OpenedStore::S3(S3Store::open(&server.settings("site")).await.unwrap())
            }
        }
    }
}

/// Sets [`AWS_ENV`] in this process, once, for in-process S3 clients
/// (the standard AWS chain reads them).
pub fn set_aws_env() {
    static ENV: std::sync::Once = std::sync::Once::new();
    // SAFETY: set once, to the same values, before any S3 client of this
    // test binary is created; nothing else in the tests writes them.
    ENV.call_once(|| unsafe {
        for (k, v) in AWS_ENV {
            std::env::set_var(k, v);
        }
    });
}

/// One test per backend for each scenario `fn NAME(Backend)`: a module
/// `NAME` with a test per listed kind (`fs`, `moto`, `s3s_fs`, `ceph`), e.g.
/// `on_backends!([fs, moto, s3s_fs] pull, push);` runs `pull` and `push`
/// on all three. With `async` first, the scenarios are `async fn
/// NAME(Backend)` run on a multi-threaded tokio runtime.
#[allow(unused_macros)]
macro_rules! on_backends {
    (@one $mode:tt [$($kind:ident),+] $scenario:ident) => {
        mod $scenario {
            $($crate::common::backend::on_backends!(@test $mode $kind $scenario);)+
        }
    };
    (@test sync $kind:ident $scenario:ident) => {
        #[test]
        fn $kind() {
            use $crate::common::backend::{Backend, Kind};
            super::$scenario(Backend::start(Kind::named(stringify!($kind))));
        }
    };
    (@test async $kind:ident $scenario:ident) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $kind() {
            use $crate::common::backend::{Backend, Kind};
            super::$scenario(Backend::start(Kind::named(stringify!($kind)))).await;
        }
    };
    (async $kinds:tt $($scenario:ident),+ $(,)?) => {
        $($crate::common::backend::on_backends!(@one async $kinds $scenario);)+
    };
    ($kinds:tt $($scenario:ident),+ $(,)?) => {
        $($crate::common::backend::on_backends!(@one sync $kinds $scenario);)+
    };
}

#[allow(unused_imports)]
pub(crate) use on_backends;

/// Calls `f` until it returns `want` or `within` has passed, and returns
/// its last answer: for what another process changed, which a server sees
/// within its root refresh ([`Backend::refresh_bound`]).
pub fn settled<T: PartialEq>(within: Duration, want: &T, mut f: impl FnMut() -> T) -> T {
    let deadline = Instant::now() + within;
    loop {
        let got = f();
        if got == *want || Instant::now() >= deadline {
            return got;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
