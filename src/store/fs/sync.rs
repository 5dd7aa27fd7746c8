//! Rounds of `fsync(2)` run side by side (a state commit's new pages; the
//! directories and the new root file before a root swap).
//!
//! Owns: how the fsyncs of one round are spread over threads. On ext4 every
//! `fsync(2)` ends with a device cache flush, even when the journal commit
//! it needs is already on disk; one after another, the 10-20 fsyncs of a
//! commit cost 10-20 flushes, and on a disk shared with other writers each
//! flush can take tens of milliseconds (a tag PUT's tail latency). Issued at
//! once, they wait for the same journal commit and the block layer merges
//! their flushes, so a round costs about one flush. Durability is the same:
//! every file and directory still gets its own `fsync(2)`, and a round
//! returns only when all of them have.

use std::fs::File;
use std::io::{self, ErrorKind};
use std::path::{Path, PathBuf};

/// Most threads one round uses (the calling thread is one of them).
const MAX_THREADS: usize = 16;

/// One thing to make durable.
enum Target<'a> {
    /// An open file: its data and metadata.
    File(&'a File),
    /// A directory: its entries. One removed since (an emptied
    /// `uploads/<id>/`) has nothing to make durable.
    Dir(&'a Path),
}

impl Target<'_> {
    fn sync(&self) -> io::Result<()> {
        match self {
            Target::File(f) => f.sync_all(),
            Target::Dir(d) => match File::open(d).and_then(|f| f.sync_all()) {
                Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
                other => other,
            },
        }
    }
}

/// Fsyncs each of `files` and `dirs`, up to [`MAX_THREADS`] at once, and
/// returns when all are durable.
///
/// Errors: the first failure (the others still run to the end).
pub(super) fn round(files: &[&File], dirs: &[PathBuf]) -> io::Result<()> {
    let targets: Vec<Target> = files
        .iter()
        .map(|f| Target::File(f))
        .chain(dirs.iter().map(|d| Target::Dir(d)))
        .collect();
    let threads = targets.len().min(MAX_THREADS);
    if threads <= 1 {
        return targets.iter().try_for_each(Target::sync);
    }
    let targets = &targets;
    // Thread `t` takes targets t, t + threads, t + 2 * threads, ...
    let share = move |t: usize| -> io::Result<()> {
        let mut first = Ok(());
        for target in targets.iter().skip(t).step_by(threads) {
            let r = target.sync();
            if first.is_ok() {
                first = r;
            }
        }
        first
    };
    std::thread::scope(|s| {
        let others: Vec<_> = (1..threads).map(|t| s.spawn(move || share(t))).collect();
        let mut first = share(0);
        for h in others {
            let r = h
                .join()
                .unwrap_or_else(|_| Err(io::Error::other("fsync thread panicked")));
            if first.is_ok() {
                first = r;
            }
        }
        first
    })
}

/// Fsyncs the directory `dir` (its entries).
pub(super) fn dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}
