//! Recovery loses only what is damaged, and says exactly what (issue 61),
//! each case from the exact inputs:
//!
//! - `refs/root` deleted or with one flipped byte, state documents present:
//!   damage, never an empty site: `fsck` exits 1, a server answers every
//!   acknowledged tag from the root's second copy while `/readyz` says 503
//!   and a push answers 503 `UNAVAILABLE` with `Retry-After`; `fsck
//!   --repair` points the root at the newest generation and says nothing
//!   was lost; history is unchanged.
//! - `refs/layout` damaged eight ways (trailing bytes, a digit, a
//!   directory, ...): no command refuses the store; `fsck` names it and
//!   exits 1, a server serves and says 503 on `/readyz`, `fsck --repair`
//!   writes it again.
//! - A copy pack with a wrong length in its header and the state document
//!   damaged: the state document comes back from its copy.
//! - Both copies of the current changes document damaged: `fsck` exits 1
//!   naming the record, `history` says the generation's record is damaged,
//!   `fsck --repair` records the loss as a new generation.
//! - Both copies of the current state document damaged: the repair lists
//!   the acknowledged tag changes it loses, read from the changes document.
//! - Both copies of one repository's leaf page damaged: its tag answers 503
//!   and `/readyz` 503 "degraded" while every other repository is served;
//!   the repair sets back that repository only, keeping the rest of the
//!   generation.
//! - Restore: a backup with a flipped pull record is refused, nothing
//!   committed; a rotten layer in the target is replaced by the backup's
//!   good one; a backup killed by `kill -9` leaves its lock, and the next
//!   backup takes it over and releases it.
//! - `airlock import --config FILE` imports into the config's `[store]`.
//!
//! Acknowledged tags and digests come from the bundles' OCI layouts
//! (`index.json`), never from airlock.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::common;

use common::backend::{Backend, Kind, on_backends};
use common::objects::{Objects, blob_key};
use common::{http, http_body, test_key};

on_backends!(
    [fs, s3s_fs]
    a_missing_root_is_damage_not_an_empty_site,
    a_flipped_root_is_damage_and_repaired_without_loss,
);

/// A tag a client was told is stored: (repository, tag, digest).
type Acked = (String, String, String);

/// Imports bundles `names` (one generation each, 1 MiB of generated
/// layers) into `b`; returns what each one acknowledged, from the
/// layouts' `index.json`.
fn imports(b: &Backend, dir: &Path, names: &[&str]) -> Vec<Vec<Acked>> {
    let (_, keyring) = test_key();
    names
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let seed = 610 + u32::try_from(i).unwrap();
            let (bundle, layout) = common::synth::bundle(dir, name, 1, seed);
            b.import(&keyring, &bundle);
            acked_of(&layout, name)
        })
        .collect()
}

