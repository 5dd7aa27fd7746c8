//! Garbage collection (issue 13): nothing a kept generation, a young link or
//! a live push needs is removed, even while skopeo pushes and pulls run;
//! everything unreferenced past the grace period (or dropped by retention)
//! is.

mod common;

use std::path::Path;
use std::process::Command;

use common::{airlock_ok, http, import_bundle, require_tool, serve, synth, test_key};

/// Retention of the current generation only.
const KEEP_ONE: &[&str] = &["--keep-generations", "1", "--keep-days", "0"];

/// `airlock gc --data DATA ARGS --json`, parsed.
fn gc_json(data: &str, args: &[&str]) -> serde_json::Value {
    let mut all = vec!["gc", "--data", data, "--json"];
    all.extend_from_slice(args);
    serde_json::from_str(&airlock_ok(&all)).unwrap()
}

/// Ages every file below `dir` by two hours.
fn age(dir: &Path) {
    let o = Command::new("find")
        .arg(dir)
        .args([
            "-type",
            "f",
            "-exec",
            "touch",
            "-d",
            "2 hours ago",
            "{}",
            "+",
        ])
        .output()
        .unwrap();
    assert!(o.status.success());
}

#[test]
fn gc_during_pushes_and_pulls_keeps_everything_live_and_sweeps_the_rest() {
    require_tool("skopeo", "skopeo");
    let dir = tempfile::tempdir().unwrap();
    let (_, keyring) = test_key();
    let (a, _) = synth::bundle(dir.path(), "a", 2, 11);
    let (b, _) = synth::bundle(dir.path(), "b", 2, 12);
    let (_, push_layout) = synth::bundle(dir.path(), "p", 3, 13);
    let data = dir.path().join("data");
    let d = data.to_str().unwrap();
    import_bundle(&data, &keyring, &a);
    import_bundle(&data, &keyring, &b);
    let server = serve(&data, &["--allow-push", "--allow-delete"]);
    // Everything that exists now is old: only references keep it.
    age(&data);
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
        airlock_ok(&["gc", "--data", d]);
    }
    pushes.join().unwrap();
    pulls.join().unwrap();
    airlock_ok(&["fsck", "--data", d, "--deep"]);
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
    let before = synth::blob_files(&data).len();
    let dry = gc_json(d, &[KEEP_ONE, &["--dry-run"]].concat());
    assert_eq!(
        synth::blob_files(&data).len(),
        before,
        "dry run removed files"
    );
    age(&data);
    let report = gc_json(d, KEEP_ONE);
    let removed = report["blobs_removed"].as_u64().unwrap();
    assert!(removed > 0, "{report}");
    assert!(dry["blobs_removed"].as_u64().unwrap() <= removed);
    assert!(report["bytes_freed"].as_u64().unwrap() > 0);
    let hex = digest.strip_prefix("sha256:").unwrap();
    assert!(
        !data.join("blobs/sha256").join(&hex[..2]).join(hex).exists(),
        "deleted manifest kept"
    );
    airlock_ok(&["fsck", "--data", d, "--deep"]);
    for path in [
        "/v2/a/img-00/manifests/latest",
        "/v2/pushed/img/manifests/2",
    ] {
        let (status, _, _) = http(&server.addr, "GET", path, &[]).unwrap();
        assert_eq!(status, 200, "{path} after gc");
    }
    let history = airlock_ok(&["history", "--data", d]);
    assert!(history.contains("removed by gc"), "{history}");
    // A second GC finds nothing more.
    let again = gc_json(d, KEEP_ONE);
    assert_eq!(again["blobs_removed"], 0, "{again}");
}

/// The race of a push that mounts an old unreferenced blob while GC sweeps
/// it: GC moves candidates to `gc-trash/`, looks a third time, and puts
/// back what a link made meanwhile names; a GC killed after the move
/// leaves the trash, which the next run puts back.
#[test]
fn gc_puts_back_a_trashed_blob_linked_meanwhile_and_after_a_kill() {
    require_tool("curl", "curl");
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let d = data.to_str().unwrap();
    let server = serve(&data, &["--allow-push"]);
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
    age(&data);
    let key = data.join("blobs/sha256").join(&hex[..2]).join(&hex);
    let trashed = data.join("gc-trash").join(format!("sha256-{hex}"));
    let gc = Command::new(env!("CARGO_BIN_EXE_airlock"))
        .args(["gc", "--data", d, "--json"])
        .args(KEEP_ONE)
        .env("AIRLOCK_FAILPOINT", "gc:after_trash=sleep:3")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = std::time::Instant::now();
    while !trashed.exists() {
        assert!(
            t0.elapsed().as_secs() < 20,
            "gc never moved the blob to gc-trash/"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(!key.exists());
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
    let link = data
        .join("links/dst/app/_blobs")
        .join(format!("sha256-{hex}"));
    std::fs::create_dir_all(link.parent().unwrap()).unwrap();
    std::fs::write(&link, size.to_string()).unwrap();
    let out = gc.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["blobs_put_back"], 1, "{report}");
    assert!(!trashed.exists());
    assert_eq!(common::sha256sum(&key), digest);
    let head = curl(&["-I", &url(&format!("/v2/dst/app/blobs/{digest}"))]);
    assert_eq!(head, "200");

    // A GC killed between the move and the third look: the trash stays,
    // and the next run (nothing past its grace) puts the blob back.
    age(&data);
    let killed = Command::new(env!("CARGO_BIN_EXE_airlock"))
        .args(["gc", "--data", d])
        .args(KEEP_ONE)
        .env("AIRLOCK_FAILPOINT", "gc:after_trash=kill")
        .output()
        .unwrap();
    assert!(!killed.status.success());
    assert!(trashed.exists() && !key.exists());
    airlock_ok(&["gc", "--data", d, "--grace", "100d"]);
    assert!(!trashed.exists());
    assert_eq!(common::sha256sum(&key), digest);
}
