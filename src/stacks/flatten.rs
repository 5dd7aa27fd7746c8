//! Flattening an image's layers into one root file system tar (what `docker
//! export` gives and what garden's `persistent_image_list` and rep's
//! `preloaded_rootfses` expect), kept as a blob.
//!
//! Owns: applying layers in manifest order per the OCI image-spec "Applying
//! Changesets": `.wh.NAME` deletes NAME (and below) from lower layers,
//! `.wh..wh..opq` hides every lower child of its directory, a directory over
//! a directory only changes its attributes, anything else replaces; hard
//! links keep pointing at the file they named when their layer was applied.
//! Modes, owners (numeric and names), mtimes, device numbers and xattrs
//! (PAX `SCHILY.xattr.*`) are kept. Never extracts anything to disk.
//!
//! How: pass 1 reads the headers of the upper layers (all but the first)
//! and records what each does to each path; pass 2 streams every layer once,
//! bottom to top, and writes each entry that survives. Every layer is
//! decompressed (gzip through flate2, zstd through the `zstd` crate)
//! once in pass 2 and, except the first, once in pass 1, so the large base
//! layer of a stack image is read only once. Directories are written once,
//! where they first appear, with their final attributes, so a parent always
//! precedes its children. A hard link whose target a later layer replaced
//! becomes a regular file under its own name. In the rare case that a link
//! *in the first layer* outlives its target, pass 1 is re-run over the
//! first layer too.
//!
//! The output is deterministic (sorted by nothing but layer order, no
//! clock), written as ustar with PAX records where a field does not fit, and
//! its sha256 is the blob's digest: the same image always gives the same
//! rootfs digest. Layer digests and diff_ids are verified while reading.

use std::collections::{HashMap, HashSet};
use std::io::{Read, Write};
use std::sync::Arc;

use anyhow::{Context, Result, anyhow, bail};
use bytes::Bytes;
use tokio::sync::mpsc;

use crate::digest::{Algorithm, Digest, Hasher};
use crate::store::{Blobstore, blob_key};

/// One layer as its manifest describes it.
#[derive(Debug, Clone)]
pub struct Layer {
    /// Layer media type (tar, tar+gzip, tar+zstd; OCI or Docker names).
    pub media_type: String,
    /// Digest of the stored (compressed) blob.
    pub digest: Digest,
    /// Its size in bytes.
    pub size: u64,
    /// The config's `rootfs.diff_ids` entry: the digest of the uncompressed tar.
    pub diff_id: Option<Digest>,
}

/// The flattened root file system, stored as a blob.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Flattened {
    /// sha256 of the tar (its blob digest).
    pub digest: Digest,
    /// Size in bytes.
    pub size: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Compression {
    None,
    Gzip,
    Zstd,
}

/// The compression a layer media type implies. Errors: not a layer type.
fn compression(media_type: &str) -> Result<Compression> {
    Ok(match media_type {
        "application/vnd.oci.image.layer.v1.tar"
        | "application/vnd.oci.image.layer.nondistributable.v1.tar"
        | "application/vnd.docker.image.rootfs.diff.tar" => Compression::None,
        "application/vnd.oci.image.layer.v1.tar+gzip"
        | "application/vnd.oci.image.layer.nondistributable.v1.tar+gzip"
        | "application/vnd.docker.image.rootfs.diff.tar.gzip"
        | "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip" => Compression::Gzip,
        "application/vnd.oci.image.layer.v1.tar+zstd"
        | "application/vnd.oci.image.layer.nondistributable.v1.tar+zstd" => Compression::Zstd,
        other => bail!("unsupported layer media type {other:?}"),
    })
}

/// What kind of entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Dir,
    Regular,
    Symlink,
    Hardlink,
    Char,
    Block,
    Fifo,
}

