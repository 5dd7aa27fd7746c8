//! Bundle create → verify → import with the real busybox fixture, and every
//! kind of bad bundle: each must fail with a one-line cause, exit non-zero,
//! and leave the state root exactly as it was. The scenarios on a store
//! run on the filesystem and on s3s-fs (tests/common/backend.rs; moto is
//! left out to bound CI time); the volume and stdin scenario compares two
//! data directories file by file, so it stays on the filesystem.

use crate::common;

use std::io::Read;
use std::path::{Path, PathBuf};

use common::backend::{Backend, Kind, on_backends};
use common::*;

on_backends!(
    [fs, s3s_fs]
    import_links_every_blob_and_reimport_writes_nothing,
    delta_bundle_carries_only_missing_blobs,
    flipped_byte_in_a_blob_is_refused,
    flipped_byte_in_the_signed_document_is_refused,
    bundle_signed_by_an_untrusted_key_is_refused,
    unlisted_extra_entry_is_refused,
    missing_listed_blob_is_refused,
    traversal_paths_are_refused,
    link_entries_are_refused,
    truncated_bundle_is_refused,
    extension_headers_are_refused_before_they_are_read,
    two_bundles_or_trailing_junk_are_refused,
    hostile_names_cannot_inject_terminal_escapes,
    a_tag_claimed_by_two_images_is_refused,
    a_missing_end_of_archive_marker_is_truncation,
);

/// Tar entries as (header, data), for tampering.
fn read_entries(path: &Path) -> Vec<(tar::Header, Vec<u8>)> {
    let mut archive = tar::Archive::new(std::fs::File::open(path).unwrap());
    archive
        .entries()
        .unwrap()
        .map(|e| {
            let mut e = e.unwrap();
            let h = e.header().clone();
            let mut data = Vec::new();
            e.read_to_end(&mut data).unwrap();
            (h, data)
        })
        .collect()
}

fn write_entries(path: &Path, entries: &[(tar::Header, Vec<u8>)]) {
    let mut b = tar::Builder::new(std::fs::File::create(path).unwrap());
    for (h, data) in entries {
        b.append(h, &data[..]).unwrap();
    }
    b.finish().unwrap();
}

/// A header with a raw (unchecked) name, as an attacker would write it.
fn raw_header(name: &str, size: u64, kind: tar::EntryType) -> tar::Header {
    let mut h = tar::Header::new_old();
    h.as_old_mut().name[..name.len()].copy_from_slice(name.as_bytes());
    h.set_size(size);
    h.set_mode(0o644);
    h.set_entry_type(kind);
    h.set_cksum();
    h
}

fn path_of(h: &tar::Header) -> String {
    String::from_utf8(h.path_bytes().into_owned()).unwrap()
}

struct World {
    dir: tempfile::TempDir,
    bundle: PathBuf,
    public: PathBuf,
    store: Backend,
}

/// `store` with the fixture imported once (generation 1) and the bundle that did it.
fn world(store: Backend) -> World {
    let dir = tempfile::tempdir().unwrap();
    let layout = fixture_layout();
    let (_, public) = test_key();
    let config = write_config(
        dir.path(),
        &layout,
        &[
            ("latest", "stacks/busybox", &["latest", "1.0"]),
            ("multi", "library/multi", &["v1"]),
        ],
    );
    let bundle = dir.path().join("b.tar");
    create_bundle(&config, &bundle, &[]);
    store.import(&public, &bundle);
    World {
        dir,
        bundle,
        public,
        store,
    }
}

/// Imports `bundle` expecting failure; asserts the one-line cause contains `expect` and the root did not move.
fn assert_refused(w: &World, bundle: &Path, keyring: &Path, expect: &str) {
    let before = w.store.root();
    let o = w.store.airlock(
        &["import"],
        &[
            "--keyring",
            keyring.to_str().unwrap(),
            bundle.to_str().unwrap(),
        ],
    );
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success(),
        "import of a bad bundle succeeded: {stderr}"
    );
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        stderr.trim_end().lines().count(),
        1,
        "not one line: {stderr}"
    );
    assert!(stderr.contains(expect), "expected {expect:?} in: {stderr}");
    assert_eq!(
        w.store.root(),
        before,
        "state root changed after a refused import"
    );
}

