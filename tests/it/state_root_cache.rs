//! The root cache (issue 11 §5): a process's own commits are visible at
//! once whatever the refresh interval; a root changed by another process is
//! noticed within the interval, and not read again before it. On every
//! blobstore backend (tests/common/backend.rs).

use crate::common;

use std::process::Command;
use std::time::{Duration, Instant};

use airlock::digest::Digest;
use airlock::names::RepositoryName;
use airlock::state::{Op, StateStore};
use common::backend::{Backend, on_backends};

on_backends!(async [fs, moto, s3s_fs] own_commits_at_once_others_within_the_interval);
on_backends!([fs, moto, s3s_fs] server_sees_a_cli_rollback_within_the_interval);
on_backends!([fs, moto, s3s_fs] a_miss_reads_the_root_again);
on_backends!([fs] the_next_request_after_a_cli_command_sees_its_commit);

fn link(i: u64) -> [Op; 1] {
    let repo: RepositoryName = "team/app".parse().unwrap();
    [Op::LinkBlobs {
        repo,
        blobs: vec![(Digest::sha256_of(format!("blob {i}").as_bytes()), 6)],
    }]
}

/// Polls `state` until its snapshot reaches `generation`; the time it took.
async fn time_until(state: &StateStore, generation: u64, give_up: Duration) -> Duration {
    let started = Instant::now();
    loop {
        let seen = state.snapshot().await.unwrap().generation();
        if seen == generation {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < give_up,
            "still at generation {seen} after {give_up:?}, want {generation}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn own_commits_at_once_others_within_the_interval(b: Backend) {
    let refresh = Duration::from_millis(1500);
    // Two stores on one directory or bucket, as two processes would be.
    let server = StateStore::new(b.open_store().await).with_root_refresh(refresh);
    let other = StateStore::new(b.open_store().await);

    // Own commits: visible at once, though the interval has not passed.
    assert_eq!(server.snapshot().await.unwrap().generation(), 0);
    let mut installed = Instant::now();
    for i in 1..=3 {
        installed = Instant::now();
        let c = server.commit("own", "test", &link(i)).await.unwrap();
        assert_eq!(c.generation, i);
        assert_eq!(server.snapshot().await.unwrap().generation(), i);
    }

    // Another writer's commit: the root the last own commit installed is
    // used until the interval has passed, then the new one is noticed.
    other.commit("other", "test", &link(4)).await.unwrap();
    let stale = server.snapshot().await.unwrap().generation();
    if installed.elapsed() < refresh {
        assert_eq!(stale, 3, "read again before the interval passed");
    }
    time_until(&server, 4, refresh + Duration::from_secs(2)).await;
    assert!(
        installed.elapsed() >= refresh,
        "noticed after {:?}, before the interval of {refresh:?}: the root was read on every call",
        installed.elapsed()
    );
    // A commit on top of a root it has not noticed yet still lands on it.
    other.commit("other", "test", &link(5)).await.unwrap();
    let c = server.commit("own", "test", &link(6)).await.unwrap();
    assert_eq!(c.generation, 6);
    assert_eq!(server.snapshot().await.unwrap().generation(), 6);
    let snap = server.snapshot().await.unwrap();
    let repo = server
        .repository(&snap, &"team/app".parse().unwrap())
        .await
        .unwrap()
        .unwrap();
    for i in 1..=6 {
        let blob = Digest::sha256_of(format!("blob {i}").as_bytes());
        assert_eq!(repo.blob(&blob).await.unwrap(), Some(6), "blob {i} kept");
    }

    // Interval 0 (the filesystem default): every read sees the other's commit.
    let eager = StateStore::new(b.open_store().await);
    assert_eq!(eager.snapshot().await.unwrap().generation(), 6);
    other.commit("other", "test", &link(7)).await.unwrap();
    assert_eq!(eager.snapshot().await.unwrap().generation(), 7);
}

fn curl(args: &[&str]) -> (u16, String) {
    let out = Command::new("curl")
        .args(["-s", "-o", "/dev/null", "-w", "%{http_code}"])
        .args(args)
        .output()
        .expect("curl runs");
    let code = String::from_utf8_lossy(&out.stdout).parse().unwrap_or(0);
    (code, String::from_utf8_lossy(&out.stderr).into_owned())
}

/// Sends the file `body` with `method` and `content_type` to `url`.
fn upload(method: &str, content_type: &str, body: &std::path::Path, url: &str) -> (u16, String) {
    curl(&[
        "-X",
        method,
        "-H",
        &format!("Content-Type: {content_type}"),
        "--data-binary",
        &format!("@{}", body.display()),
        url,
    ])
}

/// `airlock serve --root-refresh-ms 400`: its own pushes are pullable at
/// once; a rollback by the CLI (another process) shows within the interval.
fn server_sees_a_cli_rollback_within_the_interval(b: Backend) {
    let server = b.serve(&["--allow-push", "--root-refresh-ms", "400"]);
    push_v1_v2(&b, &server.addr);
    let out = b.airlock_ok(&["rollback"], &["--to", "1"]);
    assert!(out.contains("rolled back to generation 1"), "{out}");
    let base = format!("http://{}/v2/demo/app", server.addr);
    let rolled = Instant::now();
    loop {
        match curl(&[&format!("{base}/manifests/v2")]).0 {
            404 => break,
            200 => assert!(
                rolled.elapsed() < Duration::from_millis(1400),
                "tag v2 still served {:?} after the rollback",
                rolled.elapsed()
            ),
            other => panic!("GET v2 answered {other}"),
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(curl(&[&format!("{base}/manifests/v1")]).0, 200);
}

/// On the filesystem with the default refresh (1 ms, which a CLI command
/// that committed waits out before it exits), the first request sent
/// after `airlock rollback` returns, on a connection opened at once (no
/// process started in between), already sees the rolled-back root; the
/// server was kept busy reading the old one until then.
fn the_next_request_after_a_cli_command_sees_its_commit(b: Backend) {
    let server = b.serve(&["--allow-push"]);
    push_v1_v2(&b, &server.addr);
    let busy = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let reader = {
        let (busy, addr) = (busy.clone(), server.addr.clone());
        std::thread::spawn(move || {
            while busy.load(std::sync::atomic::Ordering::Relaxed) {
                let _ = common::http(&addr, "GET", "/v2/demo/app/manifests/v2", &[]);
            }
        })
    };
    let out = b.airlock_ok(&["rollback"], &["--to", "1"]);
    let (status, _, _) =
        common::http(&server.addr, "GET", "/v2/demo/app/manifests/v2", &[]).unwrap();
    busy.store(false, std::sync::atomic::Ordering::Relaxed);
    reader.join().unwrap();
    assert!(out.contains("rolled back to generation 1"), "{out}");
    assert_eq!(
        status, 404,
        "tag v2 served right after the rollback returned"
    );
}

/// Pushes the manifest of config `{}` to `demo/app` as `v1` then `v2`
/// (generations 1 and 2), each pullable at once.
fn push_v1_v2(b: &Backend, addr: &str) {
    common::require_tool("curl", "curl");
    let dir = tempfile::tempdir().unwrap();
    let base = format!("http://{addr}/v2/demo/app");
    let config = b"{}";
    let config_digest = Digest::sha256_of(config).to_string();
    let config_file = dir.path().join("config.json");
    std::fs::write(&config_file, config).unwrap();
    let (code, err) = upload(
        "POST",
        "application/octet-stream",
        &config_file,
        &format!("{base}/blobs/uploads/?digest={config_digest}"),
    );
    assert_eq!(code, 201, "blob push: {err}");
    let manifest = format!(
        r#"{{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"{config_digest}","size":2}},"layers":[]}}"#
    );
    let manifest_file = dir.path().join("manifest.json");
    std::fs::write(&manifest_file, &manifest).unwrap();
    for (i, tag) in ["v1", "v2"].iter().enumerate() {
        let (code, err) = upload(
            "PUT",
            "application/vnd.oci.image.manifest.v1+json",
            &manifest_file,
            &format!("{base}/manifests/{tag}"),
        );
        assert_eq!(code, 201, "manifest push: {err}");
        // Own write: pullable at once, within the interval.
        assert_eq!(curl(&[&format!("{base}/manifests/{tag}")]).0, 200);
        assert_eq!(b.history().len(), i + 1, "generation {} written", i + 1);
    }
}

/// Two replicas with a refresh interval of a minute: what one pushed is
/// found on the other at once when the other would answer 404 (a new tag,
/// the manifest by digest, its config blob): a miss reads the root again
/// ([`StateStore::snapshot_since`]). A hit is served from the held root
/// until the interval passes: a tag moved on one replica keeps its old
/// digest on the other, as documented (docs/scaling-out.md).
fn a_miss_reads_the_root_again(b: Backend) {
    common::require_tool("curl", "curl");
    let dir = tempfile::tempdir().unwrap();
    let args = ["--allow-push", "--root-refresh-ms", "60000"];
    let (one, two) = (b.serve(&args), b.serve(&args));
    let base = |s: &common::Server| format!("http://{}/v2/demo/app", s.addr);
    let push = |n: u32, tag: &str| -> String {
        let config = format!(r#"{{"n":{n}}}"#);
        let config_digest = Digest::sha256_of(config.as_bytes()).to_string();
        let file = dir.path().join("config.json");
        std::fs::write(&file, &config).unwrap();
        let url = format!("{}/blobs/uploads/?digest={config_digest}", base(&one));
        assert_eq!(
            upload("POST", "application/octet-stream", &file, &url).0,
            201
        );
        let manifest = format!(
            r#"{{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"{config_digest}","size":{}}},"layers":[]}}"#,
            config.len()
        );
        let file = dir.path().join("manifest.json");
        std::fs::write(&file, &manifest).unwrap();
        let url = format!("{}/manifests/{tag}", base(&one));
        let ct = "application/vnd.oci.image.manifest.v1+json";
        assert_eq!(upload("PUT", ct, &file, &url).0, 201);
        Digest::sha256_of(manifest.as_bytes()).to_string()
    };
    // The second replica reads the (empty) root first and holds it.
    assert_eq!(curl(&[&format!("{}/tags/list", base(&two))]).0, 404);
    let first = push(1, "v1");
    let config = Digest::sha256_of(br#"{"n":1}"#).to_string();
    for path in [
        "manifests/v1".to_string(),
        format!("manifests/{first}"),
        format!("blobs/{config}"),
    ] {
        let url = format!("{}/{path}", base(&two));
        let accept = "Accept: application/vnd.oci.image.manifest.v1+json";
        assert_eq!(
            curl(&["-H", accept, &url]).0,
            200,
            "{path} on the other replica at once"
        );
    }
    // A moved tag is a hit: the held root answers until the interval passes.
    let second = push(2, "v1");
    assert_ne!(first, second);
    let head = Command::new("curl")
        .args([
            "-sI",
            "-H",
            "Accept: application/vnd.oci.image.manifest.v1+json",
        ])
        .arg(format!("{}/manifests/v1", base(&two)))
        .output()
        .unwrap();
    let head = String::from_utf8_lossy(&head.stdout).to_ascii_lowercase();
    assert!(
        head.contains(&format!("docker-content-digest: {first}")),
        "{head}"
    );
}
