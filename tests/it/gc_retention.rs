//! Retention rules of `gc` (issue 23 §4): `--delete-untagged` frees images
//! whose tag was moved or deleted, images pushed by digest only, their
//! referrers, and referrers of a subject never pushed, while tagged images,
//! children of a kept index, referrers of a kept image and anything a room
//! document names stay; `--keep-tags` keeps the newest N tags of matching
//! repositories, and `pulled-within-days=D` keeps tags whose manifest a
//! GET pulled through any server (HEAD is no pull) within D days. Images
//! are pushed through the in-process router, pulled from real `airlock
//! serve` processes, digests computed here; every scenario runs on every
//! blobstore backend.

use std::sync::Arc;
use std::time::Duration;

use airlock::ops::Retention;
use airlock::ops::gc::{self, GcOptions};
use airlock::ops::retention::{KeepTags, Removal, Rules};
use airlock::registry::RegistryConfig;
use airlock::server::{self, App};
use airlock::state::{DocumentChange, Op, StateStore};
use axum::Router;

use crate::common;
use common::backend::{Backend, on_backends};
use common::images::{
    OCI_INDEX, OCI_MANIFEST, image_parts, push_blob, push_image, put_manifest, sha256,
};
use common::router::get;
use common::{header, http};

on_backends!(
    async [fs, moto, s3s_fs]
    delete_untagged_frees_what_no_tag_reaches,
    keep_tags_keeps_the_newest,
    pulled_within_keeps_what_servers_saw_pulled,
);

struct Site {
    state: StateStore,
    opened: airlock::store::OpenedStore,
    router: Router,
    backend: Backend,
}

async fn site(backend: Backend) -> Site {
    let opened = backend.open_opened().await;
    let state = StateStore::new(opened.blobstore());
    let config = RegistryConfig {
        allow_push: true,
        allow_delete: true,
        ..RegistryConfig::default()
    };
    let app = Arc::new(App::with_config(state.clone(), config));
    Site {
        router: server::router(app),
        state,
        opened,
        backend,
    }
}

fn options(rules: Rules, dry_run: bool) -> GcOptions {
    GcOptions {
        retention: Retention {
            keep_generations: 1,
            keep_days: 0,
        },
        grace: Duration::ZERO,
        rules,
        dry_run,
    }
}

/// A referrer (an OCI artifact manifest with `subject`) of `subject` in
/// `name`, pushed by digest; returns its digest.
async fn push_referrer(router: &Router, name: &str, subject: &str, seed: u32) -> String {
    let blob = format!("signature {seed}").into_bytes();
    push_blob(router, name, &blob).await;
    let empty = b"{}".to_vec();
    push_blob(router, name, &empty).await;
    let m = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "artifactType": "application/vnd.dev.cosign.artifact.sig.v1+json",
        "config": {"mediaType": "application/vnd.oci.empty.v1+json", "digest": sha256(&empty), "size": 2},
        "layers": [{"mediaType": "application/octet-stream", "digest": sha256(&blob), "size": blob.len()}],
        "subject": {"mediaType": OCI_MANIFEST, "digest": subject, "size": 100},
    }))
    .unwrap();
    let d = sha256(&m);
    put_manifest(router, name, &d, OCI_MANIFEST, &m)
        .await
        .status(201);
    d
}

fn removed_manifests(plan: &[Removal]) -> Vec<String> {
    let mut out: Vec<String> = plan
        .iter()
        .filter_map(|r| match r {
            Removal::Manifest { digest, .. } => Some(digest.to_string()),
            _ => None,
        })
        .collect();
    out.sort();
    out
}

