//! Metadata copies (issue 38): on the filesystem store every metadata
//! object has a second copy by default (a commit's blobs in one pack under
//! `copies/packs/`, a pull record object at `copies/pulls/`), so one
//! flipped, truncated or deleted object loses no acknowledged write.
//!
//! The site is built as a user builds it: an import (a stack image and a
//! torcx addon), a push by skopeo through a server, a `stack promote`, and
//! a pull the server records. For each kind of metadata object (state
//! document, repository table page, repository page, stacks document,
//! torcx document, changes document, pull record) and each damage: `airlock
//! fsck` reports it repaired from the other copy (rc 0) and the object is
//! whole again (its bytes hash to its digest, by `sha256sum`); a server
//! started on the damaged store answers every acknowledged tag with its
//! digest and stays ready; `fsck --repair` leaves the tags, stacks and
//! history exactly as before. `scrub` rewrites a rotten copy or object
//! from the other, `gc` removes copies with what it removes, and a
//! `kill -9` at any write of a commit leaves the previous or the new
//! generation, never a damaged one.

use std::path::Path;
use std::process::Command;

use crate::common;

use common::backend::{Backend, Kind};
use common::objects::{Objects, blob_key, pack_entries};
use common::{
    copy_fixture_layout, create_bundle, image_toml, layout_ref_digest, require_tool, run_ok,
    test_key,
};

/// A tag a client was told is stored: (repository, tag, digest).
type Acknowledged = (String, String, String);

/// Builds the site in `b` (files in `dir`): four generations (import,
/// push, promote), and a pull record object. Returns the acknowledged tags,
/// with digests from the layout's `index.json` (not from airlock).
fn site(b: &Backend, dir: &Path) -> Vec<Acknowledged> {
    require_tool("skopeo", "skopeo");
    require_tool("umoci", "umoci");
    let layout = copy_fixture_layout(dir);
    let l = |tag: &str| format!("{}:{tag}", layout.display());
    run_ok(Command::new("umoci").args([
        "config",
        "--image",
        &l("latest"),
        "--tag",
        "pushed",
        "--config.label=airlock.test=pushed",
    ]));
    let mut toml = image_toml(&format!("oci:{}", l("latest")), "stacks/bb", &["v1"], "");
    toml.push_str(&common::hello_addon(dir));
    let config = dir.join("mirror.toml");
    std::fs::write(&config, toml).unwrap();
    let bundle = dir.join("bundle.tar");
    create_bundle(&config, &bundle, &[]);
    b.import(&test_key().1, &bundle);

    let server = b.serve(&["--allow-push", "--pull-record-interval", "1s"]);
    common::skopeo(&[
        "copy",
        "--dest-tls-verify=false",
        &format!("oci:{}", l("pushed")),
        &format!("docker://{}/app/pushed:v1", server.addr),
    ]);
    let (status, _, _) = common::http(
        &server.addr,
        "GET",
        "/v2/app/pushed/manifests/v1",
        &[("accept", "application/vnd.oci.image.manifest.v1+json")],
    )
    .unwrap();
    assert_eq!(status, 200);
    let o = Objects::of(b);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while o.keys("pulls/").is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "no pull record written"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert!(server.terminate().success());
    b.airlock_ok(&["stack", "promote"], &["bb", "--image", "stacks/bb:v1"]);
    assert!(b.history().len() >= 3, "{:?}", b.history());
    vec![
        (
            "stacks/bb".into(),
            "v1".into(),
            layout_ref_digest(&layout, "latest"),
        ),
        (
            "app/pushed".into(),
            "v1".into(),
            layout_ref_digest(&layout, "pushed"),
        ),
    ]
}

/// The generation and every repository with its tags and digests.
fn tags(b: &Backend) -> String {
    let mut out = b.airlock_ok(&["ls"], &["--json"]);
    let ls: serde_json::Value = serde_json::from_str(&out).unwrap();
    for repo in ls["repositories"].as_array().expect("repositories") {
        let name = repo["repository"].as_str().unwrap();
        out.push_str(&b.airlock_ok(&["ls"], &[name, "--json"]));
    }
    out
}

/// What a user sees of the store: [`tags`], the stacks, and the history.
fn view(b: &Backend) -> String {
    let mut out = tags(b);
    out.push_str(&b.airlock_ok(&["stack", "list"], &[]));
    out.push_str(&b.airlock_ok(&["history"], &["--json"]));
    out
}

