//! Backup and restore (issue 42 §2): the airlock job's bbr scripts, rendered
//! by the BOSH renderer stand-in into a VM's `/var/vcap` laid out in a temp
//! dir, run in bbr's order against a server started as bpm starts it while
//! 8 push loops run: the lock answers pushes 503 with `Retry-After` (they
//! succeed after the unlock), the artifact holds the generation's metadata
//! and the blobs it reaches and no other blob, and a restore onto a fresh
//! store serves every tag acknowledged before the lock with its digest,
//! passes `fsck --deep` and says so in history. Also: a lock whose holder
//! died ends after its ttl, a CLI import is refused while it holds, and an
//! S3 store's backup holds metadata only, restores onto the bucket that
//! keeps the blobs and is refused (nothing committed) where they are gone.

use crate::bosh_vm::{Vm, fs_props};
use crate::common;

use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use common::backend::{Backend, Kind};
use common::images::{image_manifest, image_parts, sha256};
use common::*;

const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";

/// What one push attempt got.
pub(crate) enum Pushed {
    /// 201 for the manifest: its digest.
    Acked(String),
    /// A refusal: the status and `Retry-After`.
    Refused(u16, Option<String>),
}

/// Pushes an image (config and layer by monolithic POST, then the
/// manifest at `tag`) over HTTP, stopping at the first refusal.
pub(crate) fn push_http(addr: &str, repo: &str, tag: &str, seed: u32) -> Pushed {
    let (config, layer) = image_parts(seed);
    for blob in [&config, &layer] {
        let path = format!("/v2/{repo}/blobs/uploads/?digest={}", sha256(blob));
        let (status, headers, _) = http_body(
            addr,
            "POST",
            &path,
            &[("content-type", "application/octet-stream")],
            blob,
        )
        .unwrap();
        if status != 201 {
            return Pushed::Refused(status, header(&headers, "retry-after").map(String::from));
        }
    }
    let m = image_manifest(&config, &[&layer]);
    let (status, headers, body) = http_body(
        addr,
        "PUT",
        &format!("/v2/{repo}/manifests/{tag}"),
        &[("content-type", OCI_MANIFEST)],
        &m,
    )
    .unwrap();
    match status {
        201 => {
            let d = header(&headers, "docker-content-digest")
                .unwrap()
                .to_string();
            assert_eq!(d, sha256(&m), "{}", String::from_utf8_lossy(&body));
            Pushed::Acked(d)
        }
        _ => Pushed::Refused(status, header(&headers, "retry-after").map(String::from)),
    }
}

/// One acknowledged push: (repository, tag, digest), when its manifest
/// PUT started and when it was acknowledged.
type Ack = ((String, String, String), Instant, Instant);

/// One refused push: its status, `Retry-After`, and when.
type Refusal = (u16, Option<String>, Instant);