async fn delete_untagged_frees_what_no_tag_reaches(b: Backend) {
    let s = site(b).await;
    let r = &s.router;
    let repo = "builds/app";
    // A, then B at the same tag: A is untagged.
    let (_, a) = push_image(r, repo, "v1", 1).await;
    let a_sig = push_referrer(r, repo, &a, 1).await;
    let (_, b_) = push_image(r, repo, "v1", 2).await;
    let b_sig = push_referrer(r, repo, &b_, 2).await;
    // C by digest only, D by digest only but named by a room document.
    let (_, c) = push_image(r, repo, "", 3).await;
    let (_, d) = push_image(r, repo, "", 4).await;
    // A referrer of a subject never pushed.
    let dangling = push_referrer(r, repo, &sha256(b"never pushed"), 5).await;
    // An index tagged `multi` whose children were pushed by digest.
    let (m1, c1) = push_image(r, repo, "", 6).await;
    let (m2, c2) = push_image(r, repo, "", 7).await;
    let index = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": OCI_INDEX,
        "manifests": [
            {"mediaType": OCI_MANIFEST, "digest": c1, "size": m1.len(), "platform": {"os": "linux", "architecture": "amd64"}},
            {"mediaType": OCI_MANIFEST, "digest": c2, "size": m2.len(), "platform": {"os": "linux", "architecture": "arm64"}},
        ],
    }))
    .unwrap();
    put_manifest(r, repo, "multi", OCI_INDEX, &index)
        .await
        .status(201);
    let pin = format!(r#"{{"promoted": "{d}"}}"#);
    s.state
        .commit(
            "pin",
            "test",
            &[Op::Document {
                name: "future-room".into(),
                change: DocumentChange::bytes(move |_| Ok(Some(pin.clone().into_bytes()))),
            }],
        )
        .await
        .unwrap();

    let rules = Rules {
        delete_untagged: true,
        ..Rules::default()
    };
    // Dry run: the plan, nothing changed.
    let before = s.state.snapshot().await.unwrap().generation();
    let report = gc::run(&s.opened, &s.state, &options(rules.clone(), true))
        .await
        .unwrap();
    let mut want = vec![a.clone(), a_sig.clone(), c.clone(), dangling.clone()];
    want.sort();
    assert_eq!(removed_manifests(&report.retention), want);
    let reasons: Vec<String> = report.retention.iter().map(ToString::to_string).collect();
    assert!(
        reasons
            .iter()
            .any(|r| r.contains(&dangling) && r.contains("does not hold")),
        "{reasons:?}"
    );
    assert!(
        reasons
            .iter()
            .any(|r| r.contains(&a_sig) && r.contains("goes too")),
        "{reasons:?}"
    );
    assert_eq!(s.state.snapshot().await.unwrap().generation(), before);
    get(r, &format!("/v2/{repo}/manifests/{a}"))
        .await
        .status(200);

    // The real run: one commit, then the sweep frees what only A held.
    let (config_a, layer_a) = image_parts(1);
    let store = s.state.blobstore().clone();
    let key = |d: &str| format!("blobs/sha256/{}/{}", &d[7..9], &d[7..]);
    assert!(store.stat(&key(&sha256(&layer_a))).await.unwrap().is_some());
    let report = gc::run(&s.opened, &s.state, &options(rules, false))
        .await
        .unwrap();
    assert_eq!(removed_manifests(&report.retention), want);
    let generation = report.retention_generation.expect("a retention commit");
    assert_eq!(generation, before + 1);
    for gone in [&a, &a_sig, &c, &dangling] {
        get(r, &format!("/v2/{repo}/manifests/{gone}"))
            .await
            .error(404, "MANIFEST_UNKNOWN");
    }
    for kept in [&b_, &b_sig, &d, &c1, &c2] {
        get(r, &format!("/v2/{repo}/manifests/{kept}"))
            .await
            .status(200);
    }
    get(r, &format!("/v2/{repo}/manifests/v1"))
        .await
        .status(200);
    get(r, &format!("/v2/{repo}/manifests/multi"))
        .await
        .status(200);
    for blob in [sha256(&layer_a), sha256(&config_a)] {
        assert_eq!(store.stat(&key(&blob)).await.unwrap(), None, "{blob}");
    }
    let (_, layer_b) = image_parts(2);
    assert!(store.stat(&key(&sha256(&layer_b))).await.unwrap().is_some());
    // Nothing left to remove: a second run commits nothing.
    let report = gc::run(
        &s.opened,
        &s.state,
        &options(
            Rules {
                delete_untagged: true,
                ..Rules::default()
            },
            false,
        ),
    )
    .await
    .unwrap();
    assert!(report.retention.is_empty(), "{:?}", report.retention);
    assert_eq!(report.retention_generation, None);
    // A manifest untagged just now is kept for the grace period.
    push_image(r, repo, "v1", 8).await;
    let young = Rules {
        delete_untagged: true,
        grace: Duration::from_secs(3600),
        ..Rules::default()
    };
    let report = gc::run(&s.opened, &s.state, &options(young, true))
        .await
        .unwrap();
    assert!(report.retention.is_empty(), "{:?}", report.retention);
}

