//! The paged state layout (issue 8 §1): a push into a big repository
//! writes a bounded amount of metadata, listings come back in order across
//! pages, the page cache stays within its bytes, a state of a layout this
//! version does not read is refused, `walk` reaches
//! exactly what a generation needs, and the referrers list is paged with
//! `Link`. Digests are computed here with `sha2`; expected orders with
//! `sort`.
//!
//! Filesystem only: the bounds are checked by counting and sizing the files
//! a commit writes under `blobs/`; the paging logic is the same on S3 (the
//! state sits above the Blobstore trait), where registry_push and
//! state_commit run.

use std::collections::{BTreeSet, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use airlock::digest::Digest;
use airlock::names::RepositoryName;
use airlock::registry::RegistryConfig;
use airlock::registry::referrers::ReferrersLimits;
use airlock::server::{self, App};
use airlock::state::{DocumentChange, ManifestInfo, Op, StateStore, TreeItem};
use airlock::store::{Blobstore, fs::FsStore};

use crate::common;
use common::images::sha256;
use common::router::{get, send_body};

const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";

fn name(s: &str) -> RepositoryName {
    s.parse().unwrap()
}

/// Every file under `dir/blobs` with its size in bytes.
fn blob_files(dir: &Path) -> Vec<(PathBuf, u64)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.join("blobs")];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            let m = e.metadata().unwrap();
            if m.is_dir() {
                stack.push(e.path());
            } else {
                out.push((e.path(), m.len()));
            }
        }
    }
    out
}

fn info(size: u64, subject: Option<&Digest>) -> ManifestInfo {
    ManifestInfo {
        media_type: OCI_MANIFEST.into(),
        size,
        subject: subject.cloned(),
        artifact_type: None,
    }
}

/// 3,000 tags in 12 commits, then one more tag: the last push writes under
/// 64 KiB of new files, `tags/list` pages through all tags in byte-wise
/// order following `Link`, history has every generation, and a 256 KiB
/// page cache stays within its bytes.
#[tokio::test]
async fn one_push_into_3000_tags_writes_little_and_lists_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Blobstore> = Arc::new(FsStore::open(dir.path()).unwrap());
    let state = StateStore::with_cache_bytes(store.clone(), 256 * 1024);
    let manifest = br#"{"schemaVersion":2}"#;
    let digest = airlock::store::put_bytes(&*store, manifest).await.unwrap();
    assert_eq!(digest.to_string(), sha256(manifest));
    let repo = name("big/app");
    let mut want: Vec<String> = Vec::new();
    for batch in 0..12 {
        let tags: Vec<String> = (0..250).map(|i| format!("v{}", batch * 250 + i)).collect();
        want.extend(tags.iter().cloned());
        let op = Op::PutManifest {
            repo: repo.clone(),
            digest: digest.clone(),
            info: info(manifest.len() as u64, None),
            tags: tags.iter().map(|t| t.parse().unwrap()).collect(),
            guard: airlock::state::TagGuard::default(),
        };
        state.commit("batch", "t", &[op]).await.unwrap();
    }
    let before: HashSet<PathBuf> = blob_files(dir.path()).into_iter().map(|f| f.0).collect();
    let op = Op::PutManifest {
        repo: repo.clone(),
        digest: digest.clone(),
        info: info(manifest.len() as u64, None),
        tags: vec!["last-one".parse().unwrap()],
        guard: airlock::state::TagGuard::default(),
    };
    let c = state.commit("one more", "t", &[op]).await.unwrap();
    assert_eq!(c.generation, 13);
    let new: Vec<(PathBuf, u64)> = blob_files(dir.path())
        .into_iter()
        .filter(|(p, _)| !before.contains(p))
        .collect();
    let written: u64 = new.iter().map(|f| f.1).sum();
    eprintln!(
        "one tag push into 3000 tags wrote {written} bytes in {} files",
        new.len()
    );
    assert!(
        written < 64 * 1024,
        "one tag push wrote {written} bytes in {} files",
        new.len()
    );
    assert!(new.len() <= 12, "{} new files", new.len());
    want.push("last-one".into());
    want.sort();

    // tags/list through the registry, 700 at a time, following Link.
    let app = Arc::new(App::with_config(state.clone(), RegistryConfig::default()));
    let router = server::router(app);
    let mut got: Vec<String> = Vec::new();
    let mut uri = "/v2/big/app/tags/list?n=700".to_string();
    let mut pages = 0;
    loop {
        let r = get(&router, &uri).await;
        r.status(200);
        pages += 1;
        let v = r.json();
        let tags = v["tags"].as_array().unwrap();
        assert!(tags.len() <= 700);
        got.extend(tags.iter().map(|t| t.as_str().unwrap().to_string()));
        match r.headers.get("link") {
            Some(l) => {
                let l = l.to_str().unwrap();
                uri = l[1..l.find('>').unwrap()].to_string();
            }
            None => break,
        }
    }
    assert_eq!(pages, 5);
    assert_eq!(got, want, "every tag, in byte-wise order");
    // The same through the read API from a cursor.
    let snap = state.snapshot().await.unwrap();
    let r = state.repository(&snap, &repo).await.unwrap().unwrap();
    let page = r.tags(Some("v2998"), 3).await.unwrap();
    let names: Vec<&str> = page.iter().map(|(t, _)| t.as_str()).collect();
    let at = want.iter().position(|t| t == "v2998").unwrap();
    assert_eq!(
        names,
        want[at + 1..at + 4]
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>()
    );
    assert!(page.iter().all(|(_, d)| d == &digest));

    let history = state.history().await.unwrap();
    let gens: Vec<u64> = history.iter().map(|(_, s)| s.generation).collect();
    assert_eq!(gens, (1..=13).rev().collect::<Vec<u64>>());
    assert!(state.cache_bytes() > 0);
    assert!(state.cache_bytes() <= 256 * 1024, "{}", state.cache_bytes());
}

