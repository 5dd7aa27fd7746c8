//! Shared helpers for the integration tests: the real busybox fixture image,
//! running the `airlock` binary, required external tools.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

/// Fails (never skips) when `tool` is missing, naming the Debian package.
pub fn require_tool(tool: &str, package: &str) {
    let found = Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {tool}"))
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    assert!(
        found,
        "`{tool}` is required by this test: apt-get install {package}"
    );
}

/// A directory that lives for the whole test binary.
fn shared_dir() -> &'static Path {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    DIR.get_or_init(|| tempfile::tempdir().expect("tempdir"))
        .path()
}

/// The busybox fixture layout (refs `latest` and `multi`), built once per test binary.
pub fn fixture_layout() -> PathBuf {
    static LAYOUT: OnceLock<PathBuf> = OnceLock::new();
    LAYOUT
        .get_or_init(|| {
            require_tool("umoci", "umoci");
            require_tool("jq", "jq");
            assert!(
                Path::new("/bin/busybox").exists(),
                "apt-get install busybox-static"
            );
            let out = shared_dir().join("busybox-layout");
            let script =
                Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/make-busybox-image.sh");
            let o = Command::new("bash")
                .arg(&script)
                .arg(&out)
                .output()
                .expect("run fixture script");
            assert!(
                o.status.success(),
                "fixture script failed: {}",
                String::from_utf8_lossy(&o.stderr)
            );
            out
        })
        .clone()
}

/// A signing key pair made by `airlock keys generate`, once per test binary: (secret, public).
pub fn test_key() -> (PathBuf, PathBuf) {
    static KEY: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    KEY.get_or_init(|| keypair(shared_dir(), "release")).clone()
}

/// A fresh key pair under `dir` named `name`.
pub fn keypair(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
    let prefix = dir.join(name);
    let o = airlock(&[
        "keys",
        "generate",
        "--uid",
        "Release <release@example.org>",
        "--out",
        prefix.to_str().unwrap(),
    ]);
    assert!(
        o.status.success(),
        "keys generate: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    (
        dir.join(format!("{name}.sec.asc")),
        dir.join(format!("{name}.pub.asc")),
    )
}

/// Runs the airlock binary.
pub fn airlock(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_airlock"))
        .args(args)
        .output()
        .expect("run airlock")
}

/// Runs airlock and asserts success; returns stdout.
pub fn airlock_ok(args: &[&str]) -> String {
    let o = airlock(args);
    assert!(
        o.status.success(),
        "airlock {args:?} failed: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Writes a mirror config naming `oci:LAYOUT:REF` images: (ref, repository, tags).
pub fn write_config(dir: &Path, layout: &Path, images: &[(&str, &str, &[&str])]) -> PathBuf {
    let mut text = String::new();
    for (r, repo, tags) in images {
        let tags: Vec<String> = tags.iter().map(|t| format!("{t:?}")).collect();
        text.push_str(&format!(
            "[[image]]\nsource = \"oci:{}:{r}\"\nrepository = \"{repo}\"\ntags = [{}]\n\n",
            layout.display(),
            tags.join(", ")
        ));
    }
    let path = dir.join("mirror.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// sha256 of a file by coreutils' `sha256sum`, as `sha256:<hex>`.
pub fn sha256sum(path: &Path) -> String {
    let o = Command::new("sha256sum")
        .arg(path)
        .output()
        .expect("sha256sum");
    let s = String::from_utf8_lossy(&o.stdout);
    format!("sha256:{}", s.split_whitespace().next().unwrap())
}

/// The manifest digest a layout's index.json names for `ref_name`.
pub fn layout_ref_digest(layout: &Path, ref_name: &str) -> String {
    let index: serde_json::Value =
        serde_json::from_slice(&std::fs::read(layout.join("index.json")).unwrap()).unwrap();
    index["manifests"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["annotations"]["org.opencontainers.image.ref.name"] == ref_name)
        .map(|m| m["digest"].as_str().unwrap().to_string())
        .unwrap()
}

/// The content of `refs/root` (the state digest), or "" for an empty store.
pub fn root_of(data: &Path) -> String {
    std::fs::read_to_string(data.join("refs/root")).unwrap_or_default()
}

/// `airlock bundle create` of `config` into `out`, signed with [`test_key`], plus `extra` args; returns stdout.
pub fn create_bundle(config: &Path, out: &Path, extra: &[&str]) -> String {
    let (sec, _) = test_key();
    let mut args = vec![
        "bundle",
        "create",
        "--config",
        config.to_str().unwrap(),
        "--sign-key",
        sec.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    airlock_ok(&args)
}

/// `airlock import` of `bundle` into `data` trusting `keyring`; returns stdout.
pub fn import_bundle(data: &Path, keyring: &Path, bundle: &Path) -> String {
    airlock_ok(&[
        "import",
        "--data",
        data.to_str().unwrap(),
        "--keyring",
        keyring.to_str().unwrap(),
        bundle.to_str().unwrap(),
    ])
}