async fn keep_tags_keeps_the_newest(b: Backend) {
    let s = site(b).await;
    for i in 1..=4u32 {
        push_image(&s.router, "kpack/app", &format!("b{i}"), 10 + i).await;
        // Push times are whole seconds: one second apart orders them.
        tokio::time::sleep(Duration::from_millis(1100)).await;
    }
    push_image(&s.router, "other/app", "b1", 20).await;
    let rules = Rules {
        delete_untagged: true,
        keep_tags: vec!["kpack/*:newest=2".parse::<KeepTags>().unwrap()],
        ..Rules::default()
    };
    let report = gc::run(&s.opened, &s.state, &options(rules, false))
        .await
        .unwrap();
    let mut tags: Vec<String> = report
        .retention
        .iter()
        .filter_map(|r| match r {
            Removal::Tag { tag, .. } => Some(tag.clone()),
            _ => None,
        })
        .collect();
    tags.sort();
    assert_eq!(tags, ["b1", "b2"]);
    let list = get(&s.router, "/v2/kpack/app/tags/list").await;
    assert_eq!(list.json()["tags"], serde_json::json!(["b3", "b4"]));
    get(&s.router, "/v2/other/app/manifests/b1")
        .await
        .status(200);
    // The images of removed tags were untagged just now: kept this run.
    assert!(removed_manifests(&report.retention).is_empty());
    assert!("kpack/*".parse::<KeepTags>().is_err());
    assert!("kpack/*:newest=x".parse::<KeepTags>().is_err());
}

