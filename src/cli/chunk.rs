//! `airlock chunk make`: a casync blob index (and chunk store) of a local
//! file, as `casync make --digest=sha256 --compression=zstd` makes one
//! (see `airlock::chunks`): to inspect what a promotion stores, to check
//! a file against a published index, and to measure the chunker.

use anyhow::{Context, Result};
use std::path::PathBuf;

use airlock::chunks::{BlobIndex, ChunkSizes, cacnk};

#[derive(clap::Subcommand)]
pub enum ChunkCmd {
    /// Cut FILE with casync's chunker (16/64/256 KiB, SHA-256 ids) and
    /// write its blob index to INDEX (`.caibx`); with --store, also each
    /// chunk as DIR/<4 hex>/<id>.cacnk (zstd), skipping those present.
    /// Prints chunks, bytes and the chunker's throughput per CPU second
    /// (cutting alone, and cutting with the SHA-256 ids).
    Make {
        /// The blob (a rootfs tar, any file).
        file: PathBuf,
        /// Where the `.caibx` goes.
        index: PathBuf,
        /// A casync chunk store directory to write the chunks into.
        #[arg(long, value_name = "DIR")]
        store: Option<PathBuf>,
    },
}

pub async fn run(cmd: ChunkCmd) -> Result<()> {
    let ChunkCmd::Make { file, index, store } = cmd;
    tokio::task::spawn_blocking(move || make(&file, &index, store.as_deref())).await?
}

fn make(
    file: &std::path::Path,
    index: &std::path::Path,
    store: Option<&std::path::Path>,
) -> Result<()> {
    let f = std::fs::File::open(file).with_context(|| format!("opening {}", file.display()))?;
    // SAFETY: a read-only map of a file this command only reads; a writer
    // changing it meanwhile yields a wrong index, never undefined reads of
    // unmapped memory (the length is fixed at map time).
    let data =
        unsafe { memmap2::Mmap::map(&f) }.with_context(|| format!("mapping {}", file.display()))?;
    let chunker = airlock::chunks::Chunker::new(ChunkSizes::DEFAULT).map_err(anyhow::Error::msg)?;
    let started = thread_cpu_seconds();
    let cuts = airlock::chunks::chunker::chunk_lengths(&chunker, &data).len();
    let cut_seconds = thread_cpu_seconds() - started;
    let started = thread_cpu_seconds();
    let idx = BlobIndex::of(&data, ChunkSizes::DEFAULT).map_err(anyhow::Error::msg)?;
    let seconds = thread_cpu_seconds() - started;
    debug_assert_eq!(cuts, idx.chunks.len());
    std::fs::write(index, idx.to_bytes())
        .with_context(|| format!("writing {}", index.display()))?;
    let mut written = 0usize;
    if let Some(dir) = store {
        for (i, c) in idx.chunks.iter().enumerate() {
            let path = dir.join(c.id.store_path());
            if path.exists() {
                continue;
            }
            let r = idx.range(i);
            let z = cacnk::compress(&data[r.start as usize..r.end as usize])?;
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent)?;
            }
            let tmp = path.with_extension("cacnk.tmp");
            std::fs::write(&tmp, z)?;
            std::fs::rename(&tmp, &path)?;
            written += 1;
        }
    }
    let distinct: std::collections::HashSet<_> = idx.chunks.iter().map(|c| c.id).collect();
    let mbps = |s: f64| data.len() as f64 / 1e6 / s.max(1e-9);
    println!(
        "{}: {} bytes, {} chunks ({} distinct, {written} written); per CPU second: cut at {:.0} MB/s, cut and hashed (SHA-256) at {:.0} MB/s",
        file.display(),
        data.len(),
        idx.chunks.len(),
        distinct.len(),
        mbps(cut_seconds),
        mbps(seconds)
    );
    Ok(())
}

/// CPU time of this thread, in seconds (`CLOCK_THREAD_CPUTIME_ID`): the
/// throughput per core, whatever else the machine runs.
fn thread_cpu_seconds() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the call.
    unsafe {
        libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts);
    }
    ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
}
