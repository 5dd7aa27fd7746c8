//! Issue 25 §5, removable media: `bundle create --volume-size` into a
//! directory that does not exist yet writes the volumes and a signed
//! volume list (sizes and sha256 checked against coreutils' `sha256sum`);
//! `bundle verify VOLUME` checks one volume on its own; an import names
//! the volume at fault (out of order, missing, repeated, not from this
//! bundle) and never prints bytes that are not text; a tampered signed
//! document is refused in words, not with the OpenPGP library's assertion.

use crate::common;

use std::path::{Path, PathBuf};

use common::backend::{Backend, on_backends};
use common::*;

on_backends!([fs] volumes_are_listed_checked_alone_and_named_at_import);

/// A signed bundle of `mib` MiB of random layers split into 1 MiB volumes
/// under `dir/media/NAME.tar` (`media` not created beforehand).
fn volumes(dir: &Path, name: &str, seed: u32) -> (PathBuf, Vec<PathBuf>) {
    let (layout, refs) = common::synth::layout(dir, name, 3, seed);
    let images: Vec<(&str, String)> = refs
        .iter()
        .map(|r| (r.as_str(), format!("{name}/{r}")))
        .collect();
    let images: Vec<(&str, &str, &[&str])> = images
        .iter()
        .map(|(r, repo)| (*r, repo.as_str(), &["v1"][..]))
        .collect();
    let cfg_dir = dir.join(format!("{name}-cfg"));
    std::fs::create_dir_all(&cfg_dir).unwrap();
    let config = write_config(&cfg_dir, &layout, &images);
    let base = dir.join("media").join(format!("{name}.tar"));
    let out = create_bundle(&config, &base, &["--volume-size", "1M"]);
    assert!(out.contains(&format!("{name}.tar.volumes.asc")), "{out}");
    let files: Vec<PathBuf> = (0..)
        .map(|i| dir.join("media").join(format!("{name}.tar.{i:03}")))
        .take_while(|p| p.exists())
        .collect();
    assert!(files.len() >= 4, "{} volumes", files.len());
    (base, files)
}

fn strs(paths: &[&PathBuf]) -> Vec<String> {
    paths
        .iter()
        .map(|p| p.to_str().unwrap().to_string())
        .collect()
}