/// The pull record as airlock reads it, in process.
fn pulls(b: &Backend) -> String {
    let store = airlock::store::fs::FsStore::open(&b.data_dir()).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let record = rt
        .block_on(airlock::state::pulls::load(&store))
        .expect("the pull record reads");
    format!("{record:?}")
}

/// One metadata object of the current generation: its kind, its key, and
/// its digest (`None` for a keyed object, the pull record).
struct Object {
    kind: &'static str,
    key: String,
    digest: Option<String>,
}

/// The metadata objects of the current generation, one of each kind.
fn objects(b: &Backend) -> Vec<Object> {
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
    let blob = |kind, digest: String| Object {
        kind,
        key: blob_key(&digest),
        digest: Some(digest),
    };
    let document = |name: &str| {
        doc["documents"][name]
            .as_str()
            .unwrap_or_else(|| panic!("no {name} document: {doc}"))
            .to_string()
    };
    let mut out = vec![
        blob("state document", root.clone()),
        blob("repository table page", table),
        blob("repository page", repo_page),
        blob("stacks document", document("stacks")),
        blob("torcx document", document("torcx")),
        blob("changes document", doc["changes"].as_str().unwrap().into()),
    ];
    let pulls = o.keys("pulls/");
    assert_eq!(pulls.len(), 1, "{pulls:?}");
    out.push(Object {
        kind: "pull record",
        key: pulls[0].clone(),
        digest: None,
    });
    out
}

/// Flips, truncates or deletes the object at `key`.
fn damage(o: &Objects, key: &str, how: &str) {
    let bytes = o.get(key).unwrap();
    match how {
        "flipped" => {
            let mut bad = bytes.clone();
            // A digit or letter in the middle: still JSON, wrong content.
            let at = bytes.len() / 2;
            bad[at] ^= 0x01;
            o.put(key, &bad);
        }
        "truncated" => o.put(key, &bytes[..bytes.len() / 2]),
        _ => o.delete(key),
    }
}

/// The tags every client was told are stored, as a fresh server answers
/// them: each with its digest; and `/readyz` ready.
fn assert_served(b: &Backend, acked: &[Acknowledged], what: &str) {
    let server = b.serve(&[]);
    common::assert_tags_served(&server.addr, acked, what);
    assert!(server.terminate().success());
}

#[test]
fn one_damaged_metadata_object_loses_nothing() {
    let b = Backend::start(Kind::Fs);
    let dir = tempfile::tempdir().unwrap();
    let acked = site(&b, dir.path());
    let (before, pulls_before) = (view(&b), pulls(&b));
    let o = Objects::of(&b);
    for obj in objects(&b) {
        let whole = o.get(&obj.key).unwrap();
        match &obj.digest {
            Some(d) => assert!(!o.copies_of(d).is_empty(), "{} has no copy", obj.kind),
            None => assert_eq!(
                o.get(&format!("copies/{}", obj.key)).as_ref(),
                Some(&whole),
                "the pull record has no copy"
            ),
        }
        let name = obj.digest.clone().unwrap_or_else(|| obj.key.clone());
        for how in ["flipped", "truncated", "deleted"] {
            let what = format!("{} {how}", obj.kind);
            // fsck finds it, says so, and puts it back.
            damage(&o, &obj.key, how);
            let out = b.airlock_ok(&["fsck"], &[]);
            assert!(
                out.contains(&format!("repaired: {name}: "))
                    && out.contains("restored from its second copy"),
                "{what}: {out}"
            );
            assert!(out.contains(", 0 problems"), "{what}: {out}");
            match &obj.digest {
                Some(d) => assert_eq!(
                    common::sha256sum(&b.data_dir().join(&obj.key)),
                    *d,
                    "{what}: not written back"
                ),
                None => assert_eq!(o.get(&obj.key).unwrap(), whole, "{what}"),
            }
            assert_eq!(view(&b), before, "{what}: the store reads differently");
            assert_eq!(pulls(&b), pulls_before, "{what}");
            // A server started on the damaged store serves the current
            // generation; then fsck --repair changes nothing.
            damage(&o, &obj.key, how);
            assert_served(&b, &acked, &what);
            b.airlock_ok(&["fsck"], &["--repair"]);
            assert_eq!(view(&b), before, "{what}: after fsck --repair");
            assert_eq!(pulls(&b), pulls_before, "{what}: after fsck --repair");
            assert_eq!(
                o.get(&obj.key).unwrap(),
                whole,
                "{what}: after fsck --repair"
            );
        }
    }
}

