//! Upstream signature policy (issue 41 §1–2): cosign signatures laid out
//! exactly as `cosign sign --key` lays them out (the `sha256-<hex>.sig`
//! tag naming an OCI manifest whose simple-signing payload layers carry
//! their base64 signature in `dev.cosignproject.cosign/signature`), made
//! here with `openssl` (ECDSA P-256 over SHA-256 in DER, Ed25519 over the
//! payload) and pushed over HTTP to the source registry (`airlock serve
//! --allow-push`, filled by skopeo). `bundle create` checks them against
//! the mirror config's policy and carries them; `airlock import --config`
//! checks them again against the site's `[[import.policy]]`; once served,
//! the signature is checked by `openssl dgst -verify` over what the site
//! serves, as `cosign verify --key` would check it.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;

pub(crate) fn openssl(args: &[&str]) -> Vec<u8> {
    require_tool("openssl", "openssl");
    let o = Command::new("openssl").args(args).output().unwrap();
    assert!(
        o.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    o.stdout
}

/// An ECDSA P-256 key pair by openssl, as `cosign generate-key-pair`
/// makes (PEM SubjectPublicKeyInfo): (secret, public).
pub(crate) fn p256_pair(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
    let (sec, public) = (
        dir.join(format!("{name}.pem")),
        dir.join(format!("{name}.pub")),
    );
    let s = |p: &Path| p.to_str().unwrap().to_string();
    common::ca::ec_key(dir, &format!("{name}.pem"));
    openssl(&["ec", "-in", &s(&sec), "-pubout", "-out", &s(&public)]);
    (sec, public)
}

/// An Ed25519 key pair by openssl: (secret, public).
fn ed25519_pair(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
    let (sec, public) = (
        dir.join(format!("{name}.pem")),
        dir.join(format!("{name}.pub")),
    );
    let s = |p: &Path| p.to_str().unwrap().to_string();
    openssl(&["genpkey", "-algorithm", "ed25519", "-out", &s(&sec)]);
    openssl(&["pkey", "-in", &s(&sec), "-pubout", "-out", &s(&public)]);
    (sec, public)
}

/// cosign's simple-signing payload for the manifest `digest`.
pub(crate) fn payload(digest: &str) -> Vec<u8> {
    format!(
        r#"{{"critical":{{"identity":{{"docker-reference":"example.org/app"}},"image":{{"docker-manifest-digest":"{digest}"}},"type":"cosign container image signature"}},"optional":null}}"#
    )
    .into_bytes()
}

/// The signature of `payload` by the openssl key `sec`, base64 by coreutils.
pub(crate) fn sign(dir: &Path, sec: &Path, payload: &[u8], ed25519: bool) -> String {
    let p = dir.join("payload.json");
    let sig = dir.join("payload.sig");
    std::fs::write(&p, payload).unwrap();
    let (p, sig_s, sec) = (
        p.to_str().unwrap(),
        sig.to_str().unwrap(),
        sec.to_str().unwrap(),
    );
    if ed25519 {
        openssl(&[
            "pkeyutl", "-sign", "-rawin", "-inkey", sec, "-in", p, "-out", sig_s,
        ]);
    } else {
        openssl(&["dgst", "-sha256", "-sign", sec, "-out", sig_s, p]);
    }
    let o = Command::new("base64")
        .args(["-w0", sig_s])
        .output()
        .unwrap();
    assert!(o.status.success());
    String::from_utf8(o.stdout).unwrap()
}

/// Pushes `bytes` as a blob of `repo` (POST, then PUT with the digest
/// `sha256sum` computes); returns the digest.
pub(crate) fn push_blob(dir: &Path, addr: &str, repo: &str, bytes: &[u8]) -> String {
    let f = dir.join("blob.bin");
    std::fs::write(&f, bytes).unwrap();
    let digest = sha256sum(&f);
    let (status, h, _) = http(addr, "POST", &format!("/v2/{repo}/blobs/uploads/"), &[]).unwrap();
    assert_eq!(status, 202);
    let loc = header(&h, "location").unwrap().to_string();
    let sep = if loc.contains('?') { '&' } else { '?' };
    let (status, _, body) = http_body(
        addr,
        "PUT",
        &format!("{loc}{sep}digest={digest}"),
        &[("Content-Type", "application/octet-stream")],
        bytes,
    )
    .unwrap();
    assert_eq!(status, 201, "{}", String::from_utf8_lossy(&body));
    digest
}

/// Pushes the signature image of `digest` to `repo` on `addr` as cosign
/// does (tag `sha256-<hex>.sig`), with one payload layer per
/// (payload, base64 signature); returns the manifest bytes.
pub(crate) fn push_signature(
    dir: &Path,
    addr: &str,
    repo: &str,
    digest: &str,
    layers: &[(Vec<u8>, String)],
) -> Vec<u8> {
    let annotated: Vec<(Vec<u8>, serde_json::Value)> = layers
        .iter()
        .map(|(p, sig)| {
            (
                p.clone(),
                serde_json::json!({"dev.cosignproject.cosign/signature": sig}),
            )
        })
        .collect();
    push_signature_annotated(dir, addr, repo, digest, &annotated)
}

/// [`push_signature`] with each payload layer's annotations given whole
/// (cosign's keyless layers carry a certificate and a log entry too).
pub(crate) fn push_signature_annotated(
    dir: &Path,
    addr: &str,
    repo: &str,
    digest: &str,
    layers: &[(Vec<u8>, serde_json::Value)],
) -> Vec<u8> {
    let mut descs = Vec::new();
    let mut diff_ids = Vec::new();
    for (payload, annotations) in layers {
        let d = push_blob(dir, addr, repo, payload);
        diff_ids.push(d.clone());
        descs.push(serde_json::json!({
            "mediaType": "application/vnd.dev.cosign.simplesigning.v1+json",
            "size": payload.len(),
            "digest": d,
            "annotations": annotations
        }));
    }
    let config = serde_json::to_vec(&serde_json::json!({
        "architecture": "", "created": "0001-01-01T00:00:00Z",
        "history": [{"created": "0001-01-01T00:00:00Z"}], "os": "",
        "rootfs": {"type": "layers", "diff_ids": diff_ids}, "config": {}
    }))
    .unwrap();
    let config_digest = push_blob(dir, addr, repo, &config);
    let manifest = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "size": config.len(), "digest": config_digest},
        "layers": descs
    }))
    .unwrap();
    let tag = format!("sha256-{}.sig", digest.strip_prefix("sha256:").unwrap());
    put_manifest(addr, repo, &tag, &manifest);
    manifest
}

