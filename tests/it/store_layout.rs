//! The store's layout version (issue 42 §3). A fixture store written by
//! the release that introduced layout 1 is committed as
//! `tests/fixtures/store-layout-1.tar.gz`, with what its writer was told
//! in `store-layout-1.json` (tag digests from the layout's own
//! `index.json`; rootfs hashes by `sha256sum`). Every later build must
//! read it: `fsck --deep` finds nothing, a server answers every tag with
//! its digest, both promotions of the stack with their rootfs, and the
//! promotion's patch rebuilds the new rootfs from the old one with the
//! stock `zstd --patch-from`; the torcx addon, the pull record, the
//! history and a token user (its token pulls under `stacks/` only) are
//! there. A store of a newer layout is refused by `serve`,
//! `import`, `ls`, `fsck` and `gc` with one line naming both versions, and
//! is left byte for byte as it was.
//!
//! `AIRLOCK_WRITE_STORE_FIXTURE=1` makes the reading test write the
//! fixture first: for the release that introduces a layout version only
//! (a new version gets a new fixture; an old one is never rewritten).

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common;

use common::backend::{Backend, Kind};
use common::deltas::umoci_layout;
use common::synth::text;
use common::*;

/// The stack the fixture promotes twice.
const STACK: &str = "fx";
/// The fixture's token user.
const TOKEN_USER: &str = "fx-kpack";

fn fixture(ext: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/fixtures/store-layout-1.{ext}"))
}

/// Two rootfs trees of a few text files, v2 = v1 with one file rewritten.
fn trees(dir: &Path) -> (PathBuf, PathBuf) {
    let (v1, v2) = (dir.join("v1"), dir.join("v2"));
    for (root, changed) in [(&v1, 0u64), (&v2, 77)] {
        std::fs::create_dir_all(root.join("usr/lib")).unwrap();
        std::fs::create_dir_all(root.join("etc")).unwrap();
        std::fs::write(root.join("etc/os-release"), "ID=fixture\nVERSION_ID=1\n").unwrap();
        for f in 0..4u64 {
            let seed = if f == 2 { f + changed } else { f };
            std::fs::write(root.join(format!("usr/lib/lib{f}.so")), text(seed, 24_000)).unwrap();
        }
    }
    (v1, v2)
}

/// `GET path` of the server at `addr`: the body, asserting 200.
fn get(addr: &str, path: &str) -> Vec<u8> {
    let (status, _, body) = http(addr, "GET", path, &[]).unwrap();
    assert_eq!(
        status,
        200,
        "GET {path}: {}",
        String::from_utf8_lossy(&body)
    );
    body
}

/// The stack as `/stacks/v1/fx` shows it.
fn stack(addr: &str) -> serde_json::Value {
    serde_json::from_slice(&get(addr, &format!("/stacks/v1/{STACK}"))).unwrap()
}

/// Downloads promotion `n`'s (0-based) rootfs.tar into `dir`; its path.
fn rootfs(addr: &str, n: usize, dir: &Path) -> PathBuf {
    let manifest = stack(addr)["promotions"][n]["rootfs"][0]["manifest"]
        .as_str()
        .unwrap()
        .to_string();
    let to = dir.join(format!("rootfs-{n}.tar"));
    std::fs::write(
        &to,
        get(
            addr,
            &format!("/stacks/v1/{STACK}/rootfs.tar?digest={manifest}"),
        ),
    )
    .unwrap();
    to
}