/// A damaged copy is written again by `fsck`; `scrub` rewrites a rotten
/// copy and a rotten object (with a good copy) from the other.
#[test]
fn fsck_and_scrub_rewrite_either_copy_from_the_other() {
    let b = Backend::start(Kind::Fs);
    let dir = tempfile::tempdir().unwrap();
    site(&b, dir.path());
    let before = view(&b);
    let objs = objects(&b);
    let o = Objects::of(&b);
    let digest = |i: usize| objs[i].digest.clone().unwrap();

    // fsck: every copy of the state document rotten, then the pull
    // record's copy deleted.
    assert!(o.damage_copies(&digest(0)) > 0);
    o.delete(&format!("copies/{}", objs[6].key));
    let out = b.airlock_ok(&["fsck"], &[]);
    for name in [digest(0), objs[6].key.clone()] {
        assert!(
            out.contains(&format!("repaired: {name}: its second copy was")),
            "{out}"
        );
    }
    assert_eq!(good_copies(&o, &digest(0)), 1, "{out}");
    assert!(o.exists(&format!("copies/{}", objs[6].key)));

    // scrub: the table page's copies rotten, the repository page rotten.
    let (copy_of, object_of) = (digest(1), digest(2));
    assert!(o.damage_copies(&copy_of) > 0);
    damage(&o, &blob_key(&object_of), "flipped");
    let out = b.airlock_ok(&["scrub"], &["--json"]);
    let report: serde_json::Value =
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    let mut repaired: Vec<&str> = report["repaired"]
        .as_array()
        .unwrap_or_else(|| panic!("{out}"))
        .iter()
        .map(|d| d.as_str().unwrap())
        .collect();
    repaired.sort();
    repaired.dedup();
    let mut want = vec![copy_of.as_str(), object_of.as_str()];
    want.sort();
    assert_eq!(repaired, want, "{out}");
    assert_eq!(report["corrupt"].as_array().unwrap().len(), 0, "{out}");
    assert!(good_copies(&o, &copy_of) >= 1);
    assert_eq!(
        common::sha256sum(&b.data_dir().join(blob_key(&object_of))),
        object_of
    );
    assert_eq!(view(&b), before);
    let out = b.airlock_ok(&["fsck"], &[]);
    assert!(!out.contains("repaired:"), "{out}");
}

/// How many copies of `digest` in the packs hash to it (by `sha256sum`).
fn good_copies(o: &Objects, digest: &str) -> usize {
    let tmp = tempfile::tempdir().unwrap();
    let mut good = 0;
    for (key, at, len) in o.copies_of(digest) {
        let pack = o.get(&key).unwrap();
        let entry = tmp.path().join("entry");
        std::fs::write(&entry, &pack[at..at + len]).unwrap();
        good += usize::from(common::sha256sum(&entry) == digest);
    }
    good
}

/// The filesystem's default is 2 (packs written), `--metadata-copies 1`
/// writes none; a value other than 1 or 2 is refused naming the key.
#[test]
fn metadata_copies_is_a_setting() {
    let (_, keyring) = test_key();
    let dir = tempfile::tempdir().unwrap();
    let b = Backend::start(Kind::Fs);
    let (bundle, _) = common::synth::bundle(dir.path(), "one", 1, 83);
    b.import(&keyring, &bundle);
    let o = Objects::of(&b);
    let root = b.root();
    assert_eq!(good_copies(&o, &root), 1, "the default keeps a copy");

    let one = Backend::start(Kind::Fs);
    one.airlock_ok(
        &["import"],
        &[
            "--metadata-copies",
            "1",
            "--keyring",
            keyring.to_str().unwrap(),
            bundle.to_str().unwrap(),
        ],
    );
    assert!(Objects::of(&one).keys("copies/").is_empty());
    let o = b.airlock(&["history"], &["--metadata-copies", "3"]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("store.metadata_copies") && err.contains("must be 1 or 2"),
        "{err}"
    );
}