/// `n` loops pushing new images to the server at `addr` until `stop`:
/// every acknowledgement, and every refusal's (status, Retry-After).
struct PushLoops {
    acks: Arc<Mutex<Vec<Ack>>>,
    refused: Arc<Mutex<Vec<Refusal>>>,
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl PushLoops {
    fn start(addr: &str, n: u32) -> PushLoops {
        let acks = Arc::new(Mutex::new(Vec::new()));
        let refused = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let threads = (0..n)
            .map(|t| {
                let (addr, acks, refused, stop) = (
                    addr.to_string(),
                    acks.clone(),
                    refused.clone(),
                    stop.clone(),
                );
                std::thread::spawn(move || {
                    let repo = format!("loops/app{t}");
                    let mut i = 0;
                    while !stop.load(Ordering::SeqCst) {
                        let tag = format!("v{i}");
                        let started = Instant::now();
                        match push_http(&addr, &repo, &tag, 1000 * (t + 1) + i) {
                            Pushed::Acked(d) => {
                                acks.lock().unwrap().push((
                                    (repo.clone(), tag, d),
                                    started,
                                    Instant::now(),
                                ));
                                i += 1;
                            }
                            Pushed::Refused(status, retry) => {
                                refused
                                    .lock()
                                    .unwrap()
                                    .push((status, retry, Instant::now()));
                                std::thread::sleep(Duration::from_millis(200));
                            }
                        }
                    }
                })
            })
            .collect();
        PushLoops {
            acks,
            refused,
            stop,
            threads,
        }
    }

    /// When the first refusal after `since` arrived (60 s at most).
    fn first_refusal_after(&self, since: Instant) -> Instant {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let first = self
                .refused
                .lock()
                .unwrap()
                .iter()
                .map(|r| r.2)
                .find(|at| *at > since);
            if let Some(at) = first {
                return at;
            }
            assert!(
                Instant::now() < deadline,
                "no push was refused under the lock"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn acked(&self) -> usize {
        self.acks.lock().unwrap().len()
    }

    /// Waits (60 s at most) until `n` more pushes than `from` are acked.
    fn wait_acked(&self, from: usize, n: usize, what: &str) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.acked() < from + n {
            assert!(Instant::now() < deadline, "{what}: {} acked", self.acked());
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn stop(self) -> (Vec<Ack>, Vec<Refusal>) {
        self.stop.store(true, Ordering::SeqCst);
        for t in self.threads {
            t.join().unwrap();
        }
        let acks = self.acks.lock().unwrap().clone();
        let refused = self.refused.lock().unwrap().clone();
        (acks, refused)
    }
}

/// Every blob file under `store/blobs/` of a filesystem store: (digest, bytes).
fn blob_files(store: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let root = store.join("blobs/sha256");
    for fan in std::fs::read_dir(&root).unwrap() {
        for f in std::fs::read_dir(fan.unwrap().path()).unwrap() {
            let f = f.unwrap();
            let name = f.file_name().to_string_lossy().into_owned();
            out.push((format!("sha256:{name}"), std::fs::read(f.path()).unwrap()));
        }
    }
    out
}

#[test]
fn bbr_backs_up_a_site_under_push_load_and_restores_it_onto_a_fresh_store() {
    let site = tempfile::tempdir().unwrap();
    let data = site.path().join("store");
    let port = free_port();
    let vm = Vm::new(&fs_props(&data, port));
    let addr = format!("127.0.0.1:{port}");
    let server = vm.start(&addr, &data);
    assert_eq!(vm.run_ok("bbr/metadata", &[]).trim(), "---", "bbr metadata");

    // A blob pushed and never named by a manifest: kept by the source
    // (linked, within gc's grace) and not by the backup.
    let orphan = common::images::bytes_of(5000, 77);
    let (status, _, _) = http_body(
        &addr,
        "POST",
        &format!("/v2/loops/orphan/blobs/uploads/?digest={}", sha256(&orphan)),
        &[],
        &orphan,
    )
    .unwrap();
    assert_eq!(status, 201);

    let loops = PushLoops::start(&addr, 8);
    loops.wait_acked(0, 16, "before the lock");
    let lock_started = Instant::now();
    let art = site.path().join("artifact");
    std::fs::create_dir_all(&art).unwrap();
    let out = vm.run_ok("bbr/pre-backup-lock", &[]);
    assert!(out.contains("write lock taken by bbr"), "{out}");
    // Pushes are refused while the backup runs: 503 with Retry-After. Once
    // the server refused one, it refuses every write that starts after.
    let locked = loops.first_refusal_after(lock_started);
    let out = vm.run_ok("bbr/backup", &[("BBR_ARTIFACT_DIRECTORY", &art)]);
    assert!(out.contains("backed up generation"), "{out}");
    let unlocking = Instant::now();
    let held = loops.acked();
    vm.run_ok("bbr/post-backup-unlock", &[]);
    loops.wait_acked(held, 8, "after the unlock");
    let (acks, refused) = loops.stop();

    let in_lock: Vec<_> = refused
        .iter()
        .filter(|(_, _, at)| *at >= locked && *at < unlocking)
        .collect();
    assert!(!in_lock.is_empty(), "no push was refused under the lock");
    for (status, retry, _) in &refused {
        assert_eq!(*status, 503, "only the lock refuses");
        assert_eq!(retry.as_deref(), Some("5"), "Retry-After");
    }
    // No manifest PUT that started once the lock held was acknowledged
    // before the unlock.
    for (tag, started, acked) in &acks {
        assert!(
            !(*started > locked && *acked < unlocking),
            "{tag:?} acknowledged under the lock"
        );
    }
    let before_lock: Vec<_> = acks
        .iter()
        .filter(|(_, _, acked)| *acked < lock_started)
        .map(|(t, _, _)| t.clone())
        .collect();
    assert!(before_lock.len() >= 16);

    // The artifact: airlock's metadata documents, and only manifests that
    // were acknowledged with the blobs they name; the orphan is not there.
    let manifest: Value =
        serde_json::from_slice(&std::fs::read(art.join("backup.json")).unwrap()).unwrap();
    assert_eq!(manifest["kind"], "airlock.backup.v1");
    assert_eq!(manifest["blobs"], true);
    let files = blob_files(&art.join("store"));
    let acked_digests: Vec<&str> = acks.iter().map(|(t, _, _)| t.2.as_str()).collect();
    let mut named = std::collections::HashSet::new();
    let mut manifests = 0;
    for (digest, bytes) in &files {
        assert_eq!(&sha256(bytes), digest, "artifact blob content");
        let Ok(v) = serde_json::from_slice::<Value>(bytes) else {
            continue;
        };
        if v["mediaType"] == OCI_MANIFEST {
            assert!(
                acked_digests.contains(&digest.as_str()),
                "unacknowledged manifest {digest}"
            );
            manifests += 1;
            named.insert(v["config"]["digest"].as_str().unwrap().to_string());
            for l in v["layers"].as_array().unwrap() {
                named.insert(l["digest"].as_str().unwrap().to_string());
            }
        }
    }
    assert!(manifests >= before_lock.len());
    // The generation's changes document (no `kind`: named by its state document).
    let root = std::fs::read_to_string(art.join("store/refs/root")).unwrap();
    assert_eq!(root.trim(), manifest["state"].as_str().unwrap());
    let state: Value = files
        .iter()
        .find(|(d, _)| d == root.trim())
        .map(|(_, b)| serde_json::from_slice(b).unwrap())
        .unwrap();
    let changes = state["changes"].as_str().unwrap_or_default();
    for (digest, bytes) in &files {
        let kind = serde_json::from_slice::<Value>(bytes)
            .ok()
            .and_then(|v| v["kind"].as_str().map(String::from))
            .unwrap_or_default();
        let manifest =
            serde_json::from_slice::<Value>(bytes).is_ok_and(|v| v["mediaType"] == OCI_MANIFEST);
        assert!(
            kind.starts_with("airlock.") || manifest || named.contains(digest) || digest == changes,
            "the artifact holds {digest}, which nothing kept reaches: {}",
            String::from_utf8_lossy(&bytes[..bytes.len().min(200)])
        );
    }
    for d in &named {
        assert!(files.iter().any(|(f, _)| f == d), "artifact lacks {d}");
    }
    assert!(data.join(blob_key(&sha256(&orphan))).is_file());
    assert!(!files.iter().any(|(d, _)| *d == sha256(&orphan)));
    assert!(server.terminate().success());

    // Restore onto a fresh store, as bbr restore runs it on a new VM.
    let fresh = site.path().join("fresh");
    let vm2 = Vm::new(&fs_props(&fresh, free_port()));
    let out = vm2.run_ok("bbr/restore", &[("BBR_ARTIFACT_DIRECTORY", &art)]);
    assert!(out.contains("restored generation"), "{out}");
    let restored = serve(&fresh, &[]);
    assert_tags_served(&restored.addr, &before_lock, "restored");
    let fsck = airlock_ok(&["fsck", "--deep", "--data", fresh.to_str().unwrap()]);
    assert!(
        fsck.contains("0 quarantined, 0 repaired from their second copies, 0 problems"),
        "{fsck}"
    );
    let history = airlock_ok(&["history", "--data", fresh.to_str().unwrap()]);
    assert!(
        history_rows(&history)[0].contains("restored from the backup of generation"),
        "{history}"
    );
}

fn blob_key(digest: &str) -> String {
    common::objects::blob_key(digest)
}

#[test]
fn a_lock_whose_holder_died_ends_after_its_ttl_and_holds_cli_imports() {
    let b = Backend::start(Kind::Fs);
    let server = b.serve(&["--allow-push"]);
    let store = b.store_args();
    let store: Vec<&str> = store.iter().map(String::as_str).collect();
    let mut args = vec!["lock", "--holder", "gone", "--ttl", "8s"];
    args.extend(&store);
    let out = airlock_ok(&args);
    assert!(out.contains("write lock taken by gone"), "{out}");
    match push_http(&server.addr, "held/app", "v1", 1) {
        Pushed::Refused(503, Some(r)) => assert_eq!(r, "5"),
        Pushed::Refused(s, r) => panic!("refused {s} {r:?}"),
        Pushed::Acked(_) => panic!("a push was accepted under the lock"),
    }
    // `airlock status` names it.
    let mut status = vec!["status"];
    status.extend(&store);
    let out = airlock_ok(&status);
    assert!(
        out.contains("write lock     writes are locked by gone"),
        "{out}"
    );
    // Reads go on.
    assert_eq!(
        http(&server.addr, "GET", "/v2/_catalog", &[]).unwrap().0,
        200
    );
    // Another holder cannot take it while it lasts.
    let mut other = vec!["lock", "--holder", "other"];
    other.extend(&store);
    let o = airlock(&other);
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("writes are locked by gone"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    // The holder never renews or releases it: after its ttl (and one
    // refresh) writes are accepted again.
    std::thread::sleep(Duration::from_secs(9));
    assert!(matches!(
        push_http(&server.addr, "held/app", "v1", 1),
        Pushed::Acked(_)
    ));
    // A CLI import is refused while a lock holds, with one line, and
    // writes nothing.
    let mut again = vec!["lock", "--holder", "bbr", "--ttl", "1h"];
    again.extend(&store);
    airlock_ok(&again);
    let root = b.root();
    let keyring = test_key().1;
    // A file that is there (a missing one is refused before the store is
    // opened), refused for the lock before it is read.
    let bundle = tempfile::NamedTempFile::new().unwrap();
    let o = airlock(
        &[
            &["import", "--keyring", keyring.to_str().unwrap()][..],
            &store,
            &[bundle.path().to_str().unwrap()],
        ]
        .concat(),
    );
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("writes are locked by bbr (backup)"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert_eq!(b.root(), root);
    let mut force = vec!["unlock", "--force"];
    force.extend(&store);
    assert!(airlock_ok(&force).contains("released"));
    let mut unlock = vec!["unlock"];
    unlock.extend(&store);
    assert!(airlock_ok(&unlock).contains("no write lock was held"));
    assert!(airlock_ok(&status).contains("write lock     none: writes are accepted"));
    assert!(server.terminate().success());
}

#[test]
fn an_s3_backup_holds_metadata_and_restores_onto_the_bucket_that_keeps_the_blobs() {
    let b = Backend::start(Kind::Moto);
    let server = b.serve(&["--allow-push"]);
    let (a1, b1) = match (
        push_http(&server.addr, "s3/app", "a", 11),
        push_http(&server.addr, "s3/app", "b", 12),
    ) {
        (Pushed::Acked(a), Pushed::Acked(b)) => (a, b),
        _ => panic!("pushes refused"),
    };
    let art = b.dir.path().join("artifact");
    let out = b.airlock_ok(&["backup"], &[art.to_str().unwrap()]);
    assert!(out.contains("metadata only"), "{out}");
    let manifest: Value =
        serde_json::from_slice(&std::fs::read(art.join("backup.json")).unwrap()).unwrap();
    assert_eq!(manifest["blobs"], false);
    assert_eq!(manifest["blob_count"], 0);
    let files = blob_files(&art.join("store"));
    let (config, layer) = image_parts(11);
    assert!(files.iter().any(|(d, _)| *d == a1), "manifest a copied");
    for blob in [&config, &layer] {
        assert!(
            !files.iter().any(|(d, _)| *d == sha256(blob)),
            "blob copied"
        );
    }

    // Tag a moves; the restore brings the backed-up generation back.
    let Pushed::Acked(a2) = push_http(&server.addr, "s3/app", "a", 13) else {
        panic!("push refused");
    };
    assert_ne!(a1, a2);
    let out = b.airlock_ok(&["restore"], &[art.to_str().unwrap()]);
    assert!(out.contains("restored generation"), "{out}");
    std::thread::sleep(b.refresh_bound());
    let tags = [
        ("s3/app".to_string(), "a".to_string(), a1.clone()),
        ("s3/app".to_string(), "b".to_string(), b1),
    ];
    assert_tags_served(&server.addr, &tags, "restored on the bucket");
    assert!(server.terminate().success());

    // A bucket without the blobs: refused, naming them; nothing committed.
    let endpoint = b.s3.as_ref().unwrap().endpoint.clone();
    let bucket = b.s3.as_ref().unwrap().bucket.clone();
    let other = format!("s3://{bucket}/other");
    let o = Command::new(env!("CARGO_BIN_EXE_airlock"))
        .args(["restore", "--store", &other, "--s3-endpoint", &endpoint])
        .arg(&art)
        .envs(common::backend::AWS_ENV)
        .output()
        .unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("the target lacks") && err.contains("nothing was committed"),
        "{err}"
    );
    let o = Command::new(env!("CARGO_BIN_EXE_airlock"))
        .args([
            "history",
            "--json",
            "--store",
            &other,
            "--s3-endpoint",
            &endpoint,
        ])
        .envs(common::backend::AWS_ENV)
        .output()
        .unwrap();
    let rows: Value = serde_json::from_slice(&o.stdout).unwrap_or(json!([]));
    assert_eq!(rows, json!([]), "{}", String::from_utf8_lossy(&o.stderr));
}

#[test]
fn a_restore_carries_the_pull_record_with_its_second_copy() {
    let b = Backend::start(Kind::Fs);
    let server = b.serve(&["--allow-push", "--pull-record-interval", "1s"]);
    let Pushed::Acked(d) = push_http(&server.addr, "pulled/app", "v1", 21) else {
        panic!("push refused");
    };
    let (status, _, _) = http(
        &server.addr,
        "GET",
        "/v2/pulled/app/manifests/v1",
        &[("accept", OCI_MANIFEST)],
    )
    .unwrap();
    assert_eq!(status, 200);
    assert!(server.terminate().success(), "stops, writing its pulls");
    let pulls = std::fs::read_dir(b.data_dir().join("pulls"))
        .unwrap()
        .count();
    assert_eq!(pulls, 1);

    let art = b.dir.path().join("artifact");
    b.airlock_ok(&["backup"], &[art.to_str().unwrap()]);
    let fresh = b.dir.path().join("fresh");
    let fresh = fresh.to_str().unwrap();
    airlock_ok(&["restore", "--data", fresh, art.to_str().unwrap()]);
    let fsck = airlock_ok(&["fsck", "--deep", "--data", fresh]);
    assert!(
        fsck.contains("0 quarantined, 0 repaired from their second copies, 0 problems"),
        "{fsck}"
    );
    // gc's retention reads the restored record: the tag was pulled today.
    let out = airlock_ok(&[
        "gc",
        "--data",
        fresh,
        "--dry-run",
        "--keep-tags",
        "pulled/app:pulled-within-days=7",
    ]);
    assert!(
        out.lines()
            .any(|l| l.contains("tag pulled/app:v1") && l.contains("pulled today")),
        "{out}"
    );
    let restored = serve(Path::new(fresh), &[]);
    let tags = [("pulled/app".to_string(), "v1".to_string(), d)];
    assert_tags_served(&restored.addr, &tags, "restored");
}
