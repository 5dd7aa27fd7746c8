//! The site's trust document (issue 41 §3): scopes, thresholds and
//! rotation. Keys are made by `airlock keys generate`, the document
//! assembled from `airlock keys inspect --json`, signed and co-signed by
//! `airlock keys sign`/`cosign`; gpg checks every signature of a
//! multi-signed document; bundles come from `airlock bundle create` of
//! generated layouts, digests from the layouts' own index.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{
    airlock, airlock_ok, keypair, layout_ref_digest, root_of, run_ok, synth, write_config,
};

/// `airlock keys inspect --json` of each public key, merged: the `keys`
/// object of a trust document; and each key's fingerprint.
fn key_objects(pubs: &[&Path]) -> (serde_json::Map<String, serde_json::Value>, Vec<String>) {
    let mut map = serde_json::Map::new();
    let mut fprs = Vec::new();
    for p in pubs {
        let one: serde_json::Map<String, serde_json::Value> = serde_json::from_str(&airlock_ok(&[
            "keys",
            "inspect",
            "--json",
            p.to_str().unwrap(),
        ]))
        .unwrap();
        assert_eq!(one.len(), 1, "{one:?}");
        fprs.extend(one.keys().cloned());
        map.extend(one);
    }
    (map, fprs)
}

/// A bundle of one generated image as `repo:tag`, signed by `keys`;
/// returns it and the image's manifest digest.
fn bundle(
    dir: &Path,
    name: &str,
    seed: u32,
    repo: &str,
    tag: &str,
    keys: &[&Path],
) -> (PathBuf, String) {
    let (layout, refs) = synth::layout(dir, name, 1, seed);
    let cfg_dir = dir.join(format!("{name}-cfg"));
    std::fs::create_dir_all(&cfg_dir).unwrap();
    let config = write_config(&cfg_dir, &layout, &[(refs[0].as_str(), repo, &[tag])]);
    let out = dir.join(format!("{name}.tar"));
    let mut args = vec![
        "bundle".to_string(),
        "create".into(),
        "--config".into(),
        config.display().to_string(),
        "-o".into(),
        out.display().to_string(),
    ];
    for k in keys {
        args.extend(["--sign-key".into(), k.display().to_string()]);
    }
    airlock_ok(&args.iter().map(String::as_str).collect::<Vec<_>>());
    (out, layout_ref_digest(&layout, &refs[0]))
}

/// `airlock import --data DATA FILE` with no keyring: the site's trust
/// document decides.
fn import(data: &Path, file: &Path) -> std::process::Output {
    airlock(&[
        "import",
        "--data",
        data.to_str().unwrap(),
        "--json",
        file.to_str().unwrap(),
    ])
}

fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The digest `repo:tag` points at in `data` (read in process), if any.
fn tag_digest(data: &Path, repo: &str, tag: &str) -> Option<String> {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let store = std::sync::Arc::new(airlock::store::fs::FsStore::open(data).unwrap());
        let state = airlock::state::StateStore::new(store);
        let snap = state.snapshot().await.unwrap();
        let repo = state
            .repository(&snap, &repo.parse().unwrap())
            .await
            .unwrap()?;
        repo.tag(&tag.parse().unwrap())
            .await
            .unwrap()
            .map(|d| d.to_string())
    })
}

/// gpg's GOODSIG lines for `file`, checked against `pubs` in a fresh home.
fn gpg_good_signatures(dir: &Path, file: &Path, pubs: &[&Path]) -> usize {
    let home = tempfile::tempdir_in(dir).unwrap();
    for p in pubs {
        run_ok(
            Command::new("gpg")
                .args(["--batch", "--homedir"])
                .arg(home.path())
                .arg("--import")
                .arg(p),
        );
    }
    let o = Command::new("gpg")
        .args(["--batch", "--status-fd", "1", "--homedir"])
        .arg(home.path())
        .arg("--verify")
        .arg(file)
        .output()
        .expect("gpg (apt-get install gnupg)");
    assert!(o.status.success(), "gpg --verify: {}", stderr(&o));
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter(|l| l.starts_with("[GNUPG:] GOODSIG"))
        .count()
}

