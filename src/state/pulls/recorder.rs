//! One process's side of the pull record: notes taken on the request path,
//! flushed to the process's own object in the background.
//!
//! Owns: the pending notes (bounded, [`RecorderLimits`]) and this
//! process's object `pulls/<id>.json`. [`PullRecorder::note`] takes one of
//! 16 short `std` mutexes (chosen by the digest), finds the note of the
//! same repository, digest and tag for the day, and allocates only for a
//! key not seen since the last flush: no store access, no await. Past
//! [`RecorderLimits::max_pending`] distinct keys, new keys are dropped
//! (counted, and logged at the next flush); at half of it the flusher is
//! woken early ([`PullRecorder::filling`]).
//!
//! [`PullRecorder::flush`] moves the notes into the process's whole view
//! of the record, reads the objects of other processes that changed since
//! it last looked, and writes its own object when it has new notes (or
//! when its object vanished, or a stale one is to be folded in). Then it
//! deletes the stale objects it folded in (see the parent module). A
//! failed write keeps everything for the next flush.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::SystemTime;

use super::{Day, PREFIX, PullRecord, STALE_AFTER, day_of, today};
use crate::digest::{Digest, DigestMap};
use crate::names::{RepositoryName, Tag};
use crate::state::Result;
use crate::store::{self, Blobstore, StoreError};

/// Shards of the pending notes (a power of two).
const SHARDS: usize = 16;

/// Caps of a [`PullRecorder`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecorderLimits {
    /// Most distinct (repository, digest, tag) keys noted between two
    /// flushes (default 65,536: a few MiB); more are dropped.
    pub max_pending: usize,
}

impl Default for RecorderLimits {
    fn default() -> RecorderLimits {
        RecorderLimits {
            max_pending: 65_536,
        }
    }
}

/// One pending note.
struct Noted {
    repository: RepositoryName,
    tag: Option<Tag>,
    day: Day,
}

type Shard = DigestMap<Digest, Vec<Noted>>;

/// What [`PullRecorder::flush`] keeps between flushes.
struct Written {
    /// This process's object.
    key: String,
    /// Everything this process knows: its notes and every object it read.
    known: PullRecord,
    /// `known` holds notes not written yet.
    dirty: bool,
    /// The object was written at least once.
    wrote: bool,
    /// Other objects folded into `known`, at the (size, modified) read.
    seen: HashMap<String, (u64, SystemTime)>,
}

/// Pull notes of one process (see the module docs); shared by every
/// request of the server.
pub struct PullRecorder {
    on: AtomicBool,
    limits: RecorderLimits,
    shards: Box<[Mutex<Shard>]>,
    pending: AtomicUsize,
    dropped: AtomicU64,
    filling: tokio::sync::Notify,
    written: tokio::sync::Mutex<Written>,
}

impl Default for PullRecorder {
    fn default() -> PullRecorder {
        PullRecorder::new(RecorderLimits::default())
    }
}

impl PullRecorder {
    /// A recorder, on, writing `pulls/<fresh id>.json`.
    pub fn new(limits: RecorderLimits) -> PullRecorder {
        PullRecorder {
            on: AtomicBool::new(true),
            limits,
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            pending: AtomicUsize::new(0),
            dropped: AtomicU64::new(0),
            filling: tokio::sync::Notify::new(),
            written: tokio::sync::Mutex::new(Written {
                key: format!("{PREFIX}{}.json", uuid::Uuid::new_v4().simple()),
                known: PullRecord::default(),
                dirty: false,
                wrote: false,
                seen: HashMap::new(),
            }),
        }
    }

    /// Turns noting on or off (`pull_record_interval = 0`); notes taken
    /// stay until the next flush.
    pub fn set_on(&self, on: bool) {
        self.on.store(on, Ordering::Relaxed);
    }