impl Kind {
    fn of(t: tar::EntryType) -> Result<Kind> {
        Ok(match t {
            tar::EntryType::Regular | tar::EntryType::Continuous => Kind::Regular,
            tar::EntryType::Directory => Kind::Dir,
            tar::EntryType::Symlink => Kind::Symlink,
            tar::EntryType::Link => Kind::Hardlink,
            tar::EntryType::Char => Kind::Char,
            tar::EntryType::Block => Kind::Block,
            tar::EntryType::Fifo => Kind::Fifo,
            other => bail!("unsupported tar entry type {other:?}"),
        })
    }

    fn entry_type(self) -> tar::EntryType {
        match self {
            Kind::Dir => tar::EntryType::Directory,
            Kind::Regular => tar::EntryType::Regular,
            Kind::Symlink => tar::EntryType::Symlink,
            Kind::Hardlink => tar::EntryType::Link,
            Kind::Char => tar::EntryType::Char,
            Kind::Block => tar::EntryType::Block,
            Kind::Fifo => tar::EntryType::Fifo,
        }
    }
}

/// The attributes of one entry, from its header and PAX records.
#[derive(Debug, Clone)]
struct Meta {
    kind: Kind,
    mode: u32,
    uid: u64,
    gid: u64,
    mtime: u64,
    uname: Vec<u8>,
    gname: Vec<u8>,
    /// Symlink or hard link target (hard links: a cleaned path).
    link: Option<String>,
    dev: (u32, u32),
    /// PAX records carried over: xattrs and a precise `mtime`.
    pax: Vec<(String, Vec<u8>)>,
}

impl Meta {
    /// A directory made for a path no layer declares: 0755 root:root, mtime 0.
    fn implicit_dir() -> Meta {
        Meta {
            kind: Kind::Dir,
            mode: 0o755,
            uid: 0,
            gid: 0,
            mtime: 0,
            uname: Vec::new(),
            gname: Vec::new(),
            link: None,
            dev: (0, 0),
            pax: Vec::new(),
        }
    }
}

/// A whiteout marker, or the entry's cleaned path.
enum Name {
    /// `.wh..wh..opq` in this directory.
    Opaque(String),
    /// `.wh.NAME`: NAME is deleted.
    Whiteout(String),
    /// An ordinary entry at this path.
    Path(String),
    /// The root directory itself (`./`): not written.
    Root,
}

const WH: &str = ".wh.";
const OPAQUE: &str = ".wh..wh..opq";

/// `a/./b/` → `a/b`; refuses `..` and non-UTF-8 paths.
fn clean(raw: &[u8]) -> Result<Option<String>> {
    let s = std::str::from_utf8(raw).map_err(|_| anyhow!("non-UTF-8 path in layer"))?;
    let mut parts = Vec::new();
    for c in s.split('/') {
        match c {
            "" | "." => {}
            ".." => bail!("unsafe path {s:?} in layer"),
            c => parts.push(c),
        }
    }
    Ok((!parts.is_empty()).then(|| parts.join("/")))
}

fn name_of(raw: &[u8]) -> Result<Name> {
    let Some(p) = clean(raw)? else {
        return Ok(Name::Root);
    };
    let (dir, base) = match p.rsplit_once('/') {
        Some((d, b)) => (Some(d), b),
        None => (None, p.as_str()),
    };
    if base == OPAQUE {
        return Ok(match dir {
            Some(d) => Name::Opaque(d.to_string()),
            None => Name::Opaque(String::new()),
        });
    }
    if let Some(victim) = base.strip_prefix(WH) {
        if victim.is_empty() {
            bail!("whiteout {p:?} names nothing");
        }
        return Ok(Name::Whiteout(match dir {
            Some(d) => format!("{d}/{victim}"),
            None => victim.to_string(),
        }));
    }
    Ok(Name::Path(p))
}

/// The strict ancestors of `p`, nearest the root first (`a/b/c` → `a`, `a/b`).
fn ancestors(p: &str) -> impl Iterator<Item = &str> {
    p.match_indices('/').map(move |(i, _)| &p[..i])
}