/// Builds the fixture site in a fresh filesystem store and writes it (as
/// a tar.gz of the data directory) and what it was told (JSON).
fn write_fixture() {
    require_tool("umoci", "umoci");
    require_tool("skopeo", "skopeo");
    let b = Backend::start(Kind::Fs);
    let dir = b.dir.path().join("work");
    std::fs::create_dir_all(&dir).unwrap();
    let (v1, v2) = trees(&dir);
    let layout = umoci_layout(&dir, &[("v1", &v1), ("v2", &v2)]);
    let mut toml = image_toml(
        &format!("oci:{}:v1", layout.display()),
        "stacks/fx",
        &["v1"],
        "",
    );
    toml.push_str(&image_toml(
        &format!("oci:{}:v2", layout.display()),
        "stacks/fx",
        &["v2"],
        "",
    ));
    toml.push_str(&hello_addon(&dir));
    let config = dir.join("mirror.toml");
    std::fs::write(&config, toml).unwrap();
    let bundle = dir.join("bundle.tar");
    create_bundle(&config, &bundle, &[]);
    b.import(&test_key().1, &bundle);

    let server = b.serve(&["--allow-push", "--pull-record-interval", "1s"]);
    skopeo(&[
        "copy",
        "--dest-tls-verify=false",
        &format!("oci:{}:v1", layout.display()),
        &format!("docker://{}/app/pushed:v1", server.addr),
    ]);
    get(&server.addr, "/v2/app/pushed/manifests/v1");
    let pulls = b.data_dir().join("pulls");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while std::fs::read_dir(&pulls).map_or(0, |d| d.count()) == 0 {
        assert!(std::time::Instant::now() < deadline, "no pull record");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    for (tag, rollout) in [("v1", "100"), ("v2", "10")] {
        b.airlock_ok(
            &["stack", "promote"],
            &[
                STACK,
                "--image",
                &format!("stacks/fx:{tag}"),
                "--rollout",
                rollout,
            ],
        );
    }
    b.airlock_ok(&["stack", "rollout"], &[STACK, "50"]);
    let promotions = stack(&server.addr)["promotions"].clone();
    assert!(
        promotions[1]["rootfs"][0]["patch"]["blob"].is_string(),
        "{promotions}"
    );
    let rootfs_sha256: Vec<String> = (0..2)
        .map(|n| sha256sum(&rootfs(&server.addr, n, &dir)))
        .collect();
    assert!(server.terminate().success());

    // A token user (as `stack kpack --pull-secret` creates for kpack):
    // a reader limited to stacks/, its token kept in the expectations.
    let token = {
        let store = std::sync::Arc::new(airlock::store::fs::FsStore::open(&b.data_dir()).unwrap());
        let state = airlock::state::StateStore::new(store);
        let rt = tokio::runtime::Runtime::new().unwrap();
        let (token, _) = rt
            .block_on(airlock::auth::tokens::create(
                &state,
                TOKEN_USER,
                vec![airlock::auth::Role::Reader],
                vec!["stacks/".into()],
                "the layout 1 fixture's pull credential",
                "fixture@writer",
            ))
            .unwrap();
        token
    };

    let d = |tag| layout_ref_digest(&layout, tag);
    let expect = serde_json::json!({
        "token_user": [TOKEN_USER, token],
        "written_by": format!("airlock {}", env!("CARGO_PKG_VERSION")),
        "tags": [["stacks/fx", "v1", d("v1")], ["stacks/fx", "v2", d("v2")], ["app/pushed", "v1", d("v1")]],
        "promotions": [d("v1"), d("v2")],
        "rootfs_sha256": rootfs_sha256,
        "generations": b.history().len(),
    });
    std::fs::write(
        fixture("json"),
        serde_json::to_string_pretty(&expect).unwrap() + "\n",
    )
    .unwrap();
    run_ok(
        Command::new("tar")
            .args(["--sort=name", "--owner=0", "--group=0", "--numeric-owner"])
            .arg("-czf")
            .arg(fixture("tar.gz"))
            .arg("-C")
            .arg(b.data_dir())
            .arg("."),
    );
}

/// The fixture store extracted into a fresh backend's data directory.
fn extracted() -> Backend {
    let b = Backend::start(Kind::Fs);
    std::fs::create_dir_all(b.data_dir()).unwrap();
    run_ok(
        Command::new("tar")
            .arg("-xzf")
            .arg(fixture("tar.gz"))
            .arg("-C")
            .arg(b.data_dir()),
    );
    b
}

#[test]
fn the_layout_1_fixture_store_reads() {
    if std::env::var_os("AIRLOCK_WRITE_STORE_FIXTURE").is_some() {
        write_fixture();
    }
    require_tool("zstd", "zstd");
    let expect: serde_json::Value =
        serde_json::from_slice(&std::fs::read(fixture("json")).unwrap()).unwrap();
    let b = extracted();
    let marker: serde_json::Value =
        serde_json::from_slice(&std::fs::read(b.data_dir().join("refs/layout")).unwrap()).unwrap();
    assert_eq!(marker["layout"], 1);
    assert_eq!(marker["written_by"], expect["written_by"]);

    b.airlock_ok(&["fsck"], &["--deep"]);
    assert_eq!(
        b.history().len() as u64,
        expect["generations"].as_u64().unwrap()
    );
    let ls: serde_json::Value = serde_json::from_str(&b.airlock_ok(&["ls"], &["--json"])).unwrap();
    assert!(ls["torcx"].to_string().contains("hello"), "{ls}");

    let server = b.serve(&[]);
    let tags: Vec<(String, String, String)> = expect["tags"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            let s = |i: usize| t[i].as_str().unwrap().to_string();
            (s(0), s(1), s(2))
        })
        .collect();
    assert_tags_served(&server.addr, &tags, "layout 1 fixture");
    let promotions = stack(&server.addr)["promotions"].clone();
    let manifests: Vec<&serde_json::Value> = promotions
        .as_array()
        .unwrap()
        .iter()
        .map(|p| &p["rootfs"][0]["manifest"])
        .collect();
    assert_eq!(
        serde_json::json!(manifests),
        expect["promotions"],
        "{promotions}"
    );
    let dir = b.dir.path();
    let tars: Vec<PathBuf> = (0..2).map(|n| rootfs(&server.addr, n, dir)).collect();
    for (tar, want) in tars.iter().zip(expect["rootfs_sha256"].as_array().unwrap()) {
        assert_eq!(sha256sum(tar), want.as_str().unwrap());
    }
    // The promotion's patch, applied by the stock zstd to the old rootfs.
    let patch = dir.join("rootfs.patch");
    let v2 = promotions[1]["rootfs"][0]["manifest"].as_str().unwrap();
    std::fs::write(
        &patch,
        get(
            &server.addr,
            &format!("/stacks/v1/{STACK}/rootfs.patch?digest={v2}"),
        ),
    )
    .unwrap();
    let patched = dir.join("patched.tar");
    run_ok(
        Command::new("zstd")
            .args(["-q", "-d", "--long=31"])
            .arg(format!("--patch-from={}", tars[0].display()))
            .arg(&patch)
            .arg("-o")
            .arg(&patched),
    );
    assert_eq!(sha256sum(&patched), sha256sum(&tars[1]));
    assert!(server.terminate().success());

    // The token user: with users configured (no anonymous reads), its
    // token pulls under stacks/ and nothing else; a wrong token is refused.
    let config = dir.join("users.toml");
    std::fs::write(
        &config,
        format!(
            "[[user]]\nname = \"ops\"\npassword_hash = {:?}\nroles = [\"admin\"]\n",
            airlock::auth::password::hash("ops pw").unwrap()
        ),
    )
    .unwrap();
    // /v2/ answers 401 without credentials: wait for the listener only.
    let addr = format!("127.0.0.1:{}", free_port());
    let child = b
        .command(
            &["serve"],
            &["--listen", &addr, "--config", config.to_str().unwrap()],
        )
        .spawn()
        .unwrap();
    let server = adopt_server(child, &addr, &b.data_dir(), true);
    let user = expect["token_user"][0].as_str().unwrap();
    let token = expect["token_user"][1].as_str().unwrap();
    let basic = |secret: &str| {
        use base64::Engine as _;
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(format!("{user}:{secret}"))
        )
    };
    let status = |path: &str, secret: &str| {
        let auth = basic(secret);
        http(
            &server.addr,
            "GET",
            path,
            &[("authorization", auth.as_str())],
        )
        .unwrap()
        .0
    };
    assert_eq!(status("/v2/stacks/fx/manifests/v1", token), 200);
    assert_eq!(status("/v2/app/pushed/manifests/v1", token), 403);
    assert_eq!(status("/v2/stacks/fx/manifests/v1", "not-the-token"), 401);
    let listed = b.airlock_ok(&["user", "list"], &["--json"]);
    assert!(
        listed.contains(user) && listed.contains("\"token\""),
        "{listed}"
    );
    assert!(server.terminate().success());

    let store = airlock::store::fs::FsStore::open(&b.data_dir()).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let record = rt
        .block_on(airlock::state::pulls::load(&store))
        .expect("the pull record reads");
    assert!(format!("{record:?}").contains("app/pushed"), "{record:?}");
}

