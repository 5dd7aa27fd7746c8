//! `airlock import` and `airlock bundle verify`: the streaming import pipeline.
//!
//! Owns: reading a bundle tar once, front to back, in constant memory:
//! 1. the first entry must be the signed document; its signature is verified
//!    against the admin's keyring before anything else is read;
//! 2. every later entry must be exactly `oci-layout`, `index.json` or a
//!    listed `blobs/<alg>/<hex>`, a regular file, seen once, of the listed size;
//!    each is hashed while it streams into the blobstore (a reader thread
//!    hashes while the async side writes) and committed only if it matches;
//! 3. when the tar ends, every listed blob must have been seen and every
//!    required (delta) blob must already be in the store;
//! 4. the images' manifests are walked from the store and linked into their
//!    repositories, and the bundle's stack candidates recorded in the stack
//!    table, with one root swap.
//!
//! Any failure leaves the state root as it was. Before its first blob is
//! written an import records a journal ([`super::journal`]); blobs written
//! before a failure (or a kill) are unreferenced and `gc` reclaims them at
//! once through it.

use std::collections::{HashMap, HashSet};
use std::io::Read;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use bytes::Bytes;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;

use super::format::{
    BundleDoc, FORMAT_V1, INDEX_JSON, ImageEntry, MAX_LAYOUT_FILE, MAX_SIGNED_DOC, OCI_LAYOUT,
    SIGNED_DOC, parse_blob_path,
};
use super::sign::Keyring;
use crate::digest::{Digest, Hasher};
use crate::oci::{self, Manifest};
use crate::state::{ManifestInfo, Op, StateStore};
use crate::store::{self, Blobstore, ObjectWriter, blob_key};

/// Bytes per chunk handed from the reader thread to the writer.
const CHUNK: usize = 4 << 20;
/// Chunks in flight between reader and writer (bounds memory: CHUNK × this).
const IN_FLIGHT: usize = 4;

/// What an import did.
#[derive(Debug, Clone)]
pub struct ImportReport {
    /// The bundle's id.
    pub id: String,
    /// Images (repository + tags) linked.
    pub images: usize,
    /// Blobs written to the store.
    pub blobs_new: u64,
    /// Blobs already present (verified, not written).
    pub blobs_skipped: u64,
    /// Bytes written to the store.
    pub bytes_new: u64,
    /// Blob bytes read from the bundle.
    pub bytes_read: u64,
    /// The generation now current.
    pub generation: u64,
    /// False when the store already had everything (no new generation).
    pub changed: bool,
    /// Wall time.
    pub elapsed: Duration,
}

impl std::fmt::Display for ImportReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let secs = self.elapsed.as_secs_f64().max(1e-6);
        write!(
            f,
            "imported bundle {}: {} images, {} blobs new, {} skipped, {:.1} MB written, {:.1} MB read in {:.2} s ({:.1} MB/s), generation {}{}",
            self.id,
            self.images,
            self.blobs_new,
            self.blobs_skipped,
            self.bytes_new as f64 / 1e6,
            self.bytes_read as f64 / 1e6,
            secs,
            self.bytes_read as f64 / 1e6 / secs,
            self.generation,
            if self.changed { "" } else { " (no change)" }
        )
    }
}

/// Messages from the reader thread to the writer.
enum Msg {
    /// The verified document; the reader waits for the set of blobs already present.
    Doc(Box<BundleDoc>, oneshot::Sender<HashSet<Digest>>),
    /// A new blob starts.
    Begin(Digest),
    /// Bytes of the current blob.
    Chunk(Bytes),
    /// The current blob is complete and verified.
    End,
    /// A blob already present was read and verified (bytes).
    Skipped(u64),
}

/// Checks a verified document's own consistency.
fn check_doc(doc: &BundleDoc) -> Result<()> {
    if doc.format != FORMAT_V1 {
        bail!(
            "unsupported bundle format {:?} (expected {FORMAT_V1})",
            doc.format
        );
    }
    super::format::check_tags(&doc.images).map_err(|e| anyhow!("signed document: {e}"))?;
    let mut seen = HashSet::new();
    for b in doc.blobs.iter().chain(doc.required.iter()) {
        if !seen.insert(&b.digest) {
            bail!("signed document lists blob {} twice", b.digest);
        }
    }
    Ok(())
}

