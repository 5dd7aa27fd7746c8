//! Delta downloads: a new rootfs from the chunks the cell lacks.
//!
//! Owns: the decision (a delta needs the server's index and a rootfs on
//! the cell to seed from, and must move fewer bytes than the tar), the
//! HTTP chunk store of the cell ([`HttpChunkStore`], with the cell's
//! credentials and its download lease) and the cache directory that makes
//! a delta resumable (`<install-dir>/<stack>/.chunks/`, removed once the
//! rootfs is assembled or abandoned). Rides on [`crate::chunks::assemble`]
//! for seeds, fetching and assembly. Never installs: the caller does, as
//! for a full download, after the whole-file sha256 check.
//!
//! Seeds are the installed `rootfs.tar` and `rootfs.tar.previous`. A seed
//! installed as published (no CA certificates added) is read through its
//! own published index (`rootfs.caibx?digest=<its manifest>`): nothing to
//! cut or hash. One with the site's CA certificates added is cut here
//! (content-defined chunks realign right after the changed bytes).
//! Either way the assembled rootfs must match the published sha256.

use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result};
use bytes::Bytes;

use super::client::{Assignment, StacksClient};
use super::install::StackDir;
use crate::chunks::assemble::{self, ChunkCache, FetchError, Seeds};
use crate::chunks::index::MAX_INDEX_BYTES;
use crate::chunks::store::ChunkStore;
use crate::chunks::{BlobIndex, ChunkId};
use crate::digest::Digest;
use crate::http_client::percent_encode;

/// Chunks fetched at once.
pub const PARALLEL: usize = 8;

/// Bytes one chunk request costs beyond its body (request and response
/// heads), counted when deciding whether a delta moves fewer bytes.
pub const REQUEST_OVERHEAD: u64 = 400;

/// What a delta moved.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DeltaStats {
    /// Bytes downloaded now: the index and the compressed chunks.
    pub bytes: u64,
    /// Chunks downloaded now.
    pub fetched: usize,
    /// Bytes of the rootfs found in the seeds.
    pub seeded: u64,
    /// Bytes of the rootfs fetched by an earlier, interrupted run.
    pub cached: u64,
    /// Seconds spent on the seeds (their indexes, or cutting them) and the plan.
    pub seed_seconds: f64,
    /// Seconds fetching chunks.
    pub fetch_seconds: f64,
    /// Seconds assembling and checking the rootfs.
    pub assemble_seconds: f64,
}

/// What [`try_delta`] did.
#[derive(Debug)]
pub enum Delta {
    /// The rootfs is at the download path, sha256 checked.
    Assembled(DeltaStats),
    /// No delta: download the tar (the reason, for the log; the bytes the
    /// attempt moved, the index and any chunk).
    Fallback(String, u64),
}

/// The cell's chunk store: `GET <chunk_store_url><4 hex>/<id>.cacnk?stack=&cell=`
/// (the query keeps the cell's download lease alive on the server).
pub struct HttpChunkStore<'a> {
    client: &'a StacksClient,
    base: String,
    query: String,
    max: usize,
}

#[async_trait::async_trait]
impl ChunkStore for HttpChunkStore<'_> {
    async fn fetch(&self, id: &ChunkId) -> Result<Option<Bytes>> {
        let path = format!("{}{}?{}", self.base, id.store_path(), self.query);
        let limit = crate::chunks::cacnk::max_frame_size(self.max);
        let mut tries = 0;
        loop {
            match self.client.get_bytes(&path, limit).await {
                Err(e) if tries < 3 => {
                    tries += 1;
                    tracing::debug!(chunk = %id, error = %e, "chunk fetch failed; again");
                }
                r => return r,
            }
        }
    }
}