/// Reads an entry's attributes, applying PAX overrides.
fn meta_of<R: Read>(entry: &mut tar::Entry<'_, R>) -> Result<Meta> {
    let h = entry.header();
    let kind = Kind::of(h.entry_type())?;
    let mut m = Meta {
        kind,
        mode: h.mode().unwrap_or(0o644),
        uid: h.uid().unwrap_or(0),
        gid: h.gid().unwrap_or(0),
        mtime: h.mtime().unwrap_or(0),
        uname: h.username_bytes().map(<[u8]>::to_vec).unwrap_or_default(),
        gname: h.groupname_bytes().map(<[u8]>::to_vec).unwrap_or_default(),
        link: None,
        dev: (
            h.device_major().ok().flatten().unwrap_or(0),
            h.device_minor().ok().flatten().unwrap_or(0),
        ),
        pax: Vec::new(),
    };
    if matches!(kind, Kind::Symlink | Kind::Hardlink) {
        let target = entry
            .link_name_bytes()
            .ok_or_else(|| anyhow!("link without a target"))?
            .into_owned();
        m.link = Some(if kind == Kind::Hardlink {
            clean(&target)?.ok_or_else(|| anyhow!("hard link to the root directory"))?
        } else {
            String::from_utf8(target).map_err(|_| anyhow!("non-UTF-8 symlink target"))?
        });
    }
    if let Some(exts) = entry.pax_extensions()? {
        for ext in exts {
            let ext = ext?;
            let Ok(key) = ext.key() else { continue };
            let value = ext.value_bytes();
            let number = || {
                std::str::from_utf8(value)
                    .ok()
                    .and_then(|v| v.split('.').next())
                    .and_then(|v| v.parse::<u64>().ok())
            };
            match key {
                "uid" => m.uid = number().unwrap_or(m.uid),
                "gid" => m.gid = number().unwrap_or(m.gid),
                "uname" => m.uname = value.to_vec(),
                "gname" => m.gname = value.to_vec(),
                "mtime" => {
                    m.mtime = number().unwrap_or(m.mtime);
                    m.pax.push((key.to_string(), value.to_vec()));
                }
                k if k.starts_with("SCHILY.xattr.") || k.starts_with("LIBARCHIVE.xattr.") => {
                    m.pax.push((key.to_string(), value.to_vec()));
                }
                _ => {}
            }
        }
    }
    Ok(m)
}

/// What an upper layer does at one path.
enum Op {
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
struct Plan {
    /// Layers below this index were not scanned (their ops are unknown).
    scanned_from: usize,
    ops: HashMap<String, Vec<(usize, Op)>>,
    /// Hard links of scanned layers that survive, → their inode's source.
    links: HashMap<(usize, String), (usize, String)>,
    /// Inode source (layer, path) → the name it is written under.
    canonical: HashMap<(usize, String), String>,
}

/// Whether the occurrence of a path in a layer survives all layers above.
enum Fate<'a> {
    Dead,
    /// Survives; for a directory, the attributes of the top-most layer
    /// that declares it again (`None`: its own).
    Alive(Option<&'a Meta>),
}

impl Plan {
    fn record(&mut self, layer: usize, path: String, op: Op) {
        self.ops.entry(path).or_default().push((layer, op));
    }

    /// The fate of `path` as written by layer `j` (a directory if `is_dir`).
    fn fate(&self, j: usize, path: &str, is_dir: bool) -> Fate<'_> {
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

    fn alive(&self, j: usize, path: &str) -> bool {
        matches!(self.fate(j, path, false), Fate::Alive(_))
    }

