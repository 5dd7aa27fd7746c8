//! The lean HTTP/1.1 path (issue 40) over real sockets on 127.0.0.1: a
//! body-less GET or HEAD is answered by the lean loop, anything else is
//! handed to hyper with the bytes already read, and the two answer alike.
//! Every request here is raw bytes, so what the server gets is exactly
//! what is written: pipelined heads, a push behind GETs on one connection,
//! `Connection: close`, a head that trickles in, a stop with kept
//! connections open.

use crate::common;

use std::time::Duration;

use airlock::server::Limits;
use common::listener::{closed_within, get_healthz, request, start};
use sha2::{Digest as _, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

fn limits(header: Duration) -> Limits {
    Limits {
        header_timeout: header,
        idle_timeout: Duration::from_secs(60),
        max_connections: 64,
        max_connections_per_address: 1000,
        shutdown_timeout: Duration::from_secs(10),
        ..Limits::default()
    }
}

/// A response read off a byte stream: the head (lowercase) and the body.
struct Answer {
    head: String,
    body: Vec<u8>,
}

impl Answer {
    fn status(&self) -> &str {
        &self.head[9..12]
    }

    /// The head without the lines that differ per response (`date`,
    /// `x-request-id`), sorted.
    fn stable_head(&self) -> Vec<String> {
        let mut lines: Vec<String> = self
            .head
            .lines()
            .filter(|l| !l.is_empty() && !l.starts_with("date:") && !l.starts_with("x-request-id:"))
            .map(str::to_string)
            .collect();
        lines.sort();
        lines
    }
}

/// Splits `wire` into the responses to requests whose methods were
/// `heads` (true: HEAD, whose answer has a length and no body);
/// `Content-Length` framing only (what these routes send).
fn split(mut wire: &[u8], heads: &[bool]) -> Vec<Answer> {
    let mut out = Vec::new();
    for &head_only in heads {
        let end = wire
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .unwrap_or_else(|| panic!("no head in {:?}", String::from_utf8_lossy(wire)))
            + 4;
        let head = String::from_utf8_lossy(&wire[..end]).to_ascii_lowercase();
        let len: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .map_or(0, |v| v.trim().parse().unwrap());
        let len = if head_only { 0 } else { len };
        out.push(Answer {
            head,
            body: wire[end..end + len].to_vec(),
        });
        wire = &wire[end + len..];
    }
    assert!(
        wire.is_empty(),
        "bytes left over: {:?}",
        String::from_utf8_lossy(wire)
    );
    out
}

/// Writes `bytes` on a new connection and reads until the server closes it.
async fn exchange(addr: std::net::SocketAddr, bytes: &[u8]) -> Vec<u8> {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(bytes).await.unwrap();
    let mut wire = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut wire))
        .await
        .expect("the server closes the connection within 10 s")
        .unwrap();
    wire
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_requests_and_a_push_behind_them_are_answered_in_order() {
    let srv = start(limits(Duration::from_secs(5))).await;
    let blob = b"pipelined blob bytes".to_vec();
    let digest = format!("sha256:{}", hex::encode(Sha256::digest(&blob)));
    // One write: two GETs and a HEAD for the lean path, then a monolithic
    // push (a body: hyper's), then a GET of what was pushed (hyper's now:
    // the connection stays with it) with `Connection: close`.
    let mut bytes = Vec::new();
    bytes.extend_from_slice(b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n");
    bytes.extend_from_slice(b"GET /v2/ HTTP/1.1\r\nHost: t\r\n\r\n");
    bytes.extend_from_slice(
        format!("HEAD /v2/lean/blobs/{digest} HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes(),
    );
    bytes.extend_from_slice(
        format!(
            "POST /v2/lean/blobs/uploads/?digest={digest} HTTP/1.1\r\nHost: t\r\n\
             Content-Type: application/octet-stream\r\nContent-Length: {}\r\n\r\n",
            blob.len()
        )
        .as_bytes(),
    );
    bytes.extend_from_slice(&blob);
    bytes.extend_from_slice(
        format!("GET /v2/lean/blobs/{digest} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
            .as_bytes(),
    );
    let wire = exchange(srv.addr, &bytes).await;
    let answers = split(&wire, &[false, false, true, false, false]);
    let statuses: Vec<&str> = answers.iter().map(Answer::status).collect();
    assert_eq!(
        statuses,
        ["200", "200", "404", "201", "200"],
        "{}",
        String::from_utf8_lossy(&wire)
    );
    assert_eq!(answers[1].body, b"{}");
    assert_eq!(answers[4].body, blob);
    assert!(
        answers[4]
            .head
            .contains(&format!("docker-content-digest: {digest}\r\n"))
    );
    assert!(
        answers[4].head.contains("connection: close\r\n"),
        "{}",
        answers[4].head
    );
}

/// Pushes the blob both answer about (`alike`); returns its digest.
async fn push_alike(addr: std::net::SocketAddr) -> String {
    let blob = b"the same bytes either way".to_vec();
    let digest = format!("sha256:{}", hex::encode(Sha256::digest(&blob)));
    let push = format!(
        "POST /v2/alike/blobs/uploads/?digest={digest} HTTP/1.1\r\nHost: t\r\nContent-Length: {}\r\n\r\n",
        blob.len()
    );
    let (head, _) = request(addr, &[push.as_bytes(), &blob].concat()).await;
    assert!(head.starts_with("http/1.1 201"), "{head}");
    digest
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lean_path_and_hyper_answer_alike() {
    let srv = start(limits(Duration::from_secs(5))).await;
    let digest = push_alike(srv.addr).await;
    for (method, target) in [
        ("GET", "/v2/".to_string()),
        ("GET", "/healthz".to_string()),
        ("HEAD", "/healthz".to_string()),
        ("HEAD", "/v2/".to_string()),
        ("GET", format!("/v2/alike/blobs/{digest}")),
        ("HEAD", format!("/v2/alike/blobs/{digest}")),
        ("GET", "/v2/alike/tags/list".to_string()),
        ("GET", "/v2/alike/manifests/missing".to_string()),
        ("HEAD", "/v2/nobody/manifests/missing".to_string()),
        ("GET", "/v2/alike/blobs/sha256:abc".to_string()),
        ("GET", "/metrics-nowhere".to_string()),
    ] {
        let lean = format!("{method} {target} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
        // `Content-Length: 0` sends the same request to hyper.
        let hyper = format!(
            "{method} {target} HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        );
        let head_only = method == "HEAD";
        let a = split(&exchange(srv.addr, lean.as_bytes()).await, &[head_only]).remove(0);
        let b = split(&exchange(srv.addr, hyper.as_bytes()).await, &[head_only]).remove(0);
        assert_eq!(a.stable_head(), b.stable_head(), "{method} {target}");
        assert_eq!(a.body, b.body, "{method} {target}");
        assert!(
            a.head.contains("\r\ndate: "),
            "{method} {target}: {}",
            a.head
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_trickling_in_on_a_kept_connection_is_closed_after_the_header_timeout() {
    let srv = start(limits(Duration::from_secs(1))).await;
    let mut s = TcpStream::connect(srv.addr).await.unwrap();
    get_healthz(&mut s).await;
    let started = std::time::Instant::now();
    s.write_all(b"GET /healthz HTTP/1.1\r\nX-Slow: ")
        .await
        .unwrap();
    // A byte every 200 ms is activity, but no complete head: the header
    // timeout counts from the end of the previous response regardless.
    let mut closed = false;
    for _ in 0..25 {
        tokio::time::sleep(Duration::from_millis(200)).await;
        if s.write_all(b"a").await.is_err() {
            closed = true;
            break;
        }
        let mut probe = [0u8; 1];
        if let Ok(Ok(0)) = tokio::time::timeout(Duration::from_millis(1), s.read(&mut probe)).await
        {
            closed = true;
            break;
        }
    }
    let took = started.elapsed();
    assert!(closed, "still open after {took:?}");
    assert!(
        took >= Duration::from_millis(800),
        "closed too early: {took:?}"
    );
    assert!(
        took < Duration::from_millis(2500),
        "closed too late: {took:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_closes_kept_connections_at_once() {
    let mut srv = start(limits(Duration::from_secs(30))).await;
    let mut kept = Vec::new();
    for _ in 0..4 {
        let mut s = TcpStream::connect(srv.addr).await.unwrap();
        let head = get_healthz(&mut s).await;
        assert!(!head.contains("connection: close"), "{head}");
        kept.push(s);
    }
    let started = std::time::Instant::now();
    srv.stop.take().unwrap().send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(5), srv.task)
        .await
        .expect("the server stops without waiting for kept connections")
        .unwrap()
        .unwrap();
    // The shutdown timeout is 10 s: idle kept connections did not hold it.
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    for s in &mut kept {
        closed_within(s, Duration::from_secs(2)).await;
    }
}

/// Issue 60, item 2: the header timeout bounds only the wait for a request
/// head, never a response body, whichever request of a connection it
/// answers. A 64 MiB blob is fetched three times on one connection by curl
/// reading at 16 MiB/s (4 s a download, the server writing for about 3 s
/// of it: twice the header timeout of 1.5 s, which still exceeds the time
/// the client takes to drain the socket buffers before its next request),
/// over plain HTTP/1.1, TLS HTTP/1.1 and TLS HTTP/2, all at once: every
/// download completes, whole (sha256 by
/// coreutils), on one connection (curl's `num_connects` 1, 0, 0). Before
/// the fix the second download was cut a header timeout after the first
/// ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn downloads_later_on_a_connection_are_never_cut_by_the_header_timeout() {
    common::require_tool("curl", "curl");
    let limits = limits(Duration::from_millis(1500));
    let srv = start(limits.clone()).await;
    let dir = tempfile::tempdir().unwrap();
    let mut blob = vec![0u8; 64 << 20];
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for b in blob.iter_mut() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = x as u8;
    }
    let file = dir.path().join("blob");
    std::fs::write(&file, &blob).unwrap();
    let digest = common::sha256sum(&file);
    let want = digest.clone();
    let push = tokio::process::Command::new("curl")
        .args([
            "-sS",
            "-o",
            "/dev/stderr",
            "-w",
            "%{http_code}",
            "--data-binary",
        ])
        .arg(format!("@{}", file.display()))
        .args(["-H", "Content-Type: application/octet-stream"])
        .arg(format!(
            "http://{}/v2/slow/blobs/uploads/?digest={digest}",
            srv.addr
        ))
        .output()
        .await
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&push.stdout),
        "201",
        "{}",
        String::from_utf8_lossy(&push.stderr)
    );
    // The same store over TLS, under the same limits.
    let (crt, key) = common::self_signed_cert(dir.path(), "srv", "localhost");
    let tls = airlock::server::tls::Tls::load(airlock::server::tls::TlsFiles {
        cert: crt,
        key,
        client_ca: None,
    })
    .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let tls_addr = listener.local_addr().unwrap();
    tokio::spawn(airlock::server::serve_listener(
        listener,
        srv.app.clone(),
        limits,
        Some(std::sync::Arc::new(tls)),
        std::future::pending(),
    ));
    let path = format!("/v2/slow/blobs/{digest}");
    let modes = [
        (
            "http/1.1",
            format!("http://{}{path}", srv.addr),
            "--http1.1",
            "1.1",
        ),
        (
            "tls http/1.1",
            format!("https://{tls_addr}{path}"),
            "--http1.1",
            "1.1",
        ),
        // (Plain HTTP/2 with prior knowledge is left out: Debian's curl
        // 7.88 fails the second request of such a connection against any
        // server, hyper alone too; HTTP/2 goes over TLS here.)
        (
            "tls h2",
            format!("https://{tls_addr}{path}"),
            "--http2",
            "2",
        ),
    ];
    let mut runs = Vec::new();
    for (i, (mode, url, flag, version)) in modes.into_iter().enumerate() {
        let outs: Vec<_> = (0..3)
            .map(|n| dir.path().join(format!("out-{i}-{n}")))
            .collect();
        let mut cmd = tokio::process::Command::new("curl");
        cmd.args(["-sS", "-k", flag, "--limit-rate", "16M"]);
        cmd.args([
            "-w",
            "%{http_code} %{size_download} %{num_connects} %{http_version}\\n",
        ]);
        for o in &outs {
            cmd.arg("-o").arg(o).arg(&url);
        }
        runs.push((
            mode,
            version,
            outs,
            tokio::spawn(async move { cmd.output().await }),
        ));
    }
    for (mode, version, outs, run) in runs {
        let o = run.await.unwrap().unwrap();
        let lines = String::from_utf8_lossy(&o.stdout).to_string();
        assert!(
            o.status.success(),
            "{mode}: curl {:?}: {lines}{}",
            o.status,
            String::from_utf8_lossy(&o.stderr)
        );
        let rows: Vec<&str> = lines.lines().collect();
        let len = blob.len();
        assert_eq!(
            rows,
            [
                format!("200 {len} 1 {version}"),
                format!("200 {len} 0 {version}"),
                format!("200 {len} 0 {version}"),
            ],
            "{mode}"
        );
        for out in &outs {
            assert_eq!(common::sha256sum(out), want, "{mode}: {}", out.display());
        }
    }
}

/// A deterministic generator (xorshift64*).
struct Gen(u64);

impl Gen {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n as u64) as usize
    }

    fn pick<'a>(&mut self, from: &[&'a str]) -> &'a str {
        from[self.below(from.len())]
    }
}

