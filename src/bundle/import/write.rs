//! The async side of the import pipeline: blobs written into the store as
//! their chunks arrive, each committed only when its digest matches, with a
//! bounded number of commits in flight.

use super::*;

/// Counters kept by the writer side.
#[derive(Default)]
pub(super) struct Written {
    pub(super) new: u64,
    /// The blobs this import committed (absent before it): what a refused
    /// import removes again ([`super::reclaim`]).
    pub(super) committed: Vec<Digest>,
    pub(super) skipped: u64,
    pub(super) bytes_new: u64,
    pub(super) bytes_read: u64,
}

/// Which listed blobs the store already holds (right size); fails if a required blob is missing.
pub(super) async fn present_blobs(
    store: &dyn Blobstore,
    doc: &BundleDoc,
) -> Result<HashSet<Digest>> {
    for r in &doc.required {
        match store.stat(&blob_key(&r.digest)).await? {
            Some(size) if size == r.size => {}
            _ => bail!(
                "delta bundle requires blob {} ({} bytes) which this store does not hold; import the bundle it was made against first",
                r.digest,
                r.size
            ),
        }
    }
    // `check` verifies small blobs (quarantining a corrupt copy): a bundle
    // carrying a blob the store holds damaged or quarantined repairs it.
    let mut present = HashSet::new();
    for b in &doc.blobs {
        if store::check(store, &b.digest).await? == Some(b.size) {
            present.insert(b.digest.clone());
        }
    }
    Ok(present)
}

/// Fails with the one-line mismatch cause unless `actual == expected`.
pub(super) fn check_digest(expected: &Digest, actual: Digest) -> Result<()> {
    if &actual != expected {
        bail!("blob {expected}: digest mismatch: content hashes to {actual}");
    }
    Ok(())
}

/// The blob the writer is receiving.
pub(super) struct Current {
    pub(super) digest: Digest,
    pub(super) hasher: Hasher,
    /// `None` when only verifying (no store).
    pub(super) writer: Option<Box<dyn ObjectWriter>>,
}

/// Blob commits (fsync + rename) allowed to run in the background while the
/// next blobs stream in; all finish before the root swap.
pub(super) const MAX_COMMITS: usize = 32;

/// Waits for one commit in flight; a landed blob joins `committed`.
pub(super) async fn join_commit(
    commits: &mut JoinSet<(Digest, store::Result<()>)>,
    committed: &mut Vec<Digest>,
) -> Result<()> {
    if let Some(r) = commits.join_next().await {
        let (digest, landed) = r.map_err(|e| anyhow!("blob commit failed: {e}"))?;
        landed?;
        committed.push(digest);
    }
    Ok(())
}

