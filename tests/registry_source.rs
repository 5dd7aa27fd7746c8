//! `bundle create` from registries (`docker://`) with real components on
//! loopback: the source registry is `airlock serve --allow-push` or Debian's
//! `docker-registry`, filled by skopeo from the busybox fixture; TLS with a CA
//! made by `openssl` and nginx in front (HTTP Basic, or a bearer challenge
//! whose token comes from a few lines of Python). Every expected digest is
//! computed independently: `sha256sum` of what skopeo pulls and of the bytes
//! `skopeo inspect --raw` prints, never airlock's own figures.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};
use std::time::{Duration, Instant};

use common::*;

/// skopeo pushes `oci:<fixture>:<r>` to `docker://<addr>/<dest>` over plain HTTP.
fn push_fixture(addr: &str, r: &str, dest: &str, all: bool) {
    let layout = fixture_layout();
    let src = format!("oci:{}:{r}", layout.display());
    let dst = format!("docker://{addr}/{dest}");
    let mut args = vec!["copy", "--dest-tls-verify=false"];
    if all {
        args.push("--all");
    }
    args.extend([src.as_str(), dst.as_str()]);
    skopeo(&args);
}

/// sha256 of bytes via coreutils `sha256sum` (independent of airlock's hashing).
fn sha256_bytes(dir: &Path, bytes: &[u8]) -> String {
    let p = dir.join("raw.bin");
    std::fs::write(&p, bytes).unwrap();
    sha256sum(&p)
}

/// Runs `bundle create` with extra environment; returns the process output.
fn create_env(config: &Path, out: &Path, extra: &[&str], env: &[(&str, &Path)]) -> Output {
    let (sec, _) = test_key();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_airlock"));
    cmd.args(["bundle", "create", "--config"])
        .arg(config)
        .arg("--sign-key")
        .arg(&sec)
        .arg("-o")
        .arg(out)
        .args(extra)
        .env_remove("REGISTRY_AUTH_FILE")
        .env_remove("DOCKER_CONFIG")
        .env_remove("XDG_RUNTIME_DIR");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run airlock")
}

/// `bundle create --json`, asserting success; the parsed summary.
fn create_json(
    config: &Path,
    out: &Path,
    cache: &Path,
    env: &[(&str, &Path)],
) -> serde_json::Value {
    let o = create_env(
        config,
        out,
        &["--json", "--cache", cache.to_str().unwrap()],
        env,
    );
    assert!(
        o.status.success(),
        "bundle create failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).expect("--json prints JSON")
}

/// Checks every blob file of an OCI layout hashes to its name (`sha256sum`).
fn assert_layout_blobs_hash(layout: &Path) {
    let mut n = 0;
    for e in std::fs::read_dir(layout.join("blobs/sha256")).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_str().unwrap().to_string();
        assert_eq!(sha256sum(&p), format!("sha256:{name}"));
        n += 1;
    }
    assert!(
        n >= 3,
        "expected manifest, config and layers in {}",
        layout.display()
    );
}