    /// The inode a hard link written by layer `layer` to `target` names:
    /// (layer, path) of the entry that holds its content. `None`: dangling.
    fn inode(&self, mut layer: usize, target: &str) -> Option<(usize, String)> {
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
    fn resolve_links(&mut self) {
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
fn open_blob(
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
struct Tap<R> {
    inner: R,
    hasher: Option<Hasher>,
    count: u64,
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
    fn new(inner: R, alg: Option<Algorithm>) -> Tap<R> {
        Tap {
            inner,
            hasher: alg.map(Hasher::new),
            count: 0,
        }
    }

    fn check(self, expected: &Digest, size: Option<u64>, what: &str) -> Result<()> {
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
fn with_layer(
    store: &Arc<dyn Blobstore>,
    handle: &tokio::runtime::Handle,
    layer: &Layer,
    f: &mut dyn FnMut(&mut tar::Archive<&mut dyn Read>) -> Result<()>,
) -> Result<()> {
    let comp = compression(&layer.media_type)?;
    let blob = open_blob(store, handle, &layer.digest)?;
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
fn scan(
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

/// Writes the output tar.
struct Out<W: Write> {
    tar: tar::Builder<W>,
    /// Directories written: true with their final attributes, false when
    /// made up for a child that came first.
    dirs: HashMap<String, bool>,
}

/// One PAX record: `"<len> key=value\n"`, where len counts the whole record.
fn pax_record(out: &mut Vec<u8>, key: &str, value: &[u8]) {
    let rest = key.len() + value.len() + 3; // ' ', '=', '\n'
    let mut len = rest + 1;
    while len != rest + len.to_string().len() {
        len = rest + len.to_string().len();
    }
    out.extend_from_slice(format!("{len} {key}=").as_bytes());
    out.extend_from_slice(value);
    out.push(b'\n');
}

const USTAR_ID_MAX: u64 = 0o7777777;

/// `name` as text when it is UTF-8 (else it goes into a PAX record).
fn ustar_name(name: &[u8]) -> Option<&str> {
    std::str::from_utf8(name).ok()
}
const USTAR_TIME_MAX: u64 = 0o77777777777;

impl<W: Write> Out<W> {
    fn entry(
        &mut self,
        path: &str,
        m: &Meta,
        link: Option<&str>,
        size: u64,
        data: &mut dyn Read,
    ) -> Result<()> {
        let mut pax = Vec::new();
        let mut h = tar::Header::new_ustar();
        h.set_entry_type(m.kind.entry_type());
        h.set_mode(m.mode & 0o7777);
        h.set_size(size);
        if m.uid > USTAR_ID_MAX {
            pax_record(&mut pax, "uid", m.uid.to_string().as_bytes());
            h.set_uid(0);
        } else {
            h.set_uid(m.uid);
        }
        if m.gid > USTAR_ID_MAX {
            pax_record(&mut pax, "gid", m.gid.to_string().as_bytes());
            h.set_gid(0);
        } else {
            h.set_gid(m.gid);
        }
        let precise_mtime = m.pax.iter().any(|(k, _)| k == "mtime");
        if m.mtime > USTAR_TIME_MAX && !precise_mtime {
            pax_record(&mut pax, "mtime", m.mtime.to_string().as_bytes());
        }
        h.set_mtime(m.mtime.min(USTAR_TIME_MAX));
        // A name that does not fit the ustar field (or is not UTF-8) goes into PAX.
        if ustar_name(&m.uname).is_none_or(|n| h.set_username(n).is_err()) {
            pax_record(&mut pax, "uname", &m.uname);
        }
        if ustar_name(&m.gname).is_none_or(|n| h.set_groupname(n).is_err()) {
            pax_record(&mut pax, "gname", &m.gname);
        }
        if matches!(m.kind, Kind::Char | Kind::Block) {
            h.set_device_major(m.dev.0)?;
            h.set_device_minor(m.dev.1)?;
        }
        if h.set_path(path).is_err() {
            pax_record(&mut pax, "path", path.as_bytes());
            let short: String = path
                .chars()
                .rev()
                .take(90)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect();
            h.set_path(short.trim_start_matches('/'))
                .or_else(|_| h.set_path("long-name"))?;
        }
        if let Some(target) = link
            && h.set_link_name_literal(target).is_err()
        {
            pax_record(&mut pax, "linkpath", target.as_bytes());
            h.set_link_name_literal("long-link")?;
        }
        for (k, v) in &m.pax {
            pax_record(&mut pax, k, v);
        }
        if !pax.is_empty() {
            let mut x = tar::Header::new_ustar();
            x.set_entry_type(tar::EntryType::XHeader);
            x.set_mode(0o644);
            x.set_size(pax.len() as u64);
            x.set_path("PaxHeaders/entry")?;
            x.set_cksum();
            self.tar.append(&x, &pax[..])?;
        }
        h.set_cksum();
        self.tar.append(&h, data)?;
        Ok(())
    }

    /// Writes directory `path` with `m` unless already written with its final attributes.
    fn dir(&mut self, path: &str, m: &Meta, fin: bool) -> Result<()> {
        if self.dirs.get(path).copied().unwrap_or(false) {
            return Ok(());
        }
        if !fin && self.dirs.contains_key(path) {
            return Ok(());
        }
        self.entry(path, m, None, 0, &mut std::io::empty())?;
        self.dirs.insert(path.to_string(), fin);
        Ok(())
    }

    /// Writes every ancestor of `path` not written yet: with the attributes
    /// an upper layer gives it, else made up.
    fn parents(&mut self, plan: &Plan, path: &str) -> Result<()> {
        for a in ancestors(path) {
            if self.dirs.contains_key(a) {
                continue;
            }
            let known = plan.ops.get(a).and_then(|ops| {
                ops.iter()
                    .rev()
                    .find_map(|(k, op)| match (op, plan.fate(*k, a, true)) {
                        (Op::Dir(own), Fate::Alive(top)) => Some(top.unwrap_or(own).clone()),
                        _ => None,
                    })
            });
            match known {
                Some(m) => self.dir(a, &m, true)?,
                None => self.dir(a, &Meta::implicit_dir(), false)?,
            }
        }
        Ok(())
    }
}

/// A first-layer hard link outlived its target: pass 1 must cover the first layer.
#[derive(Debug)]
struct NeedFullScan;

impl std::fmt::Display for NeedFullScan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("first-layer hard link outlives its target")
    }
}
impl std::error::Error for NeedFullScan {}

/// Pass 2: streams every layer, writing what survives, into `w`.
fn write_all<W: Write>(
    store: &Arc<dyn Blobstore>,
    handle: &tokio::runtime::Handle,
    layers: &[Layer],
    plan: &Plan,
    w: W,
) -> Result<W> {
    let mut out = Out {
        tar: tar::Builder::new(w),
        dirs: HashMap::new(),
    };
    for (j, layer) in layers.iter().enumerate() {
        let scanned = j >= plan.scanned_from;
        with_layer(store, handle, layer, &mut |archive| {
            let mut seen: HashSet<String> = HashSet::new();
            for entry in archive.entries()? {
                let mut entry = entry?;
                let Name::Path(p) = name_of(&entry.path_bytes())? else {
                    continue;
                };
                if !seen.insert(p.clone()) {
                    bail!("path {p:?} appears twice in one layer");
                }
                let m = meta_of(&mut entry)?;
                match m.kind {
                    Kind::Dir => {
                        if let Fate::Alive(top) = plan.fate(j, &p, true) {
                            out.parents(plan, &p)?;
                            out.dir(&p, top.unwrap_or(&m), true)?;
                        }
                    }
                    Kind::Hardlink => {
                        let target = m.link.clone().unwrap_or_default();
                        if !plan.alive(j, &p) {
                            continue;
                        }
                        let src = if scanned {
                            plan.links.get(&(j, p.clone())).cloned()
                        } else {
                            Some((0, target.clone()))
                        };
                        let to = match src.as_ref().and_then(|s| plan.canonical.get(s)) {
                            Some(name) => name.clone(),
                            None if !scanned && !plan.alive(0, &target) => {
                                return Err(NeedFullScan.into());
                            }
                            None => target,
                        };
                        if to != p {
                            out.parents(plan, &p)?;
                            out.entry(&p, &m, Some(&to), 0, &mut std::io::empty())?;
                        }
                    }
                    _ => {
                        let key = (j, p);
                        let name = match plan.canonical.get(&key) {
                            Some(name) => Some(name.as_str()),
                            None if plan.alive(j, &key.1) => Some(key.1.as_str()),
                            None => None,
                        };
                        if let Some(name) = name {
                            out.parents(plan, name)?;
                            let size = if m.kind == Kind::Regular {
                                entry.size()
                            } else {
                                0
                            };
                            let link = m.link.clone();
                            out.entry(name, &m, link.as_deref(), size, &mut entry)?;
                        }
                    }
                }
            }
            Ok(())
        })?;
    }
    Ok(out.tar.into_inner()?)
}

/// A `Write` that sends 1 MiB chunks to the async side.
struct ChannelWriter {
    buf: Vec<u8>,
    tx: mpsc::Sender<Bytes>,
}

const OUT_CHUNK: usize = 1 << 20;

impl Write for ChannelWriter {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.buf.extend_from_slice(data);
        if self.buf.len() >= OUT_CHUNK {
            self.flush()?;
        }
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let chunk = std::mem::replace(&mut self.buf, Vec::with_capacity(OUT_CHUNK));
        self.tx
            .blocking_send(Bytes::from(chunk))
            .map_err(|_| std::io::Error::other("rootfs writer stopped"))
    }
}

/// Flattens `layers` (bottom first) into one tar stored as a blob; returns
/// its digest and size. Deterministic: the same layers give the same blob.
///
/// Errors: a layer missing from the store or not matching its digest,
/// size or diff_id; an unsupported media type or entry type; a path with
/// `..`; a store failure. Nothing is left in `blobs/` on error.
pub async fn flatten(store: Arc<dyn Blobstore>, layers: Vec<Layer>) -> Result<Flattened> {
    for l in &layers {
        compression(&l.media_type)?;
    }
    let mut from = 1.min(layers.len());
    loop {
        match flatten_once(store.clone(), layers.clone(), from).await {
            Err(e) if from > 0 && e.downcast_ref::<NeedFullScan>().is_some() => from = 0,
            other => return other,
        }
    }
}

async fn flatten_once(
    store: Arc<dyn Blobstore>,
    layers: Vec<Layer>,
    scan_from: usize,
) -> Result<Flattened> {
    let (tx, mut rx) = mpsc::channel::<Bytes>(4);
    let handle = tokio::runtime::Handle::current();
    let st = store.clone();
    let producer = tokio::task::spawn_blocking(move || -> Result<()> {
        let plan = scan(&st, &handle, &layers, scan_from)?;
        let w = ChannelWriter {
            buf: Vec::with_capacity(OUT_CHUNK),
            tx,
        };
        let mut w = write_all(&st, &handle, &layers, &plan, w)?;
        w.flush()?;
        Ok(())
    });
    let scratch = format!("stacks/scratch/{}", uuid::Uuid::new_v4());
    let mut writer = store.writer(&scratch).await?;
    let mut hasher = Hasher::new(Algorithm::Sha256);
    let mut size = 0u64;
    let mut failed = None;
    while let Some(chunk) = rx.recv().await {
        size += chunk.len() as u64;
        let (written, ()) =
            tokio::join!(writer.write(chunk.clone()), async { hasher.update(&chunk) });
        if let Err(e) = written {
            failed = Some(anyhow::Error::from(e));
            break;
        }
    }
    drop(rx);
    let produced = producer
        .await
        .map_err(|e| anyhow!("flattening failed: {e}"))?;
    if let Some(e) = failed.or(produced.err()) {
        let _ = writer.cancel().await;
        return Err(e);
    }
    writer.commit().await?;
    let digest = hasher.finish();
    let key = blob_key(&digest);
    if store.stat(&key).await? == Some(size) {
        store.delete(&scratch).await?;
    } else {
        store.rename(&scratch, &key).await?;
    }
    Ok(Flattened { digest, size })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_whiteouts() {
        assert!(matches!(name_of(b"./").unwrap(), Name::Root));
        assert!(
            matches!(name_of(b"./etc/.wh.motd").unwrap(), Name::Whiteout(p) if p == "etc/motd")
        );
        assert!(matches!(name_of(b"var/.wh..wh..opq").unwrap(), Name::Opaque(p) if p == "var"));
        assert!(matches!(name_of(b"/usr//bin/").unwrap(), Name::Path(p) if p == "usr/bin"));
        assert!(name_of(b"a/../../etc").is_err());
        assert_eq!(ancestors("a/b/c").collect::<Vec<_>>(), ["a", "a/b"]);
    }

    /// An uncompressed layer of (path, kind, content or link target), stored in `store`.
    async fn layer(store: &Arc<dyn Blobstore>, entries: &[(&str, Kind, &str)]) -> Layer {
        let mut b = tar::Builder::new(Vec::new());
        for (path, kind, text) in entries {
            let mut h = tar::Header::new_ustar();
            h.set_entry_type(kind.entry_type());
            h.set_mode(0o644);
            let data = if *kind == Kind::Regular {
                text.as_bytes()
            } else {
                b""
            };
            h.set_size(data.len() as u64);
            if matches!(kind, Kind::Hardlink | Kind::Symlink) {
                h.set_link_name(text).unwrap();
            }
            b.append_data(&mut h, path, data).unwrap();
        }
        let bytes = b.into_inner().unwrap();
        let digest = crate::store::put_bytes(&**store, &bytes).await.unwrap();
        Layer {
            media_type: "application/vnd.oci.image.layer.v1.tar".into(),
            size: bytes.len() as u64,
            diff_id: Some(digest.clone()),
            digest,
        }
    }

    async fn listing(store: &Arc<dyn Blobstore>, layers: Vec<Layer>) -> Vec<String> {
        let f = flatten(store.clone(), layers).await.unwrap();
        let bytes = crate::store::get_verified(&**store, &f.digest)
            .await
            .unwrap();
        let mut a = tar::Archive::new(&bytes[..]);
        a.entries()
            .unwrap()
            .map(|e| {
                let mut e = e.unwrap();
                let kind = Kind::of(e.header().entry_type()).unwrap();
                let mut text = String::new();
                if let Some(l) = e.link_name().unwrap() {
                    text = l.display().to_string();
                }
                e.read_to_string(&mut text).unwrap();
                format!("{} {kind:?} {text}", e.path().unwrap().display())
            })
            .collect()
    }

    #[tokio::test]
    async fn top_level_opaque_and_links_across_layers() {
        use Kind::*;
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Blobstore> =
            Arc::new(crate::store::fs::FsStore::open(dir.path()).unwrap());
        let l1 = layer(
            &store,
            &[
                ("a", Dir, ""),
                ("a/f", Regular, "f1"),
                ("a/l", Hardlink, "a/f"),
                ("b", Regular, "b1"),
            ],
        )
        .await;
        let opaque = layer(
            &store,
            &[(".wh..wh..opq", Regular, ""), ("c", Regular, "c2")],
        )
        .await;
        assert_eq!(
            listing(&store, vec![l1.clone(), opaque]).await,
            ["c Regular c2"]
        );
        // a/f replaced above: its other name a/l keeps the old content.
        let replace = layer(
            &store,
            &[
                ("a/f", Regular, "f2"),
                ("a/m", Hardlink, "a/l"),
                ("a/.wh.gone", Regular, ""),
            ],
        )
        .await;
        assert_eq!(
            listing(&store, vec![l1, replace]).await,
            [
                "a Dir ",
                "a/l Regular f1",
                "b Regular b1",
                "a/f Regular f2",
                "a/m Hardlink a/l"
            ]
        );
    }

    #[test]
    fn pax_record_lengths_count_themselves() {
        for (k, v) in [
            ("path", "x".repeat(5)),
            ("path", "y".repeat(95)),
            ("mtime", "1".into()),
        ] {
            let mut out = Vec::new();
            pax_record(&mut out, k, v.as_bytes());
            let s = String::from_utf8(out).unwrap();
            let (len, _) = s.split_once(' ').unwrap();
            assert_eq!(len.parse::<usize>().unwrap(), s.len(), "{s}");
        }
    }
}
