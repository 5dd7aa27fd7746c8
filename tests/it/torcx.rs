//! The torcx remote (issue 10): addons carried in bundles, checked at import,
//! served with contents signed by the remote's RSA key, fetched as the torcx
//! client would, checked with GnuPG (`gpg --verify`) and coreutils
//! (`sha512sum`, `sha256sum`); profile checks; the host's `remote.json`.
//! The scenarios on a store run on the filesystem and on s3s-fs
//! (tests/common/backend.rs; moto is left out to bound CI time).

use crate::common;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Arc, OnceLock};

use airlock::bundle::sign::SigningKey;
use airlock::server::App;
use airlock::state::StateStore;
use airlock::torcx::api::TorcxConfig;
use axum::Router;

use common::backend::{Backend, on_backends};
use common::router::{get, send};
use common::{airlock, airlock_ok, create_bundle_output, require_tool, test_key};

const REMOTE: &str = "com.example.mirror";

on_backends!(
    [fs, s3s_fs]
    addons_are_imported_with_sha256_and_sha512_recorded,
    hostile_archives_are_refused_at_import_and_nothing_changes,
    deprecation_leaves_future_os_versions_and_profile_check_names_it,
    profile_check_merges_as_torcx_does,
    a_client_fetches_verifies_and_downloads_over_http,
);
on_backends!(
    async [fs, s3s_fs]
    contents_are_signed_with_the_remote_key_and_verify_with_gpg,
    archives_are_served_by_name_with_head_etag_and_ranges,
    errors_are_404_with_a_plain_body_never_200,
    legacy_package_list_has_a_detached_signature,
    deprecated_versions_leave_the_served_contents,
    vendor_contents_are_served_byte_for_byte,
);

/// An RSA-3072 key made by `airlock keys generate --algo rsa3072`, once per
/// test binary: (secret, public).
fn rsa_key() -> (PathBuf, PathBuf) {
    static KEY: OnceLock<(tempfile::TempDir, PathBuf, PathBuf)> = OnceLock::new();
    let (_, s, p) = KEY.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let prefix = dir.path().join("remote");
        airlock_ok(&[
            "keys",
            "generate",
            "--algo",
            "rsa3072",
            "--uid",
            "Mirror <mirror@example.org>",
            "--out",
            prefix.to_str().unwrap(),
        ]);
        let s = dir.path().join("remote.sec.asc");
        let p = dir.path().join("remote.pub.asc");
        (dir, s, p)
    });
    (s.clone(), p.clone())
}

