//! Rootfs delta scenarios' shared parts: a stack image in two versions
//! (v2 = v1 with one package's files rebuilt and the dpkg status
//! updated), built with umoci from trees written here; what casync makes
//! of a tar (the chunk ids, by the real tool); the server's count of
//! chunk requests (`/metrics`).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use super::backend::Backend;
use super::synth::{noise, text};
use super::{create_bundle, http, require_tool, run_ok, test_key, write_config};

/// The repository both versions are in, and the stack they are promoted as.
pub const REPO: &str = "stacks/delta";
pub const STACK: &str = "delta";

/// The package v2 rebuilds.
pub const CHANGED: &str = "usr/lib/pkg-07";

/// Writes the v1 tree under `root`: 18 packages of 4 files (text-like
/// and random, 8 KiB to 160 KiB), `etc/`, and the dpkg status.
fn write_v1(root: &Path) {
    for p in 0..18u64 {
        let dir = root.join(format!("usr/lib/pkg-{p:02}"));
        std::fs::create_dir_all(&dir).unwrap();
        for f in 0..4u64 {
            let seed = p * 10 + f;
            let size = 8192 + (noise(seed, 1)[0] as usize) * 600;
            let bytes = if f == 3 {
                noise(seed, size)
            } else {
                text(seed, size)
            };
            std::fs::write(dir.join(format!("lib{f}.so")), bytes).unwrap();
        }
    }
    std::fs::create_dir_all(root.join("etc/ssl/certs")).unwrap();
    std::fs::write(root.join("etc/os-release"), "ID=delta\nVERSION_ID=1\n").unwrap();
    std::fs::write(
        root.join("etc/ssl/certs/ca-certificates.crt"),
        "# the distribution's CAs\n",
    )
    .unwrap();
    std::fs::create_dir_all(root.join("var/lib/dpkg")).unwrap();
    std::fs::write(root.join("var/lib/dpkg/status"), text(999, 40_000)).unwrap();
}

/// v2 from a copy of v1 (`cp -a`, so unchanged files keep their times):
/// the files of [`CHANGED`] rewritten in place, the dpkg status grown.
fn write_v2(v1: &Path, root: &Path) {
    run_ok(Command::new("cp").arg("-a").arg(v1).arg(root));
    for f in 0..4u64 {
        let path = root.join(CHANGED).join(format!("lib{f}.so"));
        let size = std::fs::metadata(&path).unwrap().len() as usize;
        std::fs::write(&path, text(5000 + f, size + 300)).unwrap();
    }
    let status = root.join("var/lib/dpkg/status");
    let mut s = std::fs::read(&status).unwrap();
    s.extend_from_slice(b"\nPackage: pkg-07\nVersion: 2\n");
    std::fs::write(&status, s).unwrap();
}

/// One umoci image `LAYOUT:TAG` whose single layer is `tree`.
fn umoci_image(layout: &Path, tag: &str, tree: &Path, work: &Path) {
    let image = format!("{}:{tag}", layout.display());
    run_ok(Command::new("umoci").args(["new", "--image", &image]));
    let bundle = work.join(format!("bundle-{tag}"));
    run_ok(
        Command::new("umoci")
            .args(["unpack", "--image", &image])
            .arg(&bundle),
    );
    run_ok(
        Command::new("cp")
            .arg("-a")
            .arg(format!("{}/.", tree.display()))
            .arg(bundle.join("rootfs")),
    );
    run_ok(
        Command::new("umoci")
            .args(["repack", "--image", &image])
            .arg(&bundle),
    );
}

/// A new OCI layout `dir/layout` (`umoci init`) holding one image per
/// `(tag, tree)`, each a single layer of its tree; returns the layout.
pub fn umoci_layout(dir: &Path, images: &[(&str, &Path)]) -> PathBuf {
    let layout = dir.join("layout");
    run_ok(
        Command::new("umoci")
            .args(["init", "--layout"])
            .arg(&layout),
    );
    for (tag, tree) in images {
        umoci_image(&layout, tag, tree, dir);
    }
    layout
}

