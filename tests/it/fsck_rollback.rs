//! fsck, quarantine, verified reads and rollback (issue 13), each reproducing
//! a finding of the issue: a flipped bit served with 200, a re-import that
//! does not repair it, a corrupt manifest answering HEAD 200, a deleted
//! repository table that made `history` print only the error. Every
//! scenario runs on every blobstore backend (`on_backends!`): the
//! filesystem, moto's S3 server and s3s-fs (issue 11).

use crate::common;

use std::path::Path;

use common::backend::{Backend, on_backends, settled};
use common::objects::{Objects, blob_key, quarantine_key};
use common::{header, http, synth, test_key};

on_backends!(
    [fs, moto, s3s_fs]
    corrupt_content_is_never_served_and_a_reimport_repairs_it,
    rollback_goes_both_ways,
);
on_backends!(
    [fs, moto, s3s_fs, ceph]
    fsck_deep_quarantines_a_flipped_byte_and_finds_a_missing_document,
);

on_backends!([fs, s3s_fs, ceph] scrub_quarantines_what_reads_skip,);

/// The image of a generated layout holding its largest layer: (repository
/// path `/v2/<name>/<ref>`, manifest digest, layers as (digest, size) smallest first).
/// (repository path, manifest digest, layers as (digest, size)).
type Image = (String, String, Vec<(String, u64)>);

fn biggest_image(layout: &Path, name: &str) -> Image {
    let index: serde_json::Value =
        serde_json::from_slice(&std::fs::read(layout.join("index.json")).unwrap()).unwrap();
    let mut best: Option<Image> = None;
    for m in index["manifests"].as_array().unwrap() {
        let digest = m["digest"].as_str().unwrap().to_string();
        let r = m["annotations"]["org.opencontainers.image.ref.name"]
            .as_str()
            .unwrap();
        let manifest: serde_json::Value =
            serde_json::from_slice(&std::fs::read(common::blob_file(layout, &digest)).unwrap())
                .unwrap();
        let mut layers: Vec<(String, u64)> = manifest["layers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| {
                (
                    l["digest"].as_str().unwrap().to_string(),
                    l["size"].as_u64().unwrap(),
                )
            })
            .collect();
        layers.sort_by_key(|(_, s)| *s);
        let max = |b: &Option<Image>| {
            b.as_ref()
                .map_or(0, |(_, _, l)| l.last().map_or(0, |x| x.1))
        };
        if layers.len() >= 2 && layers.last().unwrap().1 > max(&best) {
            best = Some((format!("/v2/{name}/{r}"), digest, layers));
        }
    }
    best.expect("an image with two layers")
}

/// Stores the blob `digest` of `layout` with the byte at `at` flipped.
fn flip_byte(objects: &Objects, layout: &Path, digest: &str, at: usize) {
    let mut bytes = std::fs::read(common::blob_file(layout, digest)).unwrap();
    bytes[at] ^= 0x01;
    objects.put(&blob_key(digest), &bytes);
}

