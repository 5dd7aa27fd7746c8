//! Garbage collection (issue 13, on S3 issue 11): nothing a kept
//! generation, a young link or a live push needs is removed, even while
//! skopeo pushes and pulls run; everything unreferenced past the grace
//! period (or dropped by retention) is. Every scenario runs on every
//! blobstore backend (`on_backends!`): the filesystem, moto's S3
//! server and s3s-fs. Objects cannot be aged on S3 (`LastModified` is the
//! server's), so the scenarios use a short grace period and wait it out.

use crate::common;

use std::process::Command;
use std::time::Duration;

use common::backend::{Backend, on_backends};
use common::objects::{Objects, blob_key};
use common::{http, require_tool, synth, test_key};

on_backends!(
    [fs, moto, s3s_fs, ceph]
    gc_during_pushes_and_pulls_keeps_everything_live_and_sweeps_the_rest,
);
on_backends!(
    [fs, moto, s3s_fs]
    gc_puts_back_a_trashed_blob_linked_meanwhile_and_after_a_kill,
);

/// The grace period of these scenarios, and the flag that sets it.
const GRACE_SECS: u64 = 6;
const GRACE: &[&str] = &["--grace", "6s"];
/// Retention of the current generation only.
const KEEP_ONE: &[&str] = &["--keep-generations", "1", "--keep-days", "0"];

/// Waits until everything written so far is past the grace period.
fn age() {
    std::thread::sleep(Duration::from_secs(GRACE_SECS + 1));
}

/// `airlock gc <store> ARGS --json`, parsed.
fn gc_json(b: &Backend, args: &[&str]) -> serde_json::Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    serde_json::from_str(&b.airlock_ok(&["gc"], &all)).unwrap()
}

/// The sha256 of `bytes` by coreutils' `sha256sum`.
fn sha256_of(bytes: &[u8]) -> String {
    let f = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(f.path(), bytes).unwrap();
    common::sha256sum(f.path())
}

fn gc_during_pushes_and_pulls_keeps_everything_live_and_sweeps_the_rest(store: Backend) {
    require_tool("skopeo", "skopeo");
    let dir = tempfile::tempdir().unwrap();
    let (_, keyring) = test_key();
    let (a, _) = synth::bundle(dir.path(), "a", 2, 11);
    let (b, _) = synth::bundle(dir.path(), "b", 2, 12);
    let (_, push_layout) = synth::bundle(dir.path(), "p", 3, 13);
    store.import(&keyring, &a);
    store.import(&keyring, &b);
    let objects = Objects::of(&store);
    let server = store.serve(&["--allow-push", "--allow-delete"]);
    // Everything that exists now is old: only references keep it.
    age();
    let addr = server.addr.clone();
    let layout = push_layout.clone();
    let pushes = std::thread::spawn(move || {
        for i in 0..3 {
            let o = Command::new("skopeo")
                .args(["copy", "--dest-tls-verify=false", "--retry-times", "0"])
                .arg(format!("oci:{}:img-00", layout.display()))
                .arg(format!("docker://{addr}/pushed/img:{i}"))
                .output()
                .unwrap();
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        }
    });
    let addr = server.addr.clone();
    let pulls_dir = dir.path().join("pulls");
    let pulls = std::thread::spawn(move || {
        for i in 0..3 {
            let o = Command::new("skopeo")
                .args(["copy", "--src-tls-verify=false", "--retry-times", "0"])
                .arg(format!("docker://{addr}/a/img-00:latest"))
                .arg(format!("oci:{}:p{i}", pulls_dir.display()))
                .output()
                .unwrap();
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        }
    });
    for _ in 0..5 {
        store.airlock_ok(&["gc"], GRACE);
    }
    pushes.join().unwrap();
    pulls.join().unwrap();
    store.airlock_ok(&["fsck"], &["--deep"]);
    // Every pushed image pulls back whole.
    for i in 0..3 {
        let o = Command::new("skopeo")
            .args(["copy", "--src-tls-verify=false"])
            .arg(format!("docker://{}/pushed/img:{i}", server.addr))
            .arg(format!("oci:{}:x{i}", dir.path().join("back").display()))
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }

    // Unreferenced content: delete repository b's image; with retention 1
    // and everything aged past the grace, its blobs and older documents go.
    let (status, h, _) = http(&server.addr, "HEAD", "/v2/b/img-00/manifests/latest", &[]).unwrap();
    assert_eq!(status, 200);
    let digest = common::header(&h, "docker-content-digest")
        .unwrap()
        .to_string();
    let (status, _, _) = http(
        &server.addr,
        "DELETE",
        &format!("/v2/b/img-00/manifests/{digest}"),
        &[],
    )
    .unwrap();
    assert_eq!(status, 202);
    let before = objects.keys("blobs/").len();
    let dry = gc_json(&store, &[KEEP_ONE, GRACE, &["--dry-run"]].concat());
    assert_eq!(
        objects.keys("blobs/").len(),
        before,
        "dry run removed files"
    );
    age();
    let report = gc_json(&store, &[KEEP_ONE, GRACE].concat());
    let removed = report["blobs_removed"].as_u64().unwrap();
    assert!(removed > 0, "{report}");
    assert!(dry["blobs_removed"].as_u64().unwrap() <= removed);
    assert!(report["bytes_freed"].as_u64().unwrap() > 0);
    assert_eq!(
        objects.keys("blobs/").len() as u64,
        before as u64 - removed,
        "{report}"
    );
    assert!(!objects.exists(&blob_key(&digest)), "deleted manifest kept");
    store.airlock_ok(&["fsck"], &["--deep"]);
    for path in [
        "/v2/a/img-00/manifests/latest",
        "/v2/pushed/img/manifests/2",
    ] {
        let (status, _, _) = http(&server.addr, "GET", path, &[]).unwrap();
        assert_eq!(status, 200, "{path} after gc");
    }
    let history = store.airlock_ok(&["history"], &[]);
    assert!(history.contains("removed by gc"), "{history}");
    // A second GC finds nothing more.
    let again = gc_json(&store, &[KEEP_ONE, GRACE].concat());
    assert_eq!(again["blobs_removed"], 0, "{again}");
}

