//! Replicas behind a load balancer, under failure (issue 37 §5): HAProxy
//! round-robin, no stickiness, health-checking `/readyz`, in front of three
//! `airlock serve` replicas on one Ceph RGW bucket. Eight push loops, two
//! pull loops and fifty cells syncing a stack go through the balancer while
//! the replica holding the scrub's lease is killed (SIGKILL) and started
//! again, the stack is promoted to its next version, and another replica is
//! stopped (SIGTERM).

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::backend::{Backend, Kind, settled};
use crate::common::images::{image_manifest, sha256};
use crate::common::{Reply, Server, deltas, haproxy, header, http, http_body};

const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
/// The replicas' lease ttl: a killed holder's job moves on this long after.
const LEASE_TTL: Duration = Duration::from_secs(3);

/// What the clients saw: requests that failed (when, what), pushes
/// acknowledged (repository, tag, digest), uploads whose POST and PATCH
/// were answered by different replicas.
#[derive(Default)]
struct Seen {
    failures: Vec<(Instant, String)>,
    acked: Vec<(String, String, String)>,
    crossed: usize,
    slowest_push: Duration,
}

type Shared = Arc<Mutex<Seen>>;

fn ok(r: std::io::Result<Reply>, want: u16, what: &str) -> Result<Reply, String> {
    match r {
        Ok(r) if r.0 == want => Ok(r),
        Ok(r) => Err(format!("{what}: {} {}", r.0, String::from_utf8_lossy(&r.2))),
        Err(e) => Err(format!("{what}: {e}")),
    }
}

