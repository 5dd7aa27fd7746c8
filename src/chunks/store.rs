//! Chunk stores: where the `.cacnk` of a chunk id is read from.
//!
//! Owns: the [`ChunkStore`] interface (one call: the stored bytes of a
//! chunk, or that the store lacks it), the local implementation over
//! airlock's blobstore ([`BlobChunkStore`], chunks located through the
//! chunk maps of [`super::map`]) and the [`ChunkLookup`] that locates them.
//! The HTTP implementation a cell uses lives with the cell's client
//! (`cell::client`), which owns URLs and credentials. Never verifies: a
//! caller checks each chunk by its id ([`super::cacnk::decompress_verified`]).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use anyhow::Result;
use bytes::Bytes;

use super::ChunkId;
use super::map;
use crate::digest::Digest;
use crate::store::{self, Blobstore, StoreError, blob_key};

/// A source of `.cacnk` bytes by chunk id.
#[async_trait::async_trait]
pub trait ChunkStore: Send + Sync {
    /// The stored (compressed, unverified) bytes of chunk `id`; `None` when
    /// the store does not hold it. Errors: the store could not be read.
    async fn fetch(&self, id: &ChunkId) -> Result<Option<Bytes>>;
}

/// Where each chunk id of a set of chunk maps is stored.
#[derive(Debug, Default)]
pub struct ChunkLookup {
    maps: HashSet<Digest>,
    by_id: HashMap<ChunkId, Digest>,
    /// The maps read, in the order read (indexes of `owners`).
    order: Vec<Digest>,
    /// Which maps name each chunk (indexes into `order`).
    owners: HashMap<ChunkId, Vec<u32>>,
}

impl ChunkLookup {
    /// The lookup of `maps`, reusing what `previous` already read when
    /// every map it read is still wanted (the common case: one more
    /// promotion). A map that cannot be read is left out with a warning
    /// (its chunks answer as absent). Errors: none but a failing store.
    pub async fn load(
        store: Arc<dyn Blobstore>,
        maps: HashSet<Digest>,
        previous: Option<Arc<ChunkLookup>>,
    ) -> Result<ChunkLookup> {
        let mut out = match previous {
            Some(p) if p.maps.is_subset(&maps) => ChunkLookup {
                maps: p.maps.clone(),
                by_id: p.by_id.clone(),
                order: p.order.clone(),
                owners: p.owners.clone(),
            },
            _ => ChunkLookup::default(),
        };
        for m in maps {
            if out.maps.contains(&m) {
                continue;
            }
            match map::load(&*store, &m).await {
                Ok(doc) => {
                    let index = out.order.len() as u32;
                    out.order.push(m.clone());
                    for (id, d) in doc.chunks {
                        out.owners.entry(id).or_default().push(index);
                        out.by_id.entry(id).or_insert(d);
                    }
                }
                Err(e) => match e.downcast_ref::<StoreError>() {
                    Some(StoreError::Io(_) | StoreError::Unavailable(_)) => return Err(e),
                    _ => {
                        tracing::warn!(map = %m, error = %e, "chunk map unreadable; its chunks are not served")
                    }
                },
            }
            out.maps.insert(m);
        }
        Ok(out)
    }

    /// The maps read.
    pub fn maps(&self) -> &HashSet<Digest> {
        &self.maps
    }

    /// The blob holding the `.cacnk` of `id`.
    pub fn get(&self, id: &ChunkId) -> Option<&Digest> {
        self.by_id.get(id)
    }

    /// The chunk maps that name `id` (each rootfs's map; none for an
    /// unknown chunk).
    pub fn maps_of(&self, id: &ChunkId) -> impl Iterator<Item = &Digest> {
        self.owners
            .get(id)
            .into_iter()
            .flatten()
            .filter_map(|i| self.order.get(*i as usize))
    }

    /// Distinct chunks known.
    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    /// Whether no chunk is known.
    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }
}

/// The chunks of airlock's blobstore that `lookup` locates.
pub struct BlobChunkStore {
    /// The store.
    pub store: Arc<dyn Blobstore>,
    /// Where each chunk is.
    pub lookup: Arc<ChunkLookup>,
}

#[async_trait::async_trait]
impl ChunkStore for BlobChunkStore {
    async fn fetch(&self, id: &ChunkId) -> Result<Option<Bytes>> {
        let Some(d) = self.lookup.get(id) else {
            return Ok(None);
        };
        match store::read_all(&*self.store, &blob_key(d)).await {
            Ok(b) => Ok(Some(Bytes::from(b))),
            Err(StoreError::NotFound(_)) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }
}
