//! Debian's nginx (nginx-light) as a test proxy: one process
//! (`master_process off`, `daemon off`), everything under a directory of
//! the test's, killed on drop.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running nginx, killed on drop.
pub struct Nginx {
    child: Child,
    /// `127.0.0.1:PORT`.
    pub addr: String,
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts nginx with one `server { ... }` whose body is `server_body`
/// (`__PORT__` there becomes its port; add `ssl` to the `listen` line by
/// writing it in the body), prefix and logs under `dir/nginx`; waits until
/// it listens.
pub fn start(dir: &Path, server_body: &str) -> Nginx {
    super::require_tool("nginx", "nginx-light");
    let port = super::free_port();
    let prefix = dir.join("nginx");
    std::fs::create_dir_all(prefix.join("tmp")).unwrap();
    let conf = format!(
        r#"daemon off;
master_process off;
pid {p}/nginx.pid;
error_log {p}/error.log;
events {{}}
http {{
  access_log {p}/access.log;
  client_body_temp_path {p}/tmp/body;
  proxy_temp_path {p}/tmp/proxy;
  fastcgi_temp_path {p}/tmp/fastcgi;
  uwsgi_temp_path {p}/tmp/uwsgi;
  scgi_temp_path {p}/tmp/scgi;
  server {{
    {body}
  }}
}}
"#,
        p = prefix.display(),
        body = server_body.replace("__PORT__", &port.to_string()),
    );
    let conf_path = prefix.join("nginx.conf");
    std::fs::write(&conf_path, conf).unwrap();
    let child = Command::new("nginx")
        .arg("-p")
        .arg(&prefix)
        .arg("-c")
        .arg(&conf_path)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let n = Nginx {
        child,
        addr: format!("127.0.0.1:{port}"),
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(&n.addr).is_err() {
        assert!(
            Instant::now() < deadline,
            "nginx did not listen on {}",
            n.addr
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    n
}
