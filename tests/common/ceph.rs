//! A single-node Ceph cluster with the RADOS Gateway (Debian's ceph-mon,
//! ceph-mgr, ceph-osd and radosgw; `scripts/ceph-rgw.sh`), started once
//! per test process on first use and shared: each [`super::backend::S3Server`]
//! of kind Ceph gets a bucket of its own. The cluster lives under the
//! system's temp directory and stops (and is removed) when the test
//! process exits, by the parent-death signal of its start script.

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use super::backend::AWS_ENV;

/// How long the cluster may take to come up (about 30 s when idle).
const START_TIMEOUT: Duration = Duration::from_secs(240);

/// The gateway's endpoint, `http://127.0.0.1:PORT`; starts the cluster on
/// first use. Panics (naming the packages to install, or the script's
/// error) when it cannot start.
pub fn endpoint() -> &'static str {
    static CLUSTER: OnceLock<String> = OnceLock::new();
    CLUSTER.get_or_init(start)
}

fn start() -> String {
    for tool in [
        "ceph-mon",
        "ceph-mgr",
        "ceph-osd",
        "radosgw",
        "radosgw-admin",
    ] {
        super::require_installed(
            tool,
            "apt-get install ceph-mon ceph-mgr ceph-osd radosgw (scripts/install-test-deps.sh)",
        );
    }
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scripts/ceph-rgw.sh");
    let dir = std::env::temp_dir().join(format!("airlock-ceph-{}", std::process::id()));
    let log = dir.with_extension("log");
    let port = super::free_port();
    let (tx, rx) = std::sync::mpsc::channel();
    // The script is started by a thread that never ends: the parent-death
    // signal follows the thread that forked, and a test's thread ends
    // with its test.
    std::thread::spawn(move || {
        let stderr = std::fs::File::create(&log).unwrap();
        let mut cmd = Command::new(&script);
        cmd.arg(&dir)
            .arg(port.to_string())
            .env("CEPH_RGW_CLEANUP", "1")
            .stdout(Stdio::piped())
            .stderr(stderr);
        // SAFETY: prctl is async-signal-safe; nothing else runs between
        // fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
                Ok(())
            });
        }
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                let _ = tx.send(Err(format!("starting {}: {e}", script.display())));
                return;
            }
        };
        let out = BufReader::new(child.stdout.take().unwrap());
        let mut sent = false;
        for line in out.lines().map_while(Result::ok) {
            if let Some(url) = line.strip_prefix("ready ") {
                let _ = tx.send(Ok(url.to_string()));
                sent = true;
            }
        }
        if !sent {
            let _ = child.wait();
            let why = std::fs::read_to_string(&log).unwrap_or_default();
            let tail: Vec<&str> = why.lines().rev().take(5).collect();
            let _ = tx.send(Err(tail.into_iter().rev().collect::<Vec<_>>().join("\n")));
        }
        loop {
            std::thread::park();
        }
    });
    match rx.recv_timeout(START_TIMEOUT) {
        Ok(Ok(url)) => url,
        Ok(Err(why)) => panic!("the test Ceph cluster did not start: {why}"),
        Err(_) => panic!("the test Ceph cluster did not start within {START_TIMEOUT:?}"),
    }
}

/// A new, empty bucket on the cluster, named `airlock-test-PID-N`.
pub fn new_bucket() -> String {
    static N: AtomicUsize = AtomicUsize::new(0);
    let name = format!(
        "airlock-test-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    );
    let o = Command::new("python3")
        .args([
            "-c",
            "import sys, boto3\nboto3.client('s3', endpoint_url=sys.argv[1], region_name='us-east-1').create_bucket(Bucket=sys.argv[2])",
            endpoint(),
            &name,
        ])
        .envs(AWS_ENV)
        .output()
        .expect("python3 (apt-get install python3)");
    assert!(
        o.status.success(),
        "creating bucket {name} on Ceph RGW failed (pip install boto3): {}",
        String::from_utf8_lossy(&o.stderr)
    );
    name
}
