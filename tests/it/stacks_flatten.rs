//! Rootfs flattening against an independent implementation: the same
//! two-layer image (whiteouts, an opaque directory, hard links across and
//! within layers, symlinks, modes, owners, times, xattrs, long names) is
//! unpacked by `umoci unpack` and by extracting airlock's rootfs.tar with
//! GNU tar; the trees must agree. The download a cell makes matches the
//! sha256 published before it. gzip, zstd and uncompressed layers with the
//! same content give the same rootfs digest. Runs on the filesystem and on
//! s3s-fs (tests/common/backend.rs; the flattened rootfs is a blob in the
//! store); moto is left out to bound CI time.

use crate::common;

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::backend::{Backend, on_backends};
use common::*;
use sha2::Digest as _;

on_backends!([fs, s3s_fs] rootfs_matches_umoci_unpack_and_the_published_sha256);

/// The whiteout fixture layout (refs latest, zstd, plain), built once.
fn whiteout_layout(dir: &Path) -> PathBuf {
    require_tool("umoci", "umoci");
    require_tool("zstd", "zstd");
    require_tool("python3", "python3");
    let out = dir.join("layout");
    fixture_script("make-whiteout-image.sh", &out);
    out
}

fn xattrs(path: &Path) -> BTreeMap<String, Vec<u8>> {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    let c = CString::new(path.as_os_str().as_bytes()).unwrap();
    let mut names = vec![0u8; 4096];
    // SAFETY: c is NUL-terminated, names is a writable buffer of its length.
    let n = unsafe { libc::llistxattr(c.as_ptr(), names.as_mut_ptr().cast(), names.len()) };
    let mut out = BTreeMap::new();
    if n <= 0 {
        return out;
    }
    for name in names[..n as usize]
        .split(|b| *b == 0)
        .filter(|s| !s.is_empty())
    {
        let key = String::from_utf8_lossy(name).into_owned();
        if !key.starts_with("user.") {
            continue;
        }
        let cn = CString::new(name).unwrap();
        let mut val = vec![0u8; 4096];
        // SAFETY: as above.
        let m =
            unsafe { libc::lgetxattr(c.as_ptr(), cn.as_ptr(), val.as_mut_ptr().cast(), val.len()) };
        if m >= 0 {
            val.truncate(m as usize);
            out.insert(key, val);
        }
    }
    out
}

/// Path → "type mode uid gid [link|sha256|mtime] xattrs", plus the hard-link groups.
fn tree(root: &Path) -> (BTreeMap<String, String>, Vec<Vec<String>>) {
    let mut entries = BTreeMap::new();
    let mut inodes: BTreeMap<u64, Vec<String>> = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
            let m = std::fs::symlink_metadata(&p).unwrap();
            let ft = m.file_type();
            let (kind, extra) = if ft.is_dir() {
                stack.push(p.clone());
                ("dir", String::new())
            } else if ft.is_symlink() {
                let t = std::fs::read_link(&p).unwrap();
                ("symlink", format!("-> {} mtime {}", t.display(), m.mtime()))
            } else if ft.is_file() {
                inodes.entry(m.ino()).or_default().push(rel.clone());
                let sum = hex::encode(sha2::Sha256::digest(std::fs::read(&p).unwrap()));
                ("file", format!("sha256 {sum} mtime {}", m.mtime()))
            } else {
                ("special", format!("rdev {} mtime {}", m.rdev(), m.mtime()))
            };
            let line = format!(
                "{kind} {:o} {}:{} {extra} {:?}",
                m.mode() & 0o7777,
                m.uid(),
                m.gid(),
                xattrs(&p)
            );
            entries.insert(rel, line);
        }
    }
    let mut groups: Vec<Vec<String>> = inodes
        .into_values()
        .filter(|g| g.len() > 1)
        .map(|mut g| {
            g.sort();
            g
        })
        .collect();
    groups.sort();
    (entries, groups)
}