#[test]
fn a_trust_document_scopes_thresholds_and_rotation() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let data = dir.join("data");
    let names = ["root0", "root1", "root2", "apps", "rel-a", "rel-b", "apps2"];
    let pairs: Vec<(PathBuf, PathBuf)> = names.iter().map(|n| keypair(dir, n)).collect();
    let (sec, public): (Vec<&Path>, Vec<&Path>) = pairs
        .iter()
        .map(|(s, p)| (s.as_path(), p.as_path()))
        .unzip();
    let (keys, fpr) = key_objects(&public);
    let (root0, root1, root2, apps, rel_a, rel_b, apps2) =
        (sec[0], sec[1], sec[2], sec[3], sec[4], sec[5], sec[6]);

    // Version 1: root 2 of 3; apps may sign apps/**; stacks/** needs both release keys.
    let write_doc = |version: u64, apps_fpr: &str, path: &Path| {
        let mut ks = keys.clone();
        ks.retain(|k, _| fpr[..3].contains(k) || fpr[4..6].contains(k) || k == apps_fpr);
        let doc = serde_json::json!({
            "format": "airlock-trust/v1",
            "version": version,
            "keys": ks,
            "root": {"keys": &fpr[..3], "threshold": 2},
            "roles": [
                {"name": "apps", "keys": [apps_fpr], "threshold": 1, "repositories": ["apps/**"]},
                {"name": "release", "keys": &fpr[4..6], "threshold": 2,
                 "repositories": ["stacks/**"], "stacks": ["*"]}
            ]
        });
        std::fs::write(path, serde_json::to_string_pretty(&doc).unwrap()).unwrap();
    };
    let v1_json = dir.join("trust-v1.json");
    let v1 = dir.join("trust-v1.json.asc");
    write_doc(1, &fpr[3], &v1_json);
    airlock_ok(&[
        "keys",
        "sign",
        "--key",
        root0.to_str().unwrap(),
        v1_json.to_str().unwrap(),
        "-o",
        v1.to_str().unwrap(),
    ]);

    // One root signature of the two needed: refused, nothing committed.
    let o = import(&data, &v1);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("needs 2 signatures of its own root keys")
            && stderr(&o).contains("it has 1"),
        "{}",
        stderr(&o)
    );
    assert_eq!(root_of(&data), "", "nothing committed");
    airlock_ok(&[
        "keys",
        "cosign",
        "--key",
        root1.to_str().unwrap(),
        v1.to_str().unwrap(),
        "-o",
        v1.to_str().unwrap(),
    ]);
    assert_eq!(
        gpg_good_signatures(dir, &v1, &public[..3]),
        2,
        "gpg sees both"
    );
    let o = import(&data, &v1);
    assert!(o.status.success(), "{}", stderr(&o));
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(r["trust_version"], 1);
    assert_eq!(r["signers"], serde_json::json!(&fpr[..2]));

    // In scope: the apps key brings in apps/web, no keyring given.
    let (web1, web1_digest) = bundle(dir, "web1", 1, "apps/web", "v1", &[apps]);
    let o = import(&data, &web1);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        tag_digest(&data, "apps/web", "v1"),
        Some(web1_digest.clone())
    );

    // Out of scope: refused whole, naming the entry; nothing committed.
    let root = root_of(&data);
    let (other, _) = bundle(dir, "other", 2, "other/x", "v1", &[apps]);
    let o = import(&data, &other);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("touches repository other/x, which no role of the site's trust document (version 1) covers"),
        "{}",
        stderr(&o)
    );
    let (bb_one, bb1_digest) = bundle(dir, "bb1", 3, "stacks/bb", "v1", &[rel_a]);
    let o = import(&data, &bb_one);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("touches repository stacks/bb: role release needs 2 of"),
        "{}",
        stderr(&o)
    );
    assert_eq!(root_of(&data), root, "nothing committed");
    // `bundle verify --trust` says the same before the media travels.
    let o = airlock(&[
        "bundle",
        "verify",
        "--trust",
        v1.to_str().unwrap(),
        bb_one.to_str().unwrap(),
    ]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("role release needs 2"),
        "{}",
        stderr(&o)
    );

    // The second release engineer co-signs the same bundle: gpg sees both
    // signatures on its document; the site lets it in.
    let bb_cosigned = dir.join("bb1-cosigned.tar");
    airlock_ok(&[
        "bundle",
        "cosign",
        "--sign-key",
        rel_b.to_str().unwrap(),
        bb_one.to_str().unwrap(),
        "-o",
        bb_cosigned.to_str().unwrap(),
    ]);
    let signed_doc = |tar: &Path| {
        let at = dir.join("extract");
        let _ = std::fs::remove_dir_all(&at);
        std::fs::create_dir_all(&at).unwrap();
        run_ok(
            Command::new("tar")
                .args(["-xf"])
                .arg(tar)
                .arg("-C")
                .arg(&at)
                .arg("airlock-bundle.json.asc"),
        );
        at.join("airlock-bundle.json.asc")
    };
    assert_eq!(
        gpg_good_signatures(dir, &signed_doc(&bb_cosigned), &public[4..6]),
        2
    );
    airlock_ok(&[
        "bundle",
        "verify",
        "--trust",
        v1.to_str().unwrap(),
        bb_cosigned.to_str().unwrap(),
    ]);
    let o = import(&data, &bb_cosigned);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(tag_digest(&data, "stacks/bb", "v1"), Some(bb1_digest));

    // Both keys at create: one document with two signatures.
    let (bb_two, bb_digest) = bundle(dir, "bb2", 4, "stacks/bb", "v2", &[rel_a, rel_b]);
    assert_eq!(
        gpg_good_signatures(dir, &signed_doc(&bb_two), &public[4..6]),
        2
    );
    let o = import(&data, &bb_two);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(tag_digest(&data, "stacks/bb", "v2"), Some(bb_digest));

    // Over HTTP, with no [import] keyring: the trust document decides too.
    let server = common::serve(&data, &[]);
    let (code, body) = common::post_import(&server.addr, &other);
    assert_eq!(
        (code, body["code"].as_str()),
        (409, Some("REFUSED")),
        "{body}"
    );
    assert!(
        body["message"].as_str().unwrap().contains("other/x"),
        "{body}"
    );
    drop(server);

    // Rotation: version 2 replaces the apps key with apps2. Signed by one
    // current root key: refused; co-signed by a second: installed.
    let v2_json = dir.join("trust-v2.json");
    let v2 = dir.join("trust-v2.json.asc");
    write_doc(2, &fpr[6], &v2_json);
    airlock_ok(&[
        "keys",
        "sign",
        "--key",
        root2.to_str().unwrap(),
        v2_json.to_str().unwrap(),
        "-o",
        v2.to_str().unwrap(),
    ]);
    let o = import(&data, &v2);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("needs 2 signatures"), "{}", stderr(&o));
    airlock_ok(&[
        "keys",
        "cosign",
        "--key",
        root0.to_str().unwrap(),
        v2.to_str().unwrap(),
        "-o",
        v2.to_str().unwrap(),
    ]);
    let o = import(&data, &v2);
    assert!(o.status.success(), "{}", stderr(&o));
    // Replaying version 1 is refused.
    let o = import(&data, &v1);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("does not follow the site's version 2"),
        "{}",
        stderr(&o)
    );

    // The removed key signs nothing now; its earlier import stays.
    let (web2, _) = bundle(dir, "web2", 5, "apps/web", "v2", &[apps]);
    let o = import(&data, &web2);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("not in the trusted keyring"),
        "{}",
        stderr(&o)
    );
    let (web2b, web2_digest) = bundle(dir, "web2b", 6, "apps/web", "v2", &[apps2]);
    let o = import(&data, &web2b);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(tag_digest(&data, "apps/web", "v1"), Some(web1_digest));
    assert_eq!(tag_digest(&data, "apps/web", "v2"), Some(web2_digest));

    // History says which document came when, and who signed it.
    let history: serde_json::Value = serde_json::from_str(&airlock_ok(&[
        "history",
        "--data",
        data.to_str().unwrap(),
        "--json",
    ]))
    .unwrap();
    let reasons: Vec<&str> = history
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|g| g["reason"].as_str())
        .filter(|r| r.starts_with("trust document"))
        .collect();
    let short = |f: &str| f[f.len() - 16..].to_string();
    assert_eq!(
        reasons,
        vec![
            format!(
                "trust document version 2 (signed by {}, {})",
                short(&fpr[2]),
                short(&fpr[0])
            ),
            format!(
                "trust document version 1 (signed by {}, {})",
                short(&fpr[0]),
                short(&fpr[1])
            ),
        ]
    );
    // `keys inspect` reads the installed document's signatures back.
    let shown = airlock_ok(&["keys", "inspect", v2.to_str().unwrap()]);
    assert!(shown.contains("trust document version 2"), "{shown}");
    assert!(
        shown.contains("2 signed this document: threshold met"),
        "{shown}"
    );
}