/// The entry's path as raw UTF-8, refusing anything but a regular file.
fn entry_path<R: Read>(entry: &tar::Entry<'_, R>) -> Result<String> {
    let raw = entry.path_bytes();
    let path =
        String::from_utf8(raw.into_owned()).map_err(|_| anyhow!("entry with a non-UTF-8 path"))?;
    let kind = entry.header().entry_type();
    if !matches!(kind, tar::EntryType::Regular) {
        let what = match kind {
            tar::EntryType::Symlink => "a symlink",
            tar::EntryType::Link => "a hardlink",
            tar::EntryType::Directory => "a directory",
            tar::EntryType::Char | tar::EntryType::Block => "a device",
            tar::EntryType::Fifo => "a fifo",
            tar::EntryType::GNUSparse => "a sparse file",
            tar::EntryType::XHeader
            | tar::EntryType::XGlobalHeader
            | tar::EntryType::GNULongName
            | tar::EntryType::GNULongLink => {
                "a PAX or GNU extension header (bundles use plain ustar entries)"
            }
            _ => "not a regular file",
        };
        bail!("entry {path:?} is {what}; bundles hold regular files only");
    }
    Ok(path)
}

fn read_bounded<R: Read>(entry: &mut R, size: u64, limit: u64, what: &str) -> Result<Vec<u8>> {
    if size > limit {
        bail!("{what} is {size} bytes, over the {limit}-byte limit");
    }
    let mut buf = Vec::with_capacity(size as usize);
    entry.take(limit + 1).read_to_end(&mut buf)?;
    if buf.len() as u64 != size {
        bail!("{what}: truncated ({} of {size} bytes)", buf.len());
    }
    Ok(buf)
}

/// Reads the first entry, which must be the signed document (bounded in size).
fn read_signed_doc<R: Read>(entries: &mut tar::Entries<'_, R>) -> Result<String> {
    let mut first = entries
        .next()
        .ok_or_else(|| anyhow!("empty bundle: no entries"))??;
    let path = entry_path(&first)?;
    if path != SIGNED_DOC {
        bail!("first entry is {path:?}; a bundle starts with {SIGNED_DOC}");
    }
    let size = first.size();
    let armored = read_bounded(&mut first, size, MAX_SIGNED_DOC, SIGNED_DOC)?;
    String::from_utf8(armored).map_err(|_| anyhow!("{SIGNED_DOC} is not UTF-8"))
}

/// After the end-of-archive block only zero padding may follow (at most
/// [`MAX_PADDING`] bytes): anything else is a second bundle or junk.
/// Returns how many zero bytes followed.
fn only_padding_follows(mut rest: impl Read) -> Result<u64> {
    let mut buf = vec![0u8; 64 * 1024];
    let mut total = 0u64;
    loop {
        let n = rest.read(&mut buf)?;
        if n == 0 {
            return Ok(total);
        }
        total += n as u64;
        if total > MAX_PADDING || buf[..n].iter().any(|&b| b != 0) {
            bail!(
                "data after the end of the tar archive: a bundle is one tar (or its volumes, in order); import bundles one at a time"
            );
        }
    }
}

/// Zero padding accepted after the end-of-archive block, in bytes (tar records are 10 KiB).
const MAX_PADDING: u64 = 1 << 20;

/// The end-of-archive marker: two zero blocks of 512 bytes (POSIX ustar).
const END_OF_ARCHIVE: u64 = 1024;