/// One generated request: a head of random method, target, version and
/// header shapes (framing headers included), with the body its framing
/// announces.
fn generated_request(g: &mut Gen, blob: &str) -> Vec<u8> {
    let method = g.pick(&[
        "GET", "GET", "GET", "HEAD", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "get", "GET ",
    ]);
    let blob_path = format!("/v2/alike/blobs/{blob}");
    let target = g.pick(&[
        "/healthz",
        "/v2/",
        "/v2",
        "/v2/alike/manifests/missing",
        &blob_path,
        "/nowhere",
        "/v2/%zz/tags/list",
        "/v2/_catalog",
        "*",
        "http://t/healthz",
        "/stacks/v1/",
        "/healthz?x=1",
        "/v2/alike/tags/list?n=1",
    ]);
    let version = g.pick(&[
        "HTTP/1.1", "HTTP/1.1", "HTTP/1.1", "HTTP/1.1", "HTTP/1.0", "HTTP/1.2", "HTTP/2.0",
        "http/1.1",
    ]);
    let mut head = format!("{method} {target} {version}\r\n");
    let mut body = Vec::new();
    if g.below(8) != 0 {
        head.push_str("Host: t\r\n");
    }
    for _ in 0..g.below(4) {
        let line = g.pick(&[
            "Host: other\r\n",
            "Connection: close\r\n",
            "Connection: keep-alive\r\n",
            "connection: Close\r\n",
            "Content-Length: 0\r\n",
            "Content-Length: 3\r\n",
            "Content-Length: -1\r\n",
            "Content-Length: 3\r\nContent-Length: 4\r\n",
            "Transfer-Encoding: chunked\r\n",
            "Transfer-Encoding: gzip\r\n",
            "Expect: 100-continue\r\n",
            "X-Folded: a\r\n b\r\n",
            " X-Leading: space\r\n",
            "X-Empty:\r\n",
            "X-Empty-Spaced:   \r\n",
            "NoColon\r\n",
            "X-Tab:\tvalue\t\r\n",
            "Range: bytes=0-3\r\n",
            "If-None-Match: \"x\"\r\n",
            "Accept: application/vnd.oci.image.manifest.v1+json\r\n",
            "X-Utf8: \u{e9}\r\n",
            "Upgrade: websocket\r\n",
            "X-Bad\u{1}Name: v\r\n",
        ]);
        if line.starts_with("Content-Length: 3\r\n") && !line.contains("4") {
            body.extend_from_slice(b"abc");
        }
        if line.starts_with("Transfer-Encoding: chunked") {
            body.extend_from_slice(b"3\r\nabc\r\n0\r\n\r\n");
        }
        head.push_str(line);
    }
    if g.below(10) == 0 {
        head.push_str(&format!("X-Long: {}\r\n", "a".repeat(70 << 10)));
    }
    head.push_str("\r\n");
    [head.into_bytes(), body].concat()
}

