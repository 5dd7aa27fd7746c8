//! The chunk map: which blob holds the `.cacnk` of each chunk id.
//!
//! A chunk id is the SHA-256 of the uncompressed chunk (what the index and
//! casync name); the blobstore keys every blob by the sha256 of its stored
//! bytes, so a compressed chunk is the blob `sha256(<.cacnk bytes>)`, kept
//! and verified like any other (GC, fsck, scrub, S3 alike). The map is the
//! one place that joins the two: one JSON document per chunked blob,
//! itself a blob, named by the rootfs record ([`super::ChunkRefs`]).
//!
//! ```json
//! {"kind": "airlock.chunks.v1",
//!  "blob": "sha256:<the rootfs tar>",
//!  "index": "sha256:<the .caibx blob>",
//!  "chunks": {"<chunk id, 64 hex>": "sha256:<the .cacnk blob>", ...}}
//! ```
//!
//! Chunks are shared: two rootfs holding the same chunk name the same
//! `.cacnk` blob in their maps (the first promotion that stored it wins;
//! later ones find it present and reuse it).

use std::collections::BTreeMap;

use super::ChunkId;
use crate::digest::Digest;

/// The `kind` of a chunk map.
pub const KIND: &str = "airlock.chunks.v1";

/// One chunked blob's map from chunk id to `.cacnk` blob.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ChunkMap {
    /// Always [`KIND`].
    pub kind: String,
    /// The blob the chunks make up.
    pub blob: Digest,
    /// Its blob index (`.caibx`) blob.
    pub index: Digest,
    /// Every chunk id of the index, once, with the blob of its `.cacnk`.
    pub chunks: BTreeMap<ChunkId, Digest>,
}

impl ChunkMap {
    /// Parses a map. Errors: not JSON of this shape, or another `kind`.
    pub fn parse(bytes: &[u8]) -> Result<ChunkMap, String> {
        let m: ChunkMap = serde_json::from_slice(bytes).map_err(|e| format!("chunk map: {e}"))?;
        if m.kind != KIND {
            return Err(format!("chunk map: kind {:?}, expected {KIND:?}", m.kind));
        }
        Ok(m)
    }

    /// Every blob the map keeps: the index and each `.cacnk` (for GC and fsck).
    pub fn blobs(&self) -> impl Iterator<Item = &Digest> {
        std::iter::once(&self.index).chain(self.chunks.values())
    }
}

/// Reads the map `digest` from `store`, verified against its digest.
/// Errors: missing, corrupt or not a chunk map.
pub async fn load(
    store: &dyn crate::store::Blobstore,
    digest: &Digest,
) -> anyhow::Result<ChunkMap> {
    let bytes = crate::store::get_verified(store, digest).await?;
    ChunkMap::parse(&bytes).map_err(anyhow::Error::msg)
}