/// The pull record, polled until it holds every digest of `want` for
/// `repo` (the servers write it every second): returns it.
async fn pulls_recorded(
    store: &dyn airlock::store::Blobstore,
    repo: &str,
    want: &[&str],
) -> airlock::state::pulls::PullRecord {
    let name = repo.parse().unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let record = airlock::state::pulls::load(store).await.unwrap();
        let all = want
            .iter()
            .all(|d| record.last_pulled(&name, &d.parse().unwrap()).is_some());
        if all || std::time::Instant::now() > deadline {
            return record;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// One request to a real server; returns (status, digest header, body).
fn pull(addr: &str, method: &str, path: &str) -> (u16, String, Vec<u8>) {
    let (status, headers, body) = http(addr, method, path, &[("accept", OCI_MANIFEST)]).unwrap();
    let digest = header(&headers, "docker-content-digest").unwrap_or_default();
    (status, digest.to_string(), body)
}

async fn pulled_within_keeps_what_servers_saw_pulled(b: Backend) {
    let s = site(b).await;
    let repo = "pulls/app";
    let (ma, a) = push_image(&s.router, repo, "a", 31).await;
    let (_, b_) = push_image(&s.router, repo, "b", 32).await;
    let (mc, c) = push_image(&s.router, repo, "c", 33).await;
    let (_, d) = push_image(&s.router, repo, "d", 34).await;
    let store = s.state.blobstore().clone();

    // Two servers on one store, writing their pulls every second: `a` by
    // tag on one, `c` by digest on the other, `b` only HEADed on both.
    let one = s.backend.serve(&["--pull-record-interval", "1s"]);
    let two = s.backend.serve(&["--pull-record-interval", "1s"]);
    assert_eq!(
        pull(&one.addr, "GET", &format!("/v2/{repo}/manifests/a")),
        (200, a.clone(), ma.clone())
    );
    assert_eq!(
        pull(&two.addr, "GET", &format!("/v2/{repo}/manifests/{c}")),
        (200, c.clone(), mc.clone())
    );
    for srv in [&one, &two] {
        let (status, digest, body) = pull(&srv.addr, "HEAD", &format!("/v2/{repo}/manifests/b"));
        assert_eq!((status, digest.as_str(), body.len()), (200, b_.as_str(), 0));
    }
    let record = pulls_recorded(&*store, repo, &[&a, &c]).await;
    let name = repo.parse().unwrap();
    let today = airlock::state::pulls::today();
    assert_eq!(record.last_pulled(&name, &a.parse().unwrap()), Some(today));
    assert_eq!(record.last_pulled(&name, &c.parse().unwrap()), Some(today));
    assert_eq!(record.last_pulled(&name, &b_.parse().unwrap()), None);
    assert_eq!(
        record.repositories[&name]
            .tags
            .keys()
            .map(|t| t.as_str())
            .collect::<Vec<_>>(),
        ["a"]
    );
    // One object per server: neither overwrites the other's.
    assert_eq!(store.list("pulls/").await.unwrap().len(), 2);
    assert!(one.terminate().success());
    assert!(two.terminate().success());

    // A restarted server that never flushes on its own writes its pulls
    // when it stops (SIGTERM), beside the records of the stopped ones.
    let three = s.backend.serve(&["--pull-record-interval", "1h"]);
    assert_eq!(
        pull(&three.addr, "GET", &format!("/v2/{repo}/manifests/d")).0,
        200
    );
    assert!(three.terminate().success());
    let record = airlock::state::pulls::load(&*store).await.unwrap();
    for kept in [&a, &c, &d] {
        assert_eq!(
            record.last_pulled(&name, &kept.parse().unwrap()),
            Some(today),
            "{kept}"
        );
    }
    assert_eq!(record.last_pulled(&name, &b_.parse().unwrap()), None);
    assert_eq!(store.list("pulls/").await.unwrap().len(), 3);

    // The dry run names the rule that keeps or removes each tag.
    let rule = format!("{repo}:pulled-within-days=7");
    let gc_args = [
        "--keep-tags",
        &rule,
        "--delete-untagged",
        "--grace",
        "0s",
        "--keep-generations",
        "1",
        "--keep-days",
        "0",
    ];
    let out = s
        .backend
        .airlock_ok(&["gc"], &[&gc_args[..], &["--dry-run"]].concat());
    let line = |tag: &str| {
        out.lines()
            .find(|l| l.contains(&format!(" tag {repo}:{tag} ")))
            .unwrap_or_else(|| panic!("no line for {tag}: {out}"))
            .to_string()
    };
    assert!(
        line("a").starts_with("would keep ") && line("a").contains(": pulled today (keep_tags"),
        "{out}"
    );
    assert!(
        line("c").starts_with("would keep ") && line("c").contains("pulled today"),
        "{out}"
    );
    assert!(
        line("b").starts_with(&format!(
            "would remove tag {repo}:b ({b_}): not pulled within 7 days"
        )) && line("b").contains("never pulled"),
        "{out}"
    );
    get(&s.router, &format!("/v2/{repo}/manifests/b"))
        .await
        .status(200);

    // The run: tag `b` goes; its image, untagged just now, goes at the next.
    let rules = Rules {
        delete_untagged: true,
        keep_tags: vec![rule.parse::<KeepTags>().unwrap()],
        ..Rules::default()
    };
    let report = gc::run(&s.opened, &s.state, &options(rules.clone(), false))
        .await
        .unwrap();
    let tags: Vec<(String, String)> = report
        .retention
        .iter()
        .filter_map(|r| match r {
            Removal::Tag { tag, digest, .. } => Some((tag.clone(), digest.to_string())),
            _ => None,
        })
        .collect();
    assert_eq!(tags, [("b".to_string(), b_.clone())]);
    let list = get(&s.router, &format!("/v2/{repo}/tags/list")).await;
    assert_eq!(list.json()["tags"], serde_json::json!(["a", "c", "d"]));
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let report = gc::run(&s.opened, &s.state, &options(rules, false))
        .await
        .unwrap();
    assert_eq!(removed_manifests(&report.retention), vec![b_.clone()]);
    get(&s.router, &format!("/v2/{repo}/manifests/{b_}"))
        .await
        .error(404, "MANIFEST_UNKNOWN");
    for kept in [&a, &c, &d] {
        get(&s.router, &format!("/v2/{repo}/manifests/{kept}"))
            .await
            .status(200);
    }
}
