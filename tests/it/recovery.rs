//! Recovery without the damaged part (issue 24 §4): one flipped byte in
//! the current state document, in a repository page or in the stacks
//! document is found by `airlock fsck` and repaired by `airlock fsck
//! --repair`, which restores the newest generation whose whole tree
//! verifies without reading the damaged one; nothing committed before the
//! damaged generation is lost, and `rollback --to` works on a damaged
//! current generation too. A running server keeps answering reads from
//! the last good generation and says so on `/readyz`. A re-import alone
//! repairs what it needs: it restores the newest generation that verifies
//! and commits on top of it (a dry run only says so), and a manifest blob
//! quarantined by `fsck` is written again by the import that carries it.
//! Every scenario runs on the filesystem and on s3s-fs (moto is left out
//! to bound CI time).

use crate::common;

use common::backend::{Backend, on_backends};
use std::path::PathBuf;

use common::objects::{Objects, blob_key};
use common::{synth, test_key};

on_backends!(
    [fs, s3s_fs, ceph]
    a_damaged_state_document_is_repaired,
    a_re_import_repairs_a_damaged_repository_page,
);
on_backends!(
    [fs, s3s_fs]
    a_damaged_repository_page_is_repaired,
    a_damaged_stacks_document_is_repaired,
    rollback_works_on_a_damaged_current_generation,
    a_re_import_repairs_a_damaged_state_document,
    a_re_import_rewrites_a_quarantined_manifest,
);

/// Three generations: bundles `one` and `two` imported, then a room
/// document written (as a stack promotion writes `stacks`). Returns the
/// history, newest first: (generation, state document digest).
fn three_generations(b: &Backend) -> Vec<(u64, String)> {
    let dir = tempfile::tempdir().unwrap();
    three_generations_in(b, dir.path()).0
}

/// [`three_generations`] with the bundles kept in `dir`: the history and
/// bundle `two`'s path.
fn three_generations_in(b: &Backend, dir: &std::path::Path) -> (Vec<(u64, String)>, PathBuf) {
    let (_, keyring) = test_key();
    let (one, _) = synth::bundle(dir, "one", 1, 61);
    let (two, _) = synth::bundle(dir, "two", 1, 62);
    b.import(&keyring, &one);
    b.import(&keyring, &two);
    write_stacks_document(b);
    let h = b.history();
    assert_eq!(h.len(), 3, "{h:?}");
    (h, two)
}

/// `airlock import` of `bundle` (with `extra` flags): its output.
fn import_with(b: &Backend, bundle: &std::path::Path, extra: &[&str]) -> std::process::Output {
    let (_, keyring) = test_key();
    let mut args = vec!["--keyring", keyring.to_str().unwrap()];
    args.extend_from_slice(extra);
    args.push(bundle.to_str().unwrap());
    b.airlock(&["import"], &args)
}

/// stdout and stderr of `o`, joined.
fn text(o: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Commits a `stacks` room document (in process, as `stack promote` would).
fn write_stacks_document(b: &Backend) {
    commit_stacks_document(
        b,
        "stacks document",
        br#"{"kind":"airlock.stacks.v1","stacks":{}}"#,
    );
}

/// Commits `doc` as the `stacks` room document with `reason`.
fn commit_stacks_document(b: &Backend, reason: &str, doc: &[u8]) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let doc = doc.to_vec();
    rt.block_on(async {
        let state = airlock::state::StateStore::new(b.open_store().await);
        state
            .commit(
                reason,
                "test",
                &[airlock::state::Op::Document {
                    name: "stacks".into(),
                    change: airlock::state::DocumentChange::bytes(move |_| Ok(Some(doc.clone()))),
                }],
            )
            .await
            .unwrap();
    });
}

/// Flips one byte of the blob `digest` in place (its key unchanged), and
/// of its second copy when the store keeps one (`metadata_copies = 2`):
/// damage no copy can repair, which these
/// scenarios are about (one damaged copy: `metadata_copies.rs`).
fn flip(b: &Backend, digest: &str) {
    let objects = Objects::of(b);
    let key = blob_key(digest);
    let mut bytes = objects.get(&key).expect("no blob to damage");
    let at = bytes.len() / 2;
    bytes[at] ^= 0x20;
    objects.put(&key, &bytes);
    objects.damage_copies(digest);
}

/// The state document of the current generation, parsed.
fn state_doc(b: &Backend, digest: &str) -> serde_json::Value {
    let bytes = Objects::of(b).get(&blob_key(digest)).unwrap();
    serde_json::from_slice(&bytes).unwrap()
}

