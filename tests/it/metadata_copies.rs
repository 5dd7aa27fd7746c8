//! Metadata copies (issue 38): with `metadata_copies = 2` (on the
//! filesystem store here) every metadata
//! object a commit writes has a second copy (`copies/`), so one flipped,
//! truncated or deleted object loses no acknowledged write. For each kind
//! (state document, repository table page, repository page, stacks and
//! torcx documents, changes document) and each damage: `airlock fsck`
//! reports it repaired from the other copy (rc 0), the object is whole
//! again (its bytes hash to its digest, by `sha256sum`), and the tags,
//! stacks and history are exactly as before. A server keeps answering the
//! current generation and stays ready. A damaged second copy is written
//! again by `fsck` and by `airlock scrub`.

use crate::common;

use common::backend::{Backend, Kind};
use common::objects::{Objects, blob_key};
use common::{synth, test_key};

/// The flag every command of these scenarios gets.
const COPIES: [&str; 2] = ["--metadata-copies", "2"];

/// `airlock SUB <store> --metadata-copies 2 ARGS`, asserting success.
fn ok(b: &Backend, sub: &str, args: &[&str]) -> String {
    let mut all = COPIES.to_vec();
    all.extend_from_slice(args);
    b.airlock_ok(&[sub], &all)
}

/// The same blob's second copy.
fn copy_key(digest: &str) -> String {
    blob_key(digest).replacen("blobs/", "copies/", 1)
}

/// Commits the room document `name` (in process, as `stack promote` or a
/// torcx import writes theirs).
fn commit_document(b: &Backend, name: &str, doc: &[u8]) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let doc = doc.to_vec();
    let name = name.to_string();
    rt.block_on(async {
        let store = airlock::store::fs::FsStore::open(&b.data_dir())
            .unwrap()
            .with_metadata_copies(2);
        let state = airlock::state::StateStore::new(std::sync::Arc::new(store));
        state
            .commit(
                &format!("{name} document"),
                "test",
                &[airlock::state::Op::Document {
                    name,
                    change: airlock::state::DocumentChange::bytes(move |_| Ok(Some(doc.clone()))),
                }],
            )
            .await
            .unwrap();
    });
}

