//! What an import may change (issue 24 §1): every import lists the tags it
//! creates, moves and leaves unchanged; a stale, validly signed bundle
//! (created before the one that set a tag) is refused as a whole unless the
//! admin allows the downgrade with a reason, recorded in history;
//! `--dry-run` verifies and plans without committing; immutable tags are
//! never moved; a bundle past its `expires` is refused unless the admin
//! allows it, and a site says when its newest bundle is older than
//! `max_staleness` (issue 41 §3). Bundles are made by `airlock bundle
//! create` from generated layouts; digests come from the layouts' own
//! index (`jq`); times are checked with coreutils' `date`.

use crate::common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{
    airlock, airlock_ok, create_bundle, layout_ref_digest, root_of, synth, test_key, write_config,
};

const REPO: &str = "stacks/bookworm";

/// A bundle of one generated image as `stacks/bookworm:2026.12` and
/// `:latest`; returns the bundle and the image's manifest digest.
fn bundle(dir: &Path, name: &str, seed: u32, tags: &[&str]) -> (PathBuf, String) {
    let (layout, refs) = synth::layout(dir, name, 1, seed);
    let cfg_dir = dir.join(format!("{name}-cfg"));
    std::fs::create_dir_all(&cfg_dir).unwrap();
    let config = write_config(&cfg_dir, &layout, &[(refs[0].as_str(), REPO, tags)]);
    let out = dir.join(format!("{name}.tar"));
    create_bundle(&config, &out, &[]);
    (out, layout_ref_digest(&layout, &refs[0]))
}

fn import(data: &Path, bundle: &Path, extra: &[&str]) -> std::process::Output {
    let (_, keyring) = test_key();
    let mut args = vec![
        "import",
        "--data",
        data.to_str().unwrap(),
        "--keyring",
        keyring.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    args.push(bundle.to_str().unwrap());
    airlock(&args)
}

/// [`import`], which must succeed.
fn import_ok(data: &Path, bundle: &Path, extra: &[&str]) {
    let out = import(data, bundle, extra);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `airlock history --json` of `data`, newest first.
fn history(data: &Path) -> serde_json::Value {
    serde_json::from_str(&airlock_ok(&[
        "history",
        "--data",
        data.to_str().unwrap(),
        "--json",
    ]))
    .unwrap()
}

/// The digest `stacks/bookworm:TAG` points at in `data` (read in process).
fn tag_digest(data: &Path, tag: &str) -> String {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let store = std::sync::Arc::new(airlock::store::fs::FsStore::open(data).unwrap());
        let state = airlock::state::StateStore::new(store);
        let snap = state.snapshot().await.unwrap();
        let repo = state
            .repository(&snap, &REPO.parse().unwrap())
            .await
            .unwrap()
            .unwrap();
        repo.tag(&tag.parse().unwrap())
            .await
            .unwrap()
            .map(|d| d.to_string())
            .unwrap_or_default()
    })
}

