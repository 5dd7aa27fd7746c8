//! Issue 25 §1: a stack image made by Debian's `umoci insert` (0.4.7), whose
//! layers stop right after the last file's data (no padding, no
//! end-of-archive blocks), is read as umoci and Go's archive/tar read it and
//! flattens; a layer whose entry is cut short is refused with the entry and
//! the byte (computed by Python's tarfile in `tests/fixtures/cut-layer-entry.py`),
//! at `bundle create` (a `[[stack]]` image or one with the stack label) and
//! at import (a delta bundle whose layer was not at hand at create).

use crate::common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::backend::{Backend, on_backends};
use common::objects::{Objects, blob_key};
use common::*;

on_backends!([fs] umoci_layers_flatten_and_cut_entries_are_named_before_the_gap);

/// The commands: an image `L:v1` with `/etc` from `dir` and a whiteout of `/etc/old`.
fn umoci_image(tmp: &Path) -> PathBuf {
    require_tool("umoci", "umoci");
    let dir = tmp.join("etc-files");
    std::fs::create_dir_all(dir.join("old")).unwrap();
    std::fs::write(dir.join("hostname"), "bar\n").unwrap();
    std::fs::write(dir.join("os-release"), "ID=bar\n").unwrap();
    let data: Vec<u8> = (0..700u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(dir.join("old/file"), data).unwrap();
    let l = tmp.join("L");
    let image = format!("{}:v1", l.display());
    run_ok(Command::new("umoci").args(["init", "--layout", l.to_str().unwrap()]));
    run_ok(Command::new("umoci").args(["new", "--image", &image]));
    run_ok(Command::new("umoci").args([
        "insert",
        "--image",
        &image,
        dir.to_str().unwrap(),
        "/etc",
    ]));
    run_ok(Command::new("umoci").args(["insert", "--image", &image, "--whiteout", "/etc/old"]));
    l
}

/// The layer digests of `reference` in `layout`.
fn layers(layout: &Path, reference: &str) -> Vec<String> {
    let m = layout_ref_digest(layout, reference);
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(blob_file(layout, &m)).unwrap()).unwrap();
    manifest["layers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["digest"].as_str().unwrap().to_string())
        .collect()
}

/// Length of a gzip file's content, by `gzip -dc`.
fn gunzipped_len(path: &Path) -> usize {
    require_tool("gzip", "gzip");
    let o = Command::new("gzip").arg("-dc").arg(path).output().unwrap();
    o.stdout.len()
}

/// Path → sha256 of every regular file, "dir" or "link" for the others.
fn files(root: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let rel = p.strip_prefix(root).unwrap().display().to_string();
            let m = std::fs::symlink_metadata(&p).unwrap();
            let what = if m.is_dir() {
                stack.push(p.clone());
                "dir".to_string()
            } else if m.is_file() {
                sha256sum(&p)
            } else {
                "other".to_string()
            };
            out.insert(rel, what);
        }
    }
    out
}

fn config(
    tmp: &Path,
    name: &str,
    layout: &Path,
    reference: &str,
    repo: &str,
    stack: bool,
) -> PathBuf {
    let mut text = format!(
        "[[image]]\nsource = \"oci:{}:{reference}\"\nrepository = \"{repo}\"\ntags = [\"v1\"]\n",
        layout.display()
    );
    if stack {
        text.push_str(&format!(
            "\n[[stack]]\nname = \"{name}\"\nimage = \"{repo}:v1\"\n"
        ));
    }
    let path = tmp.join(format!("{name}.toml"));
    std::fs::write(&path, text).unwrap();
    path
}