/// PUTs the OCI image manifest `manifest` as `repo:reference`, asserting 201.
pub(crate) fn put_manifest(addr: &str, repo: &str, reference: &str, manifest: &[u8]) {
    let (status, _, body) = http_body(
        addr,
        "PUT",
        &format!("/v2/{repo}/manifests/{reference}"),
        &[("Content-Type", "application/vnd.oci.image.manifest.v1+json")],
        manifest,
    )
    .unwrap();
    assert_eq!(status, 201, "{}", String::from_utf8_lossy(&body));
}

/// skopeo copies the fixture's `r` to `docker://ADDR/DEST`; returns the
/// manifest digest by `sha256sum` of what `skopeo inspect --raw` reads.
pub(crate) fn push_image(dir: &Path, addr: &str, r: &str, dest: &str) -> String {
    let src = format!("oci:{}:{r}", fixture_layout().display());
    let dst = format!("docker://{addr}/{dest}");
    skopeo(&["copy", "--all", "--dest-tls-verify=false", &src, &dst]);
    let raw = raw_manifest(addr, dest);
    let f = dir.join("raw.json");
    std::fs::write(&f, raw).unwrap();
    sha256sum(&f)
}

/// `bundle create` of one mirror config; (success, stderr).
pub(crate) fn create(
    dir: &Path,
    name: &str,
    addr: &str,
    images: &[String],
) -> (bool, String, PathBuf) {
    create_with(dir, name, addr, images, &dir.join("cache"), &[])
}

/// [`create`] with the cache `cache` and `extra` arguments (`--have INV`).
pub(crate) fn create_with(
    dir: &Path,
    name: &str,
    addr: &str,
    images: &[String],
    cache: &Path,
    extra: &[&str],
) -> (bool, String, PathBuf) {
    let config = mirror_config(&dir.join(format!("{name}.toml")), &[addr], images);
    let out = dir.join(format!("{name}.bundle"));
    let o = create_env_plain(&config, &out, cache, extra);
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
        out,
    )
}

fn create_env_plain(
    config: &Path,
    out: &Path,
    cache: &Path,
    extra: &[&str],
) -> std::process::Output {
    let (sec, _) = test_key();
    Command::new(env!("CARGO_BIN_EXE_airlock"))
        .args(["bundle", "create", "--config"])
        .arg(config)
        .arg("--sign-key")
        .arg(&sec)
        .arg("--cache")
        .arg(cache)
        .arg("-o")
        .arg(out)
        .args(extra)
        .env_remove("REGISTRY_AUTH_FILE")
        .env_remove("DOCKER_CONFIG")
        .output()
        .unwrap()
}