/// A signed bundle of `stacks/delta:v1` and `:v2`, built once per test binary.
pub fn bundle() -> &'static Path {
    static B: OnceLock<PathBuf> = OnceLock::new();
    B.get_or_init(|| {
        require_tool("umoci", "umoci");
        let dir = Box::leak(Box::new(tempfile::tempdir().unwrap()))
            .path()
            .to_path_buf();
        let (v1, v2) = (dir.join("v1"), dir.join("v2"));
        write_v1(&v1);
        write_v2(&v1, &v2);
        let layout = umoci_layout(&dir, &[("v1", &v1), ("v2", &v2)]);
        let cfg = write_config(
            &dir,
            &layout,
            &[("v1", REPO, &["v1"]), ("v2", REPO, &["v2"])],
        );
        let bundle = dir.join("bundle.tar");
        create_bundle(&cfg, &bundle, &[]);
        bundle
    })
}

/// Imports [`bundle`] into `b` and promotes `stacks/delta:TAG` as stack
/// `delta`, plus `extra` promote flags.
pub fn import_and_promote(b: &Backend, tag: &str, extra: &[&str]) {
    b.import(&test_key().1, bundle());
    promote(b, tag, extra);
}

/// `airlock stack promote delta --image stacks/delta:TAG` plus `extra`.
pub fn promote(b: &Backend, tag: &str, extra: &[&str]) {
    let image = format!("{REPO}:{tag}");
    let mut args = vec!["delta", "--image", &image];
    args.extend_from_slice(extra);
    b.airlock_ok(&["stack", "promote"], &args);
}

/// The chunk ids `casync make --digest=sha256` cuts `file` into.
pub fn casync_ids(file: &Path) -> BTreeSet<String> {
    require_tool("casync", "casync");
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    run_ok(
        Command::new("casync")
            .args(["make", "--digest=sha256", "--compression=zstd"])
            .arg(format!("--store={}", store.display()))
            .arg(dir.path().join("x.caibx"))
            .arg(file),
    );
    let mut out = BTreeSet::new();
    for d in std::fs::read_dir(&store).unwrap().flatten() {
        for f in std::fs::read_dir(d.path()).unwrap().flatten() {
            let name = f.file_name().to_string_lossy().into_owned();
            out.insert(name.trim_end_matches(".cacnk").to_string());
        }
    }
    out
}

/// Chunk GETs the server answered 200 (`airlock_http_requests_total{route="chunk"}`).
pub fn chunks_served(addr: &str) -> u64 {
    let (status, _, body) = http(addr, "GET", "/metrics", &[]).unwrap();
    assert_eq!(status, 200);
    String::from_utf8_lossy(&body)
        .lines()
        .filter(|l| {
            l.starts_with("airlock_http_requests_total{")
                && l.contains("route=\"chunk\"")
                && l.contains("method=\"GET\"")
                && l.contains("status=\"200\"")
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

/// The stack as `GET /stacks/v1/delta` shows it.
pub fn stack_json(addr: &str) -> serde_json::Value {
    let (status, _, body) = http(addr, "GET", "/stacks/v1/delta", &[]).unwrap();
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    serde_json::from_slice(&body).unwrap()
}

/// The rootfs of promotion `n` (1-based): (manifest, sha256, chunks refs).
pub fn rootfs_of(addr: &str, n: usize) -> serde_json::Value {
    stack_json(addr)["promotions"][n - 1]["rootfs"][0].clone()
}

/// `GET path` into `to`, asserting 200.
pub fn download(addr: &str, path: &str, to: &Path) {
    let (status, _, body) = http(addr, "GET", path, &[]).unwrap();
    assert_eq!(
        status,
        200,
        "GET {path}: {}",
        String::from_utf8_lossy(&body)
    );
    std::fs::write(to, body).unwrap();
}
