//! The casync blob index (`.caibx`) as a plain value: written, read and
//! compared byte for byte with what `casync make` writes.
//!
//! Layout (`src/caformat.h`, all integers little-endian u64):
//!
//! ```text
//! CaFormatIndex      size = 48, type = CA_FORMAT_INDEX, feature_flags,
//!                    chunk_size_min, chunk_size_avg, chunk_size_max
//! CaFormatTable      size = u64::MAX, type = CA_FORMAT_TABLE
//! CaFormatTableItem  offset (end of the chunk in the blob), chunk id (32 bytes)  × n
//! CaFormatTableTail  0, 0, index_offset = 48, size (of the table: 16 + 40 n + 40),
//!                    CA_FORMAT_TABLE_TAIL_MARKER
//! ```
//!
//! Feature flags are what `casync make --digest=sha256` writes for a blob:
//! `CA_FORMAT_EXCLUDE_NODUMP | CA_FORMAT_EXCLUDE_FILE` (its defaults), and
//! not `CA_FORMAT_SHA512_256` (so the ids are SHA-256). The compression of
//! the chunks is not recorded in the index: casync detects it from each
//! `.cacnk` file (a zstd frame here).

use super::{ChunkId, ChunkSizes};

/// `CA_FORMAT_INDEX`: the type of the index header.
pub const CA_FORMAT_INDEX: u64 = 0x96824d9c7b129ff9;
/// `CA_FORMAT_TABLE`: the type of the table header.
pub const CA_FORMAT_TABLE: u64 = 0xe75b9e112f17417d;
/// `CA_FORMAT_TABLE_TAIL_MARKER`: the last 8 bytes of an index.
pub const CA_FORMAT_TABLE_TAIL_MARKER: u64 = 0x4b4f050e5549ecd1;
/// `CA_FORMAT_SHA512_256`: ids are SHA-512/256 (casync's default); unset: SHA-256.
pub const CA_FORMAT_SHA512_256: u64 = 0x2000000000000000;
/// `CA_FORMAT_EXCLUDE_FILE`: honour `.caexclude` (a `casync make` default).
pub const CA_FORMAT_EXCLUDE_FILE: u64 = 0x1000000000000000;
/// `CA_FORMAT_EXCLUDE_NODUMP`: skip `chattr +d` files (a `casync make` default).
pub const CA_FORMAT_EXCLUDE_NODUMP: u64 = 0x8000000000000000;
/// The flags `casync make --digest=sha256` writes into a blob index.
pub const SHA256_BLOB_FLAGS: u64 = CA_FORMAT_EXCLUDE_NODUMP | CA_FORMAT_EXCLUDE_FILE;

const HEADER: usize = 48;
const TABLE_HEADER: usize = 16;
const ITEM: usize = 40;
const TAIL: usize = 40;

/// Largest index read (a 1 TiB blob of 16 KiB chunks is 2.6 GB; airlock's
/// rootfs indexes are a few hundred KiB): 256 MiB.
pub const MAX_INDEX_BYTES: usize = 256 << 20;

/// One chunk of a blob: where it ends and its id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexChunk {
    /// Offset one past the chunk's last byte in the blob.
    pub end: u64,
    /// SHA-256 of the chunk's (uncompressed) bytes.
    pub id: ChunkId,
}

/// A blob index: the blob as its chunks, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlobIndex {
    /// `feature_flags` of the header ([`SHA256_BLOB_FLAGS`] when airlock writes one).
    pub feature_flags: u64,
    /// The chunker's sizes.
    pub sizes: ChunkSizes,
    /// Every chunk, in blob order.
    pub chunks: Vec<IndexChunk>,
}

/// Why bytes are not a blob index airlock can use.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IndexError {
    /// Not of the layout above (a wrong magic, size or marker, a truncated table).
    #[error("not a casync blob index: {0}")]
    Format(String),
    /// A valid index whose ids are not SHA-256.
    #[error(
        "the index uses SHA-512/256 chunk ids; airlock reads SHA-256 ones (casync --digest=sha256)"
    )]
    Digest,
}

fn le(b: &[u8], at: usize) -> u64 {
    let mut x = [0u8; 8];
    x.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(x)
}

impl BlobIndex {
    /// The index of `data` cut with `sizes` (a blob in memory; a stored
    /// one is cut as it streams, [`super::build`]). Errors: sizes the
    /// chunker refuses ([`ChunkSizes::check`]).
    pub fn of(data: &[u8], sizes: ChunkSizes) -> Result<BlobIndex, String> {
        let chunker = super::Chunker::new(sizes)?;
        let mut chunks = Vec::new();
        let mut end = 0usize;
        for len in super::chunker::chunk_lengths(&chunker, data) {
            chunks.push(IndexChunk {
                end: (end + len) as u64,
                id: ChunkId::of(&data[end..end + len]),
            });
            end += len;
        }
        Ok(BlobIndex {
            feature_flags: SHA256_BLOB_FLAGS,
            sizes,
            chunks,
        })
    }