#[test]
fn plain_http_tag_and_digest_sources_round_trip() {
    require_tool("skopeo", "skopeo");
    let tmp = tempfile::tempdir().unwrap();
    let src = serve(&tmp.path().join("src-data"), &["--allow-push"]);
    push_fixture(&src.addr, "latest", "src/busybox:1.0", false);
    push_fixture(&src.addr, "multi", "src/multi:v1", true);
    let raw_single = skopeo(&[
        "inspect",
        "--raw",
        "--tls-verify=false",
        &format!("docker://{}/src/busybox:1.0", src.addr),
    ]);
    let want_single = sha256_bytes(tmp.path(), &raw_single);
    let raw_multi = skopeo(&[
        "inspect",
        "--raw",
        "--tls-verify=false",
        &format!("docker://{}/src/multi:v1", src.addr),
    ]);
    let want_multi = sha256_bytes(tmp.path(), &raw_multi);

    let config = tmp.path().join("mirror.toml");
    std::fs::write(
        &config,
        format!(
            r#"[[registry]]
host = "{a}"
tls_verify = false

[[image]]
source = "docker://{a}/src/busybox:1.0"
repository = "mirror/busybox"
tags = ["1.0"]

[[image]]
source = "docker://{a}/src/multi@{want_multi}"
repository = "mirror/multi"
tags = ["v1"]
"#,
            a = src.addr
        ),
    )
    .unwrap();
    let cache = tmp.path().join("cache");
    let bundle = tmp.path().join("b.tar");
    let summary = create_json(&config, &bundle, &cache, &[]);
    assert_eq!(summary["images"][0]["digest"], want_single.as_str());
    assert_eq!(summary["images"][1]["digest"], want_multi.as_str());
    assert_eq!(
        summary["images"][1]["mediaType"],
        "application/vnd.oci.image.index.v1+json"
    );
    let first_bytes = summary["registry"]["bytes_downloaded"].as_u64().unwrap();
    assert!(first_bytes > 100_000, "{summary}");

    // Import into a fresh store and pull back with skopeo.
    let (_, public) = test_key();
    let data = tmp.path().join("dst-data");
    import_bundle(&data, &public, &bundle);
    let dst = serve(&data, &[]);
    let back = skopeo(&[
        "inspect",
        "--raw",
        "--tls-verify=false",
        &format!("docker://{}/mirror/busybox:1.0", dst.addr),
    ]);
    assert_eq!(back, raw_single, "manifest bytes changed on the way");
    let back_multi = skopeo(&[
        "inspect",
        "--raw",
        "--tls-verify=false",
        &format!("docker://{}/mirror/multi:v1", dst.addr),
    ]);
    assert_eq!(sha256_bytes(tmp.path(), &back_multi), want_multi);
    let pulled = tmp.path().join("pulled");
    skopeo(&[
        "copy",
        "--all",
        "--src-tls-verify=false",
        &format!("docker://{}/mirror/multi:v1", dst.addr),
        &format!("oci:{}:multi", pulled.display()),
    ]);
    skopeo(&[
        "copy",
        "--src-tls-verify=false",
        &format!("docker://{}/mirror/busybox:1.0", dst.addr),
        &format!("oci:{}:single", pulled.display()),
    ]);
    assert_eq!(layout_ref_digest(&pulled, "multi"), want_multi);
    assert_eq!(layout_ref_digest(&pulled, "single"), want_single);
    assert_layout_blobs_hash(&pulled);

    // A second run finds every blob in the cache: only the root manifests move.
    let again = create_json(&config, &tmp.path().join("b2.tar"), &cache, &[]);
    let bytes = again["registry"]["bytes_downloaded"].as_u64().unwrap();
    assert_eq!(
        bytes,
        (raw_single.len() + raw_multi.len()) as u64,
        "second run downloaded more than the two root manifests: {again}"
    );
    assert!(
        again["registry"]["cache_hits"].as_u64().unwrap() >= 5,
        "{again}"
    );
    assert_eq!(again["images"], summary["images"]);
}

#[test]
fn bad_sources_fail_cleanly_and_leave_no_output() {
    let tmp = tempfile::tempdir().unwrap();
    let src = serve(&tmp.path().join("src-data"), &["--allow-push"]);
    let cases = [
        (format!("docker://{}/nothing/here:1", src.addr), "not found"),
        ("docker://127.0.0.1:1/a/b:1".to_string(), "127.0.0.1:1"),
        ("docker://host/UPPER:1".to_string(), "invalid"),
    ];
    for (source, want) in cases {
        let config = tmp.path().join("bad.toml");
        std::fs::write(
            &config,
            format!(
                "[[registry]]\nhost = \"{}\"\ntls_verify = false\n\n[[image]]\nsource = \"{source}\"\nrepository = \"x/y\"\ntags = [\"1\"]\n",
                src.addr
            ),
        )
        .unwrap();
        let out = tmp.path().join("bad.tar");
        let o = create_env(
            &config,
            &out,
            &["--cache", tmp.path().join("cache").to_str().unwrap()],
            &[],
        );
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{source}: succeeded");
        assert!(err.contains(want), "{source}: {err}");
        assert!(!err.contains("panicked"), "{source}: {err}");
        assert!(!out.exists(), "{source}: partial output left");
    }
}
