//! Recently verified small blobs, kept in memory so that a hot manifest or
//! small layer is not read and hashed again for every GET.
//!
//! Owns: which reads may be answered from memory and the byte budget.
//! Only the bytes of a blob that [`super::verify`] found to match its
//! digest are kept, each with the identity (device, inode) of the file it
//! was read from and its change time. Objects are immutable once committed
//! and only ever replaced by rename or removed; a write in place would
//! change the change time. A read is answered from memory when a
//! `stat(2)` of the blob's path showed that same file, unchanged, since the
//! store last saw `refs/root` change (the root *epoch*, see
//! [`super::fs`]): while the root stays the same, the state names the same
//! blobs, and nothing that keeps a blob the state names removes or
//! rewrites it (GC removes only blobs no retained generation reaches;
//! this process's own deletes, renames and quarantines forget the entry at
//! once). The first read after a root change stats the file again; a
//! removed, quarantined, replaced or modified blob is then read from disk
//! (and verified) again. Every byte served has been verified against its
//! digest; what memory changes is that a bit flipped on disk after the
//! blob was cached is found by the next read after the entry is evicted
//! (or by `airlock fsck`), never served in between.
//! Never decides what a request may read (the registry's state does).
//!
//! Bounds: blobs of at most [`HOT_BLOB_MAX`] bytes, [`HOT_BUDGET`] bytes in
//! all, evicted first in, first out.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;

use crate::digest::DigestMap;

/// Blobs of at most this many bytes (64 KiB: manifests, configs, small
/// layers) are kept once verified.
pub const HOT_BLOB_MAX: u64 = 64 << 10;
/// Bytes of blobs kept at most (8 MiB).
pub const HOT_BUDGET: usize = 8 << 20;

/// The identity of a file and of its content: (device, inode, change time
/// in seconds, its nanoseconds). A write in place changes the change time.
pub type FileId = (u64, u64, i64, i64);

/// Verified small blobs by object key.
#[derive(Default)]
pub struct HotBlobs {
    inner: Mutex<Inner>,
    /// Calls of [`HotBlobs::remove`] so far ([`HotBlobs::removals`]).
    removals: AtomicU64,
}

/// One blob held: the file it was read from, the root epoch in which a
/// `stat(2)` last showed that file at its path, and the bytes.
#[derive(Clone, Debug, PartialEq)]
pub struct Hot {
    /// The file the bytes were read from.
    pub id: FileId,
    /// The root epoch of the last check that the path names `id`.
    pub epoch: u64,
    /// The verified bytes.
    pub bytes: Bytes,
}

#[derive(Default)]
struct Inner {
    used: usize,
    map: DigestMap<String, Hot>,
    /// Keys in insertion order (the eviction order).
    order: VecDeque<String>,
}

impl HotBlobs {
    /// The verified bytes of `key`, the file they were read from and the
    /// epoch of its last check; the caller serves them only if its path
    /// still names that file (checked in that epoch, or now).
    pub fn get(&self, key: &str) -> Option<Hot> {
        let inner = self.inner.lock().ok()?;
        inner.map.get(key).cloned()
    }

    /// Records that `key`'s path was found naming its file in `epoch`.
    pub fn checked(&self, key: &str, epoch: u64) {
        if let Ok(mut inner) = self.inner.lock()
            && let Some(h) = inner.map.get_mut(key)
        {
            h.epoch = h.epoch.max(epoch);
        }
    }

    /// Keeps `bytes`, verified content of `key` read from the file `id`
    /// (its path checked in `epoch`; nothing when larger than
    /// [`HOT_BLOB_MAX`]), evicting the oldest entries beyond [`HOT_BUDGET`].
    pub fn insert(&self, key: &str, id: FileId, epoch: u64, bytes: Bytes) {
        if bytes.len() as u64 > HOT_BLOB_MAX {
            return;
        }
        let Ok(mut inner) = self.inner.lock() else {
            return;
        };
        let len = bytes.len();
        if let Some(old) = inner.map.insert(key.to_string(), Hot { id, epoch, bytes }) {
            inner.used -= old.bytes.len();
        } else {
            inner.order.push_back(key.to_string());
        }
        inner.used += len;
        while inner.used > HOT_BUDGET {
            let Some(old) = inner.order.pop_front() else {
                break;
            };
            if let Some(h) = inner.map.remove(&old) {
                inner.used -= h.bytes.len();
            }
        }
    }

    /// Forgets `key` (its file was found gone or different, or it is
    /// deleted, renamed or to be verified again), held or not; counted
    /// ([`HotBlobs::removals`]) when it may be a blob's (it contains
    /// `blobs/`: a blob key, with an S3 prefix or without; another key
    /// that contains it is counted too, which only makes an answer kept
    /// above the store read again).
    pub fn remove(&self, key: &str) {
        if key.contains("blobs/") {
            self.removals.fetch_add(1, Ordering::Release);
        }
        if let Ok(mut inner) = self.inner.lock()
            && let Some(h) = inner.map.remove(key)
        {
            inner.used -= h.bytes.len();
            inner.order.retain(|k| k != key);
        }
    }

    /// How many times [`HotBlobs::remove`] was called for a blob's key,
    /// counted up: what
    /// [`crate::store::Blobstore::forgotten`] reports.
    pub fn removals(&self) -> u64 {
        self.removals.load(Ordering::Acquire)
    }

    /// Bytes held now.
    #[cfg(test)]
    fn used(&self) -> usize {
        self.inner.lock().map(|i| i.used).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn served_only_for_the_same_file_and_bounded() {
        let hot = HotBlobs::default();
        let chunk = Bytes::from(vec![7u8; HOT_BLOB_MAX as usize]);
        hot.insert("blobs/a", (1, 10, 0, 0), 3, chunk.clone());
        let held = |epoch| {
            Some(Hot {
                id: (1, 10, 0, 0),
                epoch,
                bytes: chunk.clone(),
            })
        };
        assert_eq!(hot.get("blobs/a"), held(3));
        hot.checked("blobs/a", 4);
        assert_eq!(hot.get("blobs/a"), held(4));
        hot.insert(
            "blobs/big",
            (1, 12, 0, 0),
            0,
            Bytes::from(vec![0u8; HOT_BLOB_MAX as usize + 1]),
        );
        assert!(
            hot.get("blobs/big").is_none(),
            "larger than HOT_BLOB_MAX: not kept"
        );
        let n = HOT_BUDGET / HOT_BLOB_MAX as usize;
        for i in 0..n {
            hot.insert(&format!("blobs/{i}"), (1, i as u64, 0, 0), 0, chunk.clone());
        }
        assert_eq!(hot.used(), HOT_BUDGET);
        assert!(hot.get("blobs/a").is_none(), "the oldest entry went first");
        hot.remove("blobs/0");
        assert_eq!(hot.used(), HOT_BUDGET - HOT_BLOB_MAX as usize);
    }

    #[test]
    fn removals_of_blob_keys_are_counted_held_or_not() {
        let hot = HotBlobs::default();
        hot.insert(
            "blobs/sha256/ab/ab1",
            (1, 2, 3, 4),
            0,
            Bytes::from_static(b"x"),
        );
        assert_eq!(hot.removals(), 0);
        hot.remove("blobs/sha256/ab/ab1");
        hot.remove("blobs/sha256/cd/cd2"); // not held: counted all the same
        hot.remove("site-a/blobs/sha256/ef/ef3"); // an S3 prefix
        assert_eq!(hot.removals(), 3);
        hot.remove("pulls/abc.json");
        hot.remove("uploads/1/data");
        assert_eq!(hot.removals(), 3, "not a blob's key");
    }
}