    /// The size of the blob (the last chunk's end; 0 when empty).
    pub fn blob_size(&self) -> u64 {
        self.chunks.last().map_or(0, |c| c.end)
    }

    /// The byte range of chunk `i` in the blob.
    pub fn range(&self, i: usize) -> std::ops::Range<u64> {
        let start = if i == 0 { 0 } else { self.chunks[i - 1].end };
        start..self.chunks[i].end
    }

    /// The index as casync writes it.
    pub fn to_bytes(&self) -> Vec<u8> {
        let table = TABLE_HEADER + ITEM * self.chunks.len() + TAIL;
        let mut out = Vec::with_capacity(HEADER + table);
        for v in [
            HEADER as u64,
            CA_FORMAT_INDEX,
            self.feature_flags,
            self.sizes.min,
            self.sizes.avg,
            self.sizes.max,
            u64::MAX,
            CA_FORMAT_TABLE,
        ] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        for c in &self.chunks {
            out.extend_from_slice(&c.end.to_le_bytes());
            out.extend_from_slice(c.id.as_bytes());
        }
        for v in [
            0,
            0,
            HEADER as u64,
            table as u64,
            CA_FORMAT_TABLE_TAIL_MARKER,
        ] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out
    }

    /// Reads an index. Errors: [`IndexError::Format`] for anything but the
    /// layout above (also offsets that do not grow, a chunk longer than
    /// `max`, bytes after the tail), [`IndexError::Digest`] for SHA-512/256 ids.
    pub fn parse(b: &[u8]) -> Result<BlobIndex, IndexError> {
        let bad = |why: &str| IndexError::Format(why.to_string());
        if b.len() > MAX_INDEX_BYTES {
            return Err(bad("larger than 256 MiB"));
        }
        if b.len() < HEADER + TABLE_HEADER + TAIL {
            return Err(bad("too short"));
        }
        if le(b, 0) != HEADER as u64 || le(b, 8) != CA_FORMAT_INDEX {
            return Err(bad("no CA_FORMAT_INDEX header"));
        }
        let feature_flags = le(b, 16);
        let sizes = ChunkSizes {
            min: le(b, 24),
            avg: le(b, 32),
            max: le(b, 40),
        };
        if le(b, 48) != u64::MAX || le(b, 56) != CA_FORMAT_TABLE {
            return Err(bad("no CA_FORMAT_TABLE header"));
        }
        let items = &b[HEADER + TABLE_HEADER..];
        if !(items.len() - TAIL).is_multiple_of(ITEM) {
            return Err(bad("table is not a whole number of items"));
        }
        let n = (items.len() - TAIL) / ITEM;
        let tail = &items[n * ITEM..];
        let table = (TABLE_HEADER + ITEM * n + TAIL) as u64;
        if le(tail, 0) != 0
            || le(tail, 8) != 0
            || le(tail, 16) != HEADER as u64
            || le(tail, 24) != table
            || le(tail, 32) != CA_FORMAT_TABLE_TAIL_MARKER
        {
            return Err(bad("no table tail where the file ends"));
        }
        let mut chunks = Vec::with_capacity(n);
        let mut prev = 0u64;
        for item in items[..n * ITEM].chunks_exact(ITEM) {
            let end = le(item, 0);
            if end <= prev || end - prev > sizes.max {
                return Err(IndexError::Format(format!(
                    "chunk ending at {end} after {prev}: offsets must grow by 1 to {} bytes",
                    sizes.max
                )));
            }
            let mut id = [0u8; 32];
            id.copy_from_slice(&item[8..]);
            chunks.push(IndexChunk {
                end,
                id: ChunkId(id),
            });
            prev = end;
        }
        if feature_flags & CA_FORMAT_SHA512_256 != 0 {
            return Err(IndexError::Digest);
        }
        Ok(BlobIndex {
            feature_flags,
            sizes,
            chunks,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_refusals() {
        let idx = BlobIndex {
            feature_flags: SHA256_BLOB_FLAGS,
            sizes: ChunkSizes::DEFAULT,
            chunks: vec![
                IndexChunk {
                    end: 70000,
                    id: ChunkId([1; 32]),
                },
                IndexChunk {
                    end: 70001,
                    id: ChunkId([2; 32]),
                },
            ],
        };
        let b = idx.to_bytes();
        assert_eq!(b.len(), 48 + 16 + 80 + 40);
        assert_eq!(BlobIndex::parse(&b).unwrap(), idx);
        assert_eq!(idx.range(1), 70000..70001);
        let mut short = b.clone();
        short.pop();
        assert!(BlobIndex::parse(&short).is_err());
        let mut sha512 = b.clone();
        sha512[23] |= 0x20;
        assert_eq!(BlobIndex::parse(&sha512), Err(IndexError::Digest));
        let mut shrinking = b;
        shrinking[64 + 40..64 + 48].copy_from_slice(&5u64.to_le_bytes());
        assert!(BlobIndex::parse(&shrinking).is_err());
    }
}