/// What a server did with `writes`: every byte it sent (its `date` and
/// `x-request-id` values blanked) and whether it closed the connection within 3 s of
/// the last write (else it kept it open).
async fn fate(addr: std::net::SocketAddr, writes: &[Vec<u8>]) -> (Vec<u8>, bool) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.set_nodelay(true).unwrap();
    for (i, w) in writes.iter().enumerate() {
        if i > 0 {
            // Lets the server read what came before on its own.
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        if s.write_all(w).await.is_err() {
            break;
        }
    }
    let mut wire = Vec::new();
    let closed = tokio::time::timeout(Duration::from_secs(3), async {
        let mut chunk = [0u8; 65536];
        loop {
            match s.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => wire.extend_from_slice(&chunk[..n]),
            }
        }
    })
    .await
    .is_ok();
    // Values that differ per response: the time, the request's id.
    let varying = regex::bytes::Regex::new(r"(?i)\r\n(date|x-request-id): [^\r]*").unwrap();
    (
        varying.replace_all(&wire, &b"\r\n$1: -"[..]).into_owned(),
        closed,
    )
}

/// Whether two fates differ only in how a head over `max_request_head`
/// behind a pipelined request was refused: hyper alone answers it 400 or
/// 431 depending on how the bytes before it were read (the same bytes,
/// sent alone, get 431 from both); both close the connection.
fn same_refusal(a: &(Vec<u8>, bool), b: &(Vec<u8>, bool)) -> bool {
    let last = |w: &[u8]| {
        let at = w.windows(9).rposition(|x| x == b"HTTP/1.1 ").unwrap_or(0);
        (w[..at].to_vec(), w[at..].get(9..12).map(<[u8]>::to_vec))
    };
    let ((pa, sa), (pb, sb)) = (last(&a.0), last(&b.0));
    let refusal = |s: &Option<Vec<u8>>| matches!(s.as_deref(), Some(b"400" | b"431"));
    a.1 && b.1 && pa == pb && refusal(&sa) && refusal(&sb)
}