/// One push of `load/wT:vI` through `lb`: the config by a monolithic POST,
/// the layer by POST, two PATCHes and PUT, then the manifest. Returns the
/// manifest digest and whether the layer's POST and first PATCH were
/// answered by different replicas.
fn push_once(lb: &str, t: usize, i: usize) -> Result<(String, bool), String> {
    let repo = format!("load/w{t}");
    let config = format!(r#"{{"architecture":"amd64","os":"linux","w":{t},"i":{i}}}"#).into_bytes();
    let layer: Vec<u8> = (0..65_536u32)
        .map(|n| (n.wrapping_mul(31) ^ (t as u32 * 7919 + i as u32)) as u8)
        .collect();
    let cd = sha256(&config);
    let post = format!("/v2/{repo}/blobs/uploads/?digest={cd}");
    ok(
        http_body(lb, "POST", &post, &[], &config),
        201,
        "config POST",
    )?;
    let r = ok(
        http(lb, "POST", &format!("/v2/{repo}/blobs/uploads/"), &[]),
        202,
        "layer POST",
    )?;
    let posted_by = header(&r.1, "x-served-by").unwrap_or("").to_string();
    let loc = header(&r.1, "location").ok_or("no Location")?.to_string();
    let half = layer.len() / 2;
    let r = ok(
        http_body(
            lb,
            "PATCH",
            &loc,
            &[("Content-Range", &format!("0-{}", half - 1))],
            &layer[..half],
        ),
        202,
        "PATCH 1",
    )?;
    let crossed = header(&r.1, "x-served-by").is_some_and(|s| s != posted_by);
    let loc = header(&r.1, "location").unwrap_or(&loc).to_string();
    let r = ok(
        http_body(
            lb,
            "PATCH",
            &loc,
            &[("Content-Range", &format!("{half}-{}", layer.len() - 1))],
            &layer[half..],
        ),
        202,
        "PATCH 2",
    )?;
    let loc = header(&r.1, "location").unwrap_or(&loc).to_string();
    let sep = if loc.contains('?') { '&' } else { '?' };
    let put = format!("{loc}{sep}digest={}", sha256(&layer));
    ok(http(lb, "PUT", &put, &[]), 201, "layer PUT")?;
    let m = image_manifest(&config, &[&layer]);
    let r = ok(
        http_body(
            lb,
            "PUT",
            &format!("/v2/{repo}/manifests/v{i}"),
            &[("Content-Type", OCI_MANIFEST)],
            &m,
        ),
        201,
        "manifest PUT",
    )?;
    let digest = header(&r.1, "docker-content-digest")
        .unwrap_or("")
        .to_string();
    if digest != sha256(&m) {
        return Err(format!("manifest PUT answered digest {digest:?}"));
    }
    Ok((digest, crossed))
}

/// Push loop `t`: pushes `load/wT:v0..` until `stop`, each push retried
/// from the start until it is acknowledged (every failure recorded).
fn pusher(lb: String, t: usize, stop: Arc<AtomicBool>, seen: Shared) {
    let mut i = 0;
    while !stop.load(Ordering::Relaxed) {
        let started = Instant::now();
        let mut attempts = 0;
        loop {
            attempts += 1;
            match push_once(&lb, t, i) {
                Ok((digest, crossed)) => {
                    let mut s = seen.lock().unwrap();
                    s.acked
                        .push((format!("load/w{t}"), format!("v{i}"), digest));
                    s.crossed += usize::from(crossed);
                    s.slowest_push = s.slowest_push.max(started.elapsed());
                    break;
                }
                Err(e) => {
                    seen.lock().unwrap().failures.push((Instant::now(), e));
                    assert!(attempts < 30, "push w{t}:v{i} never succeeded");
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
        }
        i += 1;
    }
}

/// Pull loop: GETs acknowledged manifests through `lb` and checks them.
fn puller(lb: String, stop: Arc<AtomicBool>, seen: Shared) {
    let mut n = 0usize;
    while !stop.load(Ordering::Relaxed) {
        let pick = {
            let s = seen.lock().unwrap();
            (!s.acked.is_empty()).then(|| s.acked[n % s.acked.len()].clone())
        };
        n += 7;
        let Some((repo, tag, digest)) = pick else {
            std::thread::sleep(Duration::from_millis(50));
            continue;
        };
        let path = format!("/v2/{repo}/manifests/{tag}");
        match ok(
            http(&lb, "GET", &path, &[("Accept", OCI_MANIFEST)]),
            200,
            "pull",
        ) {
            Ok(r) => assert_eq!(sha256(&r.2), digest, "{path} served other bytes"),
            Err(e) => seen.lock().unwrap().failures.push((Instant::now(), e)),
        }
    }
}

/// Cell `n`: asks for its assignment of stack `delta` every 300 ms and
/// installs (downloads and checks) each new rootfs, until `stop` and it
/// runs `want`'s rootfs digest. Returns the rootfs digest it runs.
fn cell(
    lb: String,
    n: usize,
    stop: Arc<AtomicBool>,
    want: Arc<Mutex<String>>,
    seen: Shared,
) -> String {
    let mut installed = String::new();
    let mut last = String::new();
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        if stop.load(Ordering::Relaxed) && installed == *want.lock().unwrap() {
            return installed;
        }
        assert!(
            Instant::now() < deadline,
            "cell {n} did not converge: runs {installed:?}, wants {:?}, last: {last}",
            want.lock().unwrap()
        );
        let q = format!("/stacks/v1/delta?cell=cell-{n}");
        match ok(http(&lb, "GET", &q, &[]), 200, "assignment") {
            Ok(r) => {
                let v: serde_json::Value = serde_json::from_slice(&r.2).unwrap();
                let target = v["rootfs_digest"].as_str().unwrap().to_string();
                last = format!("assigned {target}");
                if target != installed {
                    // As `airlock cell sync`: the URL names the rootfs by digest.
                    let url = v["rootfs_url"].as_str().unwrap();
                    match ok(http(&lb, "GET", url, &[]), 200, "rootfs") {
                        Ok(r) if sha256(&r.2) == target => installed = target,
                        Ok(r) => panic!("cell {n}: rootfs {} is not {target}", sha256(&r.2)),
                        Err(e) => {
                            last = e.clone();
                            seen.lock().unwrap().failures.push((Instant::now(), e));
                        }
                    }
                }
            }
            Err(e) => {
                last = e.clone();
                seen.lock().unwrap().failures.push((Instant::now(), e));
            }
        }
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// The rootfs digest stack `delta` assigns to a cell now.
fn assigned(lb: &str) -> String {
    let (status, _, body) = http(lb, "GET", "/stacks/v1/delta?cell=probe", &[]).unwrap();
    assert_eq!(status, 200);
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    v["rootfs_digest"].as_str().unwrap().to_string()
}

/// The holder of job `job`'s lease as written in the store, `HOST:PID:NONCE`.
fn lease_holder(b: &Backend, job: &str) -> String {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let store = b.open_store().await;
        let v = store
            .read_versioned(&airlock::ops::lease::key(job))
            .await
            .unwrap();
        v.map(|v| {
            let doc: airlock::ops::lease::LeaseDoc = serde_json::from_str(&v.value).unwrap();
            doc.holder
        })
        .unwrap_or_default()
    })
}

fn holder_pid(holder: &str) -> Option<u32> {
    holder.split(':').nth(1).and_then(|p| p.parse().ok())
}

/// Waits (at most `within`) until job `job`'s lease is held by one of
/// `pids`; returns that pid.
fn lease_held_by(b: &Backend, job: &str, pids: &[u32], within: Duration) -> u32 {
    let deadline = Instant::now() + within;
    loop {
        let holder = lease_holder(b, job);
        if let Some(pid) = holder_pid(&holder).filter(|p| pids.contains(p)) {
            return pid;
        }
        assert!(
            Instant::now() < deadline,
            "{job} lease held by {holder:?}, not one of {pids:?}, after {within:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn three_replicas_behind_haproxy_lose_no_acknowledged_write() {
    let b = Backend::start(Kind::Ceph);
    deltas::import_and_promote(&b, "v1", &[]);
    let ttl = format!("{}s", LEASE_TTL.as_secs());
    let args = [
        "--allow-push",
        "--scrub-interval",
        "2s",
        "--scrub-rate",
        "0",
        "--lease-ttl",
        &ttl,
        // Out of the balancer (2 checks of 300 ms) before the listeners close.
        "--shutdown-delay-secs",
        "2",
    ];
    let mut replicas: Vec<Option<Server>> = (0..3).map(|_| Some(b.serve(&args))).collect();
    let addrs: Vec<String> = replicas
        .iter()
        .map(|r| r.as_ref().unwrap().addr.clone())
        .collect();
    let pids =
        |rs: &[Option<Server>]| -> Vec<u32> { rs.iter().flatten().map(Server::pid).collect() };
    let lb = haproxy::start(b.dir.path(), &addrs);
    // Every replica up in the balancer (2 checks of 300 ms).
    std::thread::sleep(Duration::from_millis(1500));

    let v1 = assigned(&lb.addr);
    let stop_load = Arc::new(AtomicBool::new(false));
    let stop_cells = Arc::new(AtomicBool::new(false));
    let seen: Shared = Arc::default();
    let want = Arc::new(Mutex::new(String::new()));
    let mut load = Vec::new();
    for t in 0..8 {
        let (lb, stop, seen) = (lb.addr.clone(), stop_load.clone(), seen.clone());
        load.push(std::thread::spawn(move || pusher(lb, t, stop, seen)));
    }
    for _ in 0..2 {
        let (lb, stop, seen) = (lb.addr.clone(), stop_load.clone(), seen.clone());
        load.push(std::thread::spawn(move || puller(lb, stop, seen)));
    }
    let cells: Vec<_> = (0..50)
        .map(|n| {
            let (lb, stop, want, seen) = (
                lb.addr.clone(),
                stop_cells.clone(),
                want.clone(),
                seen.clone(),
            );
            std::thread::spawn(move || cell(lb, n, stop, want, seen))
        })
        .collect();

    // The scrub's lease is held by one replica: kill that one mid-run.
    std::thread::sleep(Duration::from_secs(3));
    let holder = lease_held_by(&b, "scrub", &pids(&replicas), LEASE_TTL * 3);
    let killed = replicas
        .iter()
        .position(|r| r.as_ref().is_some_and(|s| s.pid() == holder))
        .unwrap();
    let killed_at = Instant::now();
    drop(replicas[killed].take()); // SIGKILL
    // Another replica takes the job over once the lease is ttl old.
    let live = pids(&replicas);
    let next = lease_held_by(&b, "scrub", &live, LEASE_TTL * 3);
    assert_ne!(next, holder);
    // ... and the killed one comes back where the balancer expects it.
    replicas[killed] = Some(b.serve_on(&addrs[killed], &args));

    // The next stack version, while the cells sync through the balancer.
    deltas::promote(&b, "v2", &[]);
    // The new rootfs, once every replica has seen the promotion.
    std::thread::sleep(b.refresh_bound());
    let v2 = assigned(&lb.addr);
    assert_ne!(v2, v1, "the promotion changed the rootfs");
    *want.lock().unwrap() = v2.clone();

    // A graceful stop of another replica: no request fails for it.
    std::thread::sleep(Duration::from_secs(3));
    let stopped = (killed + 1) % 3;
    let terminated_at = Instant::now();
    let status = replicas[stopped].take().unwrap().terminate();
    assert!(status.success(), "SIGTERM: {status:?}");

    std::thread::sleep(Duration::from_secs(4));
    stop_load.store(true, Ordering::Relaxed);
    for t in load {
        t.join().unwrap();
    }
    stop_cells.store(true, Ordering::Relaxed);
    let runs: Vec<String> = cells.into_iter().map(|t| t.join().unwrap()).collect();
    assert!(
        runs.iter().all(|r| *r == v2),
        "every cell runs the promoted rootfs {v2}"
    );

    let seen = seen.lock().unwrap();
    // Failures only while the killed replica's requests were in flight
    // (HAProxy marks it down within 2 checks of 300 ms).
    let since = |at: &Instant, from: Instant| match at.checked_duration_since(from) {
        Some(d) => format!("+{d:?}"),
        None => format!("-{:?}", from - *at),
    };
    let late: Vec<String> = seen
        .failures
        .iter()
        .filter(|(at, _)| *at < killed_at || at.duration_since(killed_at) > Duration::from_secs(3))
        .map(|(at, e)| {
            format!(
                "{} after the SIGKILL, {} after the SIGTERM: {e}",
                since(at, killed_at),
                since(at, terminated_at)
            )
        })
        .collect();
    assert!(
        late.is_empty(),
        "requests failed outside the kill: {late:?}"
    );
    assert!(seen.acked.len() >= 16, "only {} pushes", seen.acked.len());
    assert!(seen.crossed > 0, "no upload continued on another replica");
    // Every acknowledged push, on every replica still running.
    for r in replicas.iter().flatten() {
        for (repo, tag, digest) in &seen.acked {
            let path = format!("/v2/{repo}/manifests/{tag}");
            let got = settled(b.refresh_bound(), &(200, digest.clone()), || {
                let (status, _, body) =
                    http(&r.addr, "GET", &path, &[("Accept", OCI_MANIFEST)]).unwrap();
                (status, sha256(&body))
            });
            assert_eq!(got, (200, digest.clone()), "{path} on {}", r.addr);
        }
    }
    let repos: BTreeSet<&String> = seen.acked.iter().map(|(r, _, _)| r).collect();
    assert_eq!(repos.len(), 8);
    eprintln!(
        "{} pushes, {} failed requests (all within 3 s of the kill), {} uploads crossed replicas, slowest push {:?}",
        seen.acked.len(),
        seen.failures.len(),
        seen.crossed,
        seen.slowest_push
    );
    let fsck = b.airlock(&["fsck"], &["--deep"]);
    assert!(
        fsck.status.success(),
        "fsck --deep: {}{}",
        String::from_utf8_lossy(&fsck.stdout),
        String::from_utf8_lossy(&fsck.stderr)
    );
}
