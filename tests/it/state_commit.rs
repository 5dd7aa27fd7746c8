//! The state tree: changes from concurrent writers (separate `StateStore`s on
//! one data directory, as separate processes would be) are all kept, each in
//! its own generation, and a failed change leaves the root as it was.
//! The single-writer scenarios run on every blobstore backend
//! (tests/common/backend.rs); racing writers with separate stores on the
//! filesystem and on moto, as they need conditional writes the server
//! serializes, which s3s-fs does not (see `Kind::serializes_conditional_writes`);
//! the heavier contention scenarios on the filesystem only.

use crate::common;
use crate::forwarding_store;

use std::sync::Arc;

use airlock::digest::Digest;
use airlock::names::RepositoryName;
use airlock::state::{Op, StateError, StateStore};
use airlock::store::fs::FsStore;
use airlock::store::{self as store, Blobstore};
use common::backend::{Backend, on_backends};

on_backends!(
    async [fs, moto, s3s_fs]
    failed_change_leaves_root_and_noop_makes_no_generation,
    documents_commit_with_repositories_all_or_nothing,
);
// Racing root swaps need conditional writes the server serializes.
on_backends!(async [fs, moto, ceph] concurrent_commits_are_all_kept);
// The store is driven directly; one S3 server is enough (moto adds nothing).
on_backends!(async [fs, s3s_fs] a_document_collected_before_the_swap_is_written_again);

/// The stored root value.
async fn root(store: &dyn airlock::store::Blobstore) -> String {
    store.read_root().await.unwrap().unwrap().value
}

/// How many repositories `snap` has.
async fn repositories(state: &StateStore, snap: &airlock::state::Snapshot) -> usize {
    let all = state.repositories(snap, None, usize::MAX).await.unwrap();
    all.len()
}

fn repo(n: usize) -> RepositoryName {
    format!("team{n}/app").parse().unwrap()
}

/// Eight writers, each with its own store (as eight processes or replicas
/// would be), commit at once: every change is kept in its own generation.
async fn concurrent_commits_are_all_kept(b: Backend) {
    let mut tasks = Vec::new();
    for i in 0..8 {
        let store = b.open_store().await;
        tasks.push(tokio::spawn(async move {
            let state = StateStore::new(store);
            let blob = Digest::sha256_of(format!("blob {i}").as_bytes());
            state
                .commit(
                    &format!("link {i}"),
                    "test",
                    &[Op::LinkBlobs {
                        repo: repo(i),
                        blobs: vec![(blob, 6)],
                    }],
                )
                .await
                .unwrap()
        }));
    }
    let mut gens = Vec::new();
    for t in tasks {
        gens.push(t.await.unwrap().generation);
    }
    gens.sort();
    assert_eq!(
        gens,
        (1..=8).collect::<Vec<u64>>(),
        "each commit got its own generation"
    );
    let state = StateStore::new(b.open_store().await);
    let snap = state.snapshot().await.unwrap();
    assert_eq!(snap.generation(), 8);
    assert_eq!(repositories(&state, &snap).await, 8);
    for i in 0..8 {
        let r = state.repository(&snap, &repo(i)).await.unwrap().unwrap();
        let blob = Digest::sha256_of(format!("blob {i}").as_bytes());
        assert_eq!(r.blob(&blob).await.unwrap(), Some(6));
    }
    let history = state.history().await.unwrap();
    assert_eq!(history.len(), 8);
    assert_eq!(history.last().unwrap().1.parent, None);
}

async fn failed_change_leaves_root_and_noop_makes_no_generation(b: Backend) {
    let store = b.open_store().await;
    let state = StateStore::new(store.clone());
    let blob = Digest::sha256_of(b"x");
    let link = [Op::LinkBlobs {
        repo: repo(1),
        blobs: vec![(blob.clone(), 1)],
    }];
    assert_eq!(
        state.commit("first", "t", &link).await.unwrap().generation,
        1
    );
    let root = self::root(&*store).await;
    // The same change again: nothing to do.
    let again = state.commit("again", "t", &link).await.unwrap();
    assert!(!again.changed);
    assert_eq!(again.generation, 1);
    // A change with one bad op: nothing of it lands.
    let bad = [
        Op::LinkBlobs {
            repo: repo(2),
            blobs: vec![(blob.clone(), 1)],
        },
        Op::DeleteTag {
            repo: repo(1),
            tag: "nope".parse().unwrap(),
        },
    ];
    assert!(matches!(
        state.commit("bad", "t", &bad).await,
        Err(StateError::NotFound(_))
    ));
    assert_eq!(self::root(&*store).await, root);
    assert!(
        state
            .repository(&state.snapshot().await.unwrap(), &repo(2))
            .await
            .unwrap()
            .is_none()
    );
}