/// The race of a push that mounts an old unreferenced blob while GC sweeps
/// it: GC moves candidates to `gc-trash/`, looks a third time, and puts
/// back what a link made meanwhile names; a GC killed after the move
/// leaves the trash, which the next run puts back.
fn gc_puts_back_a_trashed_blob_linked_meanwhile_and_after_a_kill(store: Backend) {
    require_tool("curl", "curl");
    let dir = tempfile::tempdir().unwrap();
    let server = store.serve(&["--allow-push"]);
    let objects = Objects::of(&store);
    let blob = dir.path().join("blob");
    std::fs::write(
        &blob,
        format!("mounted while trashed {}", std::process::id()),
    )
    .unwrap();
    let digest = common::sha256sum(&blob);
    let hex = digest.strip_prefix("sha256:").unwrap().to_string();
    let size = std::fs::metadata(&blob).unwrap().len();
    let curl = |args: &[&str]| -> String {
        let o = Command::new("curl")
            .args(["-s", "-o", "/dev/null", "-w", "%{http_code}"])
            .args(args)
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let url = |path: &str| format!("http://{}{path}", server.addr);
    let pushed = curl(&[
        "-X",
        "POST",
        "--data-binary",
        &format!("@{}", blob.display()),
        &url(&format!("/v2/src/app/blobs/uploads/?digest={digest}")),
    ]);
    assert_eq!(pushed, "201");
    // Only the (old) pushed-blob link keeps it: a GC candidate.
    age();
    let key = blob_key(&digest);
    let trash_prefix = format!("gc-trash/sha256-{hex}.");
    let trashed = || {
        objects
            .keys("gc-trash/")
            .iter()
            .any(|k| k.starts_with(&trash_prefix))
    };
    let gc = store
        .command(&["gc"], &["--json"])
        .args(KEEP_ONE)
        .args(GRACE)
        .env("AIRLOCK_FAILPOINT", "gc:after_trash=sleep:3")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = std::time::Instant::now();
    // On S3 the move is a copy, then a delete: wait for both.
    while !trashed() || objects.exists(&key) {
        assert!(
            t0.elapsed().as_secs() < 20,
            "gc never moved the blob to gc-trash/"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!objects.exists(&key));
    // A mount now finds no blob: the spec's fallback, an upload session.
    let mount = curl(&[
        "-X",
        "POST",
        &url(&format!(
            "/v2/dst/app/blobs/uploads/?mount={digest}&from=src/app"
        )),
    ]);
    assert_eq!(mount, "202");
    // A mount that saw the blob before the move links it now (the other
    // interleaving of its stat and its link write).
    objects.put(
        &format!("links/dst/app/_blobs/sha256-{hex}"),
        size.to_string().as_bytes(),
    );
    let out = gc.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["blobs_put_back"], 1, "{report}");
    assert_eq!(report["blobs_removed"], 0, "{report}");
    assert!(!trashed());
    assert_eq!(sha256_of(&objects.get(&key).unwrap()), digest);
    let head = curl(&["-I", &url(&format!("/v2/dst/app/blobs/{digest}"))]);
    assert_eq!(head, "200");

    // A GC killed between the move and the third look: the trash stays,
    // and the next run (nothing past its grace) puts the blob back.
    age();
    let killed = store
        .command(&["gc"], KEEP_ONE)
        .args(GRACE)
        .env("AIRLOCK_FAILPOINT", "gc:after_trash=kill")
        .output()
        .unwrap();
    assert!(!killed.status.success());
    assert!(trashed() && !objects.exists(&key));
    store.airlock_ok(&["gc"], &["--grace", "100d"]);
    assert!(!trashed());
    assert_eq!(sha256_of(&objects.get(&key).unwrap()), digest);
    // Past its grace and linked by nothing young, the blob goes for good.
    age();
    let report = gc_json(&store, &[KEEP_ONE, GRACE].concat());
    assert_eq!(report["blobs_removed"], 1, "{report}");
    assert!(!objects.exists(&key) && !trashed());
}