/// `fsck` fails naming a problem; `fsck --repair` restores generation
/// `want` as generation `new`, naming the lost ones; then history and
/// fsck are whole, with every generation up to `want` under the new one.
fn repair_restores(b: &Backend, want: u64, lost: &[u64], new: u64) {
    let o = b.airlock(&["fsck"], &[]);
    assert!(!o.status.success(), "fsck did not notice the damage");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("--repair"), "{err}");
    let dry = b.airlock_ok(&["fsck"], &["--repair", "--dry-run"]);
    assert!(
        dry.contains(&format!("would restore generation {want}")),
        "{dry}"
    );
    let out = b.airlock_ok(&["fsck"], &["--repair"]);
    for g in lost {
        assert!(out.contains(&format!("lost: generation {g} ")), "{out}");
    }
    assert!(
        out.contains(&format!("restored generation {want} ")),
        "{out}"
    );
    b.airlock_ok(&["fsck"], &[]);
    let h = b.history();
    // Generations before the damaged one are all there, under the restored one.
    let gens: Vec<u64> = h.iter().map(|(g, _)| *g).collect();
    let mut expected = vec![new];
    expected.extend((1..=want).rev());
    assert_eq!(gens, expected);
}

fn a_damaged_state_document_is_repaired(b: Backend) {
    let h = three_generations(&b);
    flip(&b, &h[0].1);
    let o = b.airlock(&["history"], &[]);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(text.contains("fsck"), "{text}");
    // Generation 3's document is unreadable: it is lost (counted, though
    // not listed by number), and the new generation is 4, so history's
    // numbers say what is gone.
    repair_restores(&b, 2, &[], 4);
    let listing = b.airlock_ok(&["history"], &["--json"]);
    assert!(
        listing.contains("recovered: restored generation 2 (1 newer generations lost: damaged)"),
        "{listing}"
    );
}

fn a_damaged_repository_page_is_repaired(b: Backend) {
    let h = three_generations(&b);
    // The repository table's root page of generation 2 (new in it: bundle
    // `two` added repositories); generation 3 shares it.
    let doc = state_doc(&b, &h[1].1);
    let page = doc["repositories"].as_str().unwrap().to_string();
    flip(&b, &page);
    repair_restores(&b, 1, &[3, 2], 4);
}

/// A room document damaged beyond its copies costs that document only
/// (issue 61 §5: recovery at the grain of the damage): set back to its
/// newest earlier version that reads (none here: generation 3 made it, so
/// it is removed), the rest of generation 3 kept, as generation 4.
fn a_damaged_stacks_document_is_repaired(b: Backend) {
    let h = three_generations(&b);
    let doc = state_doc(&b, &h[0].1);
    let stacks = doc["documents"]["stacks"].as_str().unwrap().to_string();
    let table = doc["repositories"].as_str().unwrap().to_string();
    flip(&b, &stacks);
    let o = b.airlock(&["fsck"], &[]);
    assert!(!o.status.success(), "fsck did not notice the damage");
    let dry = b.airlock_ok(&["fsck"], &["--repair", "--dry-run"]);
    assert!(
        dry.contains("damaged: document stacks: removed (no earlier version verifies)"),
        "{dry}"
    );
    let out = b.airlock_ok(&["fsck"], &["--repair"]);
    assert!(
        out.contains("lost tag change: document stacks changed in generation 3")
            && out.contains("everything else of generation 3 kept")
            && out.contains("recorded as generation 4"),
        "{out}"
    );
    b.airlock_ok(&["fsck"], &[]);
    let gens: Vec<u64> = b.history().iter().map(|(g, _)| *g).collect();
    assert_eq!(gens, [4, 3, 2, 1], "nothing of history is lost");
    let now = state_doc(&b, b.root().trim());
    assert_eq!(
        now["repositories"].as_str().unwrap(),
        table,
        "every repository kept"
    );
    assert!(now["documents"].get("stacks").is_none());
}

fn rollback_works_on_a_damaged_current_generation(b: Backend) {
    let h = three_generations(&b);
    flip(&b, &h[0].1);
    let out = b.airlock_ok(&["rollback"], &["--to", "1"]);
    assert!(
        out.contains("rolled back to generation 1: generation 3"),
        "{out}"
    );
    b.airlock_ok(&["fsck"], &[]);
    let gens: Vec<u64> = b.history().iter().map(|(g, _)| *g).collect();
    assert_eq!(gens, [3, 1]);
}

/// A server whose state turns damaged keeps answering reads from the last
/// good generation and reports it on `/readyz`.
#[test]
fn serve_keeps_the_last_good_generation() {
    let b = Backend::start(common::backend::Kind::Fs);
    let h = three_generations(&b);
    let server = b.serve(&[]);
    let (status, _, body) = common::http(&server.addr, "GET", "/v2/_catalog", &[]).unwrap();
    assert_eq!(status, 200);
    let catalog = body;
    // Another process commits a generation; its state document is damaged
    // before the server reads it.
    write_stacks_document_other(&b);
    let now = b.root();
    assert_ne!(now, h[0].1);
    flip(&b, &now);
    let (status, _, body) = common::http(&server.addr, "GET", "/v2/_catalog", &[]).unwrap();
    assert_eq!(status, 200);
    assert_eq!(body, catalog);
    let (status, _, body) = common::http(&server.addr, "GET", "/readyz", &[]).unwrap();
    assert_eq!(status, 503);
    assert!(String::from_utf8_lossy(&body).contains("fsck --repair"));
    b.airlock_ok(&["fsck"], &["--repair"]);
    let (status, _, _) = common::http(&server.addr, "GET", "/readyz", &[]).unwrap();
    assert_eq!(status, 200);
}