/// Waits up to 5 s for `key` to exist (a quarantine S3 does in the background).
fn appears(objects: &Objects, key: &str) -> bool {
    let t0 = std::time::Instant::now();
    while !objects.exists(key) {
        if t0.elapsed().as_secs() >= 5 {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    true
}

/// sha256 of the stored blob `digest` by coreutils' `sha256sum`.
fn stored_sha256(objects: &Objects, digest: &str) -> String {
    let f = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(f.path(), objects.get(&blob_key(digest)).unwrap()).unwrap();
    common::sha256sum(f.path())
}

fn corrupt_content_is_never_served_and_a_reimport_repairs_it(store: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let (_, keyring) = test_key();
    let (bundle, layout) = synth::bundle(dir.path(), "app", 40, 3);
    store.import(&keyring, &bundle);
    let objects = Objects::of(&store);
    let (repo, manifest, layers) = biggest_image(&layout, "app");
    let (small, small_size) = layers.first().unwrap().clone();
    let (large, large_size) = layers.last().unwrap().clone();
    assert!(
        large_size > 4 << 20,
        "the layout needs a layer over the whole-verify threshold"
    );
    assert!(
        small_size <= 4 << 20,
        "the layout needs a layer under the whole-verify threshold"
    );
    let server = store.serve(&[]);
    for d in [&small, &large, &manifest] {
        flip_byte(&objects, &layout, d, 100);
    }
    // A small blob is verified before its first byte: HEAD and GET answer 404.
    let (status, _, _) = http(&server.addr, "HEAD", &format!("{repo}/blobs/{small}"), &[]).unwrap();
    assert_eq!(status, 404, "HEAD of a corrupt small blob");
    assert!(appears(&objects, &quarantine_key(&small)));
    assert!(!objects.exists(&blob_key(&small)));
    // A corrupt manifest: HEAD 404, never 200.
    let (status, _, _) = http(
        &server.addr,
        "HEAD",
        &format!("{repo}/manifests/latest"),
        &[],
    )
    .unwrap();
    assert_eq!(status, 404, "HEAD of a corrupt manifest");
    // A large blob is hashed while streamed: the transfer breaks before its end.
    let out = std::process::Command::new("curl")
        .args([
            "-sS",
            "-o",
            dir.path().join("large").to_str().unwrap(),
            "-w",
            "%{http_code} %{size_download}",
        ])
        .arg(format!("http://{}{repo}/blobs/{large}", server.addr))
        .output()
        .expect("curl (apt-get install curl)");
    assert!(
        !out.status.success(),
        "curl got a complete body of a corrupt blob: {out:?}"
    );
    let got = std::fs::metadata(dir.path().join("large")).map_or(0, |m| m.len());
    assert!(
        got < large_size,
        "a complete wrong body was sent ({got} of {large_size} bytes)"
    );
    assert!(
        appears(&objects, &quarantine_key(&large)),
        "the large corrupt blob was not quarantined"
    );
    // fsck reports every damaged object and exits non-zero.
    let o = store.airlock(&["fsck"], &[]);
    assert!(!o.status.success());
    let text = String::from_utf8_lossy(&o.stdout);
    for d in [&small, &large, &manifest] {
        assert!(text.contains(d.as_str()), "fsck did not report {d}: {text}");
    }
    // Re-importing the same bundle repairs all three; fsck --deep is clean.
    store.import(&keyring, &bundle);
    for d in [&small, &large, &manifest] {
        assert_eq!(&stored_sha256(&objects, d), d);
    }
    store.airlock_ok(&["fsck"], &["--deep"]);
    let (status, h, _) = http(&server.addr, "GET", &format!("{repo}/blobs/{large}"), &[]).unwrap();
    assert_eq!(status, 200);
    assert_eq!(
        header(&h, "content-length"),
        Some(large_size.to_string().as_str())
    );
}

fn fsck_deep_quarantines_a_flipped_byte_and_finds_a_missing_document(store: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let (_, keyring) = test_key();
    let (bundle, layout) = synth::bundle(dir.path(), "lib", 2, 4);
    store.import(&keyring, &bundle);
    let objects = Objects::of(&store);
    store.airlock_ok(&["fsck"], &["--deep"]);
    let (_, _, layers) = biggest_image(&layout, "lib");
    let (layer, _) = layers.last().unwrap().clone();
    flip_byte(&objects, &layout, &layer, 7);
    // Without --deep only references are checked: the blob is there.
    store.airlock_ok(&["fsck"], &[]);
    let o = store.airlock(&["fsck"], &["--deep", "--json"]);
    assert!(!o.status.success());
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(report["quarantined"], serde_json::json!([layer]));
    assert!(objects.exists(&quarantine_key(&layer)));
    assert!(!objects.exists(&blob_key(&layer)));
    // Now the reference is missing (quarantined), also without --deep.
    let o = store.airlock(&["fsck"], &[]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stdout).contains("quarantined"));
    store.import(&keyring, &bundle);
    store.airlock_ok(&["fsck"], &["--deep"]);

    // A deleted repository table: fsck names it, history still lists
    // every generation, rollback to a generation with a readable table works.
    let (bundle2, _) = synth::bundle(dir.path(), "two", 1, 5);
    store.import(&keyring, &bundle2);
    let root = String::from_utf8(objects.get("refs/root").unwrap()).unwrap();
    let state: serde_json::Value =
        serde_json::from_slice(&objects.get(&blob_key(root.trim())).unwrap()).unwrap();
    let table = state["repositories"].as_str().unwrap().to_string();
    objects.delete(&blob_key(&table));
    // And its second copy, where the store keeps one (metadata_copies =
    // 2): damage no copy repairs.
    objects.damage_copies(&table);
    let o = store.airlock(&["fsck"], &[]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stdout).contains(&table));
    let history = store.airlock_ok(&["history"], &[]);
    assert!(history.contains("import bundle"), "{history}");
    assert_eq!(
        common::history_rows(&history).len(),
        2,
        "history lost generations: {history}"
    );
    let server = store.serve(&[]);
    // Damage no copy repairs, in a server with no last good generation:
    // 503 with Retry-After (issue 61), never a 500 nor an empty site.
    let (status, headers, _) =
        http(&server.addr, "GET", "/v2/two/img-00/manifests/latest", &[]).unwrap();
    assert_eq!(status, 503);
    assert!(header(&headers, "retry-after").is_some(), "{headers:?}");
    let (status, _, _) = http(&server.addr, "GET", "/readyz", &[]).unwrap();
    assert_eq!(status, 503);
    drop(server);
    let gen_before: u64 = state["generation"].as_u64().unwrap();
    let o = store.airlock(&["rollback"], &["--to", &gen_before.to_string()]);
    assert!(
        !o.status.success(),
        "rollback to the current generation must fail"
    );
    store.airlock_ok(
        &["rollback"],
        &[
            "--to",
            &(gen_before - 1).to_string(),
            "--reason",
            "table lost",
        ],
    );
    store.airlock_ok(&["fsck"], &[]);
    let history = store.airlock_ok(&["history"], &[]);
    assert!(
        history.contains(&format!(
            "rollback to generation {}: table lost",
            gen_before - 1
        )),
        "{history}"
    );
}

