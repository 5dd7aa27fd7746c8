//! Reading one layer: the blob verified against its digest and size, decompressed, its tar
//! verified against the diff_id, and its entries handed out one by one, each read to its end.
//!
//! The end of a layer's tar is read as Go's `archive/tar` reads it (so containerd, docker
//! and umoci, whose `umoci insert` 0.4.7 writes layers that stop right after the last
//! file's data): the stream may end cleanly once an entry's data is complete, without the
//! zero padding to the next 512-byte block and without the two end-of-archive blocks. An
//! entry whose data is cut short is refused, in words: `tar entry PATH cut off at byte N
//! of SIZE`. Only the padding the archive lacks is made up, never data, and never for the
//! digests: the blob and diff_id hashes see the bytes as stored.

use std::cell::Cell;
use std::rc::Rc;

use super::*;

/// One entry of a layer being read.
pub(super) type LayerEntry<'a, 'r> = tar::Entry<'a, &'r mut dyn Read>;

/// What is done with each entry (its data may be left unread: the reader drains it).
pub(super) type EntryFn<'f> = dyn FnMut(&mut LayerEntry<'_, '_>) -> Result<()> + 'f;

/// Reads a layer blob from the store synchronously (inside a blocking task).
pub(super) fn open_blob(
    store: &Arc<dyn Blobstore>,
    handle: &tokio::runtime::Handle,
    digest: &Digest,
) -> Result<tokio_util::io::SyncIoBridge<crate::store::BoxRead>> {
    let key = blob_key(digest);
    let r = handle
        .block_on(store.read(&key, None))
        .with_context(|| format!("layer {digest}"))?;
    Ok(tokio_util::io::SyncIoBridge::new_with_handle(
        r,
        handle.clone(),
    ))
}

/// A reader that hashes what passes, so the hash can be checked after the
/// decompressor (which owns the reader) is done.
pub(super) struct Tap<R> {
    pub(super) inner: R,
    pub(super) hasher: Option<Hasher>,
    pub(super) count: u64,
}

impl<R: Read> Read for Tap<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        if let Some(h) = self.hasher.as_mut() {
            h.update(&buf[..n]);
        }
        self.count += n as u64;
        Ok(n)
    }
}

impl<R> Tap<R> {
    pub(super) fn new(inner: R, alg: Option<Algorithm>) -> Tap<R> {
        Tap {
            inner,
            hasher: alg.map(Hasher::new),
            count: 0,
        }
    }

    pub(super) fn check(self, expected: &Digest, size: Option<u64>, what: &str) -> Result<()> {
        if let Some(size) = size
            && self.count != size
        {
            bail!(
                "{what} {expected}: {} bytes read, descriptor says {size}",
                self.count
            );
        }
        if let Some(h) = self.hasher {
            let actual = h.finish();
            if &actual != expected {
                bail!("{what} {expected}: content hashes to {actual}");
            }
        }
        Ok(())
    }
}

/// Where the tar parser is, shared between [`Framed`] and the entry loop.
#[derive(Default)]
struct Position {
    /// Bytes handed to the parser (made-up padding included).
    at: Cell<u64>,
    /// Where the data of the last entry read to its end ends: the stream
    /// may stop anywhere from there on.
    clean_from: Cell<Option<u64>>,
}

/// The decompressed tar as the parser sees it: at the end of the stream,
/// right after a complete entry's data, the zero padding to the next block
/// is made up so that the parser finds the end of the archive there.
struct Framed<'r> {
    inner: &'r mut dyn Read,
    pos: Rc<Position>,
}

const BLOCK: u64 = 512;

impl Read for Framed<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let at = self.pos.at.get();
        let mut n = self.inner.read(buf)?;
        if n == 0
            && !buf.is_empty()
            && let Some(end) = self.pos.clean_from.get()
            && at >= end
        {
            let padded = end.div_ceil(BLOCK) * BLOCK;
            n = usize::try_from(padded.saturating_sub(at))
                .unwrap_or(usize::MAX)
                .min(buf.len());
            buf[..n].fill(0);
        }
        self.pos.at.set(at + n as u64);
        Ok(n)
    }
}

/// The entry's path for messages (cleaned when it can be, else as stored).
fn shown_path(raw: &[u8]) -> String {
    match clean(raw) {
        Ok(Some(p)) => p,
        _ => String::from_utf8_lossy(raw).into_owned(),
    }
}