/// A state document of a layout this version does not read (the first
/// layout, `airlock.state.v1`, was never released; a newer one may come)
/// is refused with an error naming the layout: reads and commits fail
/// cleanly, nothing panics and the root stays where it was.
#[tokio::test]
async fn a_state_of_an_unknown_layout_is_refused_not_misread() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Blobstore> = Arc::new(FsStore::open(dir.path()).unwrap());
    let put = async |v: serde_json::Value| {
        let bytes = serde_json::to_vec(&v).unwrap();
        airlock::store::put_bytes(&*store, &bytes)
            .await
            .unwrap()
            .to_string()
    };
    let table = put(serde_json::json!({"repositories": {}})).await;
    let state_doc = put(serde_json::json!({
        "kind": "airlock.state.v1", "generation": 1, "parent": null,
        "time": "2026-11-01T00:00:00Z", "reason": "import", "who": "t",
        "repositories": table
    }))
    .await;
    assert!(store.swap_root(None, &state_doc).await.unwrap());
    let state = StateStore::new(store.clone());
    let Err(err) = state.snapshot().await else {
        panic!("a snapshot of v1 was read")
    };
    assert!(format!("{err:?}").contains("airlock.state.v1"), "{err:?}");
    let op = Op::LinkBlobs {
        repo: name("a/b"),
        blobs: vec![(sha256(b"layer").parse().unwrap(), 5)],
    };
    let err = state.commit("link", "t", &[op]).await.unwrap_err();
    assert!(
        format!("{err:?}").contains("unknown state layout"),
        "{err:?}"
    );
    assert_eq!(
        store.read_root().await.unwrap().unwrap().value,
        state_doc,
        "the root moved"
    );
}