#[test]
fn a_stale_bundle_never_moves_tags_back_without_the_admin() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let tags: &[&str] = &["2026.12", "latest"];
    let (old, old_digest) = bundle(dir.path(), "old", 31, tags);
    // Bundle creation times are whole seconds.
    std::thread::sleep(Duration::from_millis(1100));
    let (new, new_digest) = bundle(dir.path(), "new", 32, tags);

    // The newer bundle first: both tags created, listed.
    let out = import(&data, &new, &["--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let actions: Vec<(String, String)> = report["tags"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["tag"].as_str().unwrap().into(),
                t["action"].as_str().unwrap().into(),
            )
        })
        .collect();
    assert_eq!(
        actions,
        [
            ("2026.12".into(), "created".into()),
            ("latest".into(), "created".into())
        ]
    );
    let root = root_of(&data);
    let blobs = synth::blob_files(&data);

    // The stale one: refused as a whole, naming both bundles.
    let out = import(&data, &old, &[]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    let new_id = report["id"].as_str().unwrap();
    assert!(err.contains("downgrade refused"), "{err}");
    assert!(err.contains(&format!("set by bundle {new_id}")), "{err}");
    assert!(
        err.contains("stacks/bookworm:2026.12") && err.contains("stacks/bookworm:latest"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
    assert_eq!(root_of(&data), root, "nothing committed");
    assert_eq!(
        synth::blob_files(&data),
        blobs,
        "what the refused import wrote is gone"
    );
    assert_eq!(tag_digest(&data, "2026.12"), new_digest);

    // A dry run shows the plan, commits and keeps nothing.
    let out = airlock_ok(&[
        "import",
        "--data",
        data.to_str().unwrap(),
        "--keyring",
        test_key().1.to_str().unwrap(),
        "--dry-run",
        old.to_str().unwrap(),
    ]);
    let moved = format!(
        "moved {REPO}:latest {} -> {} (downgrade: set by bundle {new_id}",
        &new_digest[7..19],
        &old_digest[7..19]
    );
    assert!(out.contains(&moved), "{out}");
    assert!(out.contains("nothing committed"), "{out}");
    assert_eq!(root_of(&data), root);
    assert_eq!(synth::blob_files(&data), blobs);

    // The admin's override, with the reason in history.
    import_ok(
        &data,
        &old,
        &["--allow-downgrade", "--reason", "regression in 2026.12"],
    );
    assert_eq!(tag_digest(&data, "latest"), old_digest);
    let history = history(&data);
    let last = &history[0];
    assert!(
        last["reason"]
            .as_str()
            .unwrap()
            .ends_with("(downgrade allowed: regression in 2026.12)"),
        "{last}"
    );
    let changes = last["changes"]["tags"].as_array().unwrap();
    assert_eq!(changes.len(), 2, "{last}");
    // The site's newest bundle is still the newer one: an older bundle
    // imported later does not make the site look fresh.
    let status: serde_json::Value = serde_json::from_str(&airlock_ok(&[
        "status",
        "--data",
        data.to_str().unwrap(),
        "--json",
    ]))
    .unwrap();
    assert_eq!(status["newest_bundle"]["bundle"], new_id, "{status}");
    assert_eq!(changes[0]["old"], new_digest.as_str());
    assert_eq!(changes[0]["new"], old_digest.as_str());
    // Re-importing it changes nothing, says so, and writes nothing (no
    // event queued either: issue 23 §5).
    let files = synth::files(&data);
    let out = import(&data, &old, &[]);
    assert!(out.status.success());
    assert_eq!(synth::files(&data), files, "a no-op import wrote something");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains(&format!("unchanged {REPO}:latest")), "{text}");
    assert!(text.contains("(no change)"), "{text}");
    // The newer bundle may move them forward again.
    import_ok(&data, &new, &[]);
    assert_eq!(tag_digest(&data, "latest"), new_digest);
}

#[test]
fn immutable_tags_are_never_moved_by_an_import() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let (first, first_digest) = bundle(dir.path(), "first", 41, &["2026.11"]);
    let (second, _) = bundle(dir.path(), "second", 42, &["2026.11"]);
    let cfg = dir.path().join("airlock.toml");
    std::fs::write(
        &cfg,
        "[registry]\nimmutable_tags = [\"stacks/**:2026.*\"]\n",
    )
    .unwrap();
    let c = cfg.to_str().unwrap();
    import_ok(&data, &first, &["--config", c]);
    let root = root_of(&data);
    let out = import(&data, &second, &["--config", c]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("immutable tags"), "{err}");
    assert!(err.contains("stacks/bookworm:2026.11"), "{err}");
    assert_eq!(root_of(&data), root);
    assert_eq!(tag_digest(&data, "2026.11"), first_digest);
}

/// Unix seconds of an RFC 3339 time, by coreutils' `date`.
fn unix_secs(rfc3339: &str) -> i64 {
    let o = std::process::Command::new("date")
        .args(["-u", "-d", rfc3339, "+%s"])
        .output()
        .unwrap();
    assert!(o.status.success(), "date -d {rfc3339}");
    String::from_utf8_lossy(&o.stdout).trim().parse().unwrap()
}

/// The signed document of a bundle, as `bundle inspect --json` prints it.
fn inspect(bundle: &Path) -> serde_json::Value {
    serde_json::from_str(&airlock_ok(&[
        "bundle",
        "inspect",
        "--json",
        bundle.to_str().unwrap(),
    ]))
    .unwrap()
}