/// Hands every entry of the tar `reader` to `f`, then reads what `f` left
/// of its data. Errors: an entry whose data ends early, a malformed header,
/// whatever `f` returns.
fn entries(reader: &mut dyn Read, f: &mut EntryFn<'_>) -> Result<()> {
    let pos = Rc::new(Position::default());
    let mut framed = Framed {
        inner: reader,
        pos: pos.clone(),
    };
    let parser: &mut dyn Read = &mut framed;
    let mut archive = tar::Archive::new(parser);
    for entry in archive.entries()? {
        let mut entry = entry?;
        f(&mut entry)?;
        std::io::copy(&mut entry, &mut std::io::sink())?;
        let start = entry.raw_file_position();
        let size = entry.size();
        let at = pos.at.get();
        if at < start + size {
            bail!(
                "tar entry {} cut off at byte {} of {size}",
                shown_path(&entry.path_bytes()),
                at - start
            );
        }
        pos.clean_from.set(Some(start + size));
    }
    // Whatever follows the end-of-archive blocks is part of the diff_id.
    std::io::copy(&mut archive.into_inner(), &mut std::io::sink())?;
    Ok(())
}

/// Runs `f` over the entries of the layer whose stored (compressed) bytes
/// `blob` reads, then checks the blob's digest and size and (when known)
/// the diff_id. Errors name the layer.
pub(super) fn read_layer(blob: impl Read, layer: &Layer, f: &mut EntryFn<'_>) -> Result<()> {
    let comp = compression(&layer.media_type)?;
    let mut outer = Tap::new(
        std::io::BufReader::with_capacity(1 << 20, blob),
        Some(layer.digest.algorithm()),
    );
    let diff_alg = layer.diff_id.as_ref().map(Digest::algorithm);
    let result = {
        let decoded: Box<dyn Read + '_> = match comp {
            Compression::None => Box::new(&mut outer),
            Compression::Gzip => Box::new(flate2::read::MultiGzDecoder::new(&mut outer)),
            Compression::Zstd => Box::new(zstd::stream::read::Decoder::with_buffer(
                std::io::BufReader::with_capacity(1 << 17, &mut outer),
            )?),
        };
        let mut inner = Tap::new(decoded, diff_alg);
        entries(&mut inner, f).and_then(|()| match &layer.diff_id {
            Some(d) => inner.check(d, None, "layer diff_id"),
            None => Ok(()),
        })
    };
    result.with_context(|| format!("layer {}", layer.digest))?;
    std::io::copy(&mut outer, &mut std::io::sink())?;
    outer.check(&layer.digest, Some(layer.size), "layer")
}

/// [`read_layer`] of a layer blob in the store.
pub(super) fn with_layer(
    store: &Arc<dyn Blobstore>,
    handle: &tokio::runtime::Handle,
    layer: &Layer,
    f: &mut EntryFn<'_>,
) -> Result<()> {
    read_layer(open_blob(store, handle, &layer.digest)?, layer, f)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tar of `files` (path, content) as tar-rs writes it, with padding and end blocks.
    fn tar_of(files: &[(&str, &[u8])]) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        for (path, data) in files {
            let mut h = tar::Header::new_ustar();
            h.set_size(data.len() as u64);
            h.set_mode(0o644);
            b.append_data(&mut h, path, *data).unwrap();
        }
        b.into_inner().unwrap()
    }

    fn listing(bytes: &[u8]) -> Result<Vec<String>> {
        let mut names = Vec::new();
        let mut r = bytes;
        entries(&mut r, &mut |e| {
            let mut data = Vec::new();
            e.read_to_end(&mut data)?;
            names.push(format!("{} {}", shown_path(&e.path_bytes()), data.len()));
            Ok(())
        })?;
        Ok(names)
    }

    #[test]
    fn clean_ends_are_read_and_cut_entries_refused() {
        let full = tar_of(&[("etc/a", b"12345"), ("etc/old/file", &[7u8; 700])]);
        // Header 512 + data 5 → padded to 1024; header 512 + data 700 → 2560.
        let data_end = 1024 + 512 + 700;
        let want = ["etc/a 5", "etc/old/file 700"];
        // Complete; without end blocks; without padding; with half the padding.
        for len in [full.len(), 2560, data_end, data_end + 100] {
            assert_eq!(listing(&full[..len]).unwrap(), want, "length {len}");
        }
        // The data of the last entry cut short: named, with the byte it stops at.
        let err = listing(&full[..data_end - 1]).unwrap_err().to_string();
        assert_eq!(err, "tar entry etc/old/file cut off at byte 699 of 700");
        // The first entry cut short, with no later entry.
        let err = listing(&full[..512 + 3]).unwrap_err().to_string();
        assert_eq!(err, "tar entry etc/a cut off at byte 3 of 5");
        // A header cut short is still an error.
        assert!(listing(&full[..1024 + 100]).is_err());
    }
}