/// Two imports, a stacks and a torcx document: four generations.
fn site(b: &Backend) {
    let dir = tempfile::tempdir().unwrap();
    let (_, keyring) = test_key();
    for (name, seed) in [("one", 81), ("two", 82)] {
        let (bundle, _) = synth::bundle(dir.path(), name, 1, seed);
        ok(
            b,
            "import",
            &[
                "--keyring",
                keyring.to_str().unwrap(),
                bundle.to_str().unwrap(),
            ],
        );
    }
    commit_document(b, "stacks", br#"{"kind":"airlock.stacks.v1","stacks":{}}"#);
    commit_document(b, "torcx", br#"{"kind":"airlock.torcx.v1","remotes":{}}"#);
    assert_eq!(b.history().len(), 4);
}

/// What a user sees of the store: every repository with its tags and
/// digests, and the history.
fn view(b: &Backend) -> String {
    let mut out = b.airlock_ok(&["ls"], &["--json"]);
    let ls: serde_json::Value = serde_json::from_str(&out).unwrap();
    for repo in ls["repositories"].as_array().expect("repositories") {
        let name = repo["repository"].as_str().unwrap();
        out.push_str(&b.airlock_ok(&["ls"], &[name, "--json"]));
    }
    out.push_str(&b.airlock_ok(&["history"], &["--json"]));
    out
}

/// The metadata objects of the current generation, one of each kind:
/// (kind, digest).
fn objects(b: &Backend) -> Vec<(&'static str, String)> {
    let o = Objects::of(b);
    let root = b.root();
    let doc: serde_json::Value = serde_json::from_slice(&o.get(&blob_key(&root)).unwrap()).unwrap();
    let table = doc["repositories"].as_str().unwrap().to_string();
    let page: serde_json::Value =
        serde_json::from_slice(&o.get(&blob_key(&table)).unwrap()).unwrap();
    let repo_page = page["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find_map(|e| e[1].as_str().filter(|v| v.starts_with("sha256:")))
        .expect("a repository's root page in the table page")
        .to_string();
    vec![
        ("state document", root),
        ("repository table page", table),
        ("repository page", repo_page),
        (
            "stacks document",
            doc["documents"]["stacks"].as_str().unwrap().into(),
        ),
        (
            "torcx document",
            doc["documents"]["torcx"].as_str().unwrap().into(),
        ),
        ("changes document", doc["changes"].as_str().unwrap().into()),
    ]
}

/// sha256 of the stored object `key` by coreutils' `sha256sum`.
fn stored_sha256(b: &Backend, key: &str) -> String {
    common::sha256sum(&b.data_dir().join(key))
}

#[test]
fn one_damaged_metadata_object_loses_nothing() {
    let b = Backend::start(Kind::Fs);
    site(&b);
    let before = view(&b);
    let o = Objects::of(&b);
    for (kind, digest) in objects(&b) {
        assert!(
            o.exists(&copy_key(&digest)),
            "{kind} {digest} has no second copy"
        );
        for damage in ["flipped", "truncated", "deleted"] {
            let key = blob_key(&digest);
            let bytes = o.get(&key).unwrap();
            match damage {
                "flipped" => {
                    let mut bad = bytes.clone();
                    bad[bytes.len() / 2] ^= 0x20;
                    o.put(&key, &bad);
                }
                "truncated" => o.put(&key, &bytes[..bytes.len() / 2]),
                _ => o.delete(&key),
            }
            let out = ok(&b, "fsck", &[]);
            assert!(
                out.contains(&format!("repaired: {digest}: metadata object was damaged")),
                "{kind} {damage}: {out}"
            );
            assert!(out.contains(", 0 problems"), "{kind} {damage}: {out}");
            assert_eq!(
                stored_sha256(&b, &key),
                digest,
                "{kind} {damage}: not written back"
            );
            assert_eq!(
                view(&b),
                before,
                "{kind} {damage}: the store reads differently"
            );
        }
    }
    // A damaged second copy: fsck writes it again from the object.
    let (_, digest) = objects(&b).remove(0);
    let copy = copy_key(&digest);
    o.put(&copy, b"rot");
    let out = ok(&b, "fsck", &[]);
    assert!(
        out.contains(&format!(
            "repaired: {digest}: its second copy was damaged; written again"
        )),
        "{out}"
    );
    assert_eq!(stored_sha256(&b, &copy), digest);
    // And a copy deleted: written again too.
    o.delete(&copy);
    let out = ok(&b, "fsck", &[]);
    assert!(
        out.contains("its second copy was missing; written again"),
        "{out}"
    );
    assert_eq!(stored_sha256(&b, &copy), digest);
    assert_eq!(view(&b), before);
}

/// A server reading a damaged current state document and table page keeps
/// answering the current generation (not the last good one) and stays
/// ready.
#[test]
fn a_server_keeps_the_current_generation() {
    let b = Backend::start(Kind::Fs);
    site(&b);
    let objs = objects(&b);
    let o = Objects::of(&b);
    for (_, digest) in &objs[..2] {
        o.delete(&blob_key(digest));
    }
    // Started after the damage: nothing of the store is cached.
    let server = b.serve(&[]);
    let (status, _, body) = common::http(&server.addr, "GET", "/readyz", &[]).unwrap();
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    let (status, _, body) = common::http(&server.addr, "GET", "/v2/_catalog", &[]).unwrap();
    assert_eq!(status, 200);
    let catalog: serde_json::Value = serde_json::from_slice(&body).unwrap();
    let ls: serde_json::Value = serde_json::from_str(&b.airlock_ok(&["ls"], &["--json"])).unwrap();
    let names: Vec<&str> = ls["repositories"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["repository"].as_str().unwrap())
        .collect();
    assert_eq!(
        catalog["repositories"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r.as_str().unwrap())
            .collect::<Vec<_>>(),
        names
    );
    for (_, digest) in &objs[..2] {
        assert_eq!(stored_sha256(&b, &blob_key(digest)), *digest);
    }
    assert_eq!(
        b.history()[0].1,
        objs[0].1,
        "the current generation changed"
    );
}

/// `airlock scrub` finds a rotten second copy and a rotten object (with a
/// good copy) and writes each again from the other.
#[test]
fn scrub_rewrites_either_copy_from_the_other() {
    let b = Backend::start(Kind::Fs);
    site(&b);
    let before = view(&b);
    let objs = objects(&b);
    let o = Objects::of(&b);
    let (copy_of, object_of) = (&objs[1].1, &objs[2].1);
    o.put(&copy_key(copy_of), b"rot");
    let mut bad = o.get(&blob_key(object_of)).unwrap();
    bad[0] ^= 1;
    o.put(&blob_key(object_of), &bad);
    let out = ok(&b, "scrub", &["--json"]);
    let report: serde_json::Value =
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    let mut repaired: Vec<&str> = report["repaired"]
        .as_array()
        .unwrap_or_else(|| panic!("{out}"))
        .iter()
        .map(|d| d.as_str().unwrap())
        .collect();
    repaired.sort();
    let mut want = vec![copy_of.as_str(), object_of.as_str()];
    want.sort();
    assert_eq!(repaired, want, "{out}");
    assert_eq!(report["corrupt"].as_array().unwrap().len(), 0, "{out}");
    assert_eq!(stored_sha256(&b, &copy_key(copy_of)), *copy_of);
    assert_eq!(stored_sha256(&b, &blob_key(object_of)), *object_of);
    assert_eq!(view(&b), before);
}

/// The default (1) writes no copies, `--metadata-copies 2` does; a value
/// other than 1 or 2 is refused naming the key.
#[test]
fn metadata_copies_is_a_setting() {
    let b = Backend::start(Kind::Fs);
    let dir = tempfile::tempdir().unwrap();
    let (_, keyring) = test_key();
    let (one, _) = synth::bundle(dir.path(), "one", 1, 83);
    b.import(&keyring, &one);
    let o = Objects::of(&b);
    assert!(o.keys("copies/").is_empty());
    let (two, _) = synth::bundle(dir.path(), "two", 1, 84);
    ok(
        &b,
        "import",
        &[
            "--keyring",
            keyring.to_str().unwrap(),
            two.to_str().unwrap(),
        ],
    );
    let root = b.root();
    assert!(
        o.exists(&copy_key(&root)),
        "the new state document has no copy"
    );
    let o = b.airlock(&["history"], &["--metadata-copies", "3"]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("store.metadata_copies") && err.contains("must be 1 or 2"),
        "{err}"
    );
}

/// `gc` removes a metadata object's copy with the object (a generation no
/// longer kept), and keeps every copy of what is kept.
#[test]
fn gc_removes_copies_with_their_objects() {
    let b = Backend::start(Kind::Fs);
    site(&b);
    let o = Objects::of(&b);
    let old_stacks = objects(&b)[3].1.clone();
    commit_document(
        &b,
        "stacks",
        br#"{"kind":"airlock.stacks.v1","stacks":{},"custom":{}}"#,
    );
    std::thread::sleep(std::time::Duration::from_secs(2));
    let out = b.airlock_ok(
        &["gc"],
        &[
            "--json",
            "--keep-generations",
            "1",
            "--keep-days",
            "0",
            "--grace",
            "1s",
        ],
    );
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(report["copies_removed"].as_u64().unwrap() >= 1, "{out}");
    assert!(!o.exists(&blob_key(&old_stacks)), "{out}");
    assert!(
        !o.exists(&copy_key(&old_stacks)),
        "the copy outlived its object: {out}"
    );
    for (kind, digest) in objects(&b) {
        assert!(
            o.exists(&copy_key(&digest)),
            "{kind}: the kept copy was removed"
        );
    }
    ok(&b, "fsck", &[]);
}
