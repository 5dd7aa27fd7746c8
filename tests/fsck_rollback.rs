//! fsck, quarantine, verified reads and rollback (issue 13), each reproducing
//! a finding of the issue: a flipped bit served with 200, a re-import that
//! does not repair it, a corrupt manifest answering HEAD 200, a deleted
//! repository table that made `history` print only the error.

mod common;

use std::path::Path;

use common::{
    airlock, airlock_ok, header, http, import_bundle, root_of, serve, sha256sum, synth, test_key,
};

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

fn stored(data: &Path, digest: &str) -> std::path::PathBuf {
    let hex = digest.strip_prefix("sha256:").unwrap();
    data.join("blobs/sha256").join(&hex[..2]).join(hex)
}

fn quarantined(data: &Path, digest: &str) -> std::path::PathBuf {
    let hex = digest.strip_prefix("sha256:").unwrap();
    data.join("quarantine/sha256").join(&hex[..2]).join(hex)
}

fn flip_byte(path: &Path, at: u64) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let mut b = [0u8];
    f.read_exact_at(&mut b, at).unwrap();
    b[0] ^= 0x01;
    f.write_all_at(&b, at).unwrap();
}

#[test]
fn corrupt_content_is_never_served_and_a_reimport_repairs_it() {
    let dir = tempfile::tempdir().unwrap();
    let (_, keyring) = test_key();
    let (bundle, layout) = synth::bundle(dir.path(), "app", 40, 3);
    let data = dir.path().join("data");
    import_bundle(&data, &keyring, &bundle);
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
    let server = serve(&data, &[]);
    for d in [&small, &large, &manifest] {
        flip_byte(&stored(&data, d), 100);
    }
    // A small blob is verified before its first byte: HEAD and GET answer 404.
    let (status, _, _) = http(&server.addr, "HEAD", &format!("{repo}/blobs/{small}"), &[]).unwrap();
    assert_eq!(status, 404, "HEAD of a corrupt small blob");
    assert!(quarantined(&data, &small).exists());
    assert!(!stored(&data, &small).exists());
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
    std::thread::sleep(std::time::Duration::from_millis(200));
    assert!(
        quarantined(&data, &large).exists(),
        "the large corrupt blob was not quarantined"
    );
    // fsck reports every damaged object and exits non-zero.
    let o = airlock(&["fsck", "--data", data.to_str().unwrap()]);
    assert!(!o.status.success());
    let text = String::from_utf8_lossy(&o.stdout);
    for d in [&small, &large, &manifest] {
        assert!(text.contains(d.as_str()), "fsck did not report {d}: {text}");
    }
    // Re-importing the same bundle repairs all three; fsck --deep is clean.
    import_bundle(&data, &keyring, &bundle);
    for d in [&small, &large, &manifest] {
        assert_eq!(&sha256sum(&stored(&data, d)), d);
    }
    airlock_ok(&["fsck", "--data", data.to_str().unwrap(), "--deep"]);
    let (status, h, _) = http(&server.addr, "GET", &format!("{repo}/blobs/{large}"), &[]).unwrap();
    assert_eq!(status, 200);
    assert_eq!(
        header(&h, "content-length"),
        Some(large_size.to_string().as_str())
    );
}