fn rollback_goes_both_ways(store: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let (_, keyring) = test_key();
    let (a, _) = synth::bundle(dir.path(), "a", 1, 6);
    let (b, _) = synth::bundle(dir.path(), "b", 1, 7);
    store.import(&keyring, &a);
    store.import(&keyring, &b);
    let server = store.serve(&[]);
    let status = |path: &str| http(&server.addr, "GET", path, &[]).unwrap().0;
    // The rollbacks are another process's commits: the server sees them
    // within its root refresh.
    let becomes = |path: &str, want: u16| settled(store.refresh_bound(), &want, || status(path));
    assert_eq!(status("/v2/b/img-00/manifests/latest"), 200);
    store.airlock_ok(&["rollback"], &["--to", "1", "--reason", "bad release"]);
    assert_eq!(becomes("/v2/b/img-00/manifests/latest", 404), 404);
    assert_eq!(status("/v2/a/img-00/manifests/latest"), 200);
    // Undo: back to generation 2, as generation 4.
    let out = store.airlock_ok(&["rollback"], &["--to", "2"]);
    assert!(out.contains("generation 4"), "{out}");
    assert_eq!(becomes("/v2/b/img-00/manifests/latest", 200), 200);
    let history = store.airlock_ok(&["history"], &[]);
    assert!(
        history.contains("rollback to generation 1: bad release"),
        "{history}"
    );
    assert!(history.contains("rollback to generation 2"), "{history}");
    let o = store.airlock(&["rollback"], &["--to", "9"]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("not in history"));
}

/// `airlock scrub` rehashes every blob: a flipped byte in a large layer is
/// quarantined and named (exit non-zero); a server with `[scrub] interval`
/// finds the next one by itself and says so in `/metrics` (issue 26 §2).
fn scrub_quarantines_what_reads_skip(store: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let (_, keyring) = test_key();
    let (bundle, layout) = synth::bundle(dir.path(), "sc", 24, 9);
    store.import(&keyring, &bundle);
    let objects = Objects::of(&store);
    let (_, _, layers) = biggest_image(&layout, "sc");
    let whole = store.airlock_ok(&["scrub"], &[]);
    assert!(whole.contains("; 0 corrupt"), "{whole}");
    let (large, size) = layers.last().unwrap().clone();
    assert!(size > 4 << 20);
    flip_byte(&objects, &layout, &large, 4 << 20);
    let o = store.airlock(&["scrub"], &[]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(!o.status.success(), "{out}");
    assert!(
        out.contains(&format!("corrupt, quarantined: {large}")),
        "{out}"
    );
    // Moved before the command exits (on S3 too, where the read's own
    // quarantine runs in the background): no waiting here.
    assert!(objects.exists(&quarantine_key(&large)));
    assert!(!objects.exists(&blob_key(&large)));
    let progress: serde_json::Value =
        serde_json::from_slice(&objects.get("reports/scrub.json").unwrap()).unwrap();
    assert_eq!(progress["corrupt"], serde_json::json!([large]));
    // The server's own scrub (a pass every 2 s here) finds the next one.
    let (next, _) = layers[layers.len() - 2].clone();
    let server = store.serve(&["--scrub-interval", "2s", "--scrub-rate", "0"]);
    flip_byte(&objects, &layout, &next, 10);
    let t0 = std::time::Instant::now();
    loop {
        let (_, _, body) = http(&server.addr, "GET", "/metrics", &[]).unwrap();
        let text = String::from_utf8_lossy(&body).to_string();
        if text.contains("airlock_scrub_corrupt_found_total 1") {
            break;
        }
        assert!(t0.elapsed().as_secs() < 20, "no scrub found it: {text}");
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    assert!(
        objects.exists(&quarantine_key(&next)),
        "the server's scrub counts it once it is quarantined"
    );
    assert!(!objects.exists(&blob_key(&next)));
}
