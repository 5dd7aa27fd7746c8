//! Compressed chunks (`.cacnk`): one zstd frame per chunk, as `casync
//! make --compression=zstd` writes them into a chunk store, and their
//! verification by id.
//!
//! Owns: the compression level and the bounded, verifying decompression.
//! Never stores or fetches anything.

use super::ChunkId;

/// zstd level of the chunks airlock writes. casync writes level 3 frames;
/// chunks are compressed once per promotion and sent to every cell, so a
/// few levels more buy bytes on the wire for little CPU at promotion.
pub const LEVEL: i32 = 9;

/// Why a `.cacnk` was refused.
#[derive(Debug, thiserror::Error)]
pub enum ChunkError {
    /// Not a zstd frame, or one that decompresses to more than the index's `max`.
    #[error("chunk {id}: not a zstd frame of at most {max} bytes: {cause}")]
    Undecodable {
        /// The id asked for.
        id: ChunkId,
        /// The largest chunk allowed.
        max: usize,
        /// zstd's reason.
        cause: String,
    },
    /// It decompressed to bytes of another id.
    #[error("chunk {id}: content is {actual}, not the id it was asked by")]
    Mismatch {
        /// The id asked for.
        id: ChunkId,
        /// The id of what it holds.
        actual: ChunkId,
    },
}

/// The most bytes a `.cacnk` of a chunk of at most `max` bytes may have:
/// zstd's worst case (`ZSTD_COMPRESSBOUND`, `max + max/256` plus a few
/// hundred bytes) with room to spare; a larger one is refused unread.
pub fn max_frame_size(max: usize) -> usize {
    max + max / 8 + 1024
}

/// `data` as a `.cacnk` (one zstd frame). Errors: zstd failed (out of memory).
pub fn compress(data: &[u8]) -> std::io::Result<Vec<u8>> {
    zstd::bulk::compress(data, LEVEL)
}

/// The chunk in `cacnk`, checked to be `id` and at most `max` bytes long.
/// Errors: [`ChunkError`] (never a panic, whatever the bytes).
pub fn decompress_verified(cacnk: &[u8], id: &ChunkId, max: usize) -> Result<Vec<u8>, ChunkError> {
    let data = zstd::bulk::decompress(cacnk, max).map_err(|e| ChunkError::Undecodable {
        id: *id,
        max,
        cause: e.to_string(),
    })?;
    let actual = ChunkId::of(&data);
    if actual != *id {
        return Err(ChunkError::Mismatch { id: *id, actual });
    }
    Ok(data)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verified_by_id() {
        let data = b"0123456789".repeat(1000);
        let id = ChunkId::of(&data);
        let z = compress(&data).unwrap();
        assert_eq!(decompress_verified(&z, &id, 10_000).unwrap(), data);
        assert!(matches!(
            decompress_verified(&z, &ChunkId([0; 32]), 10_000),
            Err(ChunkError::Mismatch { .. })
        ));
        assert!(matches!(
            decompress_verified(&z, &id, 9_999),
            Err(ChunkError::Undecodable { .. })
        ));
        assert!(decompress_verified(b"not zstd", &id, 10_000).is_err());
    }
}