fn stderr_of(o: &std::process::Output) -> String {
    assert!(
        !o.status.success(),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn umoci_layers_flatten_and_cut_entries_are_named_before_the_gap(b: Backend) {
    require_tool("tar", "tar");
    require_tool("python3", "python3");
    let tmp = tempfile::tempdir().unwrap();
    let l = umoci_image(tmp.path());
    let layer_digests = layers(&l, "v1");
    assert_eq!(layer_digests.len(), 2);
    // The fixture has the property: umoci's first layer ends right after
    // etc/old/file's data, its second after the whiteout's header.
    let len = gunzipped_len(&blob_file(&l, &layer_digests[0]));
    assert_ne!(len % 512, 0, "layer 1 is {len} bytes: padded");
    assert_eq!(gunzipped_len(&blob_file(&l, &layer_digests[1])), 512);

    // bundle create checks the [[stack]] image and says so; import, promote.
    let manifest = layout_ref_digest(&l, "v1");
    let bundle = tmp.path().join("bar.tar");
    let out = create_bundle(
        &config(tmp.path(), "bar", &l, "v1", "stacks/bar", true),
        &bundle,
        &[],
    );
    assert!(
        out.contains(&format!(
            "stack candidate bar stacks/bar@{manifest}: flattens (linux/amd64; layers read: 2)"
        )),
        "{out}"
    );
    let (_, public) = test_key();
    b.import(&public, &bundle);
    b.airlock_ok(&["stack", "promote"], &["bar", "--image", "stacks/bar:v1"]);
    let show: serde_json::Value =
        serde_json::from_str(&b.airlock_ok(&["stack", "show"], &["bar", "--json"])).unwrap();
    let rootfs = show["active"]["rootfs"][0]["sha256"].as_str().unwrap();
    let tarball = tmp.path().join("rootfs.tar");
    std::fs::write(&tarball, Objects::of(&b).get(&blob_key(rootfs)).unwrap()).unwrap();
    assert_eq!(sha256sum(&tarball), rootfs);
    let ours = tmp.path().join("ours");
    std::fs::create_dir(&ours).unwrap();
    run_ok(
        Command::new("tar")
            .arg("-xf")
            .arg(&tarball)
            .arg("-C")
            .arg(&ours),
    );
    let theirs = tmp.path().join("umoci-bundle");
    run_ok(Command::new("umoci").args([
        "unpack",
        "--image",
        &format!("{}:v1", l.display()),
        theirs.to_str().unwrap(),
    ]));
    let want = files(&theirs.join("rootfs"));
    assert!(want.contains_key("etc/hostname") && !want.contains_key("etc/old"));
    assert_eq!(files(&ours), want);

    // etc/old/file cut after 300 of its 700 bytes: refused at create, by name and byte.
    let cut = String::from_utf8(
        Command::new("python3")
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/cut-layer-entry.py"))
            .arg(&l)
            .args(["v1", "cut", "etc/old/file", "300"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    let [keep, size, layer, cut_manifest] = cut.split_whitespace().collect::<Vec<_>>()[..] else {
        panic!("cut-layer-entry.py printed {cut:?}");
    };
    assert_eq!((keep, size), ("300", "700"));
    let why = format!("layer {layer}: tar entry etc/old/file cut off at byte 300 of 700");
    let err = stderr_of(&create_bundle_output(
        &config(tmp.path(), "cut", &l, "cut", "stacks/cut", true),
        &tmp.path().join("cut.tar"),
    ));
    assert!(
        err.contains(&format!(
            "stack candidate cut (stacks/cut@{cut_manifest}, linux/amd64) cannot be flattened into a rootfs: {why}"
        )),
        "{err}"
    );
    // Not named as a stack but carrying the stack label: refused too.
    run_ok(Command::new("umoci").args([
        "config",
        "--image",
        &format!("{}:cut", l.display()),
        "--tag",
        "labelled",
        "--config.label",
        "io.buildpacks.stack.id=io.example.cut",
    ]));
    let err = stderr_of(&create_bundle_output(
        &config(tmp.path(), "lab", &l, "labelled", "stacks/lab", false),
        &tmp.path().join("lab.tar"),
    ));
    assert!(
        err.contains("image stacks/lab (label io.buildpacks.stack.id)") && err.contains(&why),
        "{err}"
    );

    // Carried as a plain image, it imports; promote names the entry.
    let plain = tmp.path().join("plain.tar");
    create_bundle(
        &config(tmp.path(), "plain", &l, "cut", "stacks/cut", false),
        &plain,
        &[],
    );
    b.import(&public, &plain);
    let o = b.airlock(&["stack", "promote"], &["cut", "--image", "stacks/cut:v1"]);
    assert!(stderr_of(&o).contains(&why), "{}", stderr_of(&o));
    // A delta bundle naming it as a stack, its layer no longer at hand at
    // create: the import refuses it and commits nothing.
    let inventory = tmp.path().join("have.json");
    b.airlock_ok(&["inventory"], &["-o", inventory.to_str().unwrap()]);
    std::fs::remove_file(blob_file(&l, layer)).unwrap();
    let delta = tmp.path().join("delta.tar");
    let out = create_bundle(
        &config(tmp.path(), "cut", &l, "cut", "stacks/cut", true),
        &delta,
        &["--have", inventory.to_str().unwrap()],
    );
    assert!(
        out.contains("stack candidate cut") && out.contains("layers read: 1)"),
        "{out}"
    );
    let root = b.root();
    let o = b.airlock(
        &["import"],
        &[
            "--keyring",
            public.to_str().unwrap(),
            delta.to_str().unwrap(),
        ],
    );
    let err = stderr_of(&o);
    assert!(
        err.contains(&format!(
            "stack candidate cut (stacks/cut@{cut_manifest}, linux/amd64) cannot be flattened into a rootfs: {why}"
        )),
        "{err}"
    );
    assert_eq!(b.root(), root, "a refused import changed the state");
}
