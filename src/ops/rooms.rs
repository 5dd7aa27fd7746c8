//! What the rooms built on the registry keep outside repositories: the
//! blobs a room document names (stacks: flattened rootfs with their chunk
//! index and chunk map; torcx: addon archives and vendor contents), and
//! the `.cacnk` blobs each chunk map names ([`kept_blobs`]). Each room
//! says it ([`StackTable::blobs`], [`StackTable::chunk_maps`],
//! [`TorcxDoc::blobs`]); `state` never knows.
//!
//! A document of a room this version does not know is scanned for every
//! string that is a digest (`sha256:<64 hex>`), so GC never frees what a
//! newer room keeps.

use crate::digest::Digest;
use crate::stacks::table::StackTable;
use crate::torcx::table::TorcxDoc;

/// The blobs kept by the room document `name` with content `bytes`.
/// Errors: the document does not parse as its room's schema.
pub fn room_blobs(name: &str, bytes: &[u8]) -> Result<Vec<Digest>, String> {
    let parse_err = |e: serde_json::Error| format!("room document {name:?}: {e}");
    match name {
        crate::stacks::table::DOC_NAME => {
            let t: StackTable = serde_json::from_slice(bytes).map_err(parse_err)?;
            Ok(t.blobs().cloned().collect())
        }
        crate::torcx::DOCUMENT => {
            let t: TorcxDoc = serde_json::from_slice(bytes).map_err(parse_err)?;
            Ok(t.blobs().cloned().collect())
        }
        _ => {
            let v: serde_json::Value = serde_json::from_slice(bytes).map_err(parse_err)?;
            let mut out = Vec::new();
            digests_in(&v, &mut out);
            Ok(out)
        }
    }
}

/// Whether the blobs the room document `name` keeps are made here from
/// other stored content (a stack's flattened rootfs, chunks and patch:
/// `airlock fsck --repair` makes them again, [`crate::stacks::rederive`])
/// rather than carried by a bundle (torcx addon archives).
pub fn derived(name: &str) -> bool {
    name == crate::stacks::table::DOC_NAME
}

/// The sizes in bytes the room document `name` records for blobs it keeps
/// (a stack's rootfs tars and patches, [`StackTable::blob_sizes`]); empty
/// for other rooms or a document that does not parse.
pub fn recorded_sizes(name: &str, bytes: &[u8]) -> Vec<(Digest, u64)> {
    if name != crate::stacks::table::DOC_NAME {
        return Vec::new();
    }
    serde_json::from_slice::<StackTable>(bytes).map_or_else(
        |_| Vec::new(),
        |t| t.blob_sizes().map(|(d, n)| (d.clone(), n)).collect(),
    )
}

/// [`room_blobs`], plus the index and `.cacnk` blobs of every chunk map
/// the document names that is not in `maps_read` yet (each map is read
/// once per run: rootfs share chunk maps across generations). A missing
/// chunk map keeps nothing more when `missing_ok` (fsck, which reports it
/// as missing); else it is an error: `fsck --repair` makes the map again,
/// and its chunks with it, so GC must not sweep them meanwhile. Errors:
/// the document does not parse as its room's schema; a chunk map could
/// not be read or parsed (GC then stops rather than sweep chunks it could
/// not see were kept).
pub async fn kept_blobs(
    store: &dyn crate::store::Blobstore,
    name: &str,
    bytes: &[u8],
    maps_read: &mut std::collections::HashSet<Digest>,
    missing_ok: bool,
) -> Result<Vec<Digest>, String> {
    let mut out = room_blobs(name, bytes)?;
    if name != crate::stacks::table::DOC_NAME {
        return Ok(out);
    }
    let t: StackTable = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
    for m in t.chunk_maps() {
        if !maps_read.insert(m.clone()) {
            continue;
        }
        match crate::chunks::map::load(store, m).await {
            Ok(map) => out.extend(map.blobs().cloned()),
            Err(e)
                if missing_ok
                    && matches!(
                        e.downcast_ref(),
                        Some(crate::store::StoreError::NotFound(_))
                    ) =>
            {
                tracing::warn!(map = %m, "chunk map missing");
            }
            Err(e) => {
                return Err(format!(
                    "chunk map {m}: {e:#} (its chunks cannot be told from garbage: airlock fsck --repair makes it again)"
                ));
            }
        }
    }
    Ok(out)
}

/// Every string (or object key) in `v` that is a digest, added to `out`.
pub fn digests_in(v: &serde_json::Value, out: &mut impl Extend<Digest>) {
    match v {
        serde_json::Value::String(s) => {
            if let Ok(d) = s.parse() {
                out.extend([d]);
            }
        }
        serde_json::Value::Array(a) => a.iter().for_each(|x| digests_in(x, out)),
        serde_json::Value::Object(o) => o.iter().for_each(|(k, x)| {
            if let Ok(d) = k.parse() {
                out.extend([d]);
            }
            digests_in(x, out)
        }),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_rooms_keep_every_digest_they_name() {
        let d = Digest::sha256_of(b"a");
        let doc = serde_json::json!({"x": [{"y": d.to_string()}], d.to_string(): 1});
        let got = room_blobs("future", &serde_json::to_vec(&doc).unwrap()).unwrap();
        assert_eq!(got, vec![d.clone(), d]);
        assert!(room_blobs("stacks", b"[").is_err());
    }
}