/// Tries to assemble the rootfs `a` names at `dir`'s download path from
/// the cell's rootfs files and the chunks it lacks. Errors: only what
/// should stop the pass (the network, reading a seed); the chunk cache
/// is then kept, so the next pass resumes. Anything that makes a delta
/// pointless or untrustworthy (no index, no seed, a missing or refused
/// chunk, a larger delta) or impossible here (a chunk cache that cannot
/// be opened or written) is [`Delta::Fallback`].
pub async fn try_delta(
    client: &StacksClient,
    stack: &str,
    cell: &str,
    dir: &StackDir,
    a: &Assignment,
    progress: &indicatif::ProgressBar,
) -> Result<Delta> {
    let (Some(index_url), Some(store_url)) = (&a.rootfs_index_url, &a.chunk_store_url) else {
        return Ok(Delta::Fallback(
            "the server has no chunk index for this rootfs".into(),
            0,
        ));
    };
    let seeds = dir.rootfs_files();
    if seeds.is_empty() {
        return Ok(Delta::Fallback(
            "no rootfs on the cell to seed from".into(),
            0,
        ));
    }
    let url = super::client::with_cell(index_url, cell);
    let Some(raw) = client.get_bytes(&url, MAX_INDEX_BYTES).await? else {
        return Ok(Delta::Fallback(
            "the server has no chunk index (404)".into(),
            0,
        ));
    };
    let mut moved = raw.len() as u64;
    let index = match BlobIndex::parse(&raw) {
        Ok(i) if i.blob_size() == a.rootfs_size => i,
        Ok(i) => {
            let why = format!(
                "index describes {} bytes, the rootfs has {}",
                i.blob_size(),
                a.rootfs_size
            );
            return Ok(Delta::Fallback(why, moved));
        }
        Err(e) => return Ok(Delta::Fallback(format!("index unusable: {e}"), moved)),
    };
    let index = Arc::new(index);
    let cache = match ChunkCache::open(&dir.chunk_cache()) {
        Ok(c) => Arc::new(c),
        Err(e) => return Ok(Delta::Fallback(format!("chunk cache: {e:#}"), moved)),
    };
    let started = Instant::now();
    let mut published = Vec::new();
    for (path, installed) in &seeds {
        match installed {
            Some(i) if i.trusted_certs.is_none() => {
                let (idx, n) = seed_index(client, stack, &i.digest).await;
                moved += n;
                published.push((path.clone(), idx));
            }
            _ => published.push((path.clone(), None)),
        }
    }
    let (i, c) = (index.clone(), cache.clone());
    let (seeds, plan) = tokio::task::spawn_blocking(move || -> Result<_> {
        let mut seeds = Seeds::default();
        for (path, idx) in published {
            match idx.map(|x| seeds.add_indexed(&path, &x)) {
                Some(Ok(())) => {}
                Some(Err(e)) => {
                    tracing::info!(seed = %path.display(), error = %e, "cutting the seed instead");
                    seeds.cut(&path, i.sizes)?;
                }
                None => seeds.cut(&path, i.sizes)?,
            }
        }
        let plan = assemble::plan(&i, &seeds, &c);
        Ok((seeds, plan))
    })
    .await??;
    let seed_seconds = started.elapsed().as_secs_f64();
    let cost = moved + plan.missing_bytes + REQUEST_OVERHEAD * plan.missing.len() as u64;
    if cost >= a.rootfs_size {
        drop_cache(cache);
        let why = format!("the delta ({cost} bytes at most) is not smaller than the rootfs");
        return Ok(Delta::Fallback(why, moved));
    }
    tracing::info!(
        stack,
        chunks = index.chunks.len(),
        missing = plan.missing.len(),
        missing_bytes = plan.missing_bytes,
        seeded_bytes = plan.seeded_bytes,
        cached_bytes = plan.cached_bytes,
        "delta planned"
    );
    let store = HttpChunkStore {
        client,
        base: store_url.clone(),
        query: format!(
            "stack={}&cell={}",
            percent_encode(stack),
            percent_encode(cell)
        ),
        max: index.sizes.max as usize,
    };
    progress.reset();
    progress.set_length(plan.missing.len() as u64);
    let kill_after = failpoint_after_chunks();
    let count = std::sync::atomic::AtomicUsize::new(0);
    let on_chunk = |_: u64| {
        progress.inc(1);
        let n = count.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        if kill_after.is_some_and(|k| n >= k) {
            crate::failpoint::crash_here();
        }
    };
    let started = Instant::now();
    let fetched = assemble::fetch(
        &store,
        &cache,
        &plan.missing,
        index.sizes.max as usize,
        PARALLEL,
        &on_chunk,
    )
    .await;
    progress.finish_and_clear();
    let fetch_seconds = started.elapsed().as_secs_f64();
    match fetched {
        Ok(n) => moved += n,
        Err(FetchError::Other(e)) => return Err(e.context("fetching chunks")),
        Err(e) => {
            drop_cache(cache);
            return Ok(Delta::Fallback(e.to_string(), moved));
        }
    }
    let out = dir.download_path();
    let expected = a.rootfs_digest.clone();
    let (i, c, o) = (index.clone(), cache.clone(), out.clone());
    let started = Instant::now();
    let built =
        tokio::task::spawn_blocking(move || assemble::assemble(&i, &seeds, &c, &o, &expected))
            .await
            .context("assembling")?;
    drop_cache(cache);
    if let Err(e) = built {
        let _ = std::fs::remove_file(&out);
        return Ok(Delta::Fallback(
            format!("assembled rootfs refused: {e:#}"),
            moved,
        ));
    }
    Ok(Delta::Assembled(DeltaStats {
        bytes: moved,
        fetched: plan.missing.len(),
        seeded: plan.seeded_bytes,
        cached: plan.cached_bytes,
        seed_seconds,
        fetch_seconds,
        assemble_seconds: started.elapsed().as_secs_f64(),
    }))
}

/// The published index of the rootfs of `manifest` (what a seed
/// installed without added certificates is), and the bytes its GET moved;
/// `None` when the server has none or it does not parse (the seed is cut).
async fn seed_index(
    client: &StacksClient,
    stack: &str,
    manifest: &Digest,
) -> (Option<BlobIndex>, u64) {
    let path = format!(
        "/stacks/v1/{}/rootfs.caibx?digest={manifest}",
        percent_encode(stack)
    );
    match client.get_bytes(&path, MAX_INDEX_BYTES).await {
        Ok(Some(raw)) => (BlobIndex::parse(&raw).ok(), raw.len() as u64),
        Ok(None) => (None, 0),
        Err(e) => {
            tracing::info!(error = %e, "no published index for a seed; cutting it");
            (None, 0)
        }
    }
}

fn drop_cache(cache: Arc<ChunkCache>) {
    if let Ok(c) = Arc::try_unwrap(cache)
        && let Err(e) = c.remove()
    {
        tracing::warn!(error = %e, "removing the chunk cache");
    }
}

/// `AIRLOCK_FAILPOINT=cell:after_chunks=N`: the process kills itself (as
/// `kill -9` would) once N chunks are cached; for crash tests only.
fn failpoint_after_chunks() -> Option<usize> {
    crate::failpoint::number("cell:after_chunks").and_then(|n| usize::try_from(n).ok())
}