fn tampered(w: &World, name: &str, f: impl FnOnce(&mut Vec<(tar::Header, Vec<u8>)>)) -> PathBuf {
    let mut entries = read_entries(&w.bundle);
    f(&mut entries);
    let out = w.dir.path().join(name);
    write_entries(&out, &entries);
    out
}

fn first_blob_index(entries: &[(tar::Header, Vec<u8>)]) -> usize {
    entries
        .iter()
        .position(|(h, _)| path_of(h).starts_with("blobs/"))
        .unwrap()
}

fn import_links_every_blob_and_reimport_writes_nothing(b: Backend) {
    let w = world(b);
    let layout = fixture_layout();
    // Every blob of the layout that the two images use is in the store, byte for byte.
    let manifest = layout_ref_digest(&layout, "latest");
    let hex = manifest.strip_prefix("sha256:").unwrap();
    if let Some(keys) = w.store.key_dir() {
        let stored = keys.join(format!("blobs/sha256/{}/{}", &hex[..2], hex));
        assert_eq!(sha256sum(&stored), manifest);
    }
    let history = w.store.airlock_ok(&["history"], &[]);
    assert!(history.contains("import bundle"), "{history}");
    let gen_lines = history
        .lines()
        .filter(|l| l.contains("import bundle"))
        .count();
    assert_eq!(gen_lines, 1);

    // Same bundle again: succeeds, writes nothing, no new generation.
    let root = w.store.root();
    let out = w.store.import(&w.public, &w.bundle);
    assert!(out.contains("0 blobs new"), "{out}");
    assert!(out.contains("(no change)"), "{out}");
    assert_eq!(w.store.root(), root);
}

/// Needs no store beyond the setup: on the filesystem.
#[test]
fn bundle_verify_and_inspect() {
    let w = world(Backend::start(Kind::Fs));
    let out = airlock_ok(&[
        "bundle",
        "verify",
        "--keyring",
        w.public.to_str().unwrap(),
        w.bundle.to_str().unwrap(),
    ]);
    assert!(out.contains("OK"), "{out}");
    let doc: serde_json::Value = serde_json::from_str(&airlock_ok(&[
        "bundle",
        "inspect",
        "--json",
        w.bundle.to_str().unwrap(),
    ]))
    .unwrap();
    let layout = fixture_layout();
    assert_eq!(
        doc["images"][0]["digest"],
        layout_ref_digest(&layout, "latest")
    );
    assert_eq!(
        doc["images"][1]["digest"],
        layout_ref_digest(&layout, "multi")
    );
    assert_eq!(
        doc["images"][1]["mediaType"],
        "application/vnd.oci.image.index.v1+json"
    );
    // Every blob listed in the document has the digest sha256sum computes from the layout.
    for b in doc["blobs"].as_array().unwrap() {
        let d = b["digest"].as_str().unwrap();
        let file = layout
            .join("blobs/sha256")
            .join(d.strip_prefix("sha256:").unwrap());
        assert_eq!(sha256sum(&file), d);
        assert_eq!(
            std::fs::metadata(&file).unwrap().len(),
            b["size"].as_u64().unwrap()
        );
    }
}