/// A reader that counts the bytes read through it, so errors can name the
/// offset in the bundle where they happened.
struct Counting<R> {
    inner: R,
    read: Arc<AtomicU64>,
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

/// The reader thread: parses, verifies and hashes; sends blob bytes to the writer.
fn read_bundle(
    reader: impl Read,
    keyring: &Keyring,
    tx: mpsc::Sender<Msg>,
    progress: &indicatif::ProgressBar,
) -> Result<BundleDoc> {
    let send = |m: Msg| {
        tx.blocking_send(m)
            .map_err(|_| anyhow!("import aborted by the store writer"))
    };
    let offset = Arc::new(AtomicU64::new(0));
    let at = || offset.load(Ordering::Relaxed);
    let mut archive = tar::Archive::new(Counting {
        inner: reader,
        read: offset.clone(),
    });
    // Raw entries: PAX and GNU extension headers are not expanded (into memory,
    // unbounded) by the tar crate but refused by `entry_path`.
    let mut entries = archive.entries()?.raw(true);
    let armored =
        read_signed_doc(&mut entries).with_context(|| format!("at byte {} of the bundle", at()))?;
    let verified = keyring
        .verify_cleartext(&armored)
        .map_err(|e| anyhow!("signature check failed: {e}"))?;
    let doc: BundleDoc = serde_json::from_str(&verified.text)
        .map_err(|e| anyhow!("signed document is not a bundle document: {e}"))?;
    check_doc(&doc)?;
    tracing::info!(id = %doc.id, signer = %verified.signer, blobs = doc.blobs.len(), "bundle signature verified");
    progress.set_length(doc.blobs.iter().map(|b| b.size).sum());

    let (ptx, prx) = oneshot::channel();
    send(Msg::Doc(Box::new(doc.clone()), ptx))?;
    let present = prx
        .blocking_recv()
        .map_err(|_| anyhow!("import aborted by the store writer"))?;

    let listed: HashMap<&Digest, u64> = doc.blobs.iter().map(|b| (&b.digest, b.size)).collect();
    let mut seen: HashSet<Digest> = HashSet::new();
    let mut layout_seen: HashSet<&'static str> = HashSet::new();
    // Where the last entry's data ends, rounded up to the 512-byte block.
    let mut data_end = 0u64;
    for entry in entries {
        let mut entry = entry.with_context(|| {
            format!(
                "bundle truncated or not a tar: cannot read an entry header at byte {}",
                at()
            )
        })?;
        let path = entry_path(&entry)?;
        let size = entry.size();
        data_end = (entry.raw_file_position() + size).div_ceil(512) * 512;
        let layout_file = [
            (OCI_LAYOUT, &doc.layout.oci_layout),
            (INDEX_JSON, &doc.layout.index_json),
        ]
        .into_iter()
        .find(|(name, _)| *name == path);
        if let Some((name, expected)) = layout_file {
            if !layout_seen.insert(name) {
                bail!("entry {name:?} appears twice");
            }
            let bytes = read_bounded(&mut entry, size, MAX_LAYOUT_FILE, name)?;
            let actual = expected.same_alg_of(&bytes);
            if &actual != expected {
                bail!("entry {name:?}: digest mismatch: expected {expected}, got {actual}");
            }
            continue;
        }
        let digest = parse_blob_path(&path)
            .ok_or_else(|| anyhow!("unexpected entry {path:?}: not part of bundle format v1"))?;
        let listed_size = *listed.get(&digest).ok_or_else(|| {
            anyhow!("entry {path:?}: blob {digest} is not listed in the signed document")
        })?;
        if !seen.insert(digest.clone()) {
            bail!("entry {path:?} appears twice");
        }
        if size != listed_size {
            bail!("blob {digest}: signed document says {listed_size} bytes, tar entry has {size}");
        }
        let skip = present.contains(&digest);
        if !skip {
            send(Msg::Begin(digest.clone()))?;
        }
        // Whoever consumes the bytes hashes them: the writer for blobs it writes (so
        // hashing overlaps the write), this thread for blobs the store already holds.
        let mut hasher = skip.then(|| Hasher::new(digest.algorithm()));
        let mut remaining = size;
        while remaining > 0 {
            let want = remaining.min(CHUNK as u64);
            let mut buf = Vec::with_capacity(want as usize);
            (&mut entry).take(want).read_to_end(&mut buf)?;
            if buf.len() as u64 != want {
                bail!("blob {digest}: bundle truncated at byte {}", at());
            }
            remaining -= want;
            progress.inc(want);
            match hasher.as_mut() {
                Some(h) => h.update(&buf),
                None => send(Msg::Chunk(Bytes::from(buf)))?,
            }
        }
        match hasher {
            Some(h) => {
                check_digest(&digest, h.finish())?;
                send(Msg::Skipped(size))?;
            }
            None => send(Msg::End)?,
        }
    }
    let consumed = at();
    let zeros = consumed.saturating_sub(data_end) + only_padding_follows(archive.into_inner())?;
    if zeros < END_OF_ARCHIVE {
        bail!(
            "bundle truncated at byte {}: the tar end-of-archive marker (two zero blocks) is missing",
            consumed.max(data_end)
        );
    }
    for name in [OCI_LAYOUT, INDEX_JSON] {
        if !layout_seen.contains(name) {
            bail!("bundle truncated or incomplete: entry {name:?} missing");
        }
    }
    if let Some(b) = doc.blobs.iter().find(|b| !seen.contains(&b.digest)) {
        bail!(
            "bundle truncated or incomplete: listed blob {} missing",
            b.digest
        );
    }
    Ok(doc)
}

/// Counters kept by the writer side.
#[derive(Default)]
struct Written {
    new: u64,
    skipped: u64,
    bytes_new: u64,
    bytes_read: u64,
}

/// Which listed blobs the store already holds (right size); fails if a required blob is missing.
async fn present_blobs(store: &dyn Blobstore, doc: &BundleDoc) -> Result<HashSet<Digest>> {
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
fn check_digest(expected: &Digest, actual: Digest) -> Result<()> {
    if &actual != expected {
        bail!("blob {expected}: digest mismatch: content hashes to {actual}");
    }
    Ok(())
}

/// The blob the writer is receiving.
struct Current {
    digest: Digest,
    hasher: Hasher,
    /// `None` when only verifying (no store).
    writer: Option<Box<dyn ObjectWriter>>,
}

/// Blob commits (fsync + rename) allowed to run in the background while the
/// next blobs stream in; all finish before the root swap.
const MAX_COMMITS: usize = 32;

async fn join_commit(commits: &mut JoinSet<store::Result<()>>) -> Result<()> {
    if let Some(r) = commits.join_next().await {
        r.map_err(|e| anyhow!("blob commit failed: {e}"))??;
    }
    Ok(())
}

/// The writer side: receives messages, hashes and writes each blob, and
/// commits it only when its digest matched.
async fn write_blobs(
    store: Option<&dyn Blobstore>,
    journal: Option<&str>,
    rx: &mut mpsc::Receiver<Msg>,
    w: &mut Written,
) -> Result<()> {
    let failpoint = failpoint_after_bytes();
    let mut current: Option<Current> = None;
    let mut commits = JoinSet::new();
    let result = async {
        while let Some(msg) = rx.recv().await {
            match msg {
                Msg::Doc(doc, reply) => {
                    // The journal before the presence check: a blob found
                    // present is then either kept by a concurrent gc (it
                    // sees the journal) or already gone from the check.
                    if let (Some(s), Some(key)) = (store, journal) {
                        let all = doc.blobs.iter().chain(&doc.required);
                        let j = super::journal::Journal::new(
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
                                crash_here();
                            }
                        }
                        None => hasher.update(&b),
                    }
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
                            join_commit(&mut commits).await?;
                        }
                        commits.spawn(out.commit());
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
            join_commit(&mut commits).await?;
        }
        Ok::<(), anyhow::Error>(())
    }
    .await;
    if let Some(out) = current.take().and_then(|c| c.writer) {
        let _ = out.cancel().await;
    }
    result
}

/// `AIRLOCK_FAILPOINT=import:after_bytes=N`, for crash tests only: the
/// import process kills itself (SIGKILL) once it has written N blob bytes.
fn failpoint_after_bytes() -> Option<u64> {
    std::env::var("AIRLOCK_FAILPOINT")
        .ok()?
        .strip_prefix("import:after_bytes=")?
        .parse()
        .ok()
}

/// Ends the process as `kill -9` would (crash tests, see [`failpoint_after_bytes`]).
fn crash_here() {
    tracing::warn!("AIRLOCK_FAILPOINT reached: killing this process");
    // SAFETY: sending a signal to our own process has no memory-safety preconditions.
    unsafe {
        libc::kill(libc::getpid(), libc::SIGKILL);
    }
}

/// Runs the reader thread and the writer together. `store = None` verifies
/// only; `journal` is the key of the import's journal.
async fn run_pipeline(
    store: Option<Arc<dyn Blobstore>>,
    journal: Option<&str>,
    keyring: Keyring,
    reader: Box<dyn Read + Send>,
    progress: indicatif::ProgressBar,
) -> Result<(BundleDoc, Written)> {
    let (tx, mut rx) = mpsc::channel(IN_FLIGHT);
    let handle = tokio::task::spawn_blocking(move || read_bundle(reader, &keyring, tx, &progress));
    let mut written = Written::default();
    let wrote = write_blobs(store.as_deref(), journal, &mut rx, &mut written).await;
    drop(rx);
    let read = handle
        .await
        .map_err(|e| anyhow!("bundle reader failed: {e}"))?;
    // The writer fails only for its own causes (store error, missing required blob); the
    // reader then only sees a closed channel, so the writer's error is reported first.
    wrote?;
    let doc = read?;
    Ok((doc, written))
}

/// Walks an image's manifests in the store and returns the ops that link it.
async fn image_ops(store: &dyn Blobstore, img: &ImageEntry) -> Result<Vec<Op>> {
    let mut ops = Vec::new();
    let mut blobs = Vec::new();
    let mut stack = vec![(img.digest.clone(), img.media_type.clone(), img.size, true)];
    let mut seen = HashSet::new();
    while let Some((digest, media_type, size, is_root)) = stack.pop() {
        if !seen.insert(digest.clone()) {
            continue;
        }
        let bytes = store::get_verified(store, &digest).await.with_context(|| {
            format!(
                "image {}: manifest {digest} is neither in the bundle nor in the store",
                img.repository
            )
        })?;
        if bytes.len() as u64 != size {
            bail!(
                "manifest {digest}: descriptor says {size} bytes, content has {}",
                bytes.len()
            );
        }
        let m = Manifest::parse(&bytes).with_context(|| format!("manifest {digest}"))?;
        if let Some(own) = &m.media_type
            && own != &media_type
        {
            bail!("manifest {digest}: mediaType {own} differs from its descriptor's {media_type}");
        }
        for child in &m.manifests {
            if is_root && img.absent.contains(&child.digest) {
                // Left out on purpose (`platforms`): the index is kept whole, the child is absent.
                continue;
            }
            if oci::is_manifest_type(&child.media_type) {
                stack.push((
                    child.digest.clone(),
                    child.media_type.clone(),
                    child.size,
                    false,
                ));
            } else {
                blobs.push((child.digest.clone(), child.size));
            }
        }
        for b in m.blobs() {
            blobs.push((b.digest.clone(), b.size));
        }
        ops.push(Op::PutManifest {
            repo: img.repository.clone(),
            digest,
            info: ManifestInfo {
                media_type,
                size,
                subject: m.subject.as_ref().map(|s| s.digest.clone()),
                artifact_type: m.referrer_artifact_type(),
            },
            tags: if is_root {
                img.tags.clone()
            } else {
                Vec::new()
            },
        });
    }
    for (d, size) in &blobs {
        match store.stat(&blob_key(d)).await? {
            Some(s) if s == *size => {}
            _ => bail!(
                "image {}: blob {d} ({size} bytes) is neither in the bundle nor in the store",
                img.repository
            ),
        }
    }
    ops.insert(
        0,
        Op::LinkBlobs {
            repo: img.repository.clone(),
            blobs,
        },
    );
    Ok(ops)
}

/// The op recording the bundle's stack candidates (in the import's own
/// commit). Errors: a candidate names an image the bundle does not carry.
fn stack_candidates(doc: &BundleDoc, who: &str) -> Result<Op> {
    let carried = |r: &crate::stacks::ImageRef| {
        doc.images
            .iter()
            .any(|i| i.repository == r.repository && i.digest == r.digest)
    };
    let now = crate::state::now_rfc3339();
    let mut entries = Vec::new();
    for s in &doc.stacks {
        for r in [Some(&s.image), s.build_image.as_ref(), s.run_image.as_ref()]
            .into_iter()
            .flatten()
        {
            if !carried(r) {
                bail!(
                    "stack candidate {}: image {r} is not one of the bundle's images",
                    s.name
                );
            }
        }
        let candidate = crate::stacks::table::Candidate {
            image: s.image.clone(),
            build_image: s.build_image.clone(),
            run_image: s.run_image.clone(),
            bundle: doc.id.clone(),
            time: now.clone(),
        };
        entries.push((s.name.clone(), s.description.clone(), candidate));
    }
    Ok(crate::stacks::ops::candidates_op(entries, who.to_string()))
}

/// Imports one bundle stream into `state`, committing with one root swap.
/// Errors: one-line causes; the root is unchanged on any error.
pub async fn import(
    state: &StateStore,
    keyring: Keyring,
    reader: Box<dyn Read + Send>,
    who: &str,
    progress: indicatif::ProgressBar,
) -> Result<ImportReport> {
    let start = Instant::now();
    let store = state.blobstore().clone();
    let journal = store::journal_key(&uuid::Uuid::new_v4().to_string());
    let result = import_journaled(state, &journal, keyring, reader, who, progress).await;
    match &result {
        Ok(_) => {
            if let Err(e) = store.delete(&journal).await {
                tracing::warn!(error = %e, %journal, "import journal not removed (gc removes it)");
            }
        }
        Err(_) => {
            // `gc` frees what it wrote at once. A rename needs no free space;
            // a journal left as it was is recognised by its dead process.
            let failed = super::journal::failed_key(&journal);
            match store.rename(&journal, &failed).await {
                Ok(()) | Err(store::StoreError::NotFound(_)) => {}
                Err(e) => tracing::warn!(error = %e, %journal, "import journal not marked failed"),
            }
        }
    }
    crate::metrics::global().import_done(
        result.is_ok(),
        result.as_ref().map_or(0, |(_, w, _)| w.bytes_new),
    );
    let (doc, w, commit) = result?;
    Ok(ImportReport {
        id: doc.id,
        images: doc.images.len(),
        blobs_new: w.new,
        blobs_skipped: w.skipped,
        bytes_new: w.bytes_new,
        bytes_read: w.bytes_read,
        generation: commit.generation,
        changed: commit.changed,
        elapsed: start.elapsed(),
    })
}

/// The import proper, under the journal `journal`.
async fn import_journaled(
    state: &StateStore,
    journal: &str,
    keyring: Keyring,
    reader: Box<dyn Read + Send>,
    who: &str,
    progress: indicatif::ProgressBar,
) -> Result<(BundleDoc, Written, crate::state::Commit)> {
    let store = state.blobstore().clone();
    let (doc, w) = run_pipeline(
        Some(store.clone()),
        Some(journal),
        keyring,
        reader,
        progress,
    )
    .await?;
    let mut ops = Vec::new();
    for img in &doc.images {
        ops.extend(image_ops(&*store, img).await?);
    }
    ops.extend(crate::torcx::bundle::import_op(&store, &doc).await?);
    if !doc.stacks.is_empty() {
        ops.push(stack_candidates(&doc, who)?);
    }
    let commit = state
        .commit(&format!("import bundle {}", doc.id), who, &ops)
        .await?;
    crate::events::emit_logged(
        &*store,
        "import.completed",
        commit.generation,
        who,
        serde_json::json!({
            "bundle": doc.id,
            "images": doc.images.iter().map(|i| &i.repository).collect::<Vec<_>>(),
            "stacks": doc.stacks.iter().map(|s| &s.name).collect::<Vec<_>>(),
            "blobs_new": w.new,
            "bytes_new": w.bytes_new,
            "changed": commit.changed,
        }),
    )
    .await;
    Ok((doc, w, commit))
}

/// Verifies a bundle without a store: signature, every entry, every digest.
/// Returns the verified document.
pub async fn verify(
    keyring: Keyring,
    reader: Box<dyn Read + Send>,
    progress: indicatif::ProgressBar,
) -> Result<BundleDoc> {
    let (doc, _) = run_pipeline(None, None, keyring, reader, progress).await?;
    Ok(doc)
}

/// Reads the signed document of a bundle WITHOUT verifying its signature (`bundle inspect`).
pub fn inspect(reader: impl Read) -> Result<BundleDoc> {
    let mut archive = tar::Archive::new(reader);
    let armored = read_signed_doc(&mut archive.entries()?.raw(true))?;
    let text = super::sign::unverified_text(&armored)?;
    Ok(serde_json::from_str(&text)?)
}
