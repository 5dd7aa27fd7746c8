//! Scrub (issue 26 §2): rehash every blob once per interval, for what a
//! file identity cannot see.
//!
//! Reads skip hashing a large blob that was verified at an unchanged file
//! identity ([`crate::store::verified`]); any write through the file system
//! changes the identity, so corrupt bytes written that way are never
//! served. Silent media corruption (bit rot under an unchanged inode) is
//! what this finds: each blob is forgotten as verified
//! ([`crate::store::Blobstore::forget_verified`]) and read in full through
//! the store's verifying read path, so a mismatch is quarantined exactly as
//! a client's read would quarantine it. Like a ZFS or Ceph scrub, every
//! blob is covered within one interval.
//!
//! A pass walks `blobs/` in key order at most `rate` bytes per second and
//! keeps its progress in the store (`reports/scrub.json`: started, cursor,
//! counts, corrupt digests), written every [`SAVE_EVERY`] blobs, so a
//! restarted server (or another replica) resumes where it stopped; a pass
//! starts `interval` after the last one started ([`due_in`]). Of the
//! replicas on one store only the holder of the scrub's lease scrubs
//! ([`super::lease`]).
//! `airlock scrub` runs one pass from the command line.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::StreamExt;

use crate::digest::Digest;
use crate::store::{self, Blobstore, StoreError, verify};

/// The object holding the scrub's progress.
pub const PROGRESS_KEY: &str = "reports/scrub.json";

/// Blobs scrubbed between two saves of the progress.
pub const SAVE_EVERY: u64 = 64;

/// `[scrub]`: how often and how fast.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScrubOptions {
    /// A pass starts this long after the previous one started (default 7 days).
    pub interval: Duration,
    /// Bytes read per second at most (default 20 MB/s); 0 = no limit.
    pub rate: u64,
}

impl Default for ScrubOptions {
    fn default() -> ScrubOptions {
        ScrubOptions {
            interval: Duration::from_secs(7 * 24 * 3600),
            rate: 20_000_000,
        }
    }
}

/// Where the current (or last) pass is; `reports/scrub.json`.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ScrubProgress {
    /// When the pass started (RFC 3339 UTC).
    pub started: String,
    /// When it ended; `None` while it runs (or was stopped).
    pub finished: Option<String>,
    /// The last blob key scrubbed: the pass resumes after it.
    pub cursor: Option<String>,
    /// Blobs rehashed in this pass.
    pub blobs: u64,
    /// Bytes rehashed in this pass.
    pub bytes: u64,
    /// Blobs found corrupt (and quarantined) in this pass, with no good
    /// second copy.
    pub corrupt: Vec<Digest>,
    /// Metadata objects (a blob's digest, or a pull record's key) of which
    /// one copy was damaged or missing and was written again from the
    /// other ([`crate::store::copies`]).
    #[serde(default)]
    pub repaired: Vec<String>,
    /// Pull record objects (`pulls/`) with no good copy left: key and
    /// cause, one line.
    #[serde(default)]
    pub damaged: Vec<String>,
}

/// Reads the saved progress (`None`: no pass ever ran, or it is unreadable).
pub async fn load(store: &dyn Blobstore) -> Option<ScrubProgress> {
    let mut r = store.read(PROGRESS_KEY, None).await.ok()?;
    let mut bytes = Vec::new();
    tokio::io::AsyncReadExt::read_to_end(&mut r, &mut bytes)
        .await
        .ok()?;
    serde_json::from_slice(&bytes).ok()
}

async fn save(store: &dyn Blobstore, p: &ScrubProgress) -> store::Result<()> {
    let bytes = serde_json::to_vec(p).map_err(|e| StoreError::Io(e.into()))?;
    let mut w = store.writer(PROGRESS_KEY).await?;
    w.write(Bytes::from(bytes)).await?;
    w.commit().await
}

/// What one blob's scrub found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Its bytes hash to its digest.
    Whole(u64),
    /// They do not: the store's read began to quarantine it
    /// ([`pass`] waits until it is moved).
    Corrupt,
    /// It is gone (collected meanwhile).
    Gone,
}