#[test]
fn gpg_verifies_the_bundle_signature() {
    require_tool("gpg", "gnupg");
    let w = world(Backend::start(Kind::Fs));
    let entries = read_entries(&w.bundle);
    let (h, signed) = &entries[0];
    assert_eq!(path_of(h), "airlock-bundle.json.asc");
    let home = tempfile::tempdir().unwrap();
    let asc = w.dir.path().join("doc.asc");
    std::fs::write(&asc, signed).unwrap();
    let gpg = |args: &[&str]| {
        std::process::Command::new("gpg")
            .env("GNUPGHOME", home.path())
            .args(["--batch", "--quiet"])
            .args(args)
            .output()
            .unwrap()
    };
    assert!(
        gpg(&["--import", w.public.to_str().unwrap()])
            .status
            .success()
    );
    let o = gpg(&["--verify", asc.to_str().unwrap()]);
    assert!(
        o.status.success(),
        "gpg --verify: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(String::from_utf8_lossy(&o.stderr).contains("Good signature"));
}

/// Filesystem only: compares two data directories file by file.
#[test]
fn volumes_and_stdin_import() {
    let w = world(Backend::start(Kind::Fs));
    let config = w.dir.path().join("mirror.toml");
    let base = w.dir.path().join("vol.tar");
    let out = create_bundle(&config, &base, &["--volume-size", "1M"]);
    assert!(out.contains("vol.tar.000"), "{out}");
    let v1 = w.dir.path().join("vol.tar.001");
    assert!(v1.exists());
    assert_eq!(
        std::fs::metadata(w.dir.path().join("vol.tar.000"))
            .unwrap()
            .len(),
        1024 * 1024
    );
    // By base name (volumes found in order) into a fresh store.
    let data2 = w.dir.path().join("data2");
    let out = import_bundle(&data2, &w.public, &base);
    assert!(out.contains("2 images"), "{out}");
    // From stdin into another fresh store: same state content.
    let data3 = w.dir.path().join("data3");
    let cat = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "cat {}.0* | {} import --data {} --keyring {} -",
            base.display(),
            env!("CARGO_BIN_EXE_airlock"),
            data3.display(),
            w.public.display()
        ))
        .output()
        .unwrap();
    assert!(
        cat.status.success(),
        "{}",
        String::from_utf8_lossy(&cat.stderr)
    );
    let tags = |d: &Path| {
        let mut keys: Vec<String> = walk(d)
            .into_iter()
            .filter(|p| p.contains("blobs/"))
            .collect();
        keys.sort();
        keys
    };
    assert_eq!(tags(&data2), tags(&data3));
}

fn walk(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(
                walk(&p)
                    .into_iter()
                    .map(|s| s.replace(dir.to_str().unwrap(), "")),
            );
        } else {
            out.push(p.strip_prefix(dir).unwrap().display().to_string());
        }
    }
    out
}

fn delta_bundle_carries_only_missing_blobs(b: Backend) {
    let w = world(b);
    let inv = w.dir.path().join("have.json");
    w.store
        .airlock_ok(&["inventory"], &["-o", inv.to_str().unwrap()]);
    let config = w.dir.path().join("mirror.toml");
    let delta = w.dir.path().join("delta.tar");
    create_bundle(&config, &delta, &["--have", inv.to_str().unwrap()]);
    let doc: serde_json::Value = serde_json::from_str(&airlock_ok(&[
        "bundle",
        "inspect",
        "--json",
        delta.to_str().unwrap(),
    ]))
    .unwrap();
    assert_eq!(doc["blobs"].as_array().unwrap().len(), 0);
    assert!(!doc["required"].as_array().unwrap().is_empty());
    // Into the store that has everything: fine. Into an empty store: refused.
    w.store.import(&w.public, &delta);
    let empty = World {
        dir: tempfile::tempdir().unwrap(),
        bundle: delta.clone(),
        public: w.public.clone(),
        store: Backend::start(w.store.kind),
    };
    assert_refused(&empty, &delta, &w.public, "delta bundle requires blob");
}

fn flipped_byte_in_a_blob_is_refused(b: Backend) {
    let w = world(b);
    let bad = tampered(&w, "flip-blob.tar", |e| {
        let i = first_blob_index(e);
        e[i].1[0] ^= 0xff;
    });
    assert_refused(&w, &bad, &w.public, "digest mismatch");
}

fn flipped_byte_in_the_signed_document_is_refused(b: Backend) {
    let w = world(b);
    let bad = tampered(&w, "flip-doc.tar", |e| {
        let text = String::from_utf8(e[0].1.clone()).unwrap();
        let altered = text.replacen("\"format\"", "\"formaT\"", 1);
        assert_ne!(altered, text);
        e[0].1 = altered.into_bytes();
    });
    assert_refused(&w, &bad, &w.public, "signature check failed");
}