/// `walk` over every generation (one shared `seen` set) reaches every file
/// in the blob store, and copying only what the current generation reaches
/// into an empty store gives a store that reads the same.
#[tokio::test]
async fn walk_reaches_exactly_what_generations_need() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Blobstore> = Arc::new(FsStore::open(dir.path()).unwrap());
    let state = StateStore::new(store.clone());
    let mut manifests = Vec::new();
    for i in 0..40u32 {
        let body = format!(r#"{{"schemaVersion":2,"n":{i}}}"#);
        manifests.push(
            airlock::store::put_bytes(&*store, body.as_bytes())
                .await
                .unwrap(),
        );
    }
    let blob = airlock::store::put_bytes(&*store, b"a layer")
        .await
        .unwrap();
    for (i, d) in manifests.iter().enumerate() {
        let repo = name(&format!("team{}/app", i % 4));
        let subject = (i % 5 == 1).then(|| manifests[0].clone());
        let ops = [
            Op::LinkBlobs {
                repo: repo.clone(),
                blobs: vec![(blob.clone(), 7)],
            },
            Op::PutManifest {
                repo,
                digest: d.clone(),
                info: info(20, subject.as_ref()),
                tags: (0..30)
                    .map(|t| format!("t{i}-{t}").parse().unwrap())
                    .collect(),
                guard: airlock::state::TagGuard::default(),
            },
        ];
        state.commit("push", "t", &ops).await.unwrap();
    }
    let room = Op::Document {
        name: "room".into(),
        change: DocumentChange::bytes(|_| Ok(Some(b"{\"a\":1}".to_vec()))),
    };
    let del = Op::DeleteTag {
        repo: name("team0/app"),
        tag: "t0-0".parse().unwrap(),
    };
    state.commit("room", "t", &[room, del]).await.unwrap();

    let mut seen = HashSet::new();
    let mut reached: BTreeSet<String> = BTreeSet::new();
    let mut current: BTreeSet<String> = BTreeSet::new();
    let history = state.history().await.unwrap();
    for (i, (d, doc)) in history.iter().enumerate() {
        // What each generation changed is kept beside it (history reads it).
        if let Some(c) = &doc.changes {
            reached.insert(c.to_string());
        }
        let mut out = Vec::new();
        state
            .walk_tree(d, &mut seen, &mut |r| {
                out.push(r);
                Ok(())
            })
            .await
            .unwrap();
        for r in out {
            let d = match r {
                TreeItem::Document(d) => d,
                TreeItem::Manifest { digest, .. } => digest,
                TreeItem::Blob { digest, .. } => digest,
            };
            if i == 0 {
                current.insert(d.to_string());
            }
            reached.insert(d.to_string());
        }
    }
    let files: BTreeSet<String> = blob_files(dir.path())
        .iter()
        .map(|(p, _)| format!("sha256:{}", p.file_name().unwrap().to_str().unwrap()))
        .collect();
    assert_eq!(
        reached, files,
        "every stored blob is reached by some generation"
    );

    // Only what the current generation reaches, in a fresh store.
    let copy = tempfile::tempdir().unwrap();
    let fresh: Arc<dyn Blobstore> = Arc::new(FsStore::open(copy.path()).unwrap());
    for d in &current {
        let d: Digest = d.parse().unwrap();
        let bytes = airlock::store::get_verified(&*store, &d).await.unwrap();
        airlock::store::put_bytes(&*fresh, &bytes).await.unwrap();
    }
    let root = store.read_root().await.unwrap().unwrap().value;
    assert!(fresh.swap_root(None, &root).await.unwrap());
    let copy_state = StateStore::new(fresh);
    let (a, b) = (
        state.snapshot().await.unwrap(),
        copy_state.snapshot().await.unwrap(),
    );
    let names = copy_state.repositories(&b, None, 100).await.unwrap();
    assert_eq!(names, state.repositories(&a, None, 100).await.unwrap());
    assert_eq!(names.len(), 4);
    for n in &names {
        let (x, y) = (
            state.repository(&a, n).await.unwrap().unwrap(),
            copy_state.repository(&b, n).await.unwrap().unwrap(),
        );
        assert_eq!(
            x.tags(None, 10_000).await.unwrap(),
            y.tags(None, 10_000).await.unwrap()
        );
        assert_eq!(
            x.manifests(None, 100).await.unwrap(),
            y.manifests(None, 100).await.unwrap()
        );
        assert_eq!(y.blobs(None, 10).await.unwrap(), vec![(blob.clone(), 7)]);
    }
    let refs = copy_state
        .repository(&b, &name("team1/app"))
        .await
        .unwrap()
        .unwrap()
        .referrers(&manifests[0], None, 100)
        .await
        .unwrap();
    assert_eq!(
        refs.len(),
        2,
        "manifests 1 and 21 are in team1/app with subject 0"
    );
    let doc: serde_json::Value = copy_state.document(&b, "room").await.unwrap().unwrap();
    assert_eq!(doc["a"], 1);
}