/// `POST /admin/v1/trust` installs and rotates the document as `airlock
/// import` does (same checks, same refusals), `GET` shows the one in force.
#[test]
fn a_trust_document_is_installed_over_http() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let data = dir.join("data");
    let pairs: Vec<(PathBuf, PathBuf)> =
        ["r0", "r1", "r2"].iter().map(|n| keypair(dir, n)).collect();
    let public: Vec<&Path> = pairs.iter().map(|(_, p)| p.as_path()).collect();
    let (keys, fpr) = key_objects(&public);
    let doc_json = dir.join("trust.json");
    std::fs::write(
        &doc_json,
        serde_json::to_string_pretty(&serde_json::json!({
            "format": "airlock-trust/v1", "version": 1, "keys": keys,
            "root": {"keys": &fpr, "threshold": 2},
            "roles": [{"name": "apps", "keys": [&fpr[2]], "threshold": 1, "repositories": ["apps/**"]}]
        }))
        .unwrap(),
    )
    .unwrap();
    let signed = dir.join("trust.json.asc");
    let sign = |verb: &str, key: &Path, input: &Path| {
        airlock_ok(&[
            "keys",
            verb,
            "--key",
            key.to_str().unwrap(),
            input.to_str().unwrap(),
            "-o",
            signed.to_str().unwrap(),
        ]);
    };
    sign("sign", &pairs[0].0, &doc_json);
    let ui = dir.join("ui.toml");
    std::fs::write(&ui, "[ui]\nenabled = true\n").unwrap();
    let server = common::serve(&data, &["--config", ui.to_str().unwrap()]);
    let post = |q: &str, body: &[u8]| {
        let (code, _, body) = common::http_body(
            &server.addr,
            "POST",
            &format!("/admin/v1/trust{q}"),
            &[],
            body,
        )
        .unwrap();
        (
            code,
            serde_json::from_slice::<serde_json::Value>(&body).unwrap(),
        )
    };
    let get = || {
        let (code, _, body) = common::http(&server.addr, "GET", "/admin/v1/trust", &[]).unwrap();
        assert_eq!(code, 200);
        serde_json::from_slice::<serde_json::Value>(&body).unwrap()
    };
    assert_eq!(get()["version"], serde_json::Value::Null);
    let status = || airlock_ok(&["status", "--data", data.to_str().unwrap()]);
    assert!(
        status().contains("trust          no trust document: the import keyring decides"),
        "{}",
        status()
    );
    let before = root_of(&data);

    // One root signature of the two needed: 409, nothing committed.
    let (code, r) = post("", &std::fs::read(&signed).unwrap());
    assert_eq!((code, r["code"].as_str()), (409, Some("REFUSED")), "{r}");
    assert!(
        r["message"]
            .as_str()
            .unwrap()
            .contains("needs 2 signatures"),
        "{r}"
    );
    // Not a trust document: 400.
    let (code, r) = post("", b"hello");
    assert_eq!(
        (code, r["code"].as_str()),
        (400, Some("TRUST_INVALID")),
        "{r}"
    );
    assert_eq!(root_of(&data), before, "a refusal committed");

    // Co-signed: a dry run checks and changes nothing; then it is installed.
    sign("cosign", &pairs[1].0, &signed);
    let text = std::fs::read(&signed).unwrap();
    let (code, r) = post("?dry_run=true", &text);
    assert_eq!(code, 200, "{r}");
    assert_eq!(
        (r["dry_run"].as_bool(), r["trust_version"].as_u64()),
        (Some(true), Some(1))
    );
    assert_eq!(root_of(&data), before, "a dry run committed");
    let (code, r) = post("", &text);
    assert_eq!(code, 200, "{r}");
    assert_eq!(r["trust_version"], 1);
    assert_eq!(r["previous"], serde_json::Value::Null);
    assert_eq!(r["signers"], serde_json::json!(&fpr[..2]));
    let shown = get();
    assert_eq!(shown["version"], 1);
    assert_eq!(shown["root"]["threshold"], 2);
    assert_eq!(shown["roles"][0]["name"], "apps");
    assert_eq!(shown["armored"].as_str().unwrap().as_bytes(), &text[..]);
    // `airlock status` and the console's overview say which one is in force.
    let line = "version 1 (root 2 of 3, 1 roles, 3 keys)";
    assert!(
        status().contains(&format!("trust          document {line}")),
        "{}",
        status()
    );
    let (code, _, body) = common::http(&server.addr, "GET", "/api/v1/overview", &[]).unwrap();
    assert_eq!(code, 200);
    let overview: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(overview["trust"], line);
    let (code, _, page) = common::http(&server.addr, "GET", "/ui/", &[]).unwrap();
    assert_eq!(code, 200);
    assert!(
        String::from_utf8_lossy(&page).contains(&format!("trust document {line}")),
        "the overview page does not show the trust document"
    );
    // The same version again does not move forward: 409.
    let (code, r) = post("", &text);
    assert_eq!((code, r["code"].as_str()), (409, Some("REFUSED")), "{r}");
    // History records it as `airlock import` does.
    let history = airlock_ok(&["history", "--data", data.to_str().unwrap()]);
    assert!(history.contains("trust document version 1"), "{history}");
}