/// Issue 60: a differential test of the lean path against hyper. Two
/// servers over one store, the lean path on and off (hyper serves every
/// byte), get the same generated byte streams: requests of random
/// methods, targets, versions and header shapes (framing headers, folds,
/// junk), pipelined one to three at a time, split into writes at random
/// places, each stream ending (most of the time) with a `Connection:
/// close` request; and three pipelines split at every byte. Both must
/// send the same bytes (but `Date`) and leave the connection to the same
/// fate (closed, or open after 3 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lean_path_and_hyper_answer_generated_requests_alike() {
    let srv = start(limits(Duration::from_secs(5))).await;
    let hyper_only = common::listener::serve_store(
        &srv.backend,
        Limits {
            lean_http1: false,
            ..limits(Duration::from_secs(5))
        },
        airlock::registry::RegistryConfig {
            allow_push: true,
            ..Default::default()
        },
    )
    .await;
    let digest = push_alike(srv.addr).await;
    let close = b"GET /healthz HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n".to_vec();
    let mut g = Gen(0x6c65_616e_2f68_7970);
    let mut cases: Vec<Vec<Vec<u8>>> = Vec::new();
    for _ in 0..400 {
        let mut bytes = Vec::new();
        for _ in 0..1 + g.below(3) {
            bytes.extend(generated_request(&mut g, &digest));
        }
        if g.below(5) != 0 {
            bytes.extend_from_slice(&close);
        }
        let mut cuts: Vec<usize> = (0..g.below(4)).map(|_| g.below(bytes.len())).collect();
        cuts.sort_unstable();
        cuts.dedup();
        let mut writes = Vec::new();
        let mut from = 0;
        for c in cuts.into_iter().filter(|c| *c > 0) {
            writes.push(bytes[from..c].to_vec());
            from = c;
        }
        writes.push(bytes[from..].to_vec());
        cases.push(writes);
    }
    // Splits at every byte of a GET, a HEAD and a pipeline of the two.
    let get = format!("GET /v2/alike/blobs/{digest} HTTP/1.1\r\nHost: t\r\n\r\n").into_bytes();
    let head = b"HEAD /v2/ HTTP/1.1\r\nHost: t\r\n\r\n".to_vec();
    for whole in [
        [get.clone(), close.clone()].concat(),
        [head.clone(), close.clone()].concat(),
        [get, head, close.clone()].concat(),
    ] {
        for at in 1..whole.len() {
            cases.push(vec![whole[..at].to_vec(), whole[at..].to_vec()]);
        }
    }
    let (lean, hyper) = (srv.addr, hyper_only.addr);
    let mut wrong = Vec::new();
    let total = cases.len();
    for chunk in cases.chunks(32) {
        let runs: Vec<_> = chunk
            .iter()
            .cloned()
            .map(|writes| {
                tokio::spawn(async move {
                    let (a, b) = tokio::join!(fate(lean, &writes), fate(hyper, &writes));
                    (writes, a, b)
                })
            })
            .collect();
        for run in runs {
            let (writes, a, b) = run.await.unwrap();
            if a != b && !same_refusal(&a, &b) {
                wrong.push(format!(
                    "sent {:?}\n lean  (closed {}): {:?}\n hyper (closed {}): {:?}",
                    String::from_utf8_lossy(&writes.concat()),
                    a.1,
                    String::from_utf8_lossy(&a.0[..a.0.len().min(600)]),
                    b.1,
                    String::from_utf8_lossy(&b.0[..b.0.len().min(600)]),
                ));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "{} of {total} streams answered differently:\n{}",
        wrong.len(),
        wrong[..wrong.len().min(8)].join("\n")
    );
}