/// 23 referrers of one subject, pages of at most 5 descriptors: following
/// `Link` gives 5 pages whose union is what was pushed, sorted by digest;
/// an `artifactType` filter pages too; a byte cap of 1,200 bytes splits
/// pages by size.
#[tokio::test]
async fn referrers_are_paged_with_link() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Blobstore> = Arc::new(FsStore::open(dir.path()).unwrap());
    let state = StateStore::new(store);
    let config = |max_descriptors, max_bytes| RegistryConfig {
        allow_push: true,
        referrers: ReferrersLimits {
            max_descriptors,
            max_bytes,
        },
        ..RegistryConfig::default()
    };
    let router = server::router(Arc::new(App::with_config(
        state.clone(),
        config(5, 1 << 20),
    )));
    let small = server::router(Arc::new(App::with_config(
        state.clone(),
        config(1000, 1200),
    )));
    let empty = b"{}".to_vec();
    let r = send_body(
        &router,
        "POST",
        &format!("/v2/app/blobs/uploads/?digest={}", sha256(&empty)),
        &[],
        empty.clone(),
    )
    .await;
    r.status(201);
    let subject = sha256(b"the subject");
    let mut pushed = Vec::new();
    let mut sigs = Vec::new();
    for i in 0..23 {
        let at = if i % 3 == 0 {
            "application/x.sig"
        } else {
            "application/x.sbom+json"
        };
        let m = serde_json::to_vec(&serde_json::json!({
            "schemaVersion": 2, "mediaType": OCI_MANIFEST, "artifactType": at,
            "config": {"mediaType": "application/vnd.oci.empty.v1+json", "digest": sha256(&empty), "size": 2},
            "layers": [],
            "subject": {"mediaType": OCI_MANIFEST, "digest": subject, "size": 11},
            "annotations": {"n": format!("{i}"), "pad": "x".repeat(200)}
        }))
        .unwrap();
        let d = sha256(&m);
        let r = send_body(
            &router,
            "PUT",
            &format!("/v2/app/manifests/{d}"),
            &[("content-type", OCI_MANIFEST)],
            m,
        )
        .await;
        r.status(201);
        if i % 3 == 0 {
            sigs.push(d.clone());
        }
        pushed.push(d);
    }
    pushed.sort();
    sigs.sort();
    let follow = async |router: &axum::Router, first: String| {
        let mut uri = first;
        let mut all = Vec::new();
        let mut sizes = Vec::new();
        loop {
            let r = get(router, &uri).await;
            r.status(200);
            let v = r.json();
            let list = v["manifests"].as_array().unwrap();
            sizes.push((list.len(), r.body.len()));
            all.extend(
                list.iter()
                    .map(|m| m["digest"].as_str().unwrap().to_string()),
            );
            match r.headers.get("link") {
                Some(l) => {
                    let l = l.to_str().unwrap();
                    assert!(l.ends_with(r#">; rel="next""#), "{l}");
                    uri = l[1..l.find('>').unwrap()].to_string();
                }
                None => break,
            }
        }
        (all, sizes)
    };
    let (all, sizes) = follow(&router, format!("/v2/app/referrers/{subject}")).await;
    assert_eq!(all, pushed);
    assert_eq!(
        sizes.iter().map(|s| s.0).collect::<Vec<_>>(),
        [5, 5, 5, 5, 3]
    );
    let (all, sizes) = follow(
        &router,
        format!("/v2/app/referrers/{subject}?artifactType=application/x.sig"),
    )
    .await;
    assert_eq!(all, sigs);
    assert_eq!(sizes.iter().map(|s| s.0).collect::<Vec<_>>(), [5, 3]);
    let (all, _) = follow(
        &router,
        format!("/v2/app/referrers/{subject}?n=2&artifactType=application%2Fx.sbom%2Bjson"),
    )
    .await;
    let sboms: Vec<String> = pushed
        .iter()
        .filter(|d| !sigs.contains(d))
        .cloned()
        .collect();
    assert_eq!(all, sboms);
    let (all, sizes) = follow(&small, format!("/v2/app/referrers/{subject}")).await;
    assert_eq!(all, pushed);
    assert!(sizes.len() >= 5, "{sizes:?}");
    assert!(sizes.iter().all(|s| s.1 <= 1200 && s.0 >= 1), "{sizes:?}");
    get(&router, &format!("/v2/app/referrers/{subject}?last=nope"))
        .await
        .error(400, "DIGEST_INVALID");
}