fn bundle_signed_by_an_untrusted_key_is_refused(b: Backend) {
    let w = world(b);
    let (_, other_pub) = keypair(w.dir.path(), "stranger");
    assert_refused(&w, &w.bundle, &other_pub, "signature check failed");
    let o = airlock(&[
        "bundle",
        "verify",
        "--keyring",
        other_pub.to_str().unwrap(),
        w.bundle.to_str().unwrap(),
    ]);
    assert!(!o.status.success());
}

fn unlisted_extra_entry_is_refused(b: Backend) {
    let w = world(b);
    let extra = b"not in the signed document".to_vec();
    let hex = {
        use sha2::Digest as _;
        hex::encode(sha2::Sha256::digest(&extra))
    };
    let bad = tampered(&w, "extra.tar", |e| {
        let name = format!("blobs/sha256/{hex}");
        e.push((
            raw_header(&name, extra.len() as u64, tar::EntryType::Regular),
            extra.clone(),
        ));
    });
    assert_refused(&w, &bad, &w.public, "is not listed in the signed document");
    let bad = tampered(&w, "extra2.tar", |e| {
        e.push((
            raw_header("README", 2, tar::EntryType::Regular),
            b"hi".to_vec(),
        ));
    });
    assert_refused(&w, &bad, &w.public, "unexpected entry \"README\"");
}

fn missing_listed_blob_is_refused(b: Backend) {
    let w = world(b);
    let bad = tampered(&w, "missing.tar", |e| {
        e.pop();
    });
    assert_refused(&w, &bad, &w.public, "listed blob");
}

fn traversal_paths_are_refused(b: Backend) {
    let w = world(b);
    for (name, path) in [
        ("dotdot.tar", "../x"),
        ("abs.tar", "/x"),
        ("dotslash.tar", "./index.json"),
    ] {
        let bad = tampered(&w, name, |e| {
            e.insert(
                1,
                (raw_header(path, 1, tar::EntryType::Regular), b"x".to_vec()),
            );
        });
        assert_refused(&w, &bad, &w.public, &format!("unexpected entry {path:?}"));
    }
}

fn link_entries_are_refused(b: Backend) {
    let w = world(b);
    let bad = tampered(&w, "symlink.tar", |e| {
        let mut h = raw_header("blobs/sha256/aa", 0, tar::EntryType::Symlink);
        h.set_link_name("/etc/passwd").unwrap();
        h.set_cksum();
        e.insert(1, (h, Vec::new()));
    });
    assert_refused(&w, &bad, &w.public, "is a symlink");
    let bad = tampered(&w, "hardlink.tar", |e| {
        let mut h = raw_header("index.json", 0, tar::EntryType::Link);
        h.set_link_name("oci-layout").unwrap();
        h.set_cksum();
        e.insert(1, (h, Vec::new()));
    });
    assert_refused(&w, &bad, &w.public, "is a hardlink");
}

fn truncated_bundle_is_refused(b: Backend) {
    let w = world(b);
    let bytes = std::fs::read(&w.bundle).unwrap();
    let cut = w.dir.path().join("cut.tar");
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    assert_refused(&w, &cut, &w.public, "truncated");
    // Not a tar at all.
    let junk = w.dir.path().join("junk.tar");
    std::fs::write(&junk, b"hello").unwrap();
    let o = w.store.airlock(
        &["import"],
        &[
            "--keyring",
            w.public.to_str().unwrap(),
            junk.to_str().unwrap(),
        ],
    );
    assert!(!o.status.success());
}

