//! Pass 1: what the upper layers do to each path (the plan), and the verified, decompressed
//! reading of each layer blob that both passes use.

use super::*;

/// What an upper layer does at one path.
pub(super) enum Op {
    Whiteout,
    Opaque,
    Dir(Box<Meta>),
    /// A regular file, symlink or device.
    File,
    /// A hard link to this (cleaned) path.
    Link(String),
}

/// Pass 1's record: layer index → ops, per path.
#[derive(Default)]
pub(super) struct Plan {
    /// Layers below this index were not scanned (their ops are unknown).
    pub(super) scanned_from: usize,
    pub(super) ops: HashMap<String, Vec<(usize, Op)>>,
    /// Hard links of scanned layers that survive, → their inode's source.
    pub(super) links: HashMap<(usize, String), (usize, String)>,
    /// Inode source (layer, path) → the name it is written under.
    pub(super) canonical: HashMap<(usize, String), String>,
}

/// Whether the occurrence of a path in a layer survives all layers above.
pub(super) enum Fate<'a> {
    Dead,
    /// Survives; for a directory, the attributes of the top-most layer
    /// that declares it again (`None`: its own).
    Alive(Option<&'a Meta>),
}

impl Plan {
    pub(super) fn record(&mut self, layer: usize, path: String, op: Op) {
        self.ops.entry(path).or_default().push((layer, op));
    }

    /// The fate of `path` as written by layer `j` (a directory if `is_dir`).
    pub(super) fn fate(&self, j: usize, path: &str, is_dir: bool) -> Fate<'_> {
        // `.wh..wh..opq` at the top level hides every lower entry.
        if let Some(ops) = self.ops.get("")
            && ops.iter().any(|(k, op)| *k > j && matches!(op, Op::Opaque))
        {
            return Fate::Dead;
        }
        for a in ancestors(path) {
            if let Some(ops) = self.ops.get(a)
                && ops
                    .iter()
                    .any(|(k, op)| *k > j && !matches!(op, Op::Dir(_)))
            {
                return Fate::Dead;
            }
        }
        let mut top: Option<(usize, &Meta)> = None;
        if let Some(ops) = self.ops.get(path) {
            for (k, op) in ops.iter().filter(|(k, _)| *k > j) {
                match op {
                    Op::Opaque => {}
                    Op::Dir(m) if is_dir => {
                        if top.is_none_or(|(t, _)| *k > t) {
                            top = Some((*k, m));
                        }
                    }
                    _ => return Fate::Dead,
                }
            }
        }
        Fate::Alive(top.map(|(_, m)| m))
    }

    pub(super) fn alive(&self, j: usize, path: &str) -> bool {
        matches!(self.fate(j, path, false), Fate::Alive(_))
    }

    /// The inode a hard link written by layer `layer` to `target` names:
    /// (layer, path) of the entry that holds its content. `None`: dangling.
    pub(super) fn inode(&self, mut layer: usize, target: &str) -> Option<(usize, String)> {
        let mut target = target.to_string();
        for _ in 0..64 {
            let occ = self.ops.get(&target).and_then(|ops| {
                ops.iter()
                    .rev()
                    .find(|(i, op)| *i <= layer && !matches!(op, Op::Opaque))
            });
            match occ {
                Some((i, Op::File)) => return Some((*i, target)),
                Some((i, Op::Link(next))) => {
                    layer = *i;
                    target = next.clone();
                }
                Some(_) => return None,
                None if self.scanned_from > 0 => return Some((0, target)),
                None => return None,
            }
        }
        None
    }

    /// After pass 1: resolves every surviving hard link to its inode and
    /// picks the name each shared inode is written under (its own path if
    /// it survives, else the first surviving link).
    pub(super) fn resolve_links(&mut self) {
        let mut members: HashMap<(usize, String), Vec<(usize, String)>> = HashMap::new();
        for (path, ops) in &self.ops {
            for (k, op) in ops {
                if let Op::Link(target) = op
                    && self.alive(*k, path)
                    && let Some(src) = self.inode(*k, target)
                {
                    members
                        .entry(src.clone())
                        .or_default()
                        .push((*k, path.clone()));
                    self.links.insert((*k, path.clone()), src);
                }
            }
        }
        for (src, mut names) in members {
            let name = if self.alive(src.0, &src.1) {
                src.1.clone()
            } else {
                names.sort();
                names.swap_remove(0).1
            };
            self.canonical.insert(src, name);
        }
    }
}

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

/// A reader that hashes what passes, shared so the hash can be checked
/// after the decompressor (which owns the reader) is done.
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

/// Runs `f` over the entries of layer `layer`'s tar, then checks the blob
/// digest and size and (when known) the diff_id.
pub(super) fn with_layer(
    store: &Arc<dyn Blobstore>,
    handle: &tokio::runtime::Handle,
    layer: &Layer,
    f: &mut dyn FnMut(&mut tar::Archive<&mut dyn Read>) -> Result<()>,
) -> Result<()> {
    let blob = open_blob(store, handle, &layer.digest)?;
    read_layer(layer, blob, f)
}

/// Runs `f` over the entries of `layer`'s tar read from `blob` (its stored,
/// compressed bytes), then checks the blob digest and size and (when known)
/// the diff_id. Errors: an unsupported media type, a digest, size or
/// diff_id mismatch, a malformed tar, or `f`'s error.
pub(crate) fn read_layer(
    layer: &Layer,
    blob: impl Read,
    f: &mut dyn FnMut(&mut tar::Archive<&mut dyn Read>) -> Result<()>,
) -> Result<()> {
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
        let r = {
            let reader: &mut dyn Read = &mut inner;
            let mut archive = tar::Archive::new(reader);
            let r = f(&mut archive);
            // Whatever follows the end-of-archive blocks is part of the diff_id.
            r.and_then(|()| {
                std::io::copy(&mut archive.into_inner(), &mut std::io::sink())?;
                Ok(())
            })
        };
        r.and_then(|()| match &layer.diff_id {
            Some(d) => inner.check(d, None, "layer diff_id"),
            None => Ok(()),
        })
    };
    result.with_context(|| format!("layer {}", layer.digest))?;
    std::io::copy(&mut outer, &mut std::io::sink())?;
    outer.check(&layer.digest, Some(layer.size), "layer")
}

/// Pass 1: what layers `from..` do, path by path.
pub(super) fn scan(
    store: &Arc<dyn Blobstore>,
    handle: &tokio::runtime::Handle,
    layers: &[Layer],
    from: usize,
) -> Result<Plan> {
    let mut plan = Plan {
        scanned_from: from,
        ..Plan::default()
    };
    for (i, layer) in layers.iter().enumerate().skip(from) {
        with_layer(store, handle, layer, &mut |archive| {
            for entry in archive.entries()? {
                let mut entry = entry?;
                let name = name_of(&entry.path_bytes())?;
                match name {
                    Name::Root => {}
                    Name::Opaque(d) => plan.record(i, d, Op::Opaque),
                    Name::Whiteout(p) => plan.record(i, p, Op::Whiteout),
                    Name::Path(p) => {
                        let m = meta_of(&mut entry)?;
                        let op = match m.kind {
                            Kind::Dir => Op::Dir(Box::new(m)),
                            Kind::Hardlink => Op::Link(m.link.unwrap_or_default()),
                            _ => Op::File,
                        };
                        plan.record(i, p, op);
                    }
                }
            }
            Ok(())
        })?;
    }
    plan.resolve_links();
    Ok(plan)
}