/// `airlock import` of `files` expecting a refusal: its stderr, after
/// checking that it is one line of text and that the root did not move.
fn refused(b: &Backend, public: &Path, files: &[&PathBuf]) -> String {
    let root = b.root();
    let mut args = vec![
        "--keyring".to_string(),
        public.to_str().unwrap().to_string(),
    ];
    args.extend(strs(files));
    let o = b.airlock(
        &["import"],
        &args.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    assert!(!o.status.success());
    let err = String::from_utf8(o.stderr).expect("stderr is UTF-8");
    assert!(
        !err.contains(char::REPLACEMENT_CHARACTER) && !err.trim_end().contains('\n'),
        "{err:?}"
    );
    assert_eq!(b.root(), root, "a refused import changed the state");
    err
}

fn volumes_are_listed_checked_alone_and_named_at_import(b: Backend) {
    let tmp = tempfile::tempdir().unwrap();
    let (_, public) = test_key();
    let (base, files) = volumes(tmp.path(), "x", 1);
    let n = files.len();

    // The list: signed, naming the bundle, each volume's size and sha256.
    let list_file = tmp.path().join("media/x.tar.volumes.asc");
    let text = std::fs::read_to_string(&list_file).unwrap();
    assert!(text.starts_with("-----BEGIN PGP SIGNED MESSAGE-----"));
    let json = &text[text.find('{').unwrap()..text.rfind('}').unwrap() + 1];
    let list: serde_json::Value = serde_json::from_str(json).unwrap();
    let inspect = airlock_ok(&["bundle", "inspect", "--json", base.to_str().unwrap()]);
    let doc: serde_json::Value = serde_json::from_str(&inspect).unwrap();
    assert_eq!(list["bundle"], doc["id"]);
    assert_eq!(list["count"], n);
    for (v, f) in list["volumes"].as_array().unwrap().iter().zip(&files) {
        assert_eq!(v["name"], f.file_name().unwrap().to_str().unwrap());
        assert_eq!(v["size"], std::fs::metadata(f).unwrap().len());
        assert_eq!(v["sha256"], sha256sum(f).as_str());
    }

    // One disc checked on its own, before it travels.
    let one = airlock_ok(&[
        "bundle",
        "verify",
        "--keyring",
        public.to_str().unwrap(),
        files[2].to_str().unwrap(),
    ]);
    assert!(
        one.contains(&format!("volume 3 of {n} (x.tar.002) OK"))
            && one.contains(&sha256sum(&files[2])),
        "{one}"
    );
    // A damaged copy of it (with the list beside it) is named.
    let disc = tmp.path().join("disc");
    std::fs::create_dir(&disc).unwrap();
    std::fs::copy(&list_file, disc.join("x.tar.volumes.asc")).unwrap();
    let mut bytes = std::fs::read(&files[2]).unwrap();
    bytes[1000] ^= 0xff;
    let damaged = disc.join("x.tar.002");
    std::fs::write(&damaged, bytes).unwrap();
    let o = airlock(&[
        "bundle",
        "verify",
        "--keyring",
        public.to_str().unwrap(),
        damaged.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(&format!(
            "volume 3 of {n} (x.tar.002) is not from this bundle (or damaged): its content hashes to {}",
            sha256sum(&damaged)
        )),
        "{err}"
    );

    // Imports name the volume at fault, and change nothing.
    let mut swapped: Vec<&PathBuf> = files.iter().collect();
    swapped.swap(0, 1);
    let err = refused(&b, &public, &swapped);
    assert!(
        err.contains(&format!(
            "volume 2 of {n} (x.tar.001) is out of order: given as file 1 of {n}"
        )),
        "{err}"
    );
    let gap: Vec<&PathBuf> = files
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != 2)
        .map(|(_, f)| f)
        .collect();
    let err = refused(&b, &public, &gap);
    assert!(
        err.contains(&format!("volume 3 of {n} (x.tar.002) is missing")),
        "{err}"
    );
    let mut twice: Vec<&PathBuf> = files.iter().collect();
    twice.insert(2, &files[1]);
    let err = refused(&b, &public, &twice);
    assert!(
        err.contains(&format!("volume 2 of {n} (x.tar.001) is repeated")),
        "{err}"
    );
    // A volume of another bundle of the same size, under this one's name.
    let (_, others) = volumes(tmp.path(), "y", 2);
    let mixed = tmp.path().join("mixed");
    std::fs::create_dir(&mixed).unwrap();
    let mut set = Vec::new();
    for (i, f) in files.iter().enumerate() {
        let to = mixed.join(f.file_name().unwrap());
        std::fs::copy(if i == 1 { &others[1] } else { f }, &to).unwrap();
        set.push(to);
    }
    std::fs::copy(&list_file, mixed.join("x.tar.volumes.asc")).unwrap();
    let err = refused(&b, &public, &set.iter().collect::<Vec<_>>());
    assert!(
        err.contains(&format!(
            "volume 2 of {n} (x.tar.001) is not from this bundle (or damaged): its content hashes to {}",
            sha256sum(&others[1])
        )),
        "{err}"
    );
    // By base name, a gap in the numbering is named even without the list.
    std::fs::remove_file(mixed.join("x.tar.volumes.asc")).unwrap();
    std::fs::remove_file(&set[2]).unwrap();
    let err = refused(&b, &public, &[&mixed.join("x.tar")]);
    assert!(
        err.contains("volume 3") && err.contains("x.tar.002) is missing: "),
        "{err}"
    );
    // Without a list, volumes out of order still never put bytes on screen.
    let (_, files_y) = volumes(tmp.path(), "z", 3);
    std::fs::remove_file(tmp.path().join("media/z.tar.volumes.asc")).unwrap();
    refused(&b, &public, &[&files_y[1], &files_y[0]]);

    // In order, it imports.
    let mut args = vec![
        "--keyring".to_string(),
        public.to_str().unwrap().to_string(),
    ];
    args.extend(strs(&files.iter().collect::<Vec<_>>()));
    let out = b.airlock_ok(
        &["import"],
        &args.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    assert!(out.contains("imported bundle"), "{out}");
}

#[test]
fn a_tampered_signed_document_is_refused_in_words() {
    let tmp = tempfile::tempdir().unwrap();
    let (_, public) = test_key();
    let config = write_config(
        tmp.path(),
        &fixture_layout(),
        &[("latest", "stacks/bb", &["v1"])],
    );
    let bundle = tmp.path().join("b.tar");
    create_bundle(&config, &bundle, &[]);
    // The signed document is the first entry: change one letter of its text.
    let mut bytes = std::fs::read(&bundle).unwrap();
    let at = bytes
        .windows(b"\"format\"".len())
        .position(|w| w == b"\"format\"")
        .unwrap();
    bytes[at + 1] = b'F';
    let altered = tmp.path().join("altered.tar");
    std::fs::write(&altered, &bytes).unwrap();
    let o = airlock(&[
        "bundle",
        "verify",
        "--keyring",
        public.to_str().unwrap(),
        altered.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(
        err.contains("signature check failed: bad signature: does not verify with key ")
            && err.contains(": the signed text does not match the signature (the document or its signature was altered after signing)"),
        "{err}"
    );
    assert!(
        !err.contains("assertion") && !err.contains("left:"),
        "{err}"
    );
}
