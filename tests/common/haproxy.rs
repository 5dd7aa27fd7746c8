//! Debian's HAProxy as the load balancer in front of replicas: one
//! process in the foreground (`-db`), its config under a directory of the
//! test's, killed on drop.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running HAProxy, killed on drop.
pub struct Haproxy {
    child: Child,
    /// `127.0.0.1:PORT` of its frontend.
    pub addr: String,
}

impl Drop for Haproxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts HAProxy balancing HTTP round-robin over `servers`
/// (`127.0.0.1:PORT` each, named `r0`, `r1`, ...), no stickiness, each
/// health-checked with `GET /readyz` every 300 ms (down after 2 failures,
/// up after 2 successes); a request whose connection to a server fails is
/// sent again to another (`retry-on conn-failure`, `option redispatch`).
/// Each response says which server answered in `X-Served-By`. Waits until
/// the frontend listens.
pub fn start(dir: &Path, servers: &[String]) -> Haproxy {
    super::require_tool("haproxy", "haproxy");
    let port = super::free_port();
    let mut backends = String::new();
    for (i, s) in servers.iter().enumerate() {
        backends.push_str(&format!("  server r{i} {s} check\n"));
    }
    let conf = format!(
        r#"global
  maxconn 4096
defaults
  mode http
  timeout connect 2s
  timeout client 60s
  timeout server 60s
  retries 3
  option redispatch 1
  retry-on conn-failure
  default-server inter 300ms fall 2 rise 2
frontend fe
  bind 127.0.0.1:{port}
  default_backend replicas
backend replicas
  balance roundrobin
  option httpchk GET /readyz
  http-check expect status 200
  http-response set-header X-Served-By %s
{backends}"#
    );
    let path = dir.join("haproxy.cfg");
    std::fs::write(&path, conf).unwrap();
    let child = Command::new("haproxy")
        .arg("-db")
        .arg("-f")
        .arg(&path)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let h = Haproxy {
        child,
        addr: format!("127.0.0.1:{port}"),
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(&h.addr).is_err() {
        assert!(
            Instant::now() < deadline,
            "haproxy did not listen on {}",
            h.addr
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    h
}