/// A named document changes in the same root swap as repository ops; a
/// failing document change leaves both as they were.
async fn documents_commit_with_repositories_all_or_nothing(b: Backend) {
    use airlock::state::DocumentChange;
    use std::collections::BTreeMap;
    let state = StateStore::new(b.open_store().await);
    let set = |k: &'static str, v: u32| Op::Document {
        name: "counters".into(),
        change: DocumentChange::json(move |cur: Option<BTreeMap<String, u32>>| {
            let mut m = cur.unwrap_or_default();
            m.insert(k.into(), v);
            Ok(Some(m))
        }),
    };
    let blob = Digest::sha256_of(b"b");
    let link = Op::LinkBlobs {
        repo: repo(1),
        blobs: vec![(blob.clone(), 1)],
    };
    let c = state
        .commit("both", "t", &[link, set("a", 1)])
        .await
        .unwrap();
    assert_eq!(c.generation, 1);
    let snap = state.snapshot().await.unwrap();
    let doc: BTreeMap<String, u32> = state.document(&snap, "counters").await.unwrap().unwrap();
    assert_eq!(doc, BTreeMap::from([("a".to_string(), 1)]));
    assert!(state.repository(&snap, &repo(1)).await.unwrap().is_some());

    let fail = Op::Document {
        name: "counters".into(),
        change: DocumentChange::json(|_: Option<BTreeMap<String, u32>>| {
            Err(StateError::NotFound("no such counter".into()))
        }),
    };
    let link2 = Op::LinkBlobs {
        repo: repo(2),
        blobs: vec![(blob, 1)],
    };
    let err = state
        .commit("fails", "t", &[set("b", 2), link2, fail])
        .await
        .unwrap_err();
    assert!(matches!(err, StateError::NotFound(_)), "{err}");
    let snap = state.snapshot().await.unwrap();
    assert_eq!(snap.generation(), 1);
    assert!(state.repository(&snap, &repo(2)).await.unwrap().is_none());
    let doc: BTreeMap<String, u32> = state.document(&snap, "counters").await.unwrap().unwrap();
    assert_eq!(doc.len(), 1);
    // The same value again changes nothing: no new generation.
    let c = state.commit("same", "t", &[set("a", 1)]).await.unwrap();
    assert_eq!((c.generation, c.changed), (1, false));
}

/// Group commit: 128 concurrent writers on one `StateStore` (as the server's
/// handlers are) all land, none is lost, and they share root swaps; a change
/// that fails in the middle of a batch fails alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_writers_in_one_process_share_root_swaps() {
    use airlock::state::ManifestInfo;
    let dir = tempfile::tempdir().unwrap();
    let state = StateStore::new(Arc::new(FsStore::open(dir.path()).unwrap()));
    let manifest = Digest::sha256_of(b"manifest");
    let info = ManifestInfo {
        media_type: "application/vnd.oci.image.manifest.v1+json".into(),
        size: 8,
        subject: None,
        artifact_type: None,
    };
    let mut tasks = Vec::new();
    for i in 0..128usize {
        let state = state.clone();
        let (manifest, info) = (manifest.clone(), info.clone());
        tasks.push(tokio::spawn(async move {
            // Even: a new tag in one repository; odd: a new repository;
            // every 16th: deletes a tag that does not exist (must fail alone).
            let op = if i % 16 == 5 {
                Op::DeleteTag {
                    repo: repo(0),
                    tag: "missing".parse().unwrap(),
                }
            } else if i % 2 == 0 {
                Op::PutManifest {
                    repo: repo(0),
                    digest: manifest,
                    info,
                    tags: vec![format!("t{i}").parse().unwrap()],
                    guard: airlock::state::TagGuard::default(),
                }
            } else {
                Op::LinkBlobs {
                    repo: repo(1000 + i),
                    blobs: vec![(Digest::sha256_of(format!("b{i}").as_bytes()), 2)],
                }
            };
            (i, state.commit(&format!("change {i}"), "t", &[op]).await)
        }));
    }
    let mut failed = 0;
    for t in tasks {
        let (i, r) = t.await.unwrap();
        if i % 16 == 5 {
            assert!(matches!(r, Err(StateError::NotFound(_))), "{i}: {r:?}");
            failed += 1;
        } else {
            assert!(r.unwrap().changed, "{i}");
        }
    }
    assert_eq!(failed, 8);
    let snap = state.snapshot().await.unwrap();
    let r0 = state.repository(&snap, &repo(0)).await.unwrap().unwrap();
    let odd = (0..128).filter(|i| i % 2 == 1 && i % 16 != 5).count();
    let even = (0..128).filter(|i| i % 2 == 0).count();
    assert_eq!(
        r0.tags(None, usize::MAX).await.unwrap().len(),
        even,
        "every tag landed"
    );
    assert_eq!(
        repositories(&state, &snap).await,
        1 + odd,
        "every repository landed"
    );
    assert!(
        snap.generation() < 120,
        "changes were batched: {} generations for 120 changes",
        snap.generation()
    );
    assert_eq!(
        state.history().await.unwrap().len() as u64,
        snap.generation()
    );
}

