//! Direct access to the objects of a [`Backend`]'s store, for scenarios
//! that plant, damage or inspect objects the same way on every backend
//! (a file below the data directory, or an object in the bucket). Goes
//! through airlock's own blobstore, opened on its own runtime; reads of
//! `blobs/` keys are verified by it (a corrupt blob reads as absent).

use std::path::Path;
use std::sync::Arc;

use airlock::store::Blobstore;
use airlock::store::fs::FsStore;
use airlock::store::s3::S3Store;

use super::backend::Backend;

/// The store of one backend.
pub struct Objects {
    rt: tokio::runtime::Runtime,
    store: Arc<dyn Blobstore>,
}

/// `blobs/sha256/<2 hex>/<hex>` of `sha256:<hex>`.
pub fn blob_key(digest: &str) -> String {
    let hex = digest.strip_prefix("sha256:").unwrap();
    format!("blobs/sha256/{}/{hex}", &hex[..2])
}

/// `quarantine/sha256/<2 hex>/<hex>` of `sha256:<hex>`.
pub fn quarantine_key(digest: &str) -> String {
    blob_key(digest).replacen("blobs/", "quarantine/", 1)
}

/// The entries of a copy pack (`copies/packs/`), read by this parser of
/// the tests' own: (digest, offset, length). Format `airlock.copies.v2`
/// (written now): a first line `airlock.copies.v2 <header length> <n>`, n
/// lines `<digest> <offset> <length>`, then the blobs' bytes; the first
/// format `airlock.copies.v1` had lines `<digest> <length>` with offsets
/// summed from the header length. Empty when `pack` is not one.
pub fn pack_entries(pack: &[u8]) -> Vec<(String, usize, usize)> {
    let Some(nl) = pack.iter().position(|&b| b == b'\n') else {
        return vec![];
    };
    let first = String::from_utf8_lossy(&pack[..nl]);
    let words: Vec<&str> = first.split(' ').collect();
    let (Some(&magic), Some(Ok(header))) =
        (words.first(), words.get(1).map(|w| w.parse::<usize>()))
    else {
        return vec![];
    };
    let text = String::from_utf8_lossy(&pack[nl + 1..header.min(pack.len())]).into_owned();
    let mut offset = header;
    let mut out = vec![];
    for line in text.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        match (magic, &fields[..]) {
            ("airlock.copies.v2", [d, at, len]) => {
                out.push((d.to_string(), at.parse().unwrap(), len.parse().unwrap()));
            }
            ("airlock.copies.v1", [d, len]) => {
                let len: usize = len.parse().unwrap();
                out.push((d.to_string(), offset, len));
                offset += len;
            }
            _ => return vec![],
        }
    }
    out
}

impl Objects {
    /// The copy packs holding a copy of `digest`: (pack key, offset,
    /// length of the entry), by [`pack_entries`].
    pub fn copies_of(&self, digest: &str) -> Vec<(String, usize, usize)> {
        let mut out = vec![];
        for key in self.keys("copies/packs/") {
            let pack = self.get(&key).unwrap_or_default();
            for (d, at, len) in pack_entries(&pack) {
                if d == digest {
                    out.push((key.clone(), at, len));
                }
            }
        }
        out
    }

    /// Flips one byte of every copy of `digest` (the packs' other entries
    /// untouched); returns how many there were.
    pub fn damage_copies(&self, digest: &str) -> usize {
        let found = self.copies_of(digest);
        for (key, at, len) in &found {
            let mut pack = self.get(key).unwrap();
            pack[at + len / 2] ^= 0x20;
            self.put(key, &pack);
        }
        found.len()
    }

    /// Opens the store of `b` (the S3 prefix `site/` of [`Backend::store_args`]).
    pub fn of(b: &Backend) -> Objects {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let store: Arc<dyn Blobstore> = match &b.s3 {
            None => Arc::new(FsStore::open(&b.data_dir()).unwrap()),
            Some(server) => {
                super::backend::set_aws_env();
                Arc::new(
                    rt.block_on(S3Store::open(&server.settings("site")))
                        .unwrap(),
                )
            }
        };
        Objects { rt, store }
    }

    /// The whole object at `key`, `None` when absent (or, for a blob,
    /// found corrupt).
    pub fn get(&self, key: &str) -> Option<Vec<u8>> {
        self.rt
            .block_on(airlock::store::read_all(&*self.store, key))
            .ok()
    }

    /// Writes `bytes` at `key` (replacing it).
    pub fn put(&self, key: &str, bytes: &[u8]) {
        self.rt.block_on(async {
            let mut w = self.store.writer(key).await.unwrap();
            w.write(bytes::Bytes::copy_from_slice(bytes)).await.unwrap();
            w.commit().await.unwrap();
            self.store.sync().await.unwrap();
        })
    }

    /// Writes the file `path` at `key`.
    pub fn put_file(&self, key: &str, path: &Path) {
        self.put(key, &std::fs::read(path).unwrap());
    }

    /// Removes `key`.
    pub fn delete(&self, key: &str) {
        self.rt.block_on(self.store.delete(key)).unwrap();
    }

    /// Whether `key` holds an object.
    pub fn exists(&self, key: &str) -> bool {
        self.rt.block_on(self.store.stat(key)).unwrap().is_some()
    }

    /// The keys below `prefix` (ending in `/`), sorted.
    pub fn keys(&self, prefix: &str) -> Vec<String> {
        self.rt.block_on(self.store.list(prefix)).unwrap()
    }
}