#[test]
fn fsck_deep_quarantines_a_flipped_byte_and_finds_a_missing_document() {
    let dir = tempfile::tempdir().unwrap();
    let (_, keyring) = test_key();
    let (bundle, layout) = synth::bundle(dir.path(), "lib", 2, 4);
    let data = dir.path().join("data");
    import_bundle(&data, &keyring, &bundle);
    let d = data.to_str().unwrap();
    airlock_ok(&["fsck", "--data", d, "--deep"]);
    let (_, _, layers) = biggest_image(&layout, "lib");
    let (layer, _) = layers.last().unwrap().clone();
    flip_byte(&stored(&data, &layer), 7);
    // Without --deep only references are checked: the blob is there.
    airlock_ok(&["fsck", "--data", d]);
    let o = airlock(&["fsck", "--data", d, "--deep", "--json"]);
    assert!(!o.status.success());
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(report["quarantined"], serde_json::json!([layer]));
    assert!(quarantined(&data, &layer).exists());
    // Now the reference is missing (quarantined), also without --deep.
    let o = airlock(&["fsck", "--data", d]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stdout).contains("quarantined"));
    import_bundle(&data, &keyring, &bundle);
    airlock_ok(&["fsck", "--data", d, "--deep"]);

    // A deleted repository table: fsck names it, history still lists
    // every generation, rollback to a generation with a readable table works.
    let (bundle2, _) = synth::bundle(dir.path(), "two", 1, 5);
    import_bundle(&data, &keyring, &bundle2);
    let state: serde_json::Value =
        serde_json::from_slice(&std::fs::read(stored(&data, root_of(&data).trim())).unwrap())
            .unwrap();
    let table = state["repositories"].as_str().unwrap().to_string();
    std::fs::remove_file(stored(&data, &table)).unwrap();
    let o = airlock(&["fsck", "--data", d]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stdout).contains(&table));
    let history = airlock_ok(&["history", "--data", d]);
    assert!(history.contains("import bundle"), "{history}");
    assert_eq!(
        history.lines().count(),
        3,
        "history lost generations: {history}"
    );
    let server = serve(&data, &[]);
    let (status, _, _) = http(&server.addr, "GET", "/v2/two/img-00/manifests/latest", &[]).unwrap();
    assert_eq!(status, 500);
    let (status, _, _) = http(&server.addr, "GET", "/readyz", &[]).unwrap();
    assert_eq!(status, 503);
    drop(server);
    let gen_before: u64 = state["generation"].as_u64().unwrap();
    let o = airlock(&["rollback", "--data", d, "--to", &gen_before.to_string()]);
    assert!(
        !o.status.success(),
        "rollback to the current generation must fail"
    );
    airlock_ok(&[
        "rollback",
        "--data",
        d,
        "--to",
        &(gen_before - 1).to_string(),
        "--reason",
        "table lost",
    ]);
    airlock_ok(&["fsck", "--data", d]);
    let history = airlock_ok(&["history", "--data", d]);
    assert!(
        history.contains(&format!(
            "rollback to generation {}: table lost",
            gen_before - 1
        )),
        "{history}"
    );
}

#[test]
fn rollback_goes_both_ways() {
    let dir = tempfile::tempdir().unwrap();
    let (_, keyring) = test_key();
    let (a, _) = synth::bundle(dir.path(), "a", 1, 6);
    let (b, _) = synth::bundle(dir.path(), "b", 1, 7);
    let data = dir.path().join("data");
    let d = data.to_str().unwrap();
    import_bundle(&data, &keyring, &a);
    import_bundle(&data, &keyring, &b);
    let server = serve(&data, &[]);
    let status = |path: &str| http(&server.addr, "GET", path, &[]).unwrap().0;
    assert_eq!(status("/v2/b/img-00/manifests/latest"), 200);
    airlock_ok(&[
        "rollback",
        "--data",
        d,
        "--to",
        "1",
        "--reason",
        "bad release",
    ]);
    assert_eq!(status("/v2/b/img-00/manifests/latest"), 404);
    assert_eq!(status("/v2/a/img-00/manifests/latest"), 200);
    // Undo: back to generation 2, as generation 4.
    let out = airlock_ok(&["rollback", "--data", d, "--to", "2"]);
    assert!(out.contains("generation 4"), "{out}");
    assert_eq!(status("/v2/b/img-00/manifests/latest"), 200);
    let history = airlock_ok(&["history", "--data", d]);
    assert!(
        history.contains("rollback to generation 1: bad release"),
        "{history}"
    );
    assert!(history.contains("rollback to generation 2"), "{history}");
    let o = airlock(&["rollback", "--data", d, "--to", "9"]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("not in history"));
}