#[test]
fn bad_config_and_missing_files_give_one_line_errors() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("bad.toml");
    std::fs::write(
        &cfg,
        "[[image]]\nsource = \"docker://x\"\nrepository = \"Bad Name\"\ntags = [\"x\"]\n",
    )
    .unwrap();
    let o = create_bundle_output(&cfg, Path::new("/dev/null/x"));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(err.contains("invalid repository name"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    // Each cause once: the OS error is not repeated by the error chain.
    let o = airlock(&[
        "import",
        "--data",
        dir.path().join("d").to_str().unwrap(),
        "--keyring",
        "/nonexist.asc",
        "b.tar",
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        err.trim_end(),
        "airlock: error: cannot read /nonexist.asc: No such file or directory (os error 2)"
    );
    // A missing bundle, or a config that does not load, is refused before
    // the store is opened: a mistyped --data path is not made a store.
    let (_, public) = test_key();
    let data = dir.path().join("typo");
    for extra in [&[][..], &["--config", cfg.to_str().unwrap()][..]] {
        let bundle = if extra.is_empty() {
            "missing.tar"
        } else {
            "/dev/null"
        };
        let mut args = vec![
            "import",
            "--data",
            data.to_str().unwrap(),
            "--keyring",
            public.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        args.push(bundle);
        let o = airlock(&args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        assert!(!data.exists(), "{} was created: {err}", data.display());
    }
}

fn extension_headers_are_refused_before_they_are_read(b: Backend) {
    let w = world(b);
    // A PAX header (as GNU tar --format=posix writes) and a GNU long name: both are
    // refused as entries, never expanded into memory.
    let bad = tampered(&w, "pax.tar", |e| {
        let body = b"30 path=blobs/sha256/aaaaaaaaaa\n".to_vec();
        e.insert(
            1,
            (
                raw_header("PaxHeaders/x", body.len() as u64, tar::EntryType::XHeader),
                body,
            ),
        );
    });
    assert_refused(&w, &bad, &w.public, "PAX or GNU extension header");
    let bad = tampered(&w, "longname.tar", |e| {
        let name = format!("{}\0", "n".repeat(5000)).into_bytes();
        e.insert(
            1,
            (
                raw_header(
                    "././@LongLink",
                    name.len() as u64,
                    tar::EntryType::GNULongName,
                ),
                name,
            ),
        );
    });
    assert_refused(&w, &bad, &w.public, "PAX or GNU extension header");
}

fn two_bundles_or_trailing_junk_are_refused(b: Backend) {
    let w = world(b);
    // Two whole bundles given as if they were volumes of one.
    let o = w.store.airlock(
        &["import"],
        &[
            "--keyring",
            w.public.to_str().unwrap(),
            w.bundle.to_str().unwrap(),
            w.bundle.to_str().unwrap(),
        ],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(
        err.contains("data after the end of the tar archive"),
        "{err}"
    );
    let mut bytes = std::fs::read(&w.bundle).unwrap();
    bytes.extend_from_slice(b"junk");
    let junk = w.dir.path().join("junk-after.tar");
    std::fs::write(&junk, bytes).unwrap();
    assert_refused(
        &w,
        &junk,
        &w.public,
        "data after the end of the tar archive",
    );
}

fn hostile_names_cannot_inject_terminal_escapes(b: Backend) {
    let w = world(b);
    let bad = tampered(&w, "escape.tar", |e| {
        e.insert(
            1,
            (
                raw_header("x\u{1b}[2Jy", 1, tar::EntryType::Regular),
                b"x".to_vec(),
            ),
        );
    });
    assert_refused(&w, &bad, &w.public, "unexpected entry");
    let o = airlock(&["bundle", "inspect", "/dev/null"]);
    assert!(!o.status.success());
    let o = w.store.airlock(
        &["import"],
        &[
            "--keyring",
            w.public.to_str().unwrap(),
            bad.to_str().unwrap(),
        ],
    );
    assert!(
        !o.stderr.contains(&0x1b),
        "raw escape byte in: {:?}",
        String::from_utf8_lossy(&o.stderr)
    );
}

#[test]
fn read_only_commands_do_not_create_a_data_directory() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope");
    for cmd in ["history", "inventory"] {
        let o = airlock(&[cmd, "--data", missing.to_str().unwrap()]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{cmd}");
        assert!(err.contains("does not exist"), "{cmd}: {err}");
        assert!(!missing.exists(), "{cmd} created the directory");
    }
}

/// One tag claimed by two images: `bundle create` refuses the config, and
/// import refuses such a bundle made (and signed) by any other tool.
fn a_tag_claimed_by_two_images_is_refused(b: Backend) {
    let w = world(b);
    let layout = fixture_layout();
    let config = w.dir.path().join("conflict.toml");
    std::fs::write(
        &config,
        format!(
            "[[image]]\nsource = \"oci:{l}:latest\"\nrepository = \"b/conflict\"\ntags = [\"v1\"]\n\n\
             [[image]]\nsource = \"oci:{l}:multi\"\nrepository = \"b/conflict\"\ntags = [\"v1\"]\n",
            l = layout.display()
        ),
    )
    .unwrap();
    let (secret, _) = test_key();
    let out = w.dir.path().join("conflict.tar");
    let o = create_bundle_output(&config, &out);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("b/conflict:v1 is claimed by two images"),
        "{stderr}"
    );
    assert!(
        stderr.contains(&layout_ref_digest(&layout, "latest")),
        "{stderr}"
    );
    assert!(
        stderr.contains(&layout_ref_digest(&layout, "multi")),
        "{stderr}"
    );
    assert!(!out.exists());
    // The same digest twice is fine.
    let same = write_config(
        w.dir.path(),
        &layout,
        &[
            ("latest", "b/same", &["v1"]),
            ("latest", "b/same", &["v1", "v2"]),
        ],
    );
    create_bundle(&same, &w.dir.path().join("same.tar"), &[]);

    // Another tool's bundle: the signed document gives stacks/busybox:latest
    // to both images (re-signed with the trusted key).
    let key = airlock::bundle::sign::SigningKey::load(&secret).unwrap();
    let bad = tampered(&w, "retagged.tar", |entries| {
        let armored = String::from_utf8(entries[0].1.clone()).unwrap();
        let text = airlock::bundle::sign::unverified_text(&armored).unwrap();
        let mut doc: serde_json::Value = serde_json::from_str(&text).unwrap();
        doc["images"][1]["repository"] = "stacks/busybox".into();
        doc["images"][1]["tags"] = serde_json::json!(["latest"]);
        let signed = key
            .clearsign(&serde_json::to_string(&doc).unwrap())
            .unwrap();
        entries[0].0.set_size(signed.len() as u64);
        entries[0].0.set_cksum();
        entries[0].1 = signed.into_bytes();
    });
    assert_refused(
        &w,
        &bad,
        &w.public,
        "stacks/busybox:latest is claimed by two images",
    );
}

/// A bundle whose end-of-archive marker is missing (cut short by up to 1024
/// bytes) is truncated, and the message names the offset; so is one cut
/// inside the first header.
fn a_missing_end_of_archive_marker_is_truncation(b: Backend) {
    let w = world(b);
    let bytes = std::fs::read(&w.bundle).unwrap();
    // Where the tar's content ends: everything after is the two zero blocks
    // and record padding.
    let content_end = bytes.iter().rposition(|&b| b != 0).unwrap() as u64 + 1;
    let data_end = content_end.div_ceil(512) * 512;
    for cut in [data_end, data_end + 512, data_end + 1000] {
        let path = w.dir.path().join(format!("cut{cut}.tar"));
        std::fs::write(&path, &bytes[..cut as usize]).unwrap();
        assert_refused(
            &w,
            &path,
            &w.public,
            "the tar end-of-archive marker (two zero blocks) is missing",
        );
        // The offset of the last whole block the reader got.
        let at = cut / 512 * 512;
        assert_refused(&w, &path, &w.public, &format!("truncated at byte {at}:"));
    }
    // Both zero blocks present, record padding cut: accepted.
    let path = w.dir.path().join("exact.tar");
    std::fs::write(&path, &bytes[..(data_end + 1024) as usize]).unwrap();
    w.store.import(&w.public, &path);
    // Cut inside the first header.
    let path = w.dir.path().join("head100.tar");
    std::fs::write(&path, &bytes[..100]).unwrap();
    assert_refused(&w, &path, &w.public, "at byte 100");
}