/// The writer side: receives messages, hashes and writes each blob, and
/// commits it only when its digest matched.
pub(super) async fn write_blobs(
    store: Option<&dyn Blobstore>,
    journal: Option<&str>,
    check_doc: &(dyn Fn(&BundleDoc) -> Result<()> + Send + Sync),
    rx: &mut mpsc::Receiver<Msg>,
    recycler: &buffers::Recycler,
    w: &mut Written,
) -> Result<()> {
    let failpoint = failpoint_after_bytes();
    let mut current: Option<Current> = None;
    let mut commits = JoinSet::new();
    let result = async {
        while let Some(msg) = rx.recv().await {
            match msg {
                Msg::Doc(doc, reply) => {
                    // Refused on the signed document alone: nothing written.
                    check_doc(&doc)?;
                    // The journal before the presence check: a blob found
                    // present is then either kept by a concurrent gc (it
                    // sees the journal) or already gone from the check.
                    if let (Some(s), Some(key)) = (store, journal) {
                        let all = doc.blobs.iter().chain(&doc.required);
                        let j = crate::bundle::journal::Journal::new(
                            &doc.id,
                            all.map(|b| b.digest.clone()).collect(),
                        );
                        j.put(s, key).await.context("writing the import journal")?;
                    }
                    let present = match store {
                        Some(s) => present_blobs(s, &doc).await?,
                        None => HashSet::new(),
                    };
                    let _ = reply.send(present);
                }
                Msg::Begin(digest) => {
                    let writer = match store {
                        Some(s) => Some(s.writer(&blob_key(&digest)).await?),
                        None => None,
                    };
                    current = Some(Current {
                        hasher: Hasher::new(digest.algorithm()),
                        digest,
                        writer,
                    });
                }
                Msg::Chunk(b) => {
                    w.bytes_read += b.len() as u64;
                    let Some(Current { hasher, writer, .. }) = current.as_mut() else {
                        bail!("bundle reader sent bytes outside a blob");
                    };
                    match writer {
                        Some(out) => {
                            w.bytes_new += b.len() as u64;
                            // The write runs on the blocking pool while this task hashes.
                            let (written, ()) =
                                tokio::join!(out.write(b.clone()), async { hasher.update(&b) });
                            written?;
                            if failpoint.is_some_and(|n| w.bytes_new >= n) {
                                crate::failpoint::crash_here();
                            }
                        }
                        None => hasher.update(&b),
                    }
                    recycler.give(b);
                }
                Msg::End => {
                    let Some(c) = current.take() else {
                        bail!("bundle reader ended a blob it never began");
                    };
                    if let Err(e) = check_digest(&c.digest, c.hasher.finish()) {
                        if let Some(out) = c.writer {
                            let _ = out.cancel().await;
                        }
                        return Err(e);
                    }
                    if let Some(out) = c.writer {
                        while commits.len() >= MAX_COMMITS {
                            join_commit(&mut commits, &mut w.committed).await?;
                        }
                        let digest = c.digest;
                        commits.spawn(async move { (digest, out.commit().await) });
                    }
                    w.new += 1;
                }
                Msg::Skipped(n) => {
                    w.skipped += 1;
                    w.bytes_read += n;
                }
            }
        }
        while !commits.is_empty() {
            join_commit(&mut commits, &mut w.committed).await?;
        }
        Ok::<(), anyhow::Error>(())
    }
    .await;
    if let Some(out) = current.take().and_then(|c| c.writer) {
        let _ = out.cancel().await;
    }
    // On failure, commits still in flight finish first (none is left half
    // done in `tmp/` when the process exits), and what landed is recorded.
    while !commits.is_empty() {
        let _ = join_commit(&mut commits, &mut w.committed).await;
    }
    result
}

/// `AIRLOCK_FAILPOINT=import:after_bytes=N`, for crash tests only: the
/// import process kills itself (SIGKILL) once it has written N blob bytes.
pub(super) fn failpoint_after_bytes() -> Option<u64> {
    crate::failpoint::number("import:after_bytes")
}

/// Runs the reader thread and the writer together. `store = None` verifies
/// only; `journal` is the key of the import's journal.
/// What was written is counted in `written` (also when it fails);
/// `check_doc` may refuse the verified document before any blob is written.
pub(super) async fn run_pipeline(
    store: Option<Arc<dyn Blobstore>>,
    journal: Option<&str>,
    verifier: Verifier,
    reader: Box<dyn Read + Send>,
    progress: indicatif::ProgressBar,
    check_doc: &(dyn Fn(&BundleDoc) -> Result<()> + Send + Sync),
    written: &mut Written,
) -> Result<BundleDoc> {
    let (tx, mut rx) = mpsc::channel(IN_FLIGHT);
    let (buffers, recycler) = buffers::pool();
    let handle =
        tokio::task::spawn_blocking(move || read_bundle(reader, &verifier, tx, buffers, &progress));
    let wrote = write_blobs(
        store.as_deref(),
        journal,
        check_doc,
        &mut rx,
        &recycler,
        written,
    )
    .await;
    drop(rx);
    let read = handle
        .await
        .map_err(|e| anyhow!("bundle reader failed: {e}"))?;
    // The writer fails only for its own causes (store error, missing required blob); the
    // reader then only sees a closed channel, so the writer's error is reported first.
    wrote?;
    read
}
