//! Unit tests of the paged tree: splits, merges, deltas and reads.

use super::*;

fn pages() -> (tempfile::TempDir, Pages) {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(crate::store::fs::FsStore::open(dir.path()).unwrap());
    let cache = Arc::new(Mutex::new(ByteLru::new(1 << 20)));
    let staged = Default::default();
    (
        dir,
        Pages {
            store,
            cache,
            staged,
            superseded: Default::default(),
            memo: Arc::new(super::super::memo::Memo::new(true)),
        },
    )
}

fn key(i: usize) -> String {
    format!("k{:06}", i * 7919 % 100_000)
}

/// Every page of the tree is bounded, its levels are consistent, and
/// its leaves hold `want` in order.
async fn check(p: &Pages, root: &Digest, want: &BTreeMap<String, String>) {
    let all = p.range(root, "", "\u{7f}", usize::MAX).await.unwrap();
    let got: BTreeMap<String, String> = all
        .into_iter()
        .map(|(k, v)| (k, parse_value::<String>(&v).unwrap()))
        .collect();
    assert_eq!(&got, want);
    let mut stack = vec![root.clone()];
    while let Some(d) = stack.pop() {
        let page = p.load(&d).await.unwrap();
        let len = serde_json::to_vec(&*page).unwrap().len();
        assert!(len <= MAX_PAGE_BYTES + 64, "page of {len} bytes");
        if page.level > 0 {
            for i in 0..page.entries.len() {
                let child = p.load(&page.child(i).unwrap()).await.unwrap();
                assert_eq!(child.level + 1, page.level);
                assert_eq!(child.entries[0].0, page.entries[i].0);
                stack.push(page.child(i).unwrap());
            }
        }
    }
    for k in want.keys() {
        let v = p.get(root, k).await.unwrap().unwrap();
        assert_eq!(&parse_value::<String>(&v).unwrap(), &want[k]);
    }
}

#[tokio::test]
async fn inserts_deletes_and_shares_pages() {
    let (_dir, p) = pages();
    let mut want = BTreeMap::new();
    let mut root: Option<Digest> = None;
    // 3,000 keys in batches of 1 to 300, then remove two thirds one by one.
    let mut i = 0;
    for batch in [1, 2, 300, 1, 1000, 7, 1000, 689] {
        let mut delta = Delta::new();
        for _ in 0..batch {
            let v = format!("v{i}-{}", "x".repeat(100));
            delta.insert(key(i), Some(string_value(&v)));
            want.insert(key(i), v);
            i += 1;
        }
        root = p.apply(root.as_ref(), &delta).await.unwrap();
    }
    let full = root.clone().unwrap();
    check(&p, &full, &want).await;
    assert!(
        p.load(&full).await.unwrap().level >= 2,
        "a tree of several levels"
    );
    // A no-op delta keeps the root.
    let same: Delta = [(key(5), Some(string_value(&want[&key(5)])))].into();
    assert_eq!(p.apply(root.as_ref(), &same).await.unwrap(), root);
    for j in 0..40 {
        let delta: Delta = (0..50).map(|k| (key(j * 50 + k), None)).collect();
        for k in delta.keys() {
            want.remove(k);
        }
        root = p.apply(root.as_ref(), &delta).await.unwrap();
    }
    p.flush(&[root.clone().unwrap()], Vec::new()).await.unwrap();
    check(&p, root.as_ref().unwrap(), &want).await;
    let delta: Delta = want.keys().map(|k| (k.clone(), None)).collect();
    assert_eq!(p.apply(root.as_ref(), &delta).await.unwrap(), None);
    // Removing an absent key from the empty tree is nothing.
    let empty = p.empty().await.unwrap();
    assert_eq!(
        p.apply(Some(&empty), &[(key(1), None)].into())
            .await
            .unwrap(),
        Some(empty)
    );
}

/// The digests of every page of the tree `root`.
async fn tree_pages(p: &Pages, root: &Digest) -> std::collections::HashSet<Digest> {
    let mut all = std::collections::HashSet::new();
    let mut stack = vec![root.clone()];
    while let Some(d) = stack.pop() {
        let page = p.read(&d, false).await.unwrap();
        for i in 0..page.entries.len() * usize::from(page.level > 0) {
            stack.push(page.child(i).unwrap());
        }
        all.insert(d);
    }
    all
}

#[tokio::test]
async fn a_landed_change_forgets_the_pages_it_replaced() {
    let (_dir, p) = pages();
    let delta: Delta = (0..3000)
        .map(|i| (key(i), Some(string_value(&"x".repeat(100)))))
        .collect();
    let mut root = p.apply(None, &delta).await.unwrap().unwrap();
    p.flush(std::slice::from_ref(&root), Vec::new())
        .await
        .unwrap();
    p.forget_superseded();
    let first = tree_pages(&p, &root).await;
    for i in 0..60 {
        let delta: Delta = [(key(i * 37), Some(string_value(&format!("v{i}"))))].into();
        root = p.apply(Some(&root), &delta).await.unwrap().unwrap();
        p.flush(std::slice::from_ref(&root), Vec::new())
            .await
            .unwrap();
        p.forget_superseded();
    }
    let live = tree_pages(&p, &root).await;
    let cached = p.cache.lock().unwrap().keys();
    let stale: Vec<_> = cached.iter().filter(|d| !live.contains(d)).collect();
    assert!(
        stale.is_empty(),
        "{} superseded pages still cached",
        stale.len()
    );
    assert!(
        cached.iter().filter(|d| first.contains(d)).count() < first.len(),
        "pages of the first tree were replaced"
    );
    // A discarded attempt forgets nothing: its pages were never stored.
    let before = p.cache.lock().unwrap().keys().len();
    let delta: Delta = [(key(1), Some(string_value("gone")))].into();
    p.apply(Some(&root), &delta).await.unwrap();
    p.discard();
    p.forget_superseded();
    assert_eq!(p.cache.lock().unwrap().keys().len(), before);
}