    /// Notes a GET of the manifest `digest` from `repository` (by `tag`,
    /// if it was pulled by tag), today. Never blocks on I/O.
    pub fn note(&self, repository: &RepositoryName, digest: &Digest, tag: Option<&Tag>) {
        if !self.on.load(Ordering::Relaxed) {
            return;
        }
        let day = today();
        let shard = digest
            .hex()
            .bytes()
            .next()
            .and_then(|b| (b as char).to_digit(16))
            .unwrap_or(0) as usize
            % SHARDS;
        let mut map = self.shards[shard]
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let noted = |n: &&mut Noted| n.repository == *repository && n.tag.as_ref() == tag;
        if let Some(list) = map.get_mut(digest)
            && let Some(n) = list.iter_mut().find(noted)
        {
            n.day = n.day.max(day);
            return;
        }
        if !self.reserve() {
            return;
        }
        map.entry(digest.clone()).or_default().push(Noted {
            repository: repository.clone(),
            tag: tag.cloned(),
            day,
        });
    }

    /// Counts one more pending key; `false` (counted as dropped) when the
    /// cap is reached.
    fn reserve(&self) -> bool {
        let n = self.pending.fetch_add(1, Ordering::Relaxed);
        if n >= self.limits.max_pending {
            self.pending.fetch_sub(1, Ordering::Relaxed);
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        if n + 1 == self.limits.max_pending.div_ceil(2) {
            self.filling.notify_one();
        }
        true
    }

    /// Distinct keys noted since the last flush.
    pub fn pending(&self) -> usize {
        self.pending.load(Ordering::Relaxed)
    }

    /// Notes dropped because the pending notes were full, since start.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Completes when the pending notes reach half their cap (the flusher
    /// then flushes early).
    pub async fn filling(&self) {
        self.filling.notified().await;
    }

    /// Moves the pending notes into `into`; returns how many.
    fn drain(&self, into: &mut PullRecord) -> usize {
        let mut n = 0;
        for shard in &self.shards {
            let map = std::mem::take(&mut *shard.lock().unwrap_or_else(PoisonError::into_inner));
            for (digest, notes) in map {
                n += notes.len();
                for note in notes {
                    into.note(&note.repository, &digest, note.tag.as_ref(), note.day);
                }
            }
        }
        self.pending.fetch_sub(n, Ordering::Relaxed);
        n
    }

    /// Writes the notes taken since the last flush to this process's
    /// object (see the module docs); returns how many there were. Safe to
    /// call at any time, also while requests note pulls; flushes run one at
    /// a time.
    ///
    /// Errors: listing, reading or writing the store failed; the notes are
    /// kept and written by the next flush.
    pub async fn flush(&self, store: &dyn Blobstore) -> Result<usize> {
        let mut w = self.written.lock().await;
        let w = &mut *w;
        let notes = self.drain(&mut w.known);
        w.dirty |= notes > 0;
        if !w.dirty && !w.wrote {
            // Nothing noted yet: nothing to write, no object to keep.
            return Ok(0);
        }
        let now = SystemTime::now();
        let mut own = false;
        let mut stale = Vec::new();
        let mut listed = HashSet::new();
        for m in store.list_meta(PREFIX).await? {
            if m.key == w.key {
                own = true;
                continue;
            }
            listed.insert(m.key.clone());
            let version = (m.size, m.modified);
            if w.seen.get(&m.key) != Some(&version) {
                match super::read_object(store, &m.key).await {
                    Ok(r) => w.known.merge(r),
                    Err(StoreError::NotFound(_)) => continue,
                    Err(e @ StoreError::Corrupt(_)) => {
                        tracing::warn!(error = %e, "pull record: object left alone");
                        continue;
                    }
                    Err(e) => return Err(e.into()),
                }
                w.seen.insert(m.key.clone(), version);
            }
            if m.modified.checked_add(STALE_AFTER).is_some_and(|t| t < now) {
                stale.push(m.key);
            }
        }
        w.seen.retain(|k, _| listed.contains(k));
        let dropped = self.dropped.swap(0, Ordering::Relaxed);
        if dropped > 0 {
            tracing::warn!(
                dropped,
                max_pending = self.limits.max_pending,
                "pull record: pulls not recorded (too many distinct manifests between flushes)"
            );
        }
        let vanished = w.wrote && !own;
        if !(w.dirty || vanished || !stale.is_empty()) || w.known.is_empty() {
            return Ok(notes);
        }
        w.known.prune(day_of(now));
        super::write_object(store, &w.key, &w.known).await?;
        w.dirty = false;
        w.wrote = true;
        for key in stale {
            // Its content is in the object just written.
            match store::copies::delete_keyed(store, &key).await {
                Ok(()) => {
                    w.seen.remove(&key);
                }
                Err(e) => tracing::warn!(error = %e, key, "pull record: stale object not removed"),
            }
        }
        Ok(notes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repo(s: &str) -> RepositoryName {
        s.parse().unwrap()
    }

    #[test]
    fn notes_are_bounded_and_deduplicated() {
        let r = PullRecorder::new(RecorderLimits { max_pending: 4 });
        let app = repo("app");
        let v1: Tag = "v1".parse().unwrap();
        let digests: Vec<Digest> = (0..6).map(|i| Digest::sha256_of(&[i])).collect();
        for _ in 0..3 {
            r.note(&app, &digests[0], None);
            r.note(&app, &digests[0], Some(&v1));
        }
        assert_eq!(r.pending(), 2);
        for d in &digests[1..] {
            r.note(&app, d, None);
        }
        assert_eq!(r.pending(), 4);
        assert_eq!(r.dropped(), 3);
        // A key already pending is still noted at the cap.
        r.note(&app, &digests[0], Some(&v1));
        assert_eq!(r.dropped(), 3);
        let mut record = PullRecord::default();
        assert_eq!(r.drain(&mut record), 4);
        assert_eq!(r.pending(), 0);
        assert_eq!(record.last_pulled(&app, &digests[0]), Some(today()));
        assert_eq!(record.repositories[&app].tags[&v1], today());
        assert_eq!(record.repositories[&app].manifests.len(), 3);
        // Off: nothing is noted.
        r.set_on(false);
        r.note(&app, &digests[5], None);
        assert_eq!(r.pending(), 0);
    }

    #[tokio::test]
    async fn replicas_keep_their_own_objects_and_fold_in_stale_ones() {
        let dir = tempfile::tempdir().unwrap();
        let store = crate::store::fs::FsStore::open(dir.path()).unwrap();
        let app = repo("app");
        let d: Vec<Digest> = (0..4).map(|i| Digest::sha256_of(&[i])).collect();
        let keys = async || store.list(PREFIX).await.unwrap();
        let (one, two, three) = (
            PullRecorder::default(),
            PullRecorder::default(),
            PullRecorder::default(),
        );
        // Nothing noted: nothing written.
        assert_eq!(one.flush(&store).await.unwrap(), 0);
        assert!(keys().await.is_empty());
        one.note(&app, &d[0], None);
        assert_eq!(one.flush(&store).await.unwrap(), 1);
        two.note(&app, &d[1], None);
        two.flush(&store).await.unwrap();
        let both = keys().await;
        assert_eq!(both.len(), 2);
        let record = super::super::load(&store).await.unwrap();
        assert!(record.last_pulled(&app, &d[0]).is_some());
        assert!(record.last_pulled(&app, &d[1]).is_some());
        // One's object has not been rewritten for two days: the next
        // replica that writes folds it into its own and removes it.
        let one_key = one.written.lock().await.key.clone();
        let old = SystemTime::now() - 2 * STALE_AFTER;
        std::fs::File::options()
            .write(true)
            .open(dir.path().join(&one_key))
            .unwrap()
            .set_modified(old)
            .unwrap();
        three.note(&app, &d[2], None);
        three.flush(&store).await.unwrap();
        let left = keys().await;
        assert_eq!(left.len(), 2);
        assert!(!left.contains(&one_key), "{left:?}");
        let record = super::super::load(&store).await.unwrap();
        for digest in &d[..3] {
            assert!(record.last_pulled(&app, digest).is_some(), "{digest}");
        }
        // One finds its object gone and writes it again, with no new note.
        assert_eq!(one.flush(&store).await.unwrap(), 0);
        assert!(keys().await.contains(&one_key));
    }
}