/// Between processes (separate `StateStore`s on one directory), 16 writers
/// with 8 changes each all land: lost races are retried, never given up.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn contention_between_processes_never_fails() {
    let dir = tempfile::tempdir().unwrap();
    let mut tasks = Vec::new();
    for w in 0..16usize {
        let path = dir.path().to_path_buf();
        tasks.push(tokio::spawn(async move {
            let state = StateStore::new(Arc::new(FsStore::open(&path).unwrap()));
            for k in 0..8usize {
                let blob = Digest::sha256_of(format!("{w}/{k}").as_bytes());
                state
                    .commit(
                        "link",
                        "t",
                        &[Op::LinkBlobs {
                            repo: repo(w),
                            blobs: vec![(blob, 3)],
                        }],
                    )
                    .await
                    .unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let state = StateStore::new(Arc::new(FsStore::open(dir.path()).unwrap()));
    let snap = state.snapshot().await.unwrap();
    assert_eq!(snap.generation(), 128);
    for w in 0..16 {
        let r = state.repository(&snap, &repo(w)).await.unwrap().unwrap();
        assert_eq!(r.blobs(None, usize::MAX).await.unwrap().len(), 8);
    }
}

/// A store on which a concurrent `gc` removes the blob `victim` right
/// after a commit's batch found it stored (and so did not write it), before
/// the commit's root swap names it: the interleaving of the GC race,
/// deterministic. Fires once.
struct CollectedMeanwhile {
    inner: Arc<dyn Blobstore>,
    victim: Digest,
    fired: std::sync::atomic::AtomicBool,
}

forwarding_store!(CollectedMeanwhile {
    async fn writer(&self, key: &str) -> store::Result<Box<dyn store::ObjectWriter>> {
        self.inner.writer(key).await
    }
    async fn put_blobs(&self, blobs: Vec<(Digest, bytes::Bytes)>) -> store::Result<Vec<Digest>> {
        use std::sync::atomic::Ordering;
        let present = self.inner.put_blobs(blobs).await?;
        if present.contains(&self.victim) && !self.fired.swap(true, Ordering::SeqCst) {
            self.inner.delete(&store::blob_key(&self.victim)).await?;
        }
        Ok(present)
    }
});

/// The GC race of a state commit: a document set back to an earlier value
/// is found stored (unreferenced by the current root), so the commit does
/// not write it; a `gc` removes it before the root swap names it again.
/// The commit checks after its swap and writes it again: the new root's
/// document is there, with the right bytes, read through a fresh store.
async fn a_document_collected_before_the_swap_is_written_again(b: Backend) {
    use airlock::state::DocumentChange;
    let set = |v: &'static str| Op::Document {
        name: "notes".into(),
        change: DocumentChange::json(move |_: Option<String>| Ok(Some(v.to_string()))),
    };
    let state = StateStore::new(b.open_store().await);
    state.commit("first", "t", &[set("first")]).await.unwrap();
    state.commit("second", "t", &[set("second")]).await.unwrap();
    // The document's bytes as the commit serialises them, hashed here.
    let victim = Digest::sha256_of(&serde_json::to_vec("first").unwrap());
    let key = store::blob_key(&victim);
    let inner = b.open_store().await;
    assert!(
        inner.stat(&key).await.unwrap().is_some(),
        "the first document is stored"
    );
    let racing = Arc::new(CollectedMeanwhile {
        inner,
        victim: victim.clone(),
        fired: false.into(),
    });
    let state = StateStore::new(racing.clone());
    let c = state.commit("back", "t", &[set("first")]).await.unwrap();
    assert_eq!((c.generation, c.changed), (3, true));
    assert!(
        racing.fired.load(std::sync::atomic::Ordering::SeqCst),
        "the commit found the first document stored (the race was set up)"
    );
    let fresh = StateStore::new(b.open_store().await);
    let snap = fresh.snapshot().await.unwrap();
    assert_eq!(snap.generation(), 3);
    let doc: Option<String> = fresh.document(&snap, "notes").await.unwrap();
    assert_eq!(doc.as_deref(), Some("first"));
    assert_eq!(
        fresh.blobstore().stat(&key).await.unwrap(),
        Some(serde_json::to_vec("first").unwrap().len() as u64)
    );
}

/// Two writers on one store (two replicas) take turns (issue 37 §2,
/// `state::turns`): a writer that saw the other's root waits, before its
/// next batch, until the other lands, so the other's change lands first
/// although it was made later; once the other is idle, one wait runs out
/// and the next batch goes at once. A writer alone never waits. Whether a
/// commit waited is read from [`StateStore::turn_waits`], not from its
/// duration (a loaded machine makes a lone commit slow); durations are
/// only bounded from below.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_writers_take_turns_and_one_alone_never_waits() {
    use std::time::{Duration, Instant};
    let dir = tempfile::tempdir().unwrap();
    let open = || -> Arc<dyn Blobstore> { Arc::new(FsStore::open(dir.path()).unwrap()) };
    let (a, b) = (StateStore::new(open()), StateStore::new(open()));
    async fn link(state: &StateStore, who: &str, n: usize) -> (u64, Duration) {
        let t = Instant::now();
        let blob = Digest::sha256_of(format!("{who} {n}").as_bytes());
        let c = state
            .commit(
                &format!("{who} {n}"),
                "test",
                &[Op::LinkBlobs {
                    repo: repo(0),
                    blobs: vec![(blob, 1)],
                }],
            )
            .await
            .unwrap();
        (c.generation, t.elapsed())
    }
    // Alone: never waits for anyone.
    for n in 0..4 {
        link(&a, "a", n).await;
        assert_eq!(a.turn_waits(), 0, "alone, commit {n} waited");
    }
    // b writes: a sees b's root on its next batch (not its own: no wait).
    link(&b, "b", 0).await;
    link(&a, "a", 4).await;
    assert_eq!(a.turn_waits(), 0, "a's batch on b's root waited");
    // a's root is current and b was active: a's next batch waits for b,
    // which starts 30 ms later and so lands first.
    let b2 = tokio::spawn({
        let b = b.clone();
        async move {
            tokio::time::sleep(Duration::from_millis(30)).await;
            link(&b, "b", 1).await
        }
    });
    let (a_gen, a_took) = link(&a, "a", 5).await;
    let (b_gen, _) = b2.await.unwrap();
    assert!(
        b_gen < a_gen,
        "b (started 30 ms later) landed first: b {b_gen}, a {a_gen} after {a_took:?}"
    );
    assert!(a_took >= Duration::from_millis(25), "a waited: {a_took:?}");
    assert_eq!(a.turn_waits(), 1, "a waited once for b");
    // b is idle now: a's next batch waits for it once (the root is a's,
    // b was active), until the wait runs out (3 times b's last turn, at
    // least 100 ms); the batches after it go at once.
    let (_, waited) = link(&a, "a", 6).await;
    assert!(waited >= Duration::from_millis(90), "one wait: {waited:?}");
    assert_eq!(a.turn_waits(), 2, "a waited once for idle b");
    for n in 7..11 {
        link(&a, "a", n).await;
        assert_eq!(a.turn_waits(), 2, "idle other, commit {n} waited");
    }
    assert_eq!(b.turn_waits(), 0, "b never waited");
}
