//! The per-core layout of `airlock serve` (`--workers N`): N worker
//! threads, each with its own runtime and SO_REUSEPORT socket, over real
//! sockets on 127.0.0.1. Many concurrent clients are all answered and
//! spread over the workers (per-thread socket writes from
//! /proc/PID/task/TID/io), the connection cap is global across workers,
//! and SIGTERM stops every worker. Every wait is bounded.

use crate::common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, ExitStatus};
use std::time::{Duration, Instant};

const GET_V2: &[u8] = b"GET /v2/ HTTP/1.1\r\nHost: test\r\n\r\n";

/// `airlock serve --workers WORKERS` plus `extra` on a free port of a
/// fresh store, answering `/v2/`.
struct Serve {
    child: Child,
    addr: String,
    _dir: tempfile::TempDir,
}

impl Serve {
    fn start(workers: &str, extra: &[&str]) -> Serve {
        let dir = tempfile::tempdir().unwrap();
        let addr = format!("127.0.0.1:{}", common::free_port());
        let child = Command::new(env!("CARGO_BIN_EXE_airlock"))
            .args(["serve", "--data", dir.path().to_str().unwrap()])
            .args(["--listen", &addr, "--workers", workers, "--log", "warn"])
            .args(extra)
            .spawn()
            .unwrap();
        let srv = Serve {
            child,
            addr,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while common::http(&srv.addr, "GET", "/v2/", &[]).is_err() {
            assert!(Instant::now() < deadline, "airlock serve did not answer");
            std::thread::sleep(Duration::from_millis(50));
        }
        srv
    }

    /// Thread id of each worker thread (named `airlock-http-I`), by I.
    fn workers(&self) -> Vec<(String, String)> {
        let dir = format!("/proc/{}/task", self.child.id());
        let mut out: Vec<(String, String)> = std::fs::read_dir(dir)
            .unwrap()
            .filter_map(|e| {
                let tid = e.ok()?.file_name().into_string().ok()?;
                let comm =
                    std::fs::read_to_string(format!("/proc/{}/task/{tid}/comm", self.child.id()))
                        .ok()?;
                let name = comm.trim().to_string();
                name.starts_with("airlock-http-").then_some((name, tid))
            })
            .collect();
        out.sort();
        out
    }

    /// Write system calls made so far by thread `tid`.
    fn writes(&self, tid: &str) -> u64 {
        let io = std::fs::read_to_string(format!("/proc/{}/task/{tid}/io", self.child.id()))
            .expect("/proc/PID/task/TID/io (needs task I/O accounting)");
        io.lines()
            .find_map(|l| l.strip_prefix("syscw:"))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    }

    /// SIGTERM, then the exit status (within 10 s).
    fn terminate(mut self) -> ExitStatus {
        common::terminate(&mut self.child, Duration::from_secs(10))
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Sends GET /v2/ on `s` and reads the response head (5 s at most).
fn get_v2(s: &mut TcpStream) -> String {
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(GET_V2).unwrap();
    read_head(s).expect("response within 5 s")
}

/// Reads one response head and its `Content-Length` body; `None` on a
/// read timeout or EOF.
fn read_head(s: &mut TcpStream) -> Option<String> {
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        match s.read(&mut byte) {
            Ok(1) => buf.push(byte[0]),
            _ => return None,
        }
    }
    let head = String::from_utf8_lossy(&buf).to_ascii_lowercase();
    let len: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .map_or(0, |v| v.trim().parse().unwrap());
    let mut body = vec![0u8; len];
    s.read_exact(&mut body).ok()?;
    Some(head)
}

#[test]
fn concurrent_clients_are_spread_over_the_workers_and_all_answered() {
    let srv = Serve::start("2", &[]);
    let workers = srv.workers();
    let names: Vec<&str> = workers.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["airlock-http-0", "airlock-http-1"]);
    let before: Vec<u64> = workers.iter().map(|(_, tid)| srv.writes(tid)).collect();
    // 64 clients at once, each with 4 requests on its connection.
    let clients: Vec<_> = (0..64)
        .map(|_| {
            let addr = srv.addr.clone();
            std::thread::spawn(move || {
                let mut s = TcpStream::connect(&addr).unwrap();
                (0..4).map(|_| get_v2(&mut s)).collect::<Vec<_>>()
            })
        })
        .collect();
    for c in clients {
        for head in c.join().unwrap() {
            assert!(head.starts_with("http/1.1 200"), "{head}");
        }
    }
    // The kernel hashes each connection to one worker's socket: with 64
    // connections, both workers wrote responses (all on one: p = 2^-63).
    for ((name, tid), before) in workers.iter().zip(before) {
        let wrote = srv.writes(tid) - before;
        assert!(wrote > 0, "{name} wrote nothing");
    }
    assert!(srv.terminate().success());
}

#[test]
fn connection_cap_is_global_across_workers() {
    let srv = Serve::start(
        "2",
        &[
            "--max-connections",
            "4",
            "--max-connections-per-address",
            "100",
        ],
    );
    // Four connections that have each sent a request (none evictable)...
    let mut held: Vec<TcpStream> = (0..4)
        .map(|_| {
            let mut s = TcpStream::connect(&srv.addr).unwrap();
            assert!(get_v2(&mut s).starts_with("http/1.1 200"));
            s
        })
        .collect();
    // ...fill the cap of the whole server, whichever worker holds them: a
    // fifth is not served (with per-worker caps it would be).
    let mut fifth = TcpStream::connect(&srv.addr).unwrap();
    fifth.write_all(GET_V2).unwrap();
    fifth
        .set_read_timeout(Some(Duration::from_millis(800)))
        .unwrap();
    assert_eq!(
        read_head(&mut fifth),
        None,
        "fifth client served above the cap"
    );
    // One closes: the fifth is answered.
    drop(held.remove(0));
    fifth
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let head = read_head(&mut fifth).expect("fifth client served once a slot is free");
    assert!(head.starts_with("http/1.1 200"), "{head}");
    assert!(get_v2(&mut held[0]).starts_with("http/1.1 200"));
    assert!(srv.terminate().success());
}

#[test]
fn workers_zero_serves_on_the_shared_runtime() {
    let srv = Serve::start("0", &[]);
    assert_eq!(srv.workers(), Vec::<(String, String)>::new());
    let mut s = TcpStream::connect(&srv.addr).unwrap();
    assert!(get_v2(&mut s).starts_with("http/1.1 200"));
    drop(s);
    assert!(srv.terminate().success());
}

#[test]
fn more_than_1024_workers_is_a_config_error() {
    let dir = tempfile::tempdir().unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_airlock"))
        .args(["serve", "--data", dir.path().to_str().unwrap()])
        .args(["--workers", "1025", "--check-config"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("workers") && err.contains("1024"), "{err}");
}

/// `--shutdown-delay-secs 2`: after SIGTERM `/readyz` answers 503
/// `stopping` while requests (on a new connection and on one opened
/// before) are still answered; the listeners close and the process exits
/// only after the delay. A second SIGTERM ends the wait.
#[test]
fn sigterm_first_turns_readyz_to_503_and_keeps_serving_for_the_delay() {
    let sigterm = |srv: &Serve| {
        let pid = i32::try_from(srv.child.id()).unwrap();
        // SAFETY: kill(2) on our own child's pid with a valid signal.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    };
    let mut srv = Serve::start("2", &["--shutdown-delay-secs", "2"]);
    let (status, _, body) = common::http(&srv.addr, "GET", "/readyz", &[]).unwrap();
    assert_eq!((status, body.as_slice()), (200, &b"ok"[..]));
    let mut kept = TcpStream::connect(&srv.addr).unwrap();
    assert!(get_v2(&mut kept).starts_with("http/1.1 200"));
    let stopped_at = Instant::now();
    sigterm(&srv);
    let deadline = Instant::now() + Duration::from_secs(1);
    loop {
        let (status, _, body) = common::http(&srv.addr, "GET", "/readyz", &[]).unwrap();
        if status == 503 {
            assert_eq!(body, b"stopping\n");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "/readyz still {status} after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(common::http(&srv.addr, "GET", "/v2/", &[]).unwrap().0, 200);
    assert!(get_v2(&mut kept).starts_with("http/1.1 200"));
    assert!(
        srv.child.try_wait().unwrap().is_none(),
        "exited within the delay"
    );
    let status = common::terminate(&mut srv.child, Duration::from_secs(10));
    assert!(status.success(), "{status:?}");
    let took = stopped_at.elapsed();
    // The second SIGTERM (sent by terminate) ended the delay early.
    assert!(took < Duration::from_secs(2), "{took:?}");
    assert!(common::http(&srv.addr, "GET", "/v2/", &[]).is_err());

    // Without a second signal it waits the whole delay.
    let srv = Serve::start("2", &["--shutdown-delay-secs", "2"]);
    let stopped_at = Instant::now();
    let status = srv.terminate();
    assert!(status.success());
    assert!(
        stopped_at.elapsed() >= Duration::from_secs(2),
        "{:?}",
        stopped_at.elapsed()
    );
}
