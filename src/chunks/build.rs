//! Cutting a stored blob (a flattened rootfs tar) into a casync chunk
//! store of ordinary blobs: each `.cacnk`, the `.caibx` and the chunk map.
//!
//! Owns: the pipeline read → cut → (hash + compress, in parallel, kept in
//! order) → store. One thread reads the blob and cuts it (the buzhash is
//! sequential); up to [`PARALLEL`] chunks are hashed and compressed at
//! once on the blocking pool; up to 16 `.cacnk` writes are in flight.
//! Memory: about `PARALLEL + 16` chunks of at most `max` bytes. The blob is
//! verified against its digest while it is read. Never decides which blobs
//! are chunked (`stacks::ops` does, at promotion).

use std::collections::BTreeMap;
use std::io::Read;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use bytes::Bytes;
use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;

use super::index::{BlobIndex, IndexChunk, SHA256_BLOB_FLAGS};
use super::map::{self, ChunkMap};
use super::{ChunkId, ChunkRefs, ChunkSizes, Chunker, cacnk};
use crate::digest::{Algorithm, Digest, Hasher};
use crate::store::{self, Blobstore, blob_key};

/// Chunks hashed and compressed at once.
pub const PARALLEL: usize = 4;

/// What chunking one blob did.
#[derive(Debug, Clone)]
pub struct Built {
    /// What the rootfs record keeps.
    pub refs: ChunkRefs,
    /// Chunks in the index (with repeats).
    pub chunks: u64,
    /// Distinct chunks.
    pub distinct: u64,
    /// `.cacnk` blobs written now (the others were present: shared).
    pub written: u64,
    /// `.cacnk` blobs found present and reused; they become reachable only
    /// when the caller's commit names the map, so the caller checks them
    /// again after it ([`missing_after_commit`]).
    pub present: Vec<Digest>,
    /// Bytes of every distinct `.cacnk`.
    pub compressed_bytes: u64,
    /// Seconds the whole pipeline took.
    pub seconds: f64,
}

/// One chunk after hashing and compressing.
struct Cut {
    id: ChunkId,
    len: u64,
    cacnk: Vec<u8>,
}

