//! Recently verified small blobs, kept in memory so that a hot manifest or
//! small layer is not read and hashed again for every GET.
//!
//! Owns: which reads may be answered from memory and the byte budget.
//! Only the bytes of a blob that [`super::verify`] found to match its
//! digest are kept, each with the identity (device, inode) of the file it
//! was read from and its change time. A read is answered from memory only
//! after a `stat(2)` of the blob's path shows that same file, unchanged
//! (objects are immutable once committed and only ever replaced by rename
//! or removed; a write in place would change the change time); a removed,
//! quarantined, replaced or modified blob is read from disk (and verified)
//! again. So every byte served has
//! been verified against its digest, as before; what changes is that a bit
//! flipped on disk after the blob was cached is found by the next read after
//! the entry is evicted (or by `airlock fsck`), never served in between.
//! Never decides what a request may read (the registry's state does).
//!
//! Bounds: blobs of at most [`HOT_BLOB_MAX`] bytes, [`HOT_BUDGET`] bytes in
//! all, evicted first in, first out.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use bytes::Bytes;

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
}

#[derive(Default)]
struct Inner {
    used: usize,
    map: HashMap<String, (FileId, Bytes)>,
    /// Keys in insertion order (the eviction order).
    order: VecDeque<String>,
}

impl HotBlobs {
    /// The verified bytes of `key` and the file they were read from; the
    /// caller serves them only if its path still names that file.
    pub fn get(&self, key: &str) -> Option<(FileId, Bytes)> {
        let inner = self.inner.lock().ok()?;
        inner.map.get(key).cloned()
    }

    /// Keeps `bytes`, verified content of `key` read from the file `id`
    /// (nothing when larger than [`HOT_BLOB_MAX`]), evicting the oldest
    /// entries beyond [`HOT_BUDGET`].
    pub fn insert(&self, key: &str, id: FileId, bytes: Bytes) {
        if bytes.len() as u64 > HOT_BLOB_MAX {
            return;
        }
        let Ok(mut inner) = self.inner.lock() else {
            return;
        };
        let len = bytes.len();
        if let Some((_, old)) = inner.map.insert(key.to_string(), (id, bytes)) {
            inner.used -= old.len();
        } else {
            inner.order.push_back(key.to_string());
        }
        inner.used += len;
        while inner.used > HOT_BUDGET {
            let Some(old) = inner.order.pop_front() else {
                break;
            };
            if let Some((_, b)) = inner.map.remove(&old) {
                inner.used -= b.len();
            }
        }
    }

    /// Forgets `key` (its file was found gone or different).
    pub fn remove(&self, key: &str) {
        if let Ok(mut inner) = self.inner.lock()
            && let Some((_, b)) = inner.map.remove(key)
        {
            inner.used -= b.len();
            inner.order.retain(|k| k != key);
        }
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
        hot.insert("blobs/a", (1, 10, 0, 0), chunk.clone());
        assert_eq!(hot.get("blobs/a"), Some(((1, 10, 0, 0), chunk.clone())));
        hot.insert(
            "blobs/big",
            (1, 12, 0, 0),
            Bytes::from(vec![0u8; HOT_BLOB_MAX as usize + 1]),
        );
        assert!(
            hot.get("blobs/big").is_none(),
            "larger than HOT_BLOB_MAX: not kept"
        );
        let n = HOT_BUDGET / HOT_BLOB_MAX as usize;
        for i in 0..n {
            hot.insert(&format!("blobs/{i}"), (1, i as u64, 0, 0), chunk.clone());
        }
        assert_eq!(hot.used(), HOT_BUDGET);
        assert!(hot.get("blobs/a").is_none(), "the oldest entry went first");
        hot.remove("blobs/0");
        assert_eq!(hot.used(), HOT_BUDGET - HOT_BLOB_MAX as usize);
    }
}