/// The tags a synthetic bundle `name` of `layout` carries:
/// `<name>/<ref>:latest` with the manifest digest the layout lists.
fn acked_of(layout: &Path, name: &str) -> Vec<Acked> {
    let index: serde_json::Value =
        serde_json::from_slice(&std::fs::read(layout.join("index.json")).unwrap()).unwrap();
    index["manifests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            let r = m["annotations"]["org.opencontainers.image.ref.name"]
                .as_str()
                .unwrap();
            (
                format!("{name}/{r}"),
                "latest".to_string(),
                m["digest"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// HEAD of each acknowledged tag: (status, digest header) per tag.
fn heads(addr: &str, tags: &[Acked]) -> Vec<(u16, Option<String>)> {
    tags.iter()
        .map(|(repo, tag, _)| common::head_manifest(addr, repo, tag))
        .collect()
}

/// Asserts every tag of `tags` is answered 200 with its digest.
fn assert_heads_ok(addr: &str, tags: &[Acked], what: &str) {
    for ((repo, tag, digest), (status, got)) in tags.iter().zip(heads(addr, tags)) {
        assert_eq!(status, 200, "{what}: {repo}:{tag}");
        assert_eq!(
            got.as_deref(),
            Some(digest.as_str()),
            "{what}: {repo}:{tag}"
        );
    }
}

/// `/readyz`: (status, body).
fn readyz(addr: &str) -> (u16, String) {
    let (status, _, body) = http(addr, "GET", "/readyz", &[]).unwrap();
    (status, String::from_utf8_lossy(&body).into_owned())
}

/// A manifest PUT (its blobs pushed first) answers 503 `UNAVAILABLE`
/// with `Retry-After`: a write refused while the state is damaged.
fn assert_push_refused(addr: &str) {
    let (config, layer) = common::images::image_parts(6161);
    for blob in [&config, &layer] {
        let path = format!(
            "/v2/damage/push/blobs/uploads/?digest={}",
            common::images::sha256(blob)
        );
        let (status, _, _) = http_body(addr, "POST", &path, &[], blob).unwrap();
        assert_eq!(status, 201, "a blob needs no generation");
    }
    let m = common::images::image_manifest(&config, &[&layer]);
    let (status, headers, body) = http_body(
        addr,
        "PUT",
        "/v2/damage/push/manifests/t",
        &[("content-type", "application/vnd.oci.image.manifest.v1+json")],
        &m,
    )
    .unwrap();
    let body = String::from_utf8_lossy(&body);
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("UNAVAILABLE"), "{body}");
    assert!(common::header(&headers, "retry-after").is_some());
}

/// stdout and stderr of `o`, joined.
fn text(o: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// `fsck` fails naming `what`, and points at `--repair`.
fn assert_fsck_fails(b: &Backend, what: &str) -> String {
    let o = b.airlock(&["fsck"], &[]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(out.contains(what), "{out}");
    assert!(out.contains("--repair"), "{out}");
    out
}

/// The damaged root, served and repaired: readers get every tag from the
/// copy, `/readyz` and a push answer 503, `fsck --repair` names the
/// newest generation again and says nothing was lost.
fn root_damage_is_served_and_repaired(b: &Backend, acked: &[Acked], root: &str, history: &str) {
    assert_fsck_fails(b, "refs/root");
    let server = b.serve(&["--allow-push"]);
    assert_heads_ok(&server.addr, acked, "served from the root's copy");
    let (status, body) = readyz(&server.addr);
    assert_eq!(status, 503, "{body}");
    assert!(body.starts_with("degraded:"), "{body}");
    assert_push_refused(&server.addr);
    let dry = b.airlock_ok(&["fsck"], &["--repair", "--dry-run"]);
    assert!(dry.contains("nothing would be lost"), "{dry}");
    let out = b.airlock_ok(&["fsck"], &["--repair"]);
    assert!(out.contains("nothing was lost"), "{out}");
    assert!(!out.contains("newer generations lost"), "{out}");
    assert_eq!(
        b.root().trim(),
        root,
        "the root names the newest generation again"
    );
    assert_eq!(b.airlock_ok(&["history"], &["--json"]), history);
    b.airlock_ok(&["fsck"], &[]);
    // The running server sees the repair within a refresh.
    common::backend::settled(Duration::from_secs(10), &200, || readyz(&server.addr).0);
    assert_heads_ok(&server.addr, acked, "after the repair");
    assert!(server.terminate().success());
}

fn a_missing_root_is_damage_not_an_empty_site(b: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let acked: Vec<Acked> = imports(&b, dir.path(), &["one", "two"]).concat();
    let root = b.root().trim().to_string();
    let history = b.airlock_ok(&["history"], &["--json"]);
    Objects::of(&b).delete("refs/root");
    root_damage_is_served_and_repaired(&b, &acked, &root, &history);
}

fn a_flipped_root_is_damage_and_repaired_without_loss(b: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let acked: Vec<Acked> = imports(&b, dir.path(), &["one", "two"]).concat();
    let root = b.root().trim().to_string();
    let history = b.airlock_ok(&["history"], &["--json"]);
    let o = Objects::of(&b);
    let mut bytes = o.get("refs/root").unwrap();
    let at = bytes.len() - 3;
    bytes[at] = if bytes[at] == b'0' { b'1' } else { b'0' };
    o.put("refs/root", &bytes);
    root_damage_is_served_and_repaired(&b, &acked, &root, &history);
}

/// The layout marker's damage, eight ways: what `refs/layout` becomes.
fn layout_damages(good: &str) -> Vec<(&'static str, Option<String>)> {
    let marker: serde_json::Value = serde_json::from_str(good).unwrap();
    let with = |k: &str, v: serde_json::Value| {
        let mut m = marker.clone();
        m[k] = v;
        Some(m.to_string())
    };
    let mut no_check = marker.clone();
    no_check.as_object_mut().unwrap().remove("check");
    no_check["layout"] = 3.into();
    vec![
        ("trailing bytes", Some(format!("{good}\u{0}\u{0}x"))),
        ("a digit 1 -> 3", Some(good.replacen("1", "3", 1))),
        ("layout 3, check kept", with("layout", 3.into())),
        ("layout 3 without a check", Some(no_check.to_string())),
        (
            "written_by changed",
            with("written_by", "airlock 9.9.9".into()),
        ),
        ("truncated", Some(good[..good.len() / 2].to_string())),
        ("empty", Some(String::new())),
        ("a directory", None),
    ]
}

#[test]
fn a_damaged_layout_marker_is_damage_and_repaired() {
    let b = Backend::start(Kind::Fs);
    let dir = tempfile::tempdir().unwrap();
    let acked: Vec<Acked> = imports(&b, dir.path(), &["one"]).concat();
    let marker = b.data_dir().join("refs/layout");
    let good = std::fs::read_to_string(&marker).unwrap();
    for (what, damaged) in layout_damages(&good) {
        match &damaged {
            Some(text) => std::fs::write(&marker, text).unwrap(),
            None => {
                std::fs::remove_file(&marker).unwrap();
                std::fs::create_dir(&marker).unwrap();
                std::fs::write(marker.join("x"), "x").unwrap();
            }
        }
        let out = assert_fsck_fails(&b, "refs/layout");
        assert!(
            !out.contains("run a release"),
            "{what}: read as a newer release: {out}"
        );
        let server = b.serve(&[]);
        assert_heads_ok(&server.addr, &acked, what);
        let (status, body) = readyz(&server.addr);
        assert_eq!(status, 503, "{what}: {body}");
        assert!(body.contains("refs/layout"), "{what}: {body}");
        assert!(server.terminate().success());
        let out = b.airlock_ok(&["fsck"], &["--repair"]);
        assert!(out.contains("refs/layout"), "{what}: {out}");
        b.airlock_ok(&["fsck"], &[]);
        let now: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&marker).unwrap()).unwrap();
        assert_eq!(now["layout"], 1, "{what}");
        assert!(now["check"].is_string(), "{what}");
    }
}

/// The current state document (from `refs/root`), parsed.
fn current_doc(b: &Backend) -> (String, serde_json::Value) {
    let root = b.root().trim().to_string();
    let bytes = Objects::of(b).get(&blob_key(&root)).unwrap();
    (root, serde_json::from_slice(&bytes).unwrap())
}

/// Flips one byte of the blob `digest` in place.
fn flip_object(o: &Objects, digest: &str) {
    let key = blob_key(digest);
    // Read the file itself: a damaged blob reads as absent through the store.
    let mut bytes = o.get(&key).expect("no blob to damage");
    let at = bytes.len() / 2;
    bytes[at] ^= 0x20;
    o.put(&key, &bytes);
}

/// Flips one byte of the blob `digest` and of every copy of it: damage no
/// copy repairs.
fn flip_with_copies(o: &Objects, digest: &str) {
    flip_object(o, digest);
    assert!(
        o.damage_copies(digest) >= 1,
        "{digest} has no copy to damage"
    );
}

#[test]
fn a_wrong_length_in_a_copy_pack_costs_that_entry_only() {
    let b = Backend::start(Kind::Fs);
    let dir = tempfile::tempdir().unwrap();
    let acked: Vec<Acked> = imports(&b, dir.path(), &["one"]).concat();
    let (root, _) = current_doc(&b);
    let o = Objects::of(&b);
    let copies = o.copies_of(&root);
    assert_eq!(copies.len(), 1, "{copies:?}");
    let (pack_key, _, _) = &copies[0];
    let mut pack = o.get(pack_key).unwrap();
    let entries = common::objects::pack_entries(&pack);
    assert!(entries.len() >= 2, "{entries:?}");
    // One wrong digit in the length of an entry listed before the state
    // document's (another entry than it), in the header text.
    let (other, _, len) = entries.iter().find(|(d, _, _)| *d != root).unwrap().clone();
    let header_end = pack.iter().position(|&c| c == b'\n').unwrap();
    let header = String::from_utf8_lossy(&pack).into_owned();
    let line_at = header.find(&format!("{other} ")).unwrap();
    let line_end = line_at + header[line_at..].find('\n').unwrap();
    assert!(line_at > header_end);
    let len_text = len.to_string();
    let digit_at = line_end - len_text.len();
    assert_eq!(&header[digit_at..line_end], len_text);
    pack[digit_at] = if pack[digit_at] == b'9' {
        b'1'
    } else {
        pack[digit_at] + 1
    };
    o.put(pack_key, &pack);
    flip_object(&o, &root);
    let out = b.airlock_ok(&["fsck"], &[]);
    assert!(
        out.contains(&format!("repaired: {root}: metadata object was damaged"))
            && out.contains("restored from its second copy"),
        "{out}"
    );
    // The entry whose length was made wrong is found damaged and written
    // again; no other entry of the pack is lost with it.
    assert!(
        out.contains(&format!("repaired: {other}: its second copy was damaged")),
        "{out}"
    );
    let server = b.serve(&[]);
    common::assert_tags_served(&server.addr, &acked, "after the repair from the copy");
    assert!(server.terminate().success());
}

#[test]
fn a_damaged_changes_record_is_reported_and_recorded() {
    let b = Backend::start(Kind::Fs);
    let dir = tempfile::tempdir().unwrap();
    let acked: Vec<Acked> = imports(&b, dir.path(), &["one", "two"]).concat();
    let (_, doc) = current_doc(&b);
    let changes = doc["changes"].as_str().unwrap().to_string();
    let o = Objects::of(&b);
    flip_with_copies(&o, &changes);
    let out = assert_fsck_fails(&b, "record");
    assert!(out.contains(&changes), "{out}");
    let history = b.airlock_ok(&["history"], &[]);
    assert!(
        history.contains("its record of what it changed is damaged"),
        "{history}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&b.airlock_ok(&["history"], &["--json"])).unwrap();
    let first = &json.as_array().map_or(&json["generations"][0], |a| &a[0]);
    assert!(first["changes_damaged"].is_string(), "{json}");
    let out = b.airlock_ok(&["fsck"], &["--repair"]);
    assert!(out.contains("recorded as generation 3"), "{out}");
    b.airlock_ok(&["fsck"], &[]);
    let server = b.serve(&[]);
    common::assert_tags_served(&server.addr, &acked, "after the record was restated");
    assert!(server.terminate().success());
}

#[test]
fn a_lost_state_document_names_the_tag_changes_it_loses() {
    let b = Backend::start(Kind::Fs);
    let dir = tempfile::tempdir().unwrap();
    let acked = imports(&b, dir.path(), &["one", "two"]);
    let (root, _) = current_doc(&b);
    flip_with_copies(&Objects::of(&b), &root);
    assert_fsck_fails(&b, &root);
    let out = b.airlock_ok(&["fsck"], &["--repair"]);
    for (repo, tag, digest) in &acked[1] {
        let short = &digest.strip_prefix("sha256:").unwrap()[..12];
        assert!(
            out.contains(&format!(
                "lost tag change: created {repo}:{tag} - -> {short}"
            )),
            "{out}"
        );
    }
    assert!(out.contains("restored generation 1"), "{out}");
    let server = b.serve(&[]);
    assert_heads_ok(&server.addr, &acked[0], "generation 1's tags kept");
    assert!(server.terminate().success());
}

/// The root page of `repository` in the state document `doc` (read from
/// the repository table's root page, a leaf for a small site).
fn repository_page(o: &Objects, doc: &serde_json::Value, repository: &str) -> String {
    let table = doc["repositories"].as_str().unwrap();
    let page: serde_json::Value =
        serde_json::from_slice(&o.get(&blob_key(table)).unwrap()).unwrap();
    page["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e[0] == repository)
        .and_then(|e| e[1].as_str())
        .unwrap_or_else(|| panic!("{repository} not in {page}"))
        .to_string()
}

#[test]
fn a_damaged_repository_page_costs_that_repository_only() {
    let b = Backend::start(Kind::Fs);
    let dir = tempfile::tempdir().unwrap();
    let acked = imports(&b, dir.path(), &["one", "two", "three"]);
    let (_, doc) = current_doc(&b);
    let o = Objects::of(&b);
    let (victim, tag, digest) = acked[1][0].clone();
    let page = repository_page(&o, &doc, &victim);
    flip_with_copies(&o, &page);

    let server = b.serve(&[]);
    let (status, _) = heads(
        &server.addr,
        &[(victim.clone(), tag.clone(), digest.clone())],
    )[0]
    .clone();
    assert_eq!(status, 503, "a damaged page is not a missing tag");
    let (status, body) = readyz(&server.addr);
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("degraded"), "{body}");
    let others: Vec<Acked> = acked
        .iter()
        .flatten()
        .filter(|(r, _, _)| *r != victim)
        .cloned()
        .collect();
    assert_heads_ok(&server.addr, &others, "the other repositories");

    assert_fsck_fails(&b, &page);
    let out = b.airlock_ok(&["fsck"], &["--repair"]);
    let short = &digest.strip_prefix("sha256:").unwrap()[..12];
    assert!(
        out.contains(&format!("damaged: repository {victim}: removed")),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "lost tag change: created {victim}:{tag} - -> {short}"
        )),
        "{out}"
    );
    assert!(
        out.contains("everything else of generation 3 kept"),
        "{out}"
    );
    b.airlock_ok(&["fsck"], &[]);
    let gens: Vec<u64> = b.history().iter().map(|(g, _)| *g).collect();
    assert_eq!(gens, [4, 3, 2, 1], "no generation lost");
    common::backend::settled(Duration::from_secs(10), &200, || readyz(&server.addr).0);
    assert_heads_ok(&server.addr, &others, "after the repair");
    assert_eq!(heads(&server.addr, &[(victim, tag, digest)])[0].0, 404);
    assert!(server.terminate().success());
}

/// `airlock backup DIR` of `b`'s store: its output.
fn backup(b: &Backend, art: &Path) -> String {
    b.airlock_ok(&["backup"], &[art.to_str().unwrap()])
}

#[test]
fn a_restore_verifies_what_it_keeps() {
    let b = Backend::start(Kind::Fs);
    let dir = tempfile::tempdir().unwrap();
    let acked: Vec<Acked> = imports(&b, dir.path(), &["one"]).concat();
    // A pull record, as a server writes it.
    let server = b.serve(&["--pull-record-interval", "1s"]);
    let (repo, tag, _) = &acked[0];
    let (status, _, _) = http(
        &server.addr,
        "GET",
        &format!("/v2/{repo}/manifests/{tag}"),
        &[("accept", "application/vnd.oci.image.manifest.v1+json")],
    )
    .unwrap();
    assert_eq!(status, 200);
    let o = Objects::of(&b);
    let deadline = Instant::now() + Duration::from_secs(20);
    while o.keys("pulls/").is_empty() {
        assert!(Instant::now() < deadline, "no pull record written");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(server.terminate().success());

    // A flipped pull record in the artifact: refused, nothing committed.
    let art = dir.path().join("art");
    backup(&b, &art);
    let record = o.keys("pulls/")[0].clone();
    let path = art.join("store").join(&record);
    let mut bytes = std::fs::read(&path).unwrap();
    let at = bytes.len() / 2;
    bytes[at] ^= 0x01;
    std::fs::write(&path, &bytes).unwrap();
    let fresh = dir.path().join("fresh");
    let o2 = common::airlock(&[
        "restore",
        "--data",
        fresh.to_str().unwrap(),
        art.to_str().unwrap(),
    ]);
    let out = text(&o2);
    assert!(!o2.status.success(), "{out}");
    assert!(
        out.contains(&record) && out.contains("nothing was committed"),
        "{out}"
    );
    assert!(!fresh.join("refs/root").exists(), "nothing committed");

    // A rotten layer already in the target: replaced by the backup's.
    let art = dir.path().join("art2");
    backup(&b, &art);
    let layer = largest_blob(&b.data_dir());
    let file = b.data_dir().join(blob_key(&layer));
    let mut bytes = std::fs::read(&file).unwrap();
    bytes[0] ^= 0xff;
    std::fs::write(&file, &bytes).unwrap();
    b.airlock_ok(&["restore"], &[art.to_str().unwrap()]);
    assert_eq!(common::sha256sum(&file), layer);
    b.airlock_ok(&["fsck"], &["--deep"]);
}

/// The digest of the largest blob below `data/blobs` (a layer).
fn largest_blob(data: &Path) -> String {
    let mut best = (0, String::new());
    for f in common::synth::files(&data.join("blobs")) {
        let len = std::fs::metadata(data.join("blobs").join(&f))
            .unwrap()
            .len();
        if len > best.0 {
            best = (len, f.rsplit('/').next().unwrap().to_string());
        }
    }
    format!("sha256:{}", best.1)
}

#[test]
fn a_backup_takes_over_the_lock_of_its_own_killed_run() {
    let b = Backend::start(Kind::Fs);
    let dir = tempfile::tempdir().unwrap();
    imports(&b, dir.path(), &["one"]);
    let art = dir.path().join("art");
    let mut child = b
        .command(&["backup"], &[art.to_str().unwrap()])
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let lock = b.data_dir().join("locks/writes");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !std::fs::read_to_string(&lock).is_ok_and(|l| l.contains("backup:")) {
        assert!(Instant::now() < deadline, "the backup took no lock");
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().unwrap(); // SIGKILL: the lock stays
    child.wait().unwrap();
    let status = b.airlock_ok(&["status"], &[]);
    assert!(status.contains("writes are locked by backup:"), "{status}");
    let art = dir.path().join("art2");
    backup(&b, &art);
    let status = b.airlock_ok(&["status"], &[]);
    assert!(
        status.contains("write lock     none: writes are accepted"),
        "the next backup released its own dead run's lock: {status}"
    );
}

#[test]
fn import_with_config_uses_the_configs_store() {
    let dir = tempfile::tempdir().unwrap();
    let (bundle, layout) = common::synth::bundle(dir.path(), "cfg", 1, 617);
    let store = dir.path().join("site-store");
    let config = dir.path().join("airlock.toml");
    std::fs::write(
        &config,
        format!("[store]\npath = {:?}\n", store.display().to_string()),
    )
    .unwrap();
    let cwd = dir.path().join("cwd");
    std::fs::create_dir(&cwd).unwrap();
    let (_, keyring) = test_key();
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_airlock"))
        .current_dir(&cwd)
        .args([
            "import",
            "--config",
            config.to_str().unwrap(),
            "--keyring",
            keyring.to_str().unwrap(),
            bundle.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        !cwd.join("airlock-data").exists(),
        "imported into ./airlock-data"
    );
    let server = common::serve(&store, &[]);
    common::assert_tags_served(
        &server.addr,
        &acked_of(&layout, "cfg"),
        "the config's store",
    );
    assert!(server.terminate().success());
}