/// Rehashes the blob `key` of `size` bytes through the store's verifying
/// read (forgetting it as verified first), at most `rate` bytes per second
/// counted from `clock` (bytes read so far in `budget`).
///
/// Errors: the store failed for another reason than corruption or absence.
pub async fn scrub_blob(
    store: &dyn Blobstore,
    key: &str,
    rate: u64,
    budget: &mut (Instant, u64),
) -> store::Result<Verdict> {
    store.forget_verified(key);
    let mut body = match store.stream(key, None).await {
        Ok(b) => b,
        Err(StoreError::NotFound(_)) => return Ok(Verdict::Gone),
        Err(StoreError::Corrupt(_)) => return Ok(Verdict::Corrupt),
        Err(e) => return Err(e),
    };
    let mut n = 0u64;
    while let Some(chunk) = body.next().await {
        match chunk {
            Ok(c) => {
                n += c.len() as u64;
                budget.1 += c.len() as u64;
                if rate > 0 {
                    let due = Duration::from_secs_f64(budget.1 as f64 / rate as f64);
                    let spent = budget.0.elapsed();
                    if due > spent {
                        tokio::time::sleep(due - spent).await;
                    }
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::InvalidData => return Ok(Verdict::Corrupt),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Verdict::Gone),
            Err(e) => return Err(StoreError::Io(e)),
        }
    }
    Ok(Verdict::Whole(n))
}

/// Checks the second copy at `key` of the metadata blob `digest`: when it
/// does not match the digest, writes it again from the blob (read and
/// verified, itself restored from nothing else). `true` when it was
/// rewritten; `false` when whole, or gone, or when the blob is bad too
/// (then logged: both copies are damaged).
///
/// Errors: the store failed.
async fn scrub_copy(store: &dyn Blobstore, key: &str, digest: &Digest) -> store::Result<bool> {
    let bytes = match store::read_all(store, key).await {
        Ok(b) => b,
        Err(StoreError::NotFound(_)) => return Ok(false),
        Err(e) => return Err(e),
    };
    if store::matches(digest, &bytes).is_ok() {
        return Ok(false);
    }
    store.forget_verified(&store::blob_key(digest));
    let good = match store::read_all(store, &store::blob_key(digest)).await {
        Ok(b) if store::matches(digest, &b).is_ok() => b,
        Ok(_) | Err(StoreError::NotFound(_) | StoreError::Corrupt(_)) => {
            tracing::error!(%digest, "scrub: both copies of a metadata blob are damaged");
            return Ok(false);
        }
        Err(e) => return Err(e),
    };
    store::copies::overwrite(store, key, &good).await?;
    tracing::warn!(%digest, "scrub: damaged second copy of a metadata blob written again");
    Ok(true)
}

/// Checks every copy in the pack `key`; the blobs of damaged ones that no
/// other pack holds a good copy of are read (verified) and written into a
/// new pack, and noted in `p.repaired`. A
/// pack whose header is damaged is noted in `p.damaged` (its blobs are
/// unknown: `fsck` writes the current generation's missing copies again).
///
/// Errors: the store failed.
async fn scrub_pack(store: &dyn Blobstore, key: &str, p: &mut ScrubProgress) -> store::Result<()> {
    let damaged = match store::copies::pack::damaged_entries(store, key).await {
        Ok(Some(d)) => d,
        Ok(None) => return Ok(()),
        Err(StoreError::Corrupt(cause)) => {
            tracing::error!(
                cause,
                "scrub: copy pack header damaged; run airlock fsck to write the copies again"
            );
            p.damaged.push(format!(
                "{cause} (run airlock fsck to write the lost copies again)"
            ));
            return Ok(());
        }
        Err(e) => return Err(e),
    };
    let mut again = Vec::new();
    for digest in damaged {
        if store::copies::pack::find(store, &digest).await?.is_some() {
            continue; // another pack holds a good copy (fsck wrote one)
        }
        match store::get_verified(store, &digest).await {
            Ok(bytes) => {
                tracing::warn!(%digest, "scrub: damaged copy of a metadata blob written again");
                again.push((digest, Bytes::from(bytes)));
            }
            Err(StoreError::NotFound(_) | StoreError::Corrupt(_) | StoreError::Mismatch(_)) => {
                // Its blob is gone (gc) or damaged too: nothing to copy.
                tracing::error!(%digest, "scrub: a copy is damaged and its blob cannot be read");
            }
            Err(e) => return Err(e),
        }
    }
    store::copies::pack::write(store, &again).await?;
    p.repaired
        .extend(again.into_iter().map(|(d, _)| d.to_string()));
    Ok(())
}

/// Runs (or resumes) one pass over every blob, saving progress as it goes;
/// returns the finished pass. A pass whose `finished` is set is not
/// resumed: a new one starts.
///
/// Errors: listing or saving failed, or a read failed for another reason
/// than corruption (the pass stops there and resumes next time).
pub async fn pass(store: &Arc<dyn Blobstore>, opts: &ScrubOptions) -> store::Result<ScrubProgress> {
    let mut p = match load(&**store).await {
        Some(p) if p.finished.is_none() => p,
        _ => ScrubProgress {
            started: crate::state::now_rfc3339(),
            ..ScrubProgress::default()
        },
    };
    // `blobs/` then `copies/` (key order): a pass covers both.
    let mut blobs = store.list_meta("blobs/").await?;
    blobs.extend(store.list_meta(store::copies::COPIES_PREFIX).await?);
    blobs.sort_by(|a, b| a.key.cmp(&b.key));
    let mut budget = (Instant::now(), 0u64);
    let mut since_save = 0u64;
    for b in blobs {
        if p.cursor
            .as_ref()
            .is_some_and(|c| b.key.as_str() <= c.as_str())
        {
            continue;
        }
        if b.key.starts_with(store::copies::pack::PACKS_PREFIX) {
            scrub_pack(&**store, &b.key, &mut p).await?;
            p.cursor = Some(b.key);
            continue;
        }
        if let Some(digest) = store::copies::copy_digest(&b.key) {
            if scrub_copy(&**store, &b.key, &digest).await? {
                p.repaired.push(digest.to_string());
            }
            p.cursor = Some(b.key);
            continue;
        }
        let Some(digest) = verify::blob_digest(&b.key) else {
            continue;
        };
        match scrub_blob(&**store, &b.key, opts.rate, &mut budget).await? {
            Verdict::Whole(n) => {
                p.blobs += 1;
                p.bytes += n;
            }
            Verdict::Corrupt => {
                // Reported once it is moved (an S3 store moves it in the
                // background; a CLI scrub would exit before that).
                verify::settle_quarantine(&**store, &digest).await?;
                let failure = StoreError::Corrupt(digest.to_string());
                if store::copies::recover(&**store, &digest, &failure)
                    .await?
                    .is_some()
                {
                    tracing::warn!(%digest, "scrub: damaged metadata blob restored from its second copy");
                    p.repaired.push(digest.to_string());
                    p.cursor = Some(b.key);
                    continue;
                }
                tracing::error!(%digest, "scrub: corrupt blob quarantined");
                crate::metrics::global().store_error("corrupt");
                crate::metrics::global().scrub_corrupt_found.inc();
                p.corrupt.push(digest);
            }
            Verdict::Gone => {}
        }
        p.cursor = Some(b.key);
        since_save += 1;
        if since_save >= SAVE_EVERY {
            since_save = 0;
            save(&**store, &p).await?;
            publish(&p);
        }
    }
    // The pull record's objects, which are keyed, not content-addressed.
    let pulls = crate::state::pulls::check_objects(&**store)
        .await
        .map_err(|e| StoreError::Io(std::io::Error::other(format!("checking pulls/: {e}"))))?;
    for (key, what) in pulls.repaired {
        tracing::warn!(key, what, "scrub: pull record object repaired");
        p.repaired.push(key);
    }
    for (key, cause) in pulls.damaged {
        tracing::error!(
            key,
            cause,
            "scrub: both copies of a pull record object are damaged"
        );
        p.damaged.push(format!("{key}: {cause}"));
    }
    p.finished = Some(crate::state::now_rfc3339());
    save(&**store, &p).await?;
    publish(&p);
    Ok(p)
}

/// Shows `p` in `/metrics` (`airlock_scrub_*`).
fn publish(p: &ScrubProgress) {
    let m = crate::metrics::global();
    m.scrub_blobs.set(p.blobs as i64);
    m.scrub_bytes.set(p.bytes as i64);
    m.scrub_corrupt.set(p.corrupt.len() as i64);
    if let Some(t) = p.finished.as_deref().and_then(parse_time) {
        m.scrub_last_finished.set(t.unix_timestamp());
    }
}

/// How long until the next pass may start, after the saved progress:
/// now for a pass left unfinished; for a store never scrubbed, the
/// interval or one hour, whichever is shorter (a server just started is
/// not slowed by a scrub at once).
pub fn due_in(last: Option<&ScrubProgress>, interval: Duration) -> Duration {
    let Some(p) = last else {
        return interval.min(Duration::from_secs(3600));
    };
    if p.finished.is_none() {
        return Duration::ZERO;
    }
    let Some(started) = parse_time(&p.started) else {
        return Duration::ZERO;
    };
    let left = started + interval - time::OffsetDateTime::now_utc();
    left.try_into().unwrap_or(Duration::ZERO)
}

fn parse_time(t: &str) -> Option<time::OffsetDateTime> {
    time::OffsetDateTime::parse(t, &time::format_description::well_known::Rfc3339).ok()
}

/// The server's scrub: a pass whenever one is due, forever, while this
/// process holds the scrub's lease (`held`, [`super::lease`]): of the
/// replicas on one store one scrubs, and when it stops (or dies) the next
/// holder continues the pass from its saved cursor. Logged at info when a
/// pass ends, at warn when one fails (it resumes after a minute).
pub fn spawn(
    store: Arc<dyn Blobstore>,
    opts: ScrubOptions,
    mut held: super::lease::Held,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            held.wait().await;
            let last = load(&*store).await;
            if let Some(p) = &last {
                publish(p);
            }
            let run = async {
                tokio::time::sleep(due_in(last.as_ref(), opts.interval)).await;
                pass(&store, &opts).await
            };
            let mut lost = held.clone();
            tokio::select! {
                r = run => match r {
                    Ok(p) => tracing::info!(
                        blobs = p.blobs,
                        bytes = p.bytes,
                        corrupt = p.corrupt.len(),
                        "scrub pass finished"
                    ),
                    Err(e) => {
                        tracing::warn!(error = %e, "scrub pass stopped; resuming in a minute");
                        tokio::time::sleep(Duration::from_secs(60)).await;
                    }
                },
                () = lost.lost() => tracing::info!("scrub: lease lost; the next holder continues from the saved cursor"),
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::fs::FsStore;

    /// A stored blob of `n` bytes (over the whole-verify threshold).
    async fn large_blob(
        store: &FsStore,
        root: &std::path::Path,
        n: usize,
    ) -> (Digest, String, std::path::PathBuf) {
        let bytes: Vec<u8> = (0..n).map(|i| (i * 7 % 251) as u8).collect();
        let d = Digest::sha256_of(&bytes);
        let key = store::blob_key(&d);
        let mut w = store.writer(&key).await.unwrap();
        w.write(Bytes::from(bytes)).await.unwrap();
        w.commit().await.unwrap();
        let path = root.join(&key);
        (d, key, path)
    }

    async fn read_all(store: &dyn Blobstore, key: &str) -> std::io::Result<u64> {
        let mut s = store
            .stream(key, None)
            .await
            .map_err(std::io::Error::other)?;
        let mut n = 0;
        while let Some(c) = s.next().await {
            n += c?.len() as u64;
        }
        Ok(n)
    }

    fn flip(path: &std::path::Path, at: u64) {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .unwrap();
        let mut b = [0u8];
        f.read_exact_at(&mut b, at).unwrap();
        b[0] ^= 0x20;
        f.write_all_at(&b, at).unwrap();
    }

    #[tokio::test]
    async fn verified_once_until_the_file_changes() {
        let dir = tempfile::tempdir().unwrap();
        let store = FsStore::open(dir.path()).unwrap();
        let (_, key, path) = large_blob(&store, dir.path(), 6 << 20).await;
        assert!(!store.verified_now(&key));
        assert_eq!(read_all(&store, &key).await.unwrap(), 6 << 20);
        assert!(
            store.verified_now(&key),
            "a whole read that matched is remembered"
        );
        // A range read does not verify, and does not forget.
        let _ = store.stream(&key, Some((0, 10))).await.unwrap();
        assert!(store.verified_now(&key));
        // A write moves the ctime: the next read hashes, fails, quarantines.
        flip(&path, 3 << 20);
        assert!(!store.verified_now(&key));
        let e = read_all(&store, &key).await.unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidData, "{e}");
        assert!(!path.exists(), "quarantined");
        assert!(
            dir.path()
                .join(verify::quarantine_key(&verify::blob_digest(&key).unwrap()))
                .exists()
        );
    }

    #[tokio::test]
    async fn a_scrub_finds_rot_under_an_unchanged_identity() {
        let dir = tempfile::tempdir().unwrap();
        let fs = FsStore::open(dir.path()).unwrap();
        let (good_d, good, _) = large_blob(&fs, dir.path(), 5 << 20).await;
        let (bad_d, bad, bad_path) = large_blob(&fs, dir.path(), 7 << 20).await;
        // Bit rot the file system cannot see: the bytes change and the blob
        // is still remembered verified at the file's identity.
        flip(&bad_path, 1 << 20);
        fs.pretend_verified(&bad);
        assert_eq!(
            read_all(&fs, &bad).await.unwrap(),
            7 << 20,
            "a verified identity is served without hashing: what the scrub is for"
        );
        let store: Arc<dyn Blobstore> = Arc::new(fs.clone());
        let opts = ScrubOptions {
            interval: Duration::from_secs(3600),
            rate: 0,
        };
        let p = pass(&store, &opts).await.unwrap();
        assert_eq!(p.corrupt, vec![bad_d.clone()]);
        assert_eq!((p.blobs, p.bytes), (1, 5 << 20));
        assert!(p.finished.is_some());
        assert!(!bad_path.exists(), "quarantined");
        assert!(dir.path().join(verify::quarantine_key(&bad_d)).exists());
        assert!(fs.verified_now(&good), "the whole one is verified again");
        assert_eq!(
            load(&*store).await.unwrap(),
            p,
            "progress kept in the store"
        );
        assert_eq!(
            read_all(&*store, &store::blob_key(&good_d)).await.unwrap(),
            5 << 20
        );
    }

    #[tokio::test]
    async fn a_stopped_pass_resumes_after_its_cursor() {
        let dir = tempfile::tempdir().unwrap();
        let fs = FsStore::open(dir.path()).unwrap();
        let mut keys = Vec::new();
        for i in 0..3 {
            keys.push(large_blob(&fs, dir.path(), (5 << 20) + i).await.1);
        }
        keys.sort();
        let store: Arc<dyn Blobstore> = Arc::new(fs);
        let stopped = ScrubProgress {
            started: "2026-01-01T00:00:00Z".into(),
            cursor: Some(keys[1].clone()),
            blobs: 2,
            bytes: 2,
            ..Default::default()
        };
        save(&*store, &stopped).await.unwrap();
        let p = pass(&store, &ScrubOptions::default()).await.unwrap();
        assert_eq!(p.started, stopped.started, "the same pass, resumed");
        assert_eq!(p.blobs, 3, "one more blob: the one after the cursor");
        assert_eq!(p.cursor.as_deref(), Some(keys[2].as_str()));
    }

    /// Two replicas' scrubs on one store: the lease holder scrubs; when it
    /// dies mid-pass, the other takes the lease after its ttl and finishes
    /// the same pass from the saved cursor.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_dead_holders_pass_is_finished_by_the_next_holder() {
        use crate::ops::lease::Leases;
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Blobstore> = Arc::new(FsStore::open(dir.path()).unwrap());
        for i in 0..200u32 {
            let bytes: Vec<u8> = (0..4096u32).map(|n| (n ^ i) as u8).collect();
            store::put_bytes(&*store, &bytes).await.unwrap();
        }
        let opts = ScrubOptions {
            interval: Duration::from_millis(100),
            rate: 200_000,
        };
        let ttl = Duration::from_millis(600);
        let a_leases = Leases::new(store.clone(), ttl);
        let a = spawn(store.clone(), opts, a_leases.job("scrub"));
        // a holds the lease and is past its first save.
        let deadline = Instant::now() + Duration::from_secs(20);
        let saved = loop {
            if let Some(p) = load(&*store).await.filter(|p| p.blobs >= SAVE_EVERY) {
                break p;
            }
            assert!(Instant::now() < deadline, "no progress saved");
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let b_leases = Leases::new(store.clone(), ttl);
        let b = spawn(store.clone(), opts, b_leases.job("scrub"));
        // a dies: its tasks stop without a release.
        a.abort();
        drop(a_leases);
        let deadline = Instant::now() + Duration::from_secs(30);
        let done = loop {
            if let Some(p) = load(&*store).await.filter(|p| p.finished.is_some()) {
                break p;
            }
            assert!(Instant::now() < deadline, "the pass was not finished");
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        b.abort();
        assert_eq!(done.started, saved.started, "the same pass, continued");
        assert_eq!(done.blobs, 200, "every blob counted once");
        assert!(done.corrupt.is_empty());
    }

    #[test]
    fn due_after_the_interval_from_the_start() {
        let week = Duration::from_secs(7 * 24 * 3600);
        assert_eq!(due_in(None, week), Duration::from_secs(3600));
        assert_eq!(due_in(None, Duration::from_secs(2)), Duration::from_secs(2));
        let unfinished = ScrubProgress {
            started: "2020-01-01T00:00:00Z".into(),
            ..Default::default()
        };
        assert_eq!(due_in(Some(&unfinished), week), Duration::ZERO);
        let now = crate::state::now_rfc3339();
        let recent = ScrubProgress {
            started: now.clone(),
            finished: Some(now),
            ..Default::default()
        };
        let d = due_in(Some(&recent), week);
        assert!(d > week - Duration::from_secs(60) && d <= week, "{d:?}");
    }
}
