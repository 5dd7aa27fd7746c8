//! A long-running `airlock serve` as an operator runs it (issue 23 §6,
//! §7): a second server on the same address is refused instead of sharing
//! the traffic, and SIGHUP never stops the server: it re-reads the config,
//! applies users and the log filter at once, keeps the running config when
//! the new one is invalid, and names what needs a restart.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine as _;
use common::site::hash;
use common::{free_port, http};

/// `airlock serve ARGS` with stderr to `log`, killed on drop.
struct Serve {
    child: Child,
    log: PathBuf,
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Serve {
    fn start(dir: &Path, name: &str, args: &[&str]) -> Serve {
        let log = dir.join(format!("{name}.log"));
        let child = Command::new(env!("CARGO_BIN_EXE_airlock"))
            .arg("serve")
            .args(args)
            .stderr(Stdio::from(std::fs::File::create(&log).unwrap()))
            .spawn()
            .unwrap();
        Serve { child, log }
    }

    /// The server's log so far, without terminal colour codes.
    fn log(&self) -> String {
        let raw = std::fs::read_to_string(&self.log).unwrap_or_default();
        let mut out = String::with_capacity(raw.len());
        let mut rest = raw.as_str();
        while let Some(at) = rest.find('\x1b') {
            out.push_str(&rest[..at]);
            let tail = &rest[at..];
            let end = tail.find('m').map_or(tail.len(), |m| m + 1);
            rest = &tail[end..];
        }
        out.push_str(rest);
        out
    }

    fn hangup(&self) {
        common::run_ok(Command::new("kill").args(["-HUP", &self.child.id().to_string()]));
    }

    fn alive(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    /// Waits (5 s at most) until the log holds `text`.
    fn logged(&self, text: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let log = self.log();
            if log.contains(text) || Instant::now() > deadline {
                assert!(log.contains(text), "{text:?} not logged:\n{log}");
                return log;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// GET /v2/ as `user:password`: the status (0 when nothing answers).
fn status_as(addr: &str, user: &str, password: &str) -> u16 {
    let auth = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
    );
    http(addr, "GET", "/v2/", &[("Authorization", &auth)]).map_or(0, |r| r.0)
}

/// Polls `f` (5 s at most) until it returns `want`.
fn eventually(want: u16, mut f: impl FnMut() -> u16) -> u16 {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let got = f();
        if got == want || Instant::now() > deadline {
            return got;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn config(addr: &str, data: &Path, log: &str, users: &[(&str, &str, &str)], extra: &str) -> String {
    let mut c = format!(
        "listen = \"{addr}\"\nlog = \"{log}\"\n[store]\npath = {:?}\n{extra}\n",
        data.display().to_string()
    );
    for (name, password, role) in users {
        c.push_str(&format!(
            "[[user]]\nname = \"{name}\"\n{}\nroles = [\"{role}\"]\n",
            hash(password)
        ));
    }
    c
}

#[test]
fn sighup_reloads_users_and_log_and_never_stops_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let addr = format!("127.0.0.1:{}", free_port());
    let cfg = dir.path().join("airlock.toml");
    let ops = ("ops", "ops-pw", "admin");
    std::fs::write(&cfg, config(&addr, &data, "warn", &[ops], "")).unwrap();
    let mut server = Serve::start(dir.path(), "serve", &["--config", cfg.to_str().unwrap()]);
    assert_eq!(eventually(200, || status_as(&addr, "ops", "ops-pw")), 200);
    assert_eq!(status_as(&addr, "dev", "dev-pw"), 401);
    assert!(!server.log().contains("\"request\"") && !server.log().contains(" request "));

    // A user added and the log filter raised: both at once, no restart.
    let dev = ("dev", "dev-pw", "reader");
    std::fs::write(&cfg, config(&addr, &data, "info", &[ops, dev], "")).unwrap();
    server.hangup();
    assert_eq!(eventually(200, || status_as(&addr, "dev", "dev-pw")), 200);
    let log = server.logged("config reloaded (SIGHUP)");
    assert!(log.contains("applied: users, log"), "{log}");
    status_as(&addr, "ops", "ops-pw");
    server.logged("status=200");
    assert!(server.alive());

    // An invalid config: logged, the running one stays.
    std::fs::write(&cfg, "listen = [1, 2]\n").unwrap();
    server.hangup();
    server.logged("keeping the running config");
    assert_eq!(status_as(&addr, "dev", "dev-pw"), 200);
    assert!(server.alive());

    // A new listen address needs a restart: named, and the old one serves.
    let other = format!("127.0.0.1:{}", free_port());
    std::fs::write(&cfg, config(&other, &data, "info", &[ops, dev], "")).unwrap();
    server.hangup();
    let log = server.logged("needs a restart (kept as running): listen");
    assert!(log.contains("config reloaded"), "{log}");
    assert_eq!(status_as(&addr, "dev", "dev-pw"), 200);
    assert_eq!(status_as(&other, "dev", "dev-pw"), 0);
    assert!(server.alive());
}

#[test]
fn sighup_without_a_config_file_keeps_serving_plain_http() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let addr = format!("127.0.0.1:{}", free_port());
    let mut server = Serve::start(
        dir.path(),
        "plain",
        &[
            "--data",
            data.to_str().unwrap(),
            "--listen",
            &addr,
            "--log",
            "info",
        ],
    );
    assert_eq!(
        eventually(200, || http(&addr, "GET", "/v2/", &[]).map_or(0, |r| r.0)),
        200
    );
    for _ in 0..3 {
        server.hangup();
        std::thread::sleep(Duration::from_millis(200));
        assert!(
            server.alive(),
            "SIGHUP stopped the server:\n{}",
            server.log()
        );
    }
    assert_eq!(http(&addr, "GET", "/v2/", &[]).unwrap().0, 200);
    server.logged("nothing changed");
}

#[test]
fn a_second_server_on_the_same_address_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let addr = format!("127.0.0.1:{}", free_port());
    let a_data = dir.path().join("a");
    let mut a = Serve::start(
        dir.path(),
        "a",
        &["--data", a_data.to_str().unwrap(), "--listen", &addr],
    );
    assert_eq!(
        eventually(200, || http(&addr, "GET", "/v2/_catalog", &[])
            .map_or(0, |r| r.0)),
        200
    );
    // Another store with users: were it to bind too, some answers would be 401.
    let b_data = dir.path().join("b");
    let cfg = dir.path().join("b.toml");
    std::fs::write(
        &cfg,
        config(&addr, &b_data, "warn", &[("ops", "ops-pw", "admin")], ""),
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_airlock"))
        .args(["serve", "--config", cfg.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!(
            "cannot listen on {addr}: another process already listens on it"
        )),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
    for _ in 0..12 {
        assert_eq!(http(&addr, "GET", "/v2/_catalog", &[]).unwrap().0, 200);
    }
    assert!(a.alive());
}