fn policy(keys: &[&Path], each_platform: bool) -> String {
    let keys: Vec<String> = keys
        .iter()
        .map(|k| format!("{:?}", k.display().to_string()))
        .collect();
    format!(
        "policy = {{ keys = [{}], each_platform = {each_platform} }}",
        keys.join(", ")
    )
}

/// A site config with one `[[import.policy]]` rule.
fn site_config(dir: &Path, name: &str, repositories: &[&str], keys: &[&Path]) -> PathBuf {
    let q = |v: Vec<String>| v.join(", ");
    let text = format!(
        "[[import.policy]]\nrepositories = [{}]\nkeys = [{}]\n",
        q(repositories.iter().map(|r| format!("{r:?}")).collect()),
        q(keys
            .iter()
            .map(|k| format!("{:?}", k.display().to_string()))
            .collect())
    );
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

pub(crate) fn import_with(data: &Path, config: &Path, bundle: &Path) -> std::process::Output {
    let (_, keyring) = test_key();
    airlock(&[
        "import",
        "--data",
        data.to_str().unwrap(),
        "--keyring",
        keyring.to_str().unwrap(),
        "--config",
        config.to_str().unwrap(),
        bundle.to_str().unwrap(),
    ])
}

#[test]
fn cosign_signatures_are_checked_at_create_carried_and_checked_again_at_import() {
    require_tool("skopeo", "skopeo");
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let src = serve(&dir.join("src-data"), &["--allow-push"]);
    let a = src.addr.clone();
    let (k_sec, k_pub) = p256_pair(dir, "release");
    let (_, other_pub) = p256_pair(dir, "other");
    let (ed_sec, ed_pub) = ed25519_pair(dir, "edkey");

    // Signed by the release key, as cosign sign --key does.
    let signed = push_image(dir, &a, "latest", "app/signed:v1");
    let p = payload(&signed);
    let sig_manifest = push_signature(
        dir,
        &a,
        "app/signed",
        &signed,
        &[(p.clone(), sign(dir, &k_sec, &p, false))],
    );
    // Unsigned; an index signed at the top only; signed with Ed25519.
    let unsigned = push_image(dir, &a, "latest", "app/unsigned:v1");
    let index = push_image(dir, &a, "multi", "app/index:v1");
    let pi = payload(&index);
    push_signature(
        dir,
        &a,
        "app/index",
        &index,
        &[(pi.clone(), sign(dir, &k_sec, &pi, false))],
    );
    let ed = push_image(dir, &a, "latest", "app/ed:v1");
    let pe = payload(&ed);
    push_signature(
        dir,
        &a,
        "app/ed",
        &ed,
        &[(pe.clone(), sign(dir, &ed_sec, &pe, true))],
    );
    // A good signature of app/signed's digest replayed onto another image.
    let replayed = push_image(dir, &a, "multi", "app/replayed:v1");
    push_signature(
        dir,
        &a,
        "app/replayed",
        &replayed,
        &[(p.clone(), sign(dir, &k_sec, &p, false))],
    );
    // A payload changed after it was signed.
    let tampered = push_image(dir, &a, "multi", "app/tampered:v1");
    let pt = payload(&tampered);
    let sig = sign(dir, &k_sec, &pt, false);
    let mut changed = pt.clone();
    let at = changed.len() - 6;
    changed[at] = b'X';
    push_signature(dir, &a, "app/tampered", &tampered, &[(changed, sig)]);

    let img = |repo: &str, extra: &str| {
        image_toml(&format!("docker://{a}/{repo}:v1"), repo, &["v1"], extra)
    };
    // Each refusal: non-zero exit, one line naming the image and the cause, no file.
    for (name, image, want) in [
        (
            "unsigned",
            img("app/unsigned", &policy(&[&k_pub], false)),
            format!("app/unsigned:v1 ({unsigned}): no cosign signature"),
        ),
        (
            "wrong-key",
            img("app/signed", &policy(&[&other_pub], false)),
            "no trusted key verifies".into(),
        ),
        (
            "replayed",
            img("app/replayed", &policy(&[&k_pub], false)),
            format!("over another digest ({signed})"),
        ),
        (
            "tampered",
            img("app/tampered", &policy(&[&k_pub], false)),
            "no trusted key verifies".into(),
        ),
        (
            "platforms",
            img("app/index", &policy(&[&k_pub], true)),
            "platform manifest".into(),
        ),
    ] {
        let (ok, stderr, out) = create(dir, name, &a, &[image]);
        assert!(!ok, "{name}: bundle create succeeded");
        assert!(stderr.contains(&want), "{name}: {stderr}");
        assert!(!out.exists(), "{name}: {} written", out.display());
    }

    // Passing: P-256, Ed25519, an index signed at the top; app/plain has no policy.
    let plain = img("app/unsigned", "");
    let (ok, stderr, bundle) = create(
        dir,
        "good",
        &a,
        &[
            img("app/signed", &policy(&[&other_pub, &k_pub], false)),
            img("app/ed", &policy(&[&ed_pub], false)),
            img("app/index", &policy(&[&k_pub], false)),
            plain,
        ],
    );
    assert!(ok, "{stderr}");
    let inspect = airlock_ok(&["bundle", "inspect", bundle.to_str().unwrap(), "--json"]);
    let sig_tag = format!("sha256-{}.sig", signed.strip_prefix("sha256:").unwrap());
    assert!(inspect.contains(&sig_tag), "{inspect}");

    // The site requires the release key for app/**: app/unsigned refused whole.
    let data = dir.join("site");
    let (ok, stderr, first) = create(dir, "first", &a, &[img("app/ed", "")]);
    assert!(ok, "{stderr}");
    import_bundle(&data, &test_key().1, &first);
    let before = root_of(&data);
    assert!(!before.is_empty());
    let strict = site_config(dir, "strict.toml", &["app/**"], &[&k_pub, &ed_pub]);
    let o = import_with(&data, &strict, &bundle);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(
        stderr.contains(&format!("app/unsigned:v1 ({unsigned})"))
            && stderr.contains("site's signature policy"),
        "{stderr}"
    );
    assert_eq!(root_of(&data), before, "a refused import changed the root");
    // A site that trusts another key refuses app/signed.
    let other = site_config(dir, "other.toml", &["app/signed"], &[&other_pub]);
    let o = import_with(&data, &other, &bundle);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("no trusted key verifies"));
    // Over HTTP the serve config's rules decide the same, 409 REFUSED.
    let keyring = test_key().1;
    let http_site = serve(
        &dir.join("http-site"),
        &[
            "--config",
            strict.to_str().unwrap(),
            "--import-keyring",
            keyring.to_str().unwrap(),
        ],
    );
    let (code, body) = post_import(&http_site.addr, &bundle);
    assert_eq!(
        (code, body["code"].as_str()),
        (409, Some("REFUSED")),
        "{body}"
    );
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("app/unsigned:v1"),
        "{body}"
    );
    drop(http_site);
    // Its own rules: the signed repositories need their keys, the rest is free.
    let site = site_config(
        dir,
        "site.toml",
        &["app/signed", "app/ed", "app/index"],
        &[&k_pub, &ed_pub],
    );
    let o = import_with(&data, &site, &bundle);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));

    // Inside the gap, what cosign verify --key checks, by openssl over
    // what the site serves: the signature tag's manifest byte for byte,
    // its payload, and the signature over it by the release key.
    let server = serve(&data, &[]);
    let served = raw_manifest(&server.addr, &format!("app/signed:{sig_tag}"));
    assert_eq!(served, sig_manifest);
    let m: serde_json::Value = serde_json::from_slice(&served).unwrap();
    let layer = &m["layers"][0];
    let (status, _, body) = http(
        &server.addr,
        "GET",
        &format!("/v2/app/signed/blobs/{}", layer["digest"].as_str().unwrap()),
        &[],
    )
    .unwrap();
    assert_eq!(status, 200);
    assert_eq!(body, p);
    let sig_b64 = dir.join("served.b64");
    std::fs::write(
        &sig_b64,
        layer["annotations"]["dev.cosignproject.cosign/signature"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    let sig_der = dir.join("served.sig");
    let o = Command::new("base64")
        .arg("-d")
        .arg(&sig_b64)
        .output()
        .unwrap();
    std::fs::write(&sig_der, o.stdout).unwrap();
    let served_payload = dir.join("served.json");
    std::fs::write(&served_payload, &body).unwrap();
    let out = openssl(&[
        "dgst",
        "-sha256",
        "-verify",
        k_pub.to_str().unwrap(),
        "-signature",
        sig_der.to_str().unwrap(),
        served_payload.to_str().unwrap(),
    ]);
    assert_eq!(String::from_utf8_lossy(&out).trim(), "Verified OK");
    let named: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        named["critical"]["image"]["docker-manifest-digest"],
        signed.as_str()
    );
}
