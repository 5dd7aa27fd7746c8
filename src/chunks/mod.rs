//! Rootfs deltas in casync's formats: the content-defined chunker, the
//! blob index (`.caibx`), compressed chunks (`.cacnk`) and the chunk
//! stores they are read from.
//!
//! Owns: chunk boundaries and ids ([`chunker`], SHA-256 as `casync
//! --digest=sha256`), the index format ([`index`]), chunk compression and
//! verification ([`cacnk`]), the chunk map that keys compressed chunks as
//! ordinary blobs ([`map`]), cutting a stored blob into chunks ([`build`]),
//! where chunks are read from ([`store`]: airlock's blobstore, or a chunk
//! store over HTTP) and putting a blob together again from chunks and
//! seeds ([`assemble`]); and the other delta, one zstd patch from the
//! rootfs a promotion replaced ([`patch`]). Never speaks the stacks API or decides what is
//! promoted: `stacks` calls [`build`] at promotion and serves the index and
//! the chunks; `cell` calls [`assemble`].
//!
//! Keys (see [`map`]): a chunk's id is the SHA-256 of its *uncompressed*
//! bytes (what the index names and what casync asks for); its `.cacnk` (a
//! zstd frame) is stored as an ordinary blob under the sha256 of the
//! *compressed* bytes, like every other blob. One chunk map per rootfs
//! (`airlock.chunks.v1`, itself a blob) maps each id to that blob digest;
//! the rootfs record names the index blob and the map.

pub mod assemble;
pub mod build;
pub mod cacnk;
pub mod chunker;
pub mod index;
pub mod map;
pub mod patch;
pub mod store;

use std::fmt;
use std::str::FromStr;

pub use chunker::{ChunkSizes, Chunker};
pub use index::{BlobIndex, IndexChunk};

/// A chunk id: the SHA-256 of the chunk's uncompressed bytes.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ChunkId(pub [u8; 32]);

impl ChunkId {
    /// The id of `data`.
    pub fn of(data: &[u8]) -> ChunkId {
        use sha2::Digest as _;
        ChunkId(sha2::Sha256::digest(data).into())
    }

    /// The 32 bytes.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// The chunk's path in a casync chunk store: `<first 4 hex>/<64 hex>.cacnk`.
    pub fn store_path(&self) -> String {
        let hex = self.to_string();
        format!("{}/{hex}.cacnk", &hex[..4])
    }
}

impl fmt::Display for ChunkId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&hex::encode(self.0))
    }
}

impl fmt::Debug for ChunkId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ChunkId({self})")
    }
}

impl FromStr for ChunkId {
    type Err = String;

    /// 64 lower-case hex characters.
    fn from_str(s: &str) -> Result<ChunkId, String> {
        let mut id = [0u8; 32];
        if s.len() != 64 || s.bytes().any(|b| b.is_ascii_uppercase()) {
            return Err(format!(
                "chunk id {s:?}: expected 64 lower-case hex characters"
            ));
        }
        hex::decode_to_slice(s, &mut id)
            .map_err(|_| format!("chunk id {s:?}: expected 64 lower-case hex characters"))?;
        Ok(ChunkId(id))
    }
}

impl serde::Serialize for ChunkId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for ChunkId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<ChunkId, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// Parses a chunk store path `<4 hex>/<64 hex>.cacnk` (what casync asks a
/// store for); `None` for anything else, including a prefix that is not
/// the id's.
pub fn parse_store_path(path: &str) -> Option<ChunkId> {
    let (prefix, file) = path.split_once('/')?;
    let id: ChunkId = file.strip_suffix(".cacnk")?.parse().ok()?;
    (prefix.len() == 4 && id.to_string().starts_with(prefix)).then_some(id)
}

/// What the rootfs record keeps of its chunks: the index and the map.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ChunkRefs {
    /// The `.caibx` blob (sha256 of its bytes).
    pub index: crate::digest::Digest,
    /// The chunk map blob ([`map::ChunkMap`]).
    pub map: crate::digest::Digest,
    /// Chunks in the index.
    pub chunks: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_paths() {
        let id = ChunkId::of(b"");
        assert_eq!(
            id.store_path(),
            "e3b0/e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855.cacnk"
        );
        assert_eq!(parse_store_path(&id.store_path()), Some(id));
        assert_eq!(
            parse_store_path(
                "e3b1/e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855.cacnk"
            ),
            None
        );
        assert_eq!(
            parse_store_path(
                "e3b0/E3B0C44298FC1C149AFBF4C8996FB92427AE41E4649B934CA495991B7852B855.cacnk"
            ),
            None
        );
        assert_eq!(parse_store_path("e3b0/x.cacnk"), None);
    }
}