/// Every file under `dir` with its bytes, and every directory (empty or
/// not: a command that made `tmp/` changed the store).
fn snapshot(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out: Vec<(String, Vec<u8>)> = synth::files(dir)
        .into_iter()
        .map(|f| {
            let bytes = std::fs::read(dir.join(&f)).unwrap();
            (f, bytes)
        })
        .collect();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            if e.file_type().unwrap().is_dir() {
                out.push((
                    format!("{}/", e.path().strip_prefix(dir).unwrap().display()),
                    vec![],
                ));
                stack.push(e.path());
            }
        }
    }
    out.sort();
    out
}

/// Issue 61 §7: a store a newer release wrote (its marker's check holds)
/// is refused by every command that opens it, with one line naming both
/// versions, and left byte for byte as it was: not even `tmp/` is made.
#[test]
fn a_store_of_a_newer_layout_is_refused_unchanged() {
    let b = extracted();
    let mut marker = airlock::store::layout::LayoutMarker {
        layout: 2,
        written_by: "airlock 9.9.9".into(),
        check: None,
    };
    marker.check = Some(marker.sum());
    std::fs::write(
        b.data_dir().join("refs/layout"),
        format!("{}\n", serde_json::to_string(&marker).unwrap()),
    )
    .unwrap();
    let _ = std::fs::remove_dir_all(b.data_dir().join("tmp"));
    let before = snapshot(&b.data_dir());
    let (bundle, _) = synth::bundle(b.dir.path(), "later", 1, 42);
    let keyring = test_key().1;
    let out = b.dir.path().join("later-out");
    let backup_dir = b.dir.path().join("later-backup");
    let (keyring, bundle) = (keyring.to_str().unwrap(), bundle.to_str().unwrap());
    let (out, backup_dir) = (out.to_str().unwrap(), backup_dir.to_str().unwrap());
    let cases: Vec<(&[&str], Vec<&str>)> = vec![
        (&["serve"], vec!["--listen", "127.0.0.1:0"]),
        (&["import"], vec!["--keyring", keyring, bundle]),
        (&["ls"], vec![]),
        (&["inventory"], vec!["-o", out]),
        (&["history"], vec![]),
        (&["status"], vec![]),
        (&["events"], vec![]),
        (&["stack", "list"], vec![]),
        (
            &["stack", "promote"],
            vec!["bb", "--image", "app/img-00:latest"],
        ),
        (&["vulns"], vec!["app/img-00:latest"]),
        (&["gc"], vec![]),
        (&["fsck"], vec![]),
        (&["fsck"], vec!["--repair"]),
        (&["scrub"], vec![]),
        (&["rollback"], vec!["--to", "1", "--reason", "x"]),
        (&["backup"], vec![backup_dir]),
        (&["lock"], vec!["--holder", "x"]),
        (&["unlock"], vec!["--holder", "x"]),
        (&["user", "list"], vec![]),
    ];
    for (cmd, args) in cases {
        let o = b.airlock(cmd, &args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{cmd:?} ran: {err}");
        let line = err.lines().last().unwrap_or_default();
        assert!(
            line.contains("has layout version 2 (written by airlock 9.9.9)")
                && line.contains(&format!(
                    "this airlock {} reads layout versions 1 to 1",
                    env!("CARGO_PKG_VERSION")
                )),
            "{cmd:?}: {err}"
        );
        assert!(
            snapshot(&b.data_dir()) == before,
            "{cmd:?} changed the store"
        );
    }
}
