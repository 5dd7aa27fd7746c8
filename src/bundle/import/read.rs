//! Reading a bundle tar front to back: the signed document first, then
//! each entry checked against it (path, kind, size) and handed to the
//! writer in chunks; the end-of-archive marker and padding checked.

use super::*;

/// Checks a verified document's own consistency.
pub(super) fn check_doc(doc: &BundleDoc) -> Result<()> {
    if doc.format != FORMAT_V1 {
        bail!(
            "unsupported bundle format {:?} (expected {FORMAT_V1})",
            doc.format
        );
    }
    crate::bundle::format::check_tags(&doc.images).map_err(|e| anyhow!("signed document: {e}"))?;
    let mut seen = HashSet::new();
    for b in doc.blobs.iter().chain(doc.required.iter()) {
        if !seen.insert(&b.digest) {
            bail!("signed document lists blob {} twice", b.digest);
        }
    }
    Ok(())
}

/// The entry's path as raw UTF-8, refusing anything but a regular file.
pub(super) fn entry_path<R: Read>(entry: &tar::Entry<'_, R>) -> Result<String> {
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

pub(super) fn read_bounded<R: Read>(
    entry: &mut R,
    size: u64,
    limit: u64,
    what: &str,
) -> Result<Vec<u8>> {
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
pub(super) fn read_signed_doc<R: Read>(entries: &mut tar::Entries<'_, R>) -> Result<String> {
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
pub(super) fn only_padding_follows(mut rest: impl Read) -> Result<u64> {
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
pub(super) const MAX_PADDING: u64 = 1 << 20;

/// The end-of-archive marker: two zero blocks of 512 bytes (POSIX ustar).
pub(super) const END_OF_ARCHIVE: u64 = 1024;

/// A reader that counts the bytes read through it, so errors can name the
/// offset in the bundle where they happened.
pub(super) struct Counting<R> {
    pub(super) inner: R,
    pub(super) read: Arc<AtomicU64>,
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

/// The reader thread: parses, verifies and hashes; sends blob bytes to the writer.
pub(super) fn read_bundle(
    reader: impl Read,
    verifier: &Verifier,
    tx: mpsc::Sender<Msg>,
    mut buffers: buffers::Buffers,
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
    let verified = verifier
        .verify(&armored)
        .map_err(|e| anyhow!("signature check failed: {e}"))?;
    let doc: BundleDoc = serde_json::from_str(&verified.text)
        .map_err(|e| anyhow!("signed document is not a bundle document: {e}"))?;
    check_doc(&doc)?;
    verifier
        .authorize(&doc, &verified.signers)
        .map_err(|e| anyhow!(Refused(e.to_string())))?;
    tracing::info!(id = %doc.id, signers = %verified.signers.join(","), blobs = doc.blobs.len(), "bundle signature verified");
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
            let mut buf = buffers.take(want as usize);
            match entry.read_exact(&mut buf) {
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                    bail!("blob {digest}: bundle truncated at byte {}", at());
                }
                other => other?,
            }
            remaining -= want;
            progress.inc(want);
            match hasher.as_mut() {
                Some(h) => {
                    h.update(&buf);
                    buffers.keep(buf);
                }
                None => send(Msg::Chunk(buf.freeze()))?,
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
