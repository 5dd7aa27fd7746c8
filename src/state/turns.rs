//! Turns between writers of one store (issue 37 §2: real races stay fair).
//!
//! Commits from several processes (S3 replicas, a CLI import beside the
//! server) race on `refs/root`: each attempt reads the root, writes its
//! pages and swaps. A writer that just won starts its next batch at once,
//! while the loser learns of its loss only when its own swap is answered,
//! some time later; with both queues full the winner finishes first again
//! and again, and never sees the loser, which commits nothing (measured on
//! Ceph RGW, 8 writers over two replicas: one batch lost 20 races in a row,
//! 6.6 s; p99 of a tag push 6.7 s against 0.23 s on one replica).
//!
//! So the loser says it waits: after each lost swap it writes
//! [`WAITING_KEY`] (`{"writer":ID,"losses":N}`, N counting its losses, so
//! the object changes with each). Before each new batch a writer reads it;
//! while it names another writer and changed within [`STALE`] (by the
//! reader's own clock: no clocks are compared), the reader waits for that
//! writer to land (which removes its marker), reading the marker every
//! [`POLL`], for at most [`MAX_YIELD`]. A loser's retries never wait. The
//! marker of a writer that died goes stale [`STALE`] after its last loss.
//! A writer alone on its store pays one read of an absent object per
//! batch. Failures to read or write the marker are ignored: fairness is
//! best effort, never a reason to fail a commit.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::store::Blobstore;

/// The object a writer that lost a race writes.
pub const WAITING_KEY: &str = "refs/waiting";
/// The longest wait before a batch.
pub const MAX_YIELD: Duration = Duration::from_secs(1);
/// How often a writer whose turn it is not reads the marker again.
pub const POLL: Duration = Duration::from_millis(20);
/// A marker unchanged this long is a dead writer's.
pub const STALE: Duration = Duration::from_secs(2);

#[derive(serde::Serialize, serde::Deserialize)]
struct Waiting {
    writer: String,
    losses: u64,
}

#[derive(Default)]
struct Seen {
    /// This writer's lost swaps.
    losses: u64,
    /// Whether this writer's marker may be in the store.
    marked: bool,
    /// Another writer's marker as last read, and since when (our clock) it
    /// reads so.
    other: Option<(Vec<u8>, Instant)>,
}

/// One process's turns on its store.
pub(super) struct Turns {
    me: String,
    seen: Mutex<Seen>,
}

impl Default for Turns {
    fn default() -> Turns {
        Turns {
            me: format!("{:016x}", rand::random::<u64>()),
            seen: Mutex::default(),
        }
    }
}

impl Turns {
    /// Before a new batch: while another writer waits for its turn (its
    /// marker names a loss to this writer's last generation, or the one
    /// before), waits for it to land (its marker removed or replaced),
    /// reading the marker every [`POLL`], for at most [`MAX_YIELD`].
    /// Returns how long it waited (zero when no one waits).
    pub(super) async fn take_turns(&self, store: &dyn Blobstore) -> Duration {
        let started = std::time::Instant::now();
        while self.other_waits(store).await && started.elapsed() < MAX_YIELD {
            tokio::time::sleep(POLL).await;
        }
        started.elapsed()
    }

    async fn other_waits(&self, store: &dyn Blobstore) -> bool {
        let Ok(bytes) = crate::store::read_all(store, WAITING_KEY).await else {
            return false;
        };
        let Ok(w) = serde_json::from_slice::<Waiting>(&bytes) else {
            return false;
        };
        if w.writer == self.me {
            return false;
        }
        let Ok(mut s) = self.seen.lock() else {
            return false;
        };
        let since = match &s.other {
            Some((seen, since)) if *seen == bytes => *since,
            _ => {
                s.other = Some((bytes, Instant::now()));
                Instant::now()
            }
        };
        since.elapsed() < STALE
    }

    /// An attempt lost the swap to another writer.
    pub(super) async fn lost(&self, store: &dyn Blobstore) {
        let losses = match self.seen.lock() {
            Ok(mut s) => {
                s.marked = true;
                s.losses += 1;
                s.losses
            }
            Err(_) => return,
        };
        let w = Waiting {
            writer: self.me.clone(),
            losses,
        };
        let Ok(bytes) = serde_json::to_vec(&w) else {
            return;
        };
        if let Err(e) = put(store, Bytes::from(bytes)).await {
            tracing::debug!(error = %e, "turns: cannot write {WAITING_KEY}");
        }
    }

    /// An attempt landed: this writer's marker, if any, is removed.
    pub(super) async fn landed(&self, store: &dyn Blobstore) {
        let marked = match self.seen.lock() {
            Ok(mut s) => std::mem::take(&mut s.marked),
            Err(_) => false,
        };
        if marked
            && let Ok(bytes) = crate::store::read_all(store, WAITING_KEY).await
            && serde_json::from_slice::<Waiting>(&bytes).is_ok_and(|w| w.writer == self.me)
        {
            let _ = store.delete(WAITING_KEY).await;
        }
    }
}

async fn put(store: &dyn Blobstore, bytes: Bytes) -> crate::store::Result<()> {
    let mut w = store.writer(WAITING_KEY).await?;
    w.write(bytes).await?;
    w.commit().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_winner_waits_while_a_loser_waits_and_alone_never() {
        let dir = tempfile::tempdir().unwrap();
        let store: std::sync::Arc<dyn Blobstore> =
            std::sync::Arc::new(crate::store::fs::FsStore::open(dir.path()).unwrap());
        let (winner, loser) = (Turns::default(), std::sync::Arc::new(Turns::default()));
        assert!(winner.take_turns(&*store).await < POLL, "alone");
        loser.lost(&*store).await;
        assert!(loser.take_turns(&*store).await < POLL, "its own marker");
        // The winner waits until the loser lands (here after 200 ms).
        let (s, l) = (store.clone(), loser.clone());
        let lands = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(200)).await;
            l.landed(&*s).await;
        });
        let w = winner.take_turns(&*store).await;
        lands.await.unwrap();
        assert!(w >= Duration::from_millis(200) && w < MAX_YIELD, "{w:?}");
        assert_eq!(
            store.stat(WAITING_KEY).await.unwrap(),
            None,
            "removed on landing"
        );
        assert!(winner.take_turns(&*store).await < POLL);
        // The marker of a writer that died: waits of MAX_YIELD until it is
        // STALE, then none.
        loser.lost(&*store).await;
        assert!(winner.take_turns(&*store).await >= MAX_YIELD);
        // STALE (2 s) after it was first read: the second wait ends then.
        assert!(winner.take_turns(&*store).await >= MAX_YIELD / 2);
        assert!(winner.take_turns(&*store).await < POLL, "stale");
    }
}