/// Reads `blob` (of `size` bytes) from `store`, cuts it with `sizes`,
/// stores every `.cacnk` not yet stored, then the index and the map.
///
/// Errors: the blob is missing, shorter or longer than `size`, or does
/// not match its digest; a store write failed. Chunks written before an
/// error stay, unreferenced (GC collects them after its grace period).
pub async fn chunk_blob(
    store: Arc<dyn Blobstore>,
    blob: &Digest,
    size: u64,
    sizes: ChunkSizes,
) -> Result<Built> {
    let started = Instant::now();
    let chunker = Chunker::new(sizes).map_err(anyhow::Error::msg)?;
    let reader = store.read(&blob_key(blob), None).await?;
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(PARALLEL * 2);
    let expected = blob.clone();
    let cutter = tokio::task::spawn_blocking(move || -> Result<()> {
        let mut r = tokio_util::io::SyncIoBridge::new(reader);
        let mut hasher = Hasher::new(Algorithm::Sha256);
        let mut seen = 0u64;
        let max = chunker.max();
        let mut buf = vec![0u8; max * 4];
        let (mut pos, mut len, mut eof) = (0usize, 0usize, false);
        loop {
            if !eof && len - pos < max {
                buf.copy_within(pos..len, 0);
                (len, pos) = (len - pos, 0);
                while !eof && len < buf.len() {
                    let n = r.read(&mut buf[len..])?;
                    hasher.update(&buf[len..len + n]);
                    (len, seen, eof) = (len + n, seen + n as u64, n == 0);
                }
            }
            if pos == len {
                break;
            }
            let n = chunker.cut(&buf[pos..len]);
            let chunk = Bytes::copy_from_slice(&buf[pos..pos + n]);
            pos += n;
            if tx.blocking_send(chunk).is_err() {
                bail!("chunk writer stopped");
            }
        }
        let got = hasher.finish();
        if seen != size || got != expected {
            bail!("blob {expected} read back as {got} ({seen} bytes, expected {size})");
        }
        Ok(())
    });
    let mut cuts = tokio_stream_of(rx)
        .map(|data| {
            tokio::task::spawn_blocking(move || -> Result<Cut> {
                Ok(Cut {
                    id: ChunkId::of(&data),
                    len: data.len() as u64,
                    cacnk: cacnk::compress(&data)?,
                })
            })
        })
        .buffered(PARALLEL);
    let mut index = Vec::new();
    let mut chunks: BTreeMap<ChunkId, Digest> = BTreeMap::new();
    let mut writes = FuturesUnordered::new();
    let (mut end, mut written, mut compressed) = (0u64, 0u64, 0u64);
    let mut present = Vec::new();
    let mut failed: Option<anyhow::Error> = None;
    while let Some(cut) = cuts.next().await {
        let cut = match cut.context("chunk worker").and_then(|c| c) {
            Ok(c) => c,
            Err(e) => {
                failed = Some(e);
                break;
            }
        };
        end += cut.len;
        index.push(IndexChunk { end, id: cut.id });
        if chunks.contains_key(&cut.id) {
            continue;
        }
        let digest = Digest::sha256_of(&cut.cacnk);
        compressed += cut.cacnk.len() as u64;
        chunks.insert(cut.id, digest.clone());
        let st = store.clone();
        writes.push(async move {
            let wrote = store::put_digested(&*st, &digest, Bytes::from(cut.cacnk)).await?;
            Ok::<_, anyhow::Error>((digest, wrote))
        });
        while writes.len() >= 16 {
            settle(writes.next().await, &mut written, &mut present, &mut failed);
        }
        if failed.is_some() {
            break;
        }
    }
    drop(cuts);
    while let Some(w) = writes.next().await {
        settle(Some(w), &mut written, &mut present, &mut failed);
    }
    let cut_result = cutter.await.context("chunker thread")?;
    if let Some(e) = failed {
        return Err(e);
    }
    cut_result?;
    let idx = BlobIndex {
        feature_flags: SHA256_BLOB_FLAGS,
        sizes,
        chunks: index,
    };
    let index_digest = store::put_bytes(&*store, &idx.to_bytes()).await?;
    let n = idx.chunks.len() as u64;
    let distinct = chunks.len() as u64;
    let doc = ChunkMap {
        kind: map::KIND.into(),
        blob: blob.clone(),
        index: index_digest.clone(),
        chunks,
    };
    let map_digest = store::put_bytes(&*store, &serde_json::to_vec(&doc)?).await?;
    Ok(Built {
        refs: ChunkRefs {
            index: index_digest,
            map: map_digest,
            chunks: n,
        },
        chunks: n,
        distinct,
        written,
        present,
        compressed_bytes: compressed,
        seconds: started.elapsed().as_secs_f64(),
    })
}

fn settle(
    done: Option<Result<(Digest, bool)>>,
    written: &mut u64,
    present: &mut Vec<Digest>,
    failed: &mut Option<anyhow::Error>,
) {
    match done {
        Some(Ok((_, true))) => *written += 1,
        Some(Ok((d, false))) => present.push(d),
        Some(Err(e)) => {
            failed.get_or_insert(e);
        }
        None => {}
    }
}

/// A stream of what `rx` receives.
fn tokio_stream_of(
    mut rx: tokio::sync::mpsc::Receiver<Bytes>,
) -> impl futures_util::Stream<Item = Bytes> {
    futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

/// The `.cacnk` blobs of `present` no longer in `store`: after the commit
/// that names them, a caller chunks the blob again when this is not empty
/// (a GC removed a shared chunk between the presence check and the commit).
/// Errors: the store failed.
pub async fn missing_after_commit(
    store: Arc<dyn Blobstore>,
    present: Vec<Digest>,
) -> Result<Vec<Digest>> {
    let mut checks =
        futures_util::stream::iter(
            present.into_iter().map(move |d| {
                let st = store.clone();
                async move {
                    Ok::<_, anyhow::Error>(st.stat(&blob_key(&d)).await?.is_none().then_some(d))
                }
            }),
        )
        .buffer_unordered(16);
    let mut out = Vec::new();
    while let Some(r) = checks.next().await {
        out.extend(r?);
    }
    Ok(out)
}