fn rootfs_matches_umoci_unpack_and_the_published_sha256(b: Backend) {
    require_tool("tar", "tar");
    require_tool("curl", "curl");
    let tmp = tempfile::tempdir().unwrap();
    let layout = whiteout_layout(tmp.path());
    let config = write_config(
        tmp.path(),
        &layout,
        &[
            ("latest", "stacks/wo", &["gzip"]),
            ("zstd", "stacks/wo", &["zstd"]),
            ("plain", "stacks/wo", &["plain"]),
        ],
    );
    let bundle = tmp.path().join("b.tar");
    create_bundle(&config, &bundle, &[]);
    let (_, public) = test_key();
    b.import(&public, &bundle);

    let mut sums = Vec::new();
    for (stack, tag) in [("wo", "gzip"), ("wo-zstd", "zstd"), ("wo-plain", "plain")] {
        b.airlock_ok(
            &["stack", "promote"],
            &[stack, "--image", &format!("stacks/wo:{tag}")],
        );
        let show: serde_json::Value =
            serde_json::from_str(&b.airlock_ok(&["stack", "show"], &[stack, "--json"])).unwrap();
        sums.push(
            show["active"]["rootfs"][0]["sha256"]
                .as_str()
                .unwrap()
                .to_string(),
        );
    }
    assert_eq!(sums[0], sums[1], "zstd layer gives another rootfs");
    assert_eq!(sums[0], sums[2], "uncompressed layer gives another rootfs");

    // A cell asks what to run, then downloads it: the sha256 is known before the download.
    let server = b.serve(&[]);
    let (status, _, body) =
        http(&server.addr, "GET", "/stacks/v1/wo?cell=diego-cell/0", &[]).unwrap();
    assert_eq!(status, 200);
    let answer: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(answer["rootfs_digest"], sums[0].as_str());
    let tarball = tmp.path().join("rootfs.tar");
    run_ok(Command::new("curl").args([
        "-sSf",
        "-o",
        tarball.to_str().unwrap(),
        &format!(
            "http://{}{}",
            server.addr,
            answer["rootfs_url"].as_str().unwrap()
        ),
    ]));
    assert_eq!(
        sha256sum(&tarball),
        format!("sha256:{}", answer["rootfs_sha256"].as_str().unwrap())
    );
    assert_eq!(
        std::fs::metadata(&tarball).unwrap().len(),
        answer["rootfs_size"].as_u64().unwrap()
    );

    // Independent implementation: umoci unpack of the same image.
    let bundle_dir = tmp.path().join("umoci");
    run_ok(Command::new("umoci").args([
        "unpack",
        "--image",
        &format!("{}:latest", layout.display()),
        bundle_dir.to_str().unwrap(),
    ]));
    let extracted = tmp.path().join("extracted");
    std::fs::create_dir(&extracted).unwrap();
    run_ok(Command::new("tar").args([
        "--xattrs",
        "--xattrs-include=*",
        "--numeric-owner",
        "-xpf",
        tarball.to_str().unwrap(),
        "-C",
        extracted.to_str().unwrap(),
    ]));
    let (ours, our_links) = tree(&extracted);
    let (theirs, their_links) = tree(&bundle_dir.join("rootfs"));
    let diff: Vec<String> = ours
        .keys()
        .chain(theirs.keys())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .filter(|k| ours.get(*k) != theirs.get(*k))
        .map(|k| {
            format!(
                "{k}:\n  airlock {:?}\n  umoci   {:?}",
                ours.get(k),
                theirs.get(k)
            )
        })
        .collect();
    assert!(diff.is_empty(), "trees differ:\n{}", diff.join("\n"));
    assert_eq!(our_links, their_links, "hard-link groups differ");
    // The fixture really has what the comparison is about.
    assert!(theirs.contains_key("opq/new") && !theirs.contains_key("opq/one"));
    assert!(!theirs.contains_key("gone") && !theirs.contains_key("etc/motd"));
    assert!(theirs["swap_dir"].starts_with("file") && theirs["swap_file"].starts_with("dir"));
    assert!(theirs["etc/pax-xattr"].contains("user.pax"));
    assert!(
        their_links
            .iter()
            .any(|g| g.contains(&"bin/hard-to-lower".to_string()))
    );
    assert!(!their_links.iter().any(|g| g.contains(&"h/a".to_string())));
}
