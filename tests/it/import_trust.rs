//! What an import may change (issue 24 §1): every import lists the tags it
//! creates, moves and leaves unchanged; a stale, validly signed bundle
//! (created before the one that set a tag) is refused as a whole unless the
//! admin allows the downgrade with a reason, recorded in history;
//! `--dry-run` verifies and plans without committing; immutable tags are
//! never moved. Bundles are made by `airlock bundle create` from generated
//! layouts; digests come from the layouts' own index (`jq`).

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
    let out = import(
        &data,
        &old,
        &["--allow-downgrade", "--reason", "regression in 2026.12"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(tag_digest(&data, "latest"), old_digest);
    let history: serde_json::Value = serde_json::from_str(&airlock_ok(&[
        "history",
        "--data",
        data.to_str().unwrap(),
        "--json",
    ]))
    .unwrap();
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
    let out = import(&data, &new, &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
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
    let out = import(&data, &first, &["--config", c]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let root = root_of(&data);
    let out = import(&data, &second, &["--config", c]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("immutable tags"), "{err}");
    assert!(err.contains("stacks/bookworm:2026.11"), "{err}");
    assert_eq!(root_of(&data), root);
    assert_eq!(tag_digest(&data, "2026.11"), first_digest);
}