/// `gc` removes the packs of generations no longer kept (carrying the
/// copies still needed out of a pack partly dead), as its dry run said,
/// and keeps a good copy of everything kept.
#[test]
fn gc_removes_copies_with_their_objects() {
    let b = Backend::start(Kind::Fs);
    let dir = tempfile::tempdir().unwrap();
    site(&b, dir.path());
    let (bundle, _) = common::synth::bundle(dir.path(), "later", 1, 92);
    b.import(&test_key().1, &bundle);
    let o = Objects::of(&b);
    let packs_before = o.keys("copies/packs/").len();
    std::thread::sleep(std::time::Duration::from_secs(2));
    let gc = |dry: bool| {
        let mut args = vec![
            "--json",
            "--keep-generations",
            "1",
            "--keep-days",
            "0",
            "--grace",
            "1s",
        ];
        args.extend(dry.then_some("--dry-run"));
        let out = b.airlock_ok(&["gc"], &args);
        let report: serde_json::Value = serde_json::from_str(&out).unwrap();
        let n = |k: &str| report[k].as_u64().unwrap_or_else(|| panic!("{k}: {out}"));
        (n("copy_packs_removed"), n("copies_carried"))
    };
    let dry = gc(true);
    assert_eq!(
        o.keys("copies/packs/").len(),
        packs_before,
        "a dry run removes nothing"
    );
    let (removed, carried) = gc(false);
    assert_eq!((removed, carried), dry, "the dry run said otherwise");
    assert!(removed >= 1);
    assert_eq!(
        o.keys("copies/packs/").len() as u64,
        packs_before as u64 - removed + u64::from(carried > 0)
    );
    for obj in objects(&b) {
        if let Some(d) = &obj.digest {
            assert!(
                good_copies(&o, d) >= 1,
                "{}: the kept copy was removed",
                obj.kind
            );
        }
    }
    let out = b.airlock_ok(&["fsck"], &[]);
    assert!(!out.contains("repaired:"), "{out}");
}

/// `kill -9` after each write of an import's commit (a blob, a page, the
/// copy pack, the root; in whatever order they land): the store reads as
/// the previous or the new generation (its tags; the new one's history
/// entry has its own time), and `fsck` finds no problem.
#[test]
fn a_crash_at_any_write_of_a_commit_leaves_a_whole_generation() {
    let b = Backend::start(Kind::Fs);
    let dir = tempfile::tempdir().unwrap();
    site(&b, dir.path());
    let before = tags(&b);
    let saved = dir.path().join("saved");
    let data = b.data_dir();
    run_ok(Command::new("cp").arg("-a").arg(&data).arg(&saved));
    let (bundle, _) = common::synth::bundle(dir.path(), "crash", 1, 91);
    let keyring = test_key().1;
    let import = [
        "--keyring",
        keyring.to_str().unwrap(),
        bundle.to_str().unwrap(),
    ];
    b.airlock_ok(&["import"], &import);
    let after = tags(&b);
    assert_ne!(before, after);
    let mut crashed = 0;
    for n in 1.. {
        run_ok(Command::new("rm").arg("-rf").arg(&data));
        run_ok(Command::new("cp").arg("-a").arg(&saved).arg(&data));
        let o = b
            .command(&["import"], &import)
            .env("AIRLOCK_FAILPOINT", format!("fs:after_writes={n}"))
            .output()
            .unwrap();
        let out = b.airlock_ok(&["fsck"], &[]);
        assert!(out.contains(", 0 problems"), "write {n}: {out}");
        let seen = tags(&b);
        if o.status.success() {
            assert_eq!(seen, after, "write {n}: finished");
            break;
        }
        crashed += 1;
        assert!(
            seen == before || seen == after,
            "write {n}: neither generation:\n{seen}\nbefore:\n{before}\nafter:\n{after}"
        );
        assert!(n < 50, "the commit never finished");
    }
    assert!(
        crashed >= 3,
        "only {crashed} writes before the commit finished"
    );
}

#[test]
fn pack_entries_parse_what_airlock_writes() {
    // The tests' own parser agrees with airlock's writer on one pack.
    let blobs = vec![
        (
            airlock::digest::Digest::sha256_of(b"a"),
            bytes::Bytes::from_static(b"a"),
        ),
        (
            airlock::digest::Digest::sha256_of(b"bc"),
            bytes::Bytes::from_static(b"bc"),
        ),
    ];
    let (_, pack) = airlock::store::copies::pack::encode(&blobs);
    let entries = pack_entries(&pack);
    assert_eq!(entries.len(), 2);
    for ((d, at, len), (want, bytes)) in entries.iter().zip(&blobs) {
        assert_eq!(*d, want.to_string());
        assert_eq!(&pack[*at..at + len], &bytes[..]);
    }
}
