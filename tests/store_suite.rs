//! One test suite for every blobstore backend (after distribution's storage
//! driver suite): each backend only supplies a constructor.

use std::sync::Arc;

use airlock::digest::Digest;
use airlock::store::{self, Blobstore, StoreError, blob_key, fs::FsStore};
use bytes::Bytes;
use tokio::io::AsyncReadExt;

async fn read(store: &dyn Blobstore, key: &str, range: Option<(u64, u64)>) -> Vec<u8> {
    let mut r = store.read(key, range).await.unwrap();
    let mut out = Vec::new();
    r.read_to_end(&mut out).await.unwrap();
    out
}

async fn collect(store: &dyn Blobstore, key: &str, range: Option<(u64, u64)>) -> Vec<u8> {
    use futures_util::StreamExt;
    let mut stream = store.stream(key, range).await.unwrap();
    let mut out = Vec::new();
    while let Some(chunk) = stream.next().await {
        out.extend_from_slice(&chunk.unwrap());
    }
    out
}

/// Every behaviour the rest of airlock relies on.
async fn suite(store: Arc<dyn Blobstore>) {
    let s = &*store;
    // Nothing is visible before commit; cancel leaves nothing.
    let big: Vec<u8> = (0..300_000u32).map(|i| (i % 253) as u8).collect();
    let d = Digest::sha256_of(&big);
    let key = blob_key(&d);
    let mut w = s.writer(&key).await.unwrap();
    w.write(Bytes::copy_from_slice(&big[..1000])).await.unwrap();
    assert_eq!(s.stat(&key).await.unwrap(), None);
    w.cancel().await.unwrap();
    assert_eq!(s.stat(&key).await.unwrap(), None);
    let mut w = s.writer(&key).await.unwrap();
    for c in big.chunks(70_000) {
        w.write(Bytes::copy_from_slice(c)).await.unwrap();
    }
    w.commit().await.unwrap();
    s.sync().await.unwrap();
    assert_eq!(s.stat(&key).await.unwrap(), Some(big.len() as u64));
    assert_eq!(read(s, &key, None).await, big);
    // Ranges, inline (small) and streamed (large).
    assert_eq!(read(s, &key, Some((10, 20))).await, &big[10..20]);
    assert_eq!(
        read(s, &key, Some((1000, 250_000))).await,
        &big[1000..250_000]
    );
    assert_eq!(read(s, &key, Some((5, 5))).await, b"");
    assert!(matches!(
        s.read(&key, Some((0, big.len() as u64 + 1))).await,
        Err(StoreError::Range { .. })
    ));
    assert!(matches!(
        s.read(&key, Some((9, 3))).await,
        Err(StoreError::Range { .. })
    ));
    assert!(matches!(
        s.read("blobs/sha256/00/none", None).await,
        Err(StoreError::NotFound(_))
    ));
    // Streams (response bodies): whole, large unaligned range, small range, errors.
    assert_eq!(collect(s, &key, None).await, big);
    assert_eq!(
        collect(s, &key, Some((4097, 250_001))).await,
        &big[4097..250_001]
    );
    assert_eq!(
        collect(s, &key, Some((299_990, 300_000))).await,
        &big[299_990..]
    );
    assert_eq!(collect(s, &key, Some((7, 7))).await, b"");
    assert!(matches!(
        s.stream(&key, Some((0, 300_001))).await,
        Err(StoreError::Range { .. })
    ));
    assert!(matches!(
        s.stream("blobs/sha256/00/none", None).await,
        Err(StoreError::NotFound(_))
    ));
    // Small blobs through the helpers, verified on the way out.
    let small = store::put_bytes(s, b"hello").await.unwrap();
    assert_eq!(store::get_verified(s, &small).await.unwrap(), b"hello");
    // Listing is sorted and relative.
    let keys = s.list("blobs/").await.unwrap();
    let mut want = vec![key.clone(), blob_key(&small)];
    want.sort();
    assert_eq!(keys, want);
    assert!(s.list("nothing-here/").await.unwrap().is_empty());
    // Delete is idempotent.
    s.delete(&blob_key(&small)).await.unwrap();
    s.delete(&blob_key(&small)).await.unwrap();
    assert_eq!(s.stat(&blob_key(&small)).await.unwrap(), None);
    // Keys outside the grammar are refused before touching storage.
    for bad in ["../x", "/x", "a//b", "a/./b", "A", "", "a/ b"] {
        assert!(
            matches!(s.stat(bad).await, Err(StoreError::InvalidKey(_))),
            "{bad}"
        );
        assert!(s.writer(bad).await.is_err(), "{bad}");
    }
    // Root compare-and-swap.
    assert_eq!(s.read_root().await.unwrap(), None);
    assert!(s.swap_root(None, "one").await.unwrap());
    assert!(!s.swap_root(None, "two").await.unwrap());
    let v1 = s.read_root().await.unwrap().unwrap();
    assert_eq!(v1.value, "one");
    assert!(s.swap_root(Some(&v1), "two").await.unwrap());
    assert!(
        !s.swap_root(Some(&v1), "three").await.unwrap(),
        "stale version must lose"
    );
    assert_eq!(s.read_root().await.unwrap().unwrap().value, "two");
}

/// Many concurrent swaps from the same version: exactly one wins.
async fn cas_race(store: Arc<dyn Blobstore>) {
    assert!(store.swap_root(None, "base").await.unwrap());
    let base = store.read_root().await.unwrap().unwrap();
    let mut tasks = Vec::new();
    for i in 0..16 {
        let (s, b) = (store.clone(), base.clone());
        tasks.push(tokio::spawn(async move {
            s.swap_root(Some(&b), &format!("v{i}")).await.unwrap()
        }));
    }
    let mut wins = 0;
    for t in tasks {
        wins += usize::from(t.await.unwrap());
    }
    assert_eq!(wins, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fs_backend_passes_the_suite() {
    let dir = tempfile::tempdir().unwrap();
    suite(Arc::new(FsStore::open(dir.path()).unwrap())).await;
    let dir = tempfile::tempdir().unwrap();
    cas_race(Arc::new(FsStore::open(dir.path()).unwrap())).await;
}