#[test]
fn an_expired_bundle_is_refused_unless_the_admin_allows_it() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    // The default: 30 days after creation.
    let (plain, _) = bundle(dir.path(), "plain", 41, &["a"]);
    let doc = inspect(&plain);
    let created = unix_secs(doc["created"].as_str().unwrap());
    let expires = unix_secs(doc["expires"].as_str().unwrap());
    assert_eq!(expires - created, 30 * 86_400, "{doc}");

    // `--expires-in 2s`: importable for two seconds.
    let (layout, refs) = synth::layout(dir.path(), "short", 1, 42);
    let config = write_config(dir.path(), &layout, &[(refs[0].as_str(), REPO, &["short"])]);
    let short = dir.path().join("short.tar");
    create_bundle(&config, &short, &["--expires-in", "2s"]);
    let doc = inspect(&short);
    let at = doc["expires"].as_str().unwrap().to_string();
    assert_eq!(
        unix_secs(&at) - unix_secs(doc["created"].as_str().unwrap()),
        2
    );
    for bad in ["0s", "soon"] {
        let out = airlock(&[
            "bundle",
            "create",
            "--config",
            config.to_str().unwrap(),
            "--sign-key",
            test_key().0.to_str().unwrap(),
            "--out",
            dir.path().join("never.tar").to_str().unwrap(),
            "--expires-in",
            bad,
        ]);
        assert!(!out.status.success(), "--expires-in {bad}");
        assert!(String::from_utf8_lossy(&out.stderr).contains("--expires-in"));
    }
    assert!(!dir.path().join("never.tar").exists());
    std::thread::sleep(Duration::from_secs(3));

    // Past it: refused as a whole, one line naming the bundle and the time.
    assert!(import(&data, &plain, &[]).status.success());
    let root = root_of(&data);
    let blobs = synth::blob_files(&data);
    let out = import(&data, &short, &[]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    let id = doc["id"].as_str().unwrap();
    assert!(
        err.contains(&format!("bundle {id} expired at {at}")),
        "{err}"
    );
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert_eq!(root_of(&data), root, "nothing committed");
    assert_eq!(synth::blob_files(&data), blobs, "no blob written");
    // `bundle verify` still checks it, and says it expired.
    let out = airlock_ok(&[
        "bundle",
        "verify",
        "--keyring",
        test_key().1.to_str().unwrap(),
        short.to_str().unwrap(),
    ]);
    assert!(out.contains(&format!("expires {at} (expired)")), "{out}");
    // Over HTTP: 409 REFUSED with the same cause, nothing committed.
    let keyring = test_key().1;
    let server = common::serve(&data, &["--import-keyring", keyring.to_str().unwrap()]);
    let (code, body) = common::post_import(&server.addr, &short);
    assert_eq!(
        (code, body["code"].as_str()),
        (409, Some("REFUSED")),
        "{body}"
    );
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains(&format!("expired at {at}")),
        "{body}"
    );
    drop(server);
    assert_eq!(root_of(&data), root, "nothing committed");
    // The override needs a reason, and is recorded.
    let out = import(&data, &short, &["--allow-expired"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--reason"));
    import_ok(
        &data,
        &short,
        &["--allow-expired", "--reason", "media held at the gate"],
    );
    assert_eq!(
        history(&data)[0]["reason"],
        format!("import bundle {id} (expired at {at}, allowed: media held at the gate)")
    );
}

#[test]
fn a_site_says_when_its_newest_bundle_is_stale() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let (b, _) = bundle(dir.path(), "b", 51, &["v1"]);
    let doc = inspect(&b);
    let id = doc["id"].as_str().unwrap();
    let created = doc["created"].as_str().unwrap();
    let status = |max: &str| {
        airlock(&[
            "status",
            "--data",
            data.to_str().unwrap(),
            "--max-staleness",
            max,
        ])
    };
    // Nothing imported yet: stale by definition.
    std::fs::create_dir_all(&data).unwrap();
    let out = status("1d");
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("stale: no bundle imported yet"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(import(&data, &b, &[]).status.success());
    let out = status("1d");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(&format!("newest bundle  {id}: created {created}")),
        "{text}"
    );
    assert!(text.contains("fresh (max_staleness 86400s)"), "{text}");
    std::thread::sleep(Duration::from_secs(3));
    let out = status("2s");
    assert_eq!(out.status.code(), Some(1));
    let line = format!("stale: the newest bundle imported ({id}, created {created}");
    assert!(String::from_utf8_lossy(&out.stderr).contains(&line));

    // The server: /readyz stays 200 and says it; /metrics has the time.
    let server = common::serve(&data, &["--import-max-staleness", "2s"]);
    let (code, _, body) = common::http(&server.addr, "GET", "/readyz", &[]).unwrap();
    let body = String::from_utf8_lossy(&body);
    assert_eq!(code, 200, "{body}");
    assert!(body.starts_with("ok\n") && body.contains(&line), "{body}");
    let (code, _, body) = common::http(&server.addr, "GET", "/metrics", &[]).unwrap();
    assert_eq!(code, 200);
    let body = String::from_utf8_lossy(&body);
    let want = format!(
        "airlock_newest_bundle_created_seconds {}",
        unix_secs(created)
    );
    assert!(body.lines().any(|l| l == want), "no {want:?} in /metrics");
    drop(server);
    // Without max_staleness, /readyz is the plain `ok`.
    let server = common::serve(&data, &[]);
    let (code, _, body) = common::http(&server.addr, "GET", "/readyz", &[]).unwrap();
    assert_eq!((code, body.as_slice()), (200, b"ok".as_slice()));
}
