//! The state tree: changes from concurrent writers (separate `StateStore`s on
//! one data directory, as separate processes would be) are all kept, each in
//! its own generation, and a failed change leaves the root as it was.

use std::sync::Arc;

use airlock::digest::Digest;
use airlock::names::RepositoryName;
use airlock::state::{Op, StateError, StateStore};
use airlock::store::fs::FsStore;

fn repo(n: usize) -> RepositoryName {
    format!("team{n}/app").parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_commits_are_all_kept() {
    let dir = tempfile::tempdir().unwrap();
    let mut tasks = Vec::new();
    for i in 0..8 {
        let path = dir.path().to_path_buf();
        tasks.push(tokio::spawn(async move {
            let state = StateStore::new(Arc::new(FsStore::open(&path).unwrap()));
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
    let state = StateStore::new(Arc::new(FsStore::open(dir.path()).unwrap()));
    let snap = state.snapshot().await.unwrap();
    assert_eq!(snap.generation(), 8);
    assert_eq!(snap.table.repositories.len(), 8);
    for i in 0..8 {
        let r = state.repository(&snap, &repo(i)).await.unwrap().unwrap();
        assert!(
            r.blobs
                .contains_key(&Digest::sha256_of(format!("blob {i}").as_bytes()))
        );
    }
    let history = state.history().await.unwrap();
    assert_eq!(history.len(), 8);
    assert_eq!(history.last().unwrap().1.parent, None);
}

#[tokio::test]
async fn failed_change_leaves_root_and_noop_makes_no_generation() {
    let dir = tempfile::tempdir().unwrap();
    let state = StateStore::new(Arc::new(FsStore::open(dir.path()).unwrap()));
    let blob = Digest::sha256_of(b"x");
    let link = [Op::LinkBlobs {
        repo: repo(1),
        blobs: vec![(blob.clone(), 1)],
    }];
    assert_eq!(
        state.commit("first", "t", &link).await.unwrap().generation,
        1
    );
    let root = std::fs::read_to_string(dir.path().join("refs/root")).unwrap();
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
    assert_eq!(
        std::fs::read_to_string(dir.path().join("refs/root")).unwrap(),
        root
    );
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
#[tokio::test]
async fn documents_commit_with_repositories_all_or_nothing() {
    use airlock::state::DocumentChange;
    use std::collections::BTreeMap;
    let dir = tempfile::tempdir().unwrap();
    let state = StateStore::new(Arc::new(FsStore::open(dir.path()).unwrap()));
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
    assert!(snap.table.repositories.contains_key(&repo(1)));

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
    assert!(!snap.table.repositories.contains_key(&repo(2)));
    let doc: BTreeMap<String, u32> = state.document(&snap, "counters").await.unwrap().unwrap();
    assert_eq!(doc.len(), 1);
    // The same value again changes nothing: no new generation.
    let c = state.commit("same", "t", &[set("a", 1)]).await.unwrap();
    assert_eq!((c.generation, c.changed), (1, false));
}