/// A real `.torcx.tgz` made with GNU tar (`tar -C root -czf X .`, as upstream
/// test data is built), with `.torcx/manifest.json` listing `/bin/NAME`.
fn make_tgz(dir: &Path, name: &str, version: &str, payload: &str) -> PathBuf {
    let root = dir.join(format!("root-{name}-{version}"));
    std::fs::create_dir_all(root.join(".torcx")).unwrap();
    std::fs::create_dir_all(root.join("bin")).unwrap();
    std::fs::write(
        root.join("bin").join(name),
        format!("#!/bin/sh\necho {payload}\n"),
    )
    .unwrap();
    std::fs::write(
        root.join(".torcx/manifest.json"),
        format!(r#"{{"kind":"image-manifest-v0","value":{{"bin":["/bin/{name}"]}}}}"#),
    )
    .unwrap();
    let out = dir.join(format!("{name}:{version}.torcx.tgz"));
    let o = Command::new("tar")
        .arg("-C")
        .arg(&root)
        .arg("-czf")
        .arg(&out)
        .arg(".")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    out
}

/// A squashfs 4.0 superblock (gzip, 128 KiB blocks) followed by zeros, 8 KiB.
fn squashfs_bytes(magic: &[u8; 4]) -> Vec<u8> {
    let mut sb = vec![0u8; 8192];
    sb[0..4].copy_from_slice(magic);
    sb[12..16].copy_from_slice(&131072u32.to_le_bytes());
    sb[20..22].copy_from_slice(&1u16.to_le_bytes());
    sb[22..24].copy_from_slice(&17u16.to_le_bytes());
    sb[28..30].copy_from_slice(&4u16.to_le_bytes());
    sb[40..48].copy_from_slice(&8192u64.to_le_bytes());
    sb
}

/// One `[[addon]]` table.
fn addon_toml(
    name: &str,
    version: &str,
    format: &str,
    source: &Path,
    os: &[&str],
    default_for: &[&str],
) -> String {
    let list = |v: &[&str]| {
        v.iter()
            .map(|s| format!("{s:?}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    format!(
        "[[addon]]\nremote = \"{REMOTE}\"\nname = \"{name}\"\nversion = \"{version}\"\nformat = \"{format}\"\nsource = {:?}\nboards = [\"amd64-usr\"]\nos_versions = [{}]\ndefault_for = [{}]\n\n",
        source.to_str().unwrap(),
        list(os),
        list(default_for)
    )
}

/// Writes `toml`, creates a bundle signed with the release key and imports
/// it into `data`; returns the import's stdout.
fn bundle_and_import(dir: &Path, data: &Backend, toml: &str, name: &str) -> String {
    let config = dir.join(format!("{name}.toml"));
    std::fs::write(&config, toml).unwrap();
    let bundle = dir.join(format!("{name}.tar"));
    common::create_bundle(&config, &bundle, &[]);
    let (_, public) = test_key();
    data.import(&public, &bundle)
}

/// The standard fixture: hello 1.0 (tgz, OS 3033.2.0 + 3033.2.1, default on
/// 3033.2.0), hello 2.0 (tgz, 3033.2.1 only, default there), kmod 1 (squashfs,
/// 3033.2.0), imported into `data`. Returns (tempdir, the store, paths by
/// `name:version`).
fn fixture(data: Backend) -> (tempfile::TempDir, Backend, BTreeMap<String, PathBuf>) {
    let dir = tempfile::tempdir().unwrap();
    let h1 = make_tgz(dir.path(), "hello", "1.0", "one");
    let h2 = make_tgz(dir.path(), "hello", "2.0", "two");
    let sq = dir.path().join("kmod:1.torcx.squashfs");
    std::fs::write(&sq, squashfs_bytes(b"hsqs")).unwrap();
    let toml = [
        addon_toml(
            "hello",
            "1.0",
            "tgz",
            &h1,
            &["3033.2.0", "3033.2.1"],
            &["3033.2.0"],
        ),
        addon_toml("hello", "2.0", "tgz", &h2, &["3033.2.1"], &["3033.2.1"]),
        addon_toml("kmod", "1", "squashfs", &sq, &["3033.2.0"], &[]),
    ]
    .concat();
    bundle_and_import(dir.path(), &data, &toml, "addons");
    let files = BTreeMap::from([
        ("hello:1.0".to_string(), h1),
        ("hello:2.0".to_string(), h2),
        ("kmod:1".to_string(), sq),
    ]);
    (dir, data, files)
}

/// The in-process router over `data`, signing `REMOTE` with the RSA key.
async fn router(data: &Backend) -> Router {
    let mut app = App::new(StateStore::new(data.open_store().await));
    let (sec, _) = rsa_key();
    app.torcx = TorcxConfig::new(BTreeMap::from([(
        REMOTE.to_string(),
        SigningKey::load(&sec).unwrap(),
    )]));
    airlock::server::router(Arc::new(app))
}

/// `sha512sum FILE` (coreutils), the hex digest.
fn sha512sum(path: &Path) -> String {
    let o = Command::new("sha512sum").arg(path).output().unwrap();
    String::from_utf8_lossy(&o.stdout)
        .split_whitespace()
        .next()
        .unwrap()
        .to_string()
}

/// A fresh GnuPG home trusting only the remote's public key.
fn gpg_home() -> tempfile::TempDir {
    require_tool("gpg", "gnupg");
    let home = tempfile::tempdir().unwrap();
    let (_, public) = rsa_key();
    let o = Command::new("gpg")
        .env("GNUPGHOME", home.path())
        .args(["--batch", "--import"])
        .arg(&public)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    home
}

/// `gpg --verify ARGS...` in `home`: (success, stderr).
fn gpg_verify(home: &Path, args: &[&Path]) -> (bool, String) {
    let o = Command::new("gpg")
        .env("GNUPGHOME", home)
        .args(["--batch", "--verify"])
        .args(args)
        .output()
        .unwrap();
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// The JSON inside a cleartext-signed document (dash-escaping undone).
fn signed_json(asc: &str) -> serde_json::Value {
    let body = asc
        .split_once("\n\n")
        .unwrap()
        .1
        .split("\n-----BEGIN PGP SIGNATURE-----")
        .next()
        .unwrap();
    let text: String = body
        .lines()
        .map(|l| l.strip_prefix("- ").unwrap_or(l))
        .collect::<Vec<_>>()
        .join("\n");
    serde_json::from_str(&text).unwrap()
}

/// `airlock torcx profile check` of `profile` on board `amd64-usr` at OS version `os`.
fn profile_check(data: &Backend, os: &str, profile: &str) -> Output {
    data.airlock(
        &["torcx", "profile", "check"],
        &["--board", "amd64-usr", "--os-version", os, profile],
    )
}

/// `airlock torcx deprecate` of `hello:VERSION` of `REMOTE` from OS version `os` on, plus `extra`.
fn deprecate_hello(data: &Backend, version: &str, os: &str, extra: &[&str]) -> Output {
    let mut args = vec![
        "--remote",
        REMOTE,
        "--name",
        "hello",
        "--version",
        version,
        "--from-os-version",
        os,
    ];
    args.extend_from_slice(extra);
    data.airlock(&["torcx", "deprecate"], &args)
}

/// Asserts `o` exited 0, showing its stderr otherwise.
fn assert_ok(o: Output) {
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

fn base(board: &str, os: &str) -> String {
    format!("/torcx/{REMOTE}/{board}/{os}/")
}

/// GET `file` of the `amd64-usr` board at OS version `os` from the router.
async fn get_amd64(r: &Router, os: &str, file: &str) -> common::router::Reply {
    get(r, &format!("{}{file}", base("amd64-usr", os))).await
}

fn addons_are_imported_with_sha256_and_sha512_recorded(b: Backend) {
    require_tool("sha512sum", "coreutils");
    let (_dir, data, files) = fixture(b);
    let out = data.airlock_ok(&["torcx", "list"], &["--json"]);
    let doc: serde_json::Value = serde_json::from_str(&out).unwrap();
    let builds = doc["remotes"][REMOTE]["builds"].as_array().unwrap();
    assert_eq!(builds.len(), 3, "{out}");
    for b in builds {
        let key = format!(
            "{}:{}",
            b["name"].as_str().unwrap(),
            b["version"].as_str().unwrap()
        );
        let file = &files[&key];
        assert_eq!(b["sha512"], sha512sum(file), "{key}");
        assert_eq!(b["sha256"], common::sha256sum(file), "{key}");
        assert_eq!(b["size"], std::fs::metadata(file).unwrap().len());
    }
    let h1 = builds.iter().find(|b| b["version"] == "1.0").unwrap();
    assert_eq!(h1["targets"].as_array().unwrap().len(), 2);
    assert_eq!(
        h1["default_for"],
        serde_json::json!([{"board": "amd64-usr", "os_version": "3033.2.0"}])
    );
    // The human listing names boards, OS versions and defaults.
    let text = data.airlock_ok(&["torcx", "list"], &[]);
    assert!(text.contains(&format!("remote {REMOTE}")), "{text}");
    assert!(
        text.contains("amd64-usr: 3033.2.0 (default), 3033.2.1"),
        "{text}"
    );
    assert!(text.contains("kmod:1 squashfs"), "{text}");
}

/// A tgz with entries given as raw (path, type, data) with no checks by the
/// tar library, so hostile names survive.
fn raw_tgz(entries: &[(&[u8], tar::EntryType, &[u8])]) -> Vec<u8> {
    let mut tar_bytes = Vec::new();
    {
        let mut b = tar::Builder::new(&mut tar_bytes);
        for (path, kind, data) in entries {
            let mut h = tar::Header::new_old();
            h.as_old_mut().name[..path.len()].copy_from_slice(path);
            h.set_size(data.len() as u64);
            h.set_mode(0o755);
            h.set_entry_type(*kind);
            h.set_cksum();
            b.append(&h, *data).unwrap();
        }
        b.finish().unwrap();
    }
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(&tar_bytes).unwrap();
    gz.finish().unwrap()
}

const MANIFEST: &[u8] = br#"{"kind":"image-manifest-v0","value":{"bin":["/bin/x"]}}"#;

fn hostile_archives() -> Vec<(&'static str, &'static str, Vec<u8>, &'static str)> {
    use tar::EntryType::{Regular, Symlink};
    let ok_files: [(&[u8], tar::EntryType, &[u8]); 2] = [
        (b"./.torcx/manifest.json", Regular, MANIFEST),
        (b"./bin/x", Regular, b"x"),
    ];
    let with = |extra: (&'static [u8], tar::EntryType, &'static [u8])| {
        let mut v = ok_files.to_vec();
        v.push(extra);
        raw_tgz(&v)
    };
    vec![
        (
            "dotdot",
            "tgz",
            with((b"./../../etc/cron.d/x", Regular, b"x")),
            "leaves the image",
        ),
        (
            "absolute",
            "tgz",
            with((b"/etc/passwd", Regular, b"x")),
            "is absolute",
        ),
        (
            "hardlink-out",
            "tgz",
            {
                let mut tar_bytes = Vec::new();
                {
                    let mut b = tar::Builder::new(&mut tar_bytes);
                    for (p, k, d) in ok_files {
                        let mut h = tar::Header::new_old();
                        h.as_old_mut().name[..p.len()].copy_from_slice(p);
                        h.set_size(d.len() as u64);
                        h.set_entry_type(k);
                        h.set_cksum();
                        b.append(&h, d).unwrap();
                    }
                    let mut h = tar::Header::new_old();
                    h.as_old_mut().name[..6].copy_from_slice(b"bin/ln");
                    h.as_old_mut().linkname[..14].copy_from_slice(b"../../etc/shad");
                    h.set_size(0);
                    h.set_entry_type(tar::EntryType::Link);
                    h.set_cksum();
                    b.append(&h, &[][..]).unwrap();
                    b.finish().unwrap();
                }
                let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
                gz.write_all(&tar_bytes).unwrap();
                gz.finish().unwrap()
            },
            "leaves the image",
        ),
        (
            "no-manifest",
            "tgz",
            raw_tgz(&[(b"./bin/x", Regular, b"x")]),
            "no .torcx/manifest.json",
        ),
        (
            "manifest-lists-missing",
            "tgz",
            raw_tgz(&[
                (b".torcx/manifest.json", Regular, MANIFEST),
                (b"bin/y", Symlink, b""),
            ]),
            "which is not in the archive",
        ),
        ("not-gzip", "tgz", b"plain text, not gzip".to_vec(), "tgz:"),
        (
            "not-squashfs",
            "squashfs",
            squashfs_bytes(b"sqsh"),
            "bad magic",
        ),
        (
            "squashfs-v3",
            "squashfs",
            {
                let mut b = squashfs_bytes(b"hsqs");
                b[28] = 3;
                b
            },
            "version 3.0",
        ),
    ]
}

#[test]
fn hostile_archives_are_refused_by_bundle_create() {
    let dir = tempfile::tempdir().unwrap();
    for (name, format, bytes, cause) in hostile_archives() {
        let file = dir.path().join(format!("{name}.torcx.{format}"));
        std::fs::write(&file, &bytes).unwrap();
        let config = dir.path().join(format!("{name}.toml"));
        std::fs::write(&config, addon_toml("x", "1", format, &file, &["1"], &[])).unwrap();
        let out = dir.path().join(format!("{name}.tar"));
        let o = create_bundle_output(&config, &out);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{name}: created");
        assert!(err.contains(cause), "{name}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{name}: one line: {err}");
        assert!(!out.exists(), "{name}: partial bundle left");
    }
}

/// A bundle signed with the release key carrying `bytes` as addon `x:1`,
/// written by hand (as a hostile or buggy creator would), bypassing create's checks.
fn handmade_bundle(path: &Path, bytes: &[u8], format: &str) {
    use sha2::Digest as _;
    let digest = format!("sha256:{}", hex::encode(sha2::Sha256::digest(bytes)));
    let layout = br#"{"imageLayoutVersion":"1.0.0"}"#;
    let index = br#"{"schemaVersion":2,"manifests":[]}"#;
    let d = |b: &[u8]| format!("sha256:{}", hex::encode(sha2::Sha256::digest(b)));
    let doc = serde_json::json!({
        "format": "airlock-bundle/v1",
        "id": "00000000-0000-4000-8000-000000000001",
        "created": "2026-11-30T00:00:00Z",
        "creator": "test",
        "images": [],
        "layout": {"oci-layout": d(layout), "index.json": d(index)},
        "blobs": [{"digest": digest, "size": bytes.len()}],
        "required": [],
        "addons": [{
            "remote": REMOTE, "name": "x", "version": "1", "format": format,
            "boards": ["amd64-usr"], "os_versions": ["1"], "default_for": [],
            "digest": digest, "size": bytes.len()
        }]
    });
    let (sec, _) = test_key();
    let signed = SigningKey::load(&sec)
        .unwrap()
        .clearsign(&format!(
            "{}\n",
            serde_json::to_string_pretty(&doc).unwrap()
        ))
        .unwrap();
    let mut b = tar::Builder::new(std::fs::File::create(path).unwrap());
    let hex = digest.strip_prefix("sha256:").unwrap().to_string();
    for (name, data) in [
        ("airlock-bundle.json.asc".to_string(), signed.as_bytes()),
        ("oci-layout".to_string(), &layout[..]),
        ("index.json".to_string(), &index[..]),
        (format!("blobs/sha256/{hex}"), bytes),
    ] {
        let mut h = tar::Header::new_ustar();
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        h.set_entry_type(tar::EntryType::Regular);
        b.append_data(&mut h, name, data).unwrap();
    }
    b.finish().unwrap();
}

fn hostile_archives_are_refused_at_import_and_nothing_changes(b: Backend) {
    let (dir, data, _) = fixture(b);
    let root = data.root();
    let (_, public) = test_key();
    for (name, format, bytes, cause) in hostile_archives() {
        let bundle = dir.path().join(format!("hostile-{name}.tar"));
        handmade_bundle(&bundle, &bytes, format);
        let o = data.airlock(
            &["import"],
            &[
                "--keyring",
                public.to_str().unwrap(),
                bundle.to_str().unwrap(),
            ],
        );
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{name}: {err}");
        assert!(err.contains(cause), "{name}: {err}");
        assert!(
            err.contains("addon x:1.torcx"),
            "{name} names the addon: {err}"
        );
        assert_eq!(data.root(), root, "{name}: state changed");
    }
    // A well-formed handmade bundle imports, so the refusals above were the archives'.
    let good = raw_tgz(&[
        (b".torcx/manifest.json", tar::EntryType::Regular, MANIFEST),
        (b"bin/x", tar::EntryType::Regular, b"x"),
    ]);
    let bundle = dir.path().join("good.tar");
    handmade_bundle(&bundle, &good, "tgz");
    data.import(&public, &bundle);
    assert_ne!(data.root(), root);
}

async fn contents_are_signed_with_the_remote_key_and_verify_with_gpg(b: Backend) {
    let (dir, data, files) = fixture(b);
    let r = router(&data).await;
    let res = get_amd64(&r, "3033.2.0", "torcx_remote_contents.json.asc").await;
    assert_eq!(res.status, 200, "{}", String::from_utf8_lossy(&res.body));
    let text = String::from_utf8(res.body.clone()).unwrap();
    assert!(
        text.starts_with("-----BEGIN PGP SIGNED MESSAGE-----\nHash: SHA256\n\n"),
        "{text}"
    );
    assert!(
        text.ends_with("-----END PGP SIGNATURE-----\n"),
        "nothing after the block: {text:?}"
    );
    assert_eq!(res.header("content-length"), text.len().to_string());
    // The CRC24 line that the client's 2018 Go armor decoder requires
    // (it reads `=XXXX` then the END line; without it the END line is base64).
    let lines: Vec<&str> = text.lines().collect();
    let crc = lines[lines.len() - 2];
    assert!(
        crc.len() == 5 && crc.starts_with('='),
        "no CRC24 line: {text}"
    );
    let doc = signed_json(&text);
    assert_eq!(doc["kind"], "torcx-remote-contents-v1");
    let images = doc["value"]["images"].as_array().unwrap();
    let names: Vec<&str> = images.iter().map(|i| i["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        ["hello", "kmod"],
        "exactly the addons built for 3033.2.0"
    );
    assert_eq!(images[0]["defaultVersion"], "1.0");
    assert_eq!(images[0]["versions"].as_array().unwrap().len(), 1);
    for img in images {
        for v in img["versions"].as_array().unwrap() {
            let key = format!(
                "{}:{}",
                img["name"].as_str().unwrap(),
                v["version"].as_str().unwrap()
            );
            assert_eq!(v["hash"], format!("sha512-{}", sha512sum(&files[&key])));
            assert_eq!(
                v["location"],
                format!("{key}.torcx.{}", v["format"].as_str().unwrap())
            );
        }
    }
    // gpg accepts it with the remote's key; a tampered byte fails.
    let home = gpg_home();
    let asc = dir.path().join("contents.asc");
    std::fs::write(&asc, &text).unwrap();
    let (ok, err) = gpg_verify(home.path(), &[&asc]);
    assert!(ok, "{err}");
    assert!(err.contains("using RSA key"), "{err}");
    let tampered = text.replacen("\"hello\"", "\"hellp\"", 1);
    assert_ne!(tampered, text);
    std::fs::write(&asc, &tampered).unwrap();
    let (ok, err) = gpg_verify(home.path(), &[&asc]);
    assert!(!ok, "tampered contents verified: {err}");
    assert!(err.contains("BAD signature"), "{err}");
    // The same bytes until the next change (ETag stable), and 3033.2.1 differs.
    let again = get_amd64(&r, "3033.2.0", "torcx_remote_contents.json.asc").await;
    assert_eq!(again.body, res.body);
    assert_eq!(again.header("etag"), res.header("etag"));
    let other = get_amd64(&r, "3033.2.1", "torcx_remote_contents.json.asc").await;
    let doc = signed_json(&String::from_utf8(other.body).unwrap());
    assert_eq!(doc["value"]["images"][0]["defaultVersion"], "2.0");
    assert_eq!(
        doc["value"]["images"].as_array().unwrap().len(),
        1,
        "no kmod on 3033.2.1"
    );
}

async fn archives_are_served_by_name_with_head_etag_and_ranges(b: Backend) {
    let (_dir, data, files) = fixture(b);
    let r = router(&data).await;
    let file = &files["hello:1.0"];
    let bytes = std::fs::read(file).unwrap();
    let uri = format!("{}hello:1.0.torcx.tgz", base("amd64-usr", "3033.2.1"));
    let res = get(&r, &uri).await;
    assert_eq!(res.status, 200);
    assert_eq!(res.body, bytes);
    assert_eq!(res.header("content-length"), bytes.len().to_string());
    assert_eq!(
        res.header("etag"),
        format!("\"{}\"", common::sha256sum(file))
    );
    assert_eq!(res.header("accept-ranges"), "bytes");
    let head = send(&r, "HEAD", &uri, &[]).await;
    assert_eq!(head.status, 200);
    assert!(head.body.is_empty());
    assert_eq!(head.header("content-length"), bytes.len().to_string());
    let part = send(&r, "GET", &uri, &[("range", "bytes=10-19")]).await;
    assert_eq!(part.status, 206);
    assert_eq!(part.body, bytes[10..20]);
    assert_eq!(
        part.header("content-range"),
        format!("bytes 10-19/{}", bytes.len())
    );
    // Percent-encoded ':' names the same file.
    let enc = get_amd64(&r, "3033.2.1", "hello%3A1.0.torcx.tgz").await;
    assert_eq!(enc.status, 200);
    let sq = get_amd64(&r, "3033.2.0", "kmod:1.torcx.squashfs").await;
    assert_eq!(sq.body, std::fs::read(&files["kmod:1"]).unwrap());
}

async fn errors_are_404_with_a_plain_body_never_200(b: Backend) {
    let (_dir, data, _) = fixture(b);
    let r = router(&data).await;
    for (uri, cause) in [
        (
            format!(
                "/torcx/com.other/amd64-usr/3033.2.0/{}",
                "torcx_remote_contents.json.asc"
            ),
            "not known",
        ),
        (
            format!(
                "{}torcx_remote_contents.json.asc",
                base("arm64-usr", "3033.2.0")
            ),
            "offers nothing",
        ),
        (
            format!(
                "{}torcx_remote_contents.json.asc",
                base("amd64-usr", "1.0.0")
            ),
            "offers nothing",
        ),
        (
            format!("{}hello:2.0.torcx.tgz", base("amd64-usr", "3033.2.0")),
            "not offered",
        ),
        (
            format!("{}hello:1.0.torcx.squashfs", base("amd64-usr", "3033.2.0")),
            "not offered",
        ),
        (
            format!("{}index.html", base("amd64-usr", "3033.2.0")),
            "is not",
        ),
        (
            format!("{}..%2F..%2Fx", base("amd64-usr", "3033.2.0")),
            "not a torcx remote path",
        ),
        ("/torcx/".to_string(), "not a torcx remote path"),
        ("/torcx/a/b".to_string(), "not a torcx remote path"),
    ] {
        let res = get(&r, &uri).await;
        let body = String::from_utf8_lossy(&res.body);
        assert_eq!(res.status, 404, "{uri}: {body}");
        assert_eq!(
            res.header("content-type"),
            "text/plain; charset=utf-8",
            "{uri}"
        );
        assert!(body.contains(cause), "{uri}: {body}");
    }
    // Without a key for the remote the contents are not served (never unsigned).
    let keyless =
        airlock::server::router(Arc::new(App::new(StateStore::new(data.open_store().await))));
    let res = get(
        &keyless,
        &format!(
            "{}torcx_remote_contents.json.asc",
            base("amd64-usr", "3033.2.0")
        ),
    )
    .await;
    assert_eq!(res.status, 404);
    assert!(String::from_utf8_lossy(&res.body).contains("--torcx-key"));
}

async fn legacy_package_list_has_a_detached_signature(b: Backend) {
    let (dir, data, files) = fixture(b);
    let r = router(&data).await;
    let b = base("amd64-usr", "3033.2.0");
    let host = [("host", "mirror.internal:5000")];
    let json = send(&r, "GET", &format!("{b}torcx_manifest.json"), &host).await;
    let sig = send(&r, "GET", &format!("{b}torcx_manifest.json.asc"), &host).await;
    assert_eq!(json.status, 200);
    assert_eq!(sig.status, 200);
    let doc: serde_json::Value = serde_json::from_slice(&json.body).unwrap();
    assert_eq!(doc["kind"], "torcx-package-list-v0");
    let hello = &doc["value"]["packages"][0];
    assert_eq!(hello["name"], "hello");
    assert_eq!(hello["defaultVersion"], "1.0");
    let v = &hello["versions"][0];
    assert_eq!(
        v["hash"],
        format!("sha512-{}", sha512sum(&files["hello:1.0"]))
    );
    assert_eq!(
        v["locations"][0]["url"],
        format!("http://mirror.internal:5000{b}hello:1.0.torcx.tgz")
    );
    let home = gpg_home();
    let (jf, sf) = (
        dir.path().join("torcx_manifest.json"),
        dir.path().join("torcx_manifest.json.asc"),
    );
    std::fs::write(&jf, &json.body).unwrap();
    std::fs::write(&sf, &sig.body).unwrap();
    let (ok, err) = gpg_verify(home.path(), &[&sf, &jf]);
    assert!(ok, "{err}");
    let mut tampered = json.body.clone();
    tampered[20] ^= 1;
    std::fs::write(&jf, &tampered).unwrap();
    assert!(!gpg_verify(home.path(), &[&sf, &jf]).0);
}

fn deprecation_leaves_future_os_versions_and_profile_check_names_it(b: Backend) {
    let (dir, data, _) = fixture(b);
    let d = &data;
    let profile = dir.path().join("user.json");
    std::fs::write(
        &profile,
        format!(r#"{{"kind":"profile-manifest-v1","value":{{"images":[{{"name":"hello","reference":"1.0","remote":"{REMOTE}"}}]}}}}"#),
    )
    .unwrap();
    let p = profile.to_str().unwrap();
    assert_ok(profile_check(d, "3033.2.1", p));
    assert_ok(deprecate_hello(
        d,
        "1.0",
        "3033.2.1",
        &["--reason", "use 2.0"],
    ));
    // Still fine on the older OS; refused, naming why, on the newer one.
    assert_ok(profile_check(d, "3033.2.0", p));
    let o = profile_check(d, "3033.2.1", p);
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(out.contains("FAIL hello:1.0"), "{out}");
    assert!(
        out.contains("deprecated from OS version 3033.2.1: use 2.0"),
        "{out}"
    );
    let list = data.airlock_ok(&["torcx", "list"], &[]);
    assert!(list.contains("3033.2.1 (deprecated)"), "{list}");
    // Deprecating what does not exist fails and changes nothing.
    let root = data.root();
    let o = deprecate_hello(d, "9", "1", &[]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(data.root(), root);
}

async fn deprecated_versions_leave_the_served_contents(b: Backend) {
    let (_dir, data, _) = fixture(b);
    assert_ok(deprecate_hello(&data, "1.0", "3033.2.1", &[]));
    let r = router(&data).await;
    let res = get_amd64(&r, "3033.2.1", "torcx_remote_contents.json.asc").await;
    let doc = signed_json(&String::from_utf8(res.body).unwrap());
    let versions: Vec<&str> = doc["value"]["images"][0]["versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["version"].as_str().unwrap())
        .collect();
    assert_eq!(versions, ["2.0"]);
    let gone = get_amd64(&r, "3033.2.1", "hello:1.0.torcx.tgz").await;
    assert_eq!(gone.status, 404);
    let kept = get_amd64(&r, "3033.2.0", "hello:1.0.torcx.tgz").await;
    assert_eq!(kept.status, 200);
}

fn profile_file(
    dir: &Path,
    name: &str,
    kind: &str,
    images: &[(&str, &str, Option<&str>)],
) -> PathBuf {
    let images: Vec<serde_json::Value> = images
        .iter()
        .map(|(n, r, remote)| match remote {
            Some(rm) => serde_json::json!({"name": n, "reference": r, "remote": rm}),
            None => serde_json::json!({"name": n, "reference": r}),
        })
        .collect();
    let path = dir.join(format!("{name}.json"));
    std::fs::write(
        &path,
        serde_json::json!({"kind": kind, "value": {"images": images}}).to_string(),
    )
    .unwrap();
    path
}

fn profile_check_merges_as_torcx_does(b: Backend) {
    let (dir, data, _) = fixture(b);
    let d = dir.path();
    let v1 = "profile-manifest-v1";
    let vendor = profile_file(
        d,
        "vendor",
        v1,
        &[
            ("hello", "com.coreos.cl", Some(REMOTE)),
            ("kmod", "1", Some(REMOTE)),
            ("docker", "local", None),
        ],
    );
    // Override to 2.0 (only on 3033.2.1), mask kmod (not on 3033.2.1).
    let user = profile_file(
        d,
        "user",
        v1,
        &[("hello", "2.0", Some(REMOTE)), ("kmod", "", None)],
    );
    let check = |os: &str, files: &[&Path]| {
        let mut args = vec!["--board", "amd64-usr", "--os-version", os];
        args.extend(files.iter().map(|f| f.to_str().unwrap()));
        let o = data.airlock(&["torcx", "profile", "check"], &args);
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stdout).into_owned(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    // Vendor alone on 3033.2.0: default reference resolves to 1.0; local image needs no remote.
    let (code, out, err) = check("3033.2.0", &[&vendor]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(
        out.contains("ok   hello:com.coreos.cl hello:1.0.torcx.tgz"),
        "{out}"
    );
    assert!(out.contains("ok   docker:local no remote"), "{out}");
    // Vendor alone on 3033.2.1: kmod is not built for it.
    let (code, out, err) = check("3033.2.1", &[&vendor]);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("FAIL kmod:1"), "{out}");
    assert!(err.contains("1 of 3 images cannot be provided"), "{err}");
    // With the user profile: override + mask, so 3033.2.1 passes and 3033.2.0 lacks hello 2.0.
    let (code, out, _) = check("3033.2.1", &[&vendor, &user]);
    assert_eq!(code, Some(0), "{out}");
    assert!(!out.contains("kmod"), "masked: {out}");
    assert!(out.contains("ok   hello:2.0"), "{out}");
    let (code, out, _) = check("3033.2.0", &[&vendor, &user]);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("FAIL hello:2.0") && out.contains("offered: 1.0"),
        "{out}"
    );
    // Unknown remote.
    let other = profile_file(d, "other", v1, &[("tool", "1", Some("org.unknown"))]);
    let (code, out, _) = check("3033.2.0", &[&other]);
    assert_eq!(code, Some(1));
    assert!(out.contains("remote \"org.unknown\" is not known"), "{out}");
    // No default on a target: 3033.2.0 has kmod without defaultVersion.
    let def = profile_file(d, "def", v1, &[("kmod", "com.coreos.cl", Some(REMOTE))]);
    let (code, out, _) = check("3033.2.0", &[&def]);
    assert_eq!(code, Some(1));
    assert!(out.contains("no default version"), "{out}");
    // A broken profile is a one-line error.
    std::fs::write(d.join("bad.json"), "{").unwrap();
    let (code, _, err) = check("3033.2.0", &[&d.join("bad.json")]);
    assert_eq!(code, Some(1));
    assert!(err.contains("bad.json: not a torcx profile"), "{err}");
}

#[test]
fn remote_config_writes_remote_json_and_keyring() {
    let dir = tempfile::tempdir().unwrap();
    let (_, public) = rsa_key();
    let out = dir.path().join("remotes");
    airlock_ok(&[
        "torcx",
        "remote-config",
        "--remote",
        REMOTE,
        "--url",
        "http://127.0.0.1:5000/torcx/com.example.mirror/${COREOS_BOARD}/${VERSION_ID}",
        "--key",
        public.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join(REMOTE).join("remote.json")).unwrap())
            .unwrap();
    assert_eq!(
        json,
        serde_json::json!({"kind": "remote-manifest-v0", "value": {
            "base_url": "http://127.0.0.1:5000/torcx/com.example.mirror/${COREOS_BOARD}/${VERSION_ID}/",
            "keys": [{"armored_keyring": "keyring.asc"}]}})
    );
    assert_eq!(
        std::fs::read(out.join(REMOTE).join("keyring.asc")).unwrap(),
        std::fs::read(&public).unwrap()
    );
    let (_, ed25519) = test_key();
    let o = airlock(&[
        "torcx",
        "remote-config",
        "--remote",
        REMOTE,
        "--url",
        "http://h/",
        "--key",
        ed25519.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("RSA signatures only"));
    for (url, cause) in [
        ("ftp://h/", "http://, https:// or file://"),
        ("http://h/{{.Board}}/${BOARD}/", "unknown variable ${BOARD}"),
    ] {
        let o = airlock(&[
            "torcx",
            "remote-config",
            "--remote",
            REMOTE,
            "--url",
            url,
            "--key",
            public.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ]);
        assert_eq!(o.status.code(), Some(1));
        assert!(String::from_utf8_lossy(&o.stderr).contains(cause));
    }
}

/// Over a real socket with curl, as the torcx client does: take base_url from
/// the printed remote.json, substitute the board and OS version, resolve the
/// contents file against it, check it with gpg, download each location
/// (literal `:`) and compare sha512sum with the manifest; `profile check --url`.
fn a_client_fetches_verifies_and_downloads_over_http(b: Backend) {
    require_tool("curl", "curl");
    let (dir, data, _) = fixture(b);
    let (sec, public) = rsa_key();
    let key_arg = format!("{REMOTE}={}", sec.to_str().unwrap());
    let server = data.serve(&["--torcx-key", &key_arg]);
    let out = dir.path().join("remotes");
    airlock_ok(&[
        "torcx",
        "remote-config",
        "--remote",
        REMOTE,
        "--url",
        &format!(
            "http://{}/torcx/{REMOTE}/${{COREOS_BOARD}}/${{VERSION_ID}}",
            server.addr
        ),
        "--key",
        public.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join(REMOTE).join("remote.json")).unwrap())
            .unwrap();
    let base_url = json["value"]["base_url"]
        .as_str()
        .unwrap()
        .replace("${COREOS_BOARD}", "amd64-usr")
        .replace("${VERSION_ID}", "3033.2.0");
    assert!(base_url.ends_with('/'));
    let curl = |url: &str, to: &Path| {
        let o = Command::new("curl")
            .args(["-sS", "-f", "-o"])
            .arg(to)
            .arg(url)
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "{url}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    };
    let asc = dir.path().join("torcx_remote_contents.json.asc");
    curl(&format!("{base_url}torcx_remote_contents.json.asc"), &asc);
    // The keyring the host gets is the one gpg checks with.
    let home = tempfile::tempdir().unwrap();
    require_tool("gpg", "gnupg");
    let o = Command::new("gpg")
        .env("GNUPGHOME", home.path())
        .args(["--batch", "--import"])
        .arg(out.join(REMOTE).join("keyring.asc"))
        .output()
        .unwrap();
    assert!(o.status.success());
    let (ok, err) = gpg_verify(home.path(), &[&asc]);
    assert!(ok, "{err}");
    let doc = signed_json(&std::fs::read_to_string(&asc).unwrap());
    let mut fetched = 0;
    for img in doc["value"]["images"].as_array().unwrap() {
        for v in img["versions"].as_array().unwrap() {
            let location = v["location"].as_str().unwrap();
            assert!(location.contains(':'));
            let file = dir.path().join(format!("dl-{location}"));
            curl(&format!("{base_url}{location}"), &file);
            assert_eq!(
                v["hash"],
                format!("sha512-{}", sha512sum(&file)),
                "{location}"
            );
            fetched += 1;
        }
    }
    assert_eq!(fetched, 2);
    // curl -f fails on the 404 of an unknown file: status codes are honest.
    let o = Command::new("curl")
        .args(["-s", "-f", "-o", "/dev/null"])
        .arg(format!("{base_url}nope:1.torcx.tgz"))
        .output()
        .unwrap();
    assert!(!o.status.success());
    // profile check against the running server.
    let p = profile_file(
        dir.path(),
        "p",
        "profile-manifest-v1",
        &[
            ("hello", "com.coreos.cl", Some(REMOTE)),
            ("kmod", "2", Some(REMOTE)),
        ],
    );
    let url = format!("http://{}", server.addr);
    let o = airlock(&[
        "torcx",
        "profile",
        "check",
        "--url",
        &url,
        "--board",
        "amd64-usr",
        "--os-version",
        "3033.2.0",
        p.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains("ok   hello:com.coreos.cl hello:1.0.torcx.tgz"),
        "{stdout}"
    );
    assert!(stdout.contains("FAIL kmod:2"), "{stdout}");
    // With the host's keyring the signature is checked; a wrong key fails.
    let keyring = out.join(REMOTE).join("keyring.asc");
    let ok = profile_file(
        dir.path(),
        "ok",
        "profile-manifest-v1",
        &[("hello", "1.0", Some(REMOTE))],
    );
    let args = |k: &Path| {
        airlock(&[
            "torcx",
            "profile",
            "check",
            "--url",
            &url,
            "--keyring",
            k.to_str().unwrap(),
            "--board",
            "amd64-usr",
            "--os-version",
            "3033.2.0",
            ok.to_str().unwrap(),
        ])
    };
    let o = args(&keyring);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let (_, wrong) = test_key();
    let o = args(&wrong);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("contents signature"));
}

#[test]
fn keys_for_torcx_must_be_rsa() {
    let (sec, _) = test_key();
    let data = tempfile::tempdir().unwrap();
    let o = airlock(&[
        "serve",
        "--data",
        data.path().to_str().unwrap(),
        "--listen",
        "127.0.0.1:1",
        "--torcx-key",
        &format!("{REMOTE}={}", sec.to_str().unwrap()),
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("RSA signatures only"));
    let o = airlock(&[
        "serve",
        "--data",
        data.path().to_str().unwrap(),
        "--torcx-key",
        "no-equals-sign",
    ]);
    assert_eq!(o.status.code(), Some(1));
}

/// A vendor's contents, clearsigned by GnuPG with the vendor's own key, carried
/// in a bundle and served byte for byte (its signature stays the vendor's).
async fn vendor_contents_are_served_byte_for_byte(b: Backend) {
    require_tool("gpg", "gnupg");
    let (dir, data, _) = fixture(b);
    let home = tempfile::tempdir().unwrap();
    let gpg = |args: &[&str]| {
        let o = Command::new("gpg")
            .env("GNUPGHOME", home.path())
            .args(["--batch", "--pinentry-mode", "loopback", "--passphrase", ""])
            .args(args)
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "gpg {args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    };
    gpg(&[
        "--quick-gen-key",
        "Vendor <vendor@example.org>",
        "rsa2048",
        "sign",
        "never",
    ]);
    let json = dir.path().join("vendor.json");
    std::fs::write(
        &json,
        r#"{"kind":"torcx-remote-contents-v1","value":{"images":[{"name":"docker","defaultVersion":"19.03","versions":[{"version":"19.03","format":"tgz","hash":"sha512-00","location":"https://vendor.example/docker:19.03.torcx.tgz"}]}]}}"#,
    )
    .unwrap();
    let asc = dir.path().join("vendor.json.asc");
    gpg(&[
        "--clearsign",
        "-o",
        asc.to_str().unwrap(),
        json.to_str().unwrap(),
    ]);
    let toml = format!(
        "[[torcx_contents]]\nremote = \"{REMOTE}\"\nboard = \"amd64-usr\"\nos_version = \"3033.2.0\"\nsource = {:?}\n",
        asc.to_str().unwrap()
    );
    bundle_and_import(dir.path(), &data, &toml, "vendor");
    let r = router(&data).await;
    let res = get_amd64(&r, "3033.2.0", "torcx_remote_contents.json.asc").await;
    assert_eq!(res.status, 200);
    assert_eq!(res.body, std::fs::read(&asc).unwrap(), "byte for byte");
    // Other targets keep the site-signed contents.
    let site = get_amd64(&r, "3033.2.1", "torcx_remote_contents.json.asc").await;
    assert!(String::from_utf8_lossy(&site.body).contains("hello"));
    // profile check reads the vendor's list for that target.
    let p = profile_file(
        dir.path(),
        "p",
        "profile-manifest-v1",
        &[("docker", "com.coreos.cl", Some(REMOTE))],
    );
    let out = data.airlock_ok(
        &["torcx", "profile", "check"],
        &[
            "--board",
            "amd64-usr",
            "--os-version",
            "3033.2.0",
            p.to_str().unwrap(),
        ],
    );
    assert!(
        out.contains("ok   docker:com.coreos.cl docker:19.03.torcx.tgz"),
        "{out}"
    );
    let list = data.airlock_ok(&["torcx", "list"], &[]);
    assert!(
        list.contains("vendor contents amd64-usr/3033.2.0"),
        "{list}"
    );
    // Data after the signature block is refused when the bundle is made.
    let mut trailing = std::fs::read(&asc).unwrap();
    trailing.extend_from_slice(b"\nextra\n");
    let bad = dir.path().join("bad.asc");
    std::fs::write(&bad, trailing).unwrap();
    let config = dir.path().join("bad.toml");
    std::fs::write(
        &config,
        toml.replace(asc.to_str().unwrap(), bad.to_str().unwrap()),
    )
    .unwrap();
    let o = create_bundle_output(&config, &dir.path().join("bad.tar"));
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("after"), "{err}");
}

on_backends!([fs] hosts_fetch_without_credentials_when_torcx_is_public);

/// Issue 25 §4: once users exist, a host without credentials gets 401 (the
/// unmodified client then reports "no signed manifest detected"); with
/// `--torcx-public` (`[torcx] public = true`) it fetches and verifies the
/// contents and archives without any, while every other surface still
/// asks for credentials; `remote-config` refuses to write a password into
/// the world-readable `remote.json`.
fn hosts_fetch_without_credentials_when_torcx_is_public(b: Backend) {
    require_tool("curl", "curl");
    let (dir, data, files) = fixture(b);
    let (sec, public) = rsa_key();
    let key_arg = format!("{REMOTE}={}", sec.to_str().unwrap());
    let cfg = dir.path().join("users.toml");
    std::fs::write(
        &cfg,
        format!(
            "[[user]]\nname = \"admin\"\n{}\nroles = [\"admin\"]\n",
            common::site::hash("pw")
        ),
    )
    .unwrap();
    let cfg = cfg.to_str().unwrap();
    let base = |addr: &str| format!("http://{addr}/torcx/{REMOTE}/amd64-usr/3033.2.0/");
    let fetch = |url: &str, to: &Path| {
        let o = Command::new("curl")
            .args(["-s", "-o"])
            .arg(to)
            .args(["-w", "%{http_code}", url])
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let asc = dir.path().join("contents.asc");

    // `Backend::serve` waits for an anonymous `/v2/` 200, which users forbid.
    let serve = |extra: &[&str]| {
        let addr = format!("127.0.0.1:{}", common::free_port());
        let child = data
            .command(
                &["serve"],
                &["--listen", &addr, "--config", cfg, "--torcx-key", &key_arg],
            )
            .args(extra)
            .spawn()
            .unwrap();
        let guard = KillOnDrop(child);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while std::net::TcpStream::connect(&addr).is_err() {
            assert!(std::time::Instant::now() < deadline, "serve did not start");
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        (guard, addr)
    };
    let (server, addr) = serve(&[]);
    let contents = format!("{}torcx_remote_contents.json.asc", base(&addr));
    assert_eq!(fetch(&contents, &asc), "401");
    drop(server);

    let (_server, addr) = serve(&["--torcx-public"]);
    let contents = format!("{}torcx_remote_contents.json.asc", base(&addr));
    assert_eq!(fetch(&contents, &asc), "200");
    let home = gpg_home();
    let (ok, err) = gpg_verify(home.path(), &[&asc]);
    assert!(ok, "{err}");
    let doc = signed_json(&std::fs::read_to_string(&asc).unwrap());
    let hello = doc["value"]["images"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["name"] == "hello")
        .unwrap()["versions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["version"] == "1.0")
        .unwrap()
        .clone();
    let archive = dir.path().join("hello.tgz");
    let url = format!("{}{}", base(&addr), hello["location"].as_str().unwrap());
    assert_eq!(fetch(&url, &archive), "200");
    // What the host checks: the archive's hash against the signed contents.
    assert_eq!(hello["hash"], format!("sha512-{}", sha512sum(&archive)));
    assert_eq!(sha512sum(&archive), sha512sum(&files["hello:1.0"]));
    // Every other surface still needs credentials.
    let nothing = dir.path().join("body");
    for path in ["/v2/", "/v2/_catalog", "/stacks/v1/"] {
        let url = format!("http://{addr}{path}");
        assert_eq!(fetch(&url, &nothing), "401", "{path}");
    }

    // A password in the base URL is refused, and not echoed.
    let o = airlock(&[
        "torcx",
        "remote-config",
        "--remote",
        REMOTE,
        "--url",
        &format!("http://admin:pw-s3cret@{addr}/torcx/{REMOTE}/${{COREOS_BOARD}}/${{VERSION_ID}}"),
        "--key",
        public.to_str().unwrap(),
        "--out",
        dir.path().join("remotes").to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(
        err.contains("[torcx] public = true") && !err.contains("s3cret"),
        "{err}"
    );
    assert!(
        !dir.path()
            .join("remotes")
            .join(REMOTE)
            .join("remote.json")
            .exists()
    );
}

/// A child process killed on drop.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