/// A fourth generation (another document), as another process commits it.
fn write_stacks_document_other(b: &Backend) {
    commit_stacks_document(
        b,
        "stacks document 2",
        br#"{"kind":"airlock.stacks.v1","stacks":{},"custom":{}}"#,
    );
}

/// A repository page of generation 2 is damaged (generation 3 shares it):
/// a dry-run import says what it would restore and changes nothing; the
/// import itself restores generation 1 (2 and 3 lost: they reach the
/// damaged page), then sets bundle `two`'s tags again on top of it.
fn a_re_import_repairs_a_damaged_repository_page(b: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let (h, two) = three_generations_in(&b, dir.path());
    let doc = state_doc(&b, &h[1].1);
    let page = doc["repositories"].as_str().unwrap().to_string();
    flip(&b, &page);
    let root = b.root();
    let dry = import_with(&b, &two, &["--dry-run"]);
    assert!(!dry.status.success(), "{}", text(&dry));
    let out = text(&dry);
    assert!(out.contains("would restore generation 1"), "{out}");
    assert!(out.contains("nothing committed"), "{out}");
    assert_eq!(b.root(), root, "a dry run moved the root");
    let o = import_with(&b, &two, &[]);
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    assert!(
        out.contains("the current generation was damaged; lost: generation 3 "),
        "{out}"
    );
    assert!(out.contains("restored generation 1 "), "{out}");
    // Bundle two's images are tagged again, as new on generation 1.
    let created = out.lines().filter(|l| l.starts_with("created ")).count();
    assert_eq!(
        created,
        bundle_index(&two)["manifests"].as_array().unwrap().len(),
        "{out}"
    );
    assert!(out.contains("generation 5"), "{out}");
    b.airlock_ok(&["fsck"], &[]);
    let gens: Vec<u64> = b.history().iter().map(|(g, _)| *g).collect();
    assert_eq!(gens, [5, 4, 1]);
}

/// The current state document is damaged: the import restores generation
/// 2 (as generation 4: 3 is lost); bundle `two` is already in it, so the import itself
/// changes nothing more.
fn a_re_import_repairs_a_damaged_state_document(b: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let (h, two) = three_generations_in(&b, dir.path());
    flip(&b, &h[0].1);
    let o = import_with(&b, &two, &["--json"]);
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    let report: serde_json::Value =
        serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(report["repaired"]["restored"]["generation"], 2, "{out}");
    assert_eq!(report["repaired"]["generation"], 4, "{out}");
    assert_eq!(report["repaired"]["lost_count"], 1, "{out}");
    assert_eq!(report["changed"], false, "{out}");
    assert_eq!(report["generation"], 4, "{out}");
    b.airlock_ok(&["fsck"], &[]);
    let gens: Vec<u64> = b.history().iter().map(|(g, _)| *g).collect();
    assert_eq!(gens, [4, 2, 1]);
}

/// A manifest blob damaged on disk is quarantined by `fsck`; re-importing
/// the bundle that carries it writes it again (no generation is lost: the
/// state itself was whole) and `fsck` is clean.
fn a_re_import_rewrites_a_quarantined_manifest(b: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let (h, two) = three_generations_in(&b, dir.path());
    let manifest = bundle_manifest(&two);
    flip(&b, &manifest);
    let o = b.airlock(&["fsck"], &[]);
    assert!(!o.status.success(), "{}", text(&o));
    assert!(
        Objects::of(&b).get(&blob_key(&manifest)).is_none(),
        "fsck left the damaged manifest in place"
    );
    let out = b.import(&test_key().1, &two);
    assert!(!out.contains("damaged"), "{out}");
    let bytes = Objects::of(&b).get(&blob_key(&manifest)).unwrap();
    assert_eq!(common::images::sha256(&bytes), manifest);
    b.airlock_ok(&["fsck"], &[]);
    assert_eq!(
        b.history()[0],
        h[0],
        "a new generation for a rewritten blob"
    );
}

/// The `index.json` of the bundle `path`, read with `tar`.
fn bundle_index(path: &std::path::Path) -> serde_json::Value {
    let out = std::process::Command::new("tar")
        .args(["-xOf", path.to_str().unwrap(), "index.json"])
        .output()
        .expect("tar (Debian package tar)");
    assert!(out.status.success());
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The digest of the first image manifest the bundle `path` carries.
fn bundle_manifest(path: &std::path::Path) -> String {
    bundle_index(path)["manifests"][0]["digest"]
        .as_str()
        .unwrap()
        .to_string()
}
