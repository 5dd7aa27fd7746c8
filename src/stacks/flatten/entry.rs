//! Reading one tar entry of a layer: compression by media type, the entry kind, its metadata
//! (mode, owners, times, PAX records) and its cleaned name, with whiteouts (`.wh.NAME`,
//! `.wh..wh..opq`) recognised (image-spec "Representing Changes").

use super::*;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Compression {
    None,
    Gzip,
    Zstd,
}

/// The compression a layer media type implies. Errors: not a layer type.
pub(super) fn compression(media_type: &str) -> Result<Compression> {
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
pub(super) enum Kind {
    Dir,
    Regular,
    Symlink,
    Hardlink,
    Char,
    Block,
    Fifo,
}

impl Kind {
    pub(super) fn of(t: tar::EntryType) -> Result<Kind> {
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

    pub(super) fn entry_type(self) -> tar::EntryType {
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
pub(super) struct Meta {
    pub(super) kind: Kind,
    pub(super) mode: u32,
    pub(super) uid: u64,
    pub(super) gid: u64,
    pub(super) mtime: u64,
    pub(super) uname: Vec<u8>,
    pub(super) gname: Vec<u8>,
    /// Symlink or hard link target (hard links: a cleaned path).
    pub(super) link: Option<String>,
    pub(super) dev: (u32, u32),
    /// PAX records carried over: xattrs and a precise `mtime`.
    pub(super) pax: Vec<(String, Vec<u8>)>,
}

impl Meta {
    /// A directory made for a path no layer declares: 0755 root:root, mtime 0.
    pub(super) fn implicit_dir() -> Meta {
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
pub(super) enum Name {
    /// `.wh..wh..opq` in this directory.
    Opaque(String),
    /// `.wh.NAME`: NAME is deleted.
    Whiteout(String),
    /// An ordinary entry at this path.
    Path(String),
    /// The root directory itself (`./`): not written.
    Root,
}

pub(super) const WH: &str = ".wh.";

pub(super) const OPAQUE: &str = ".wh..wh..opq";

/// `a/./b/` → `a/b`; refuses `..` and non-UTF-8 paths.
pub(super) fn clean(raw: &[u8]) -> Result<Option<String>> {
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

pub(super) fn name_of(raw: &[u8]) -> Result<Name> {
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
pub(super) fn ancestors(p: &str) -> impl Iterator<Item = &str> {
    p.match_indices('/').map(move |(i, _)| &p[..i])
}

/// Reads an entry's attributes, applying PAX overrides.
pub(super) fn meta_of<R: Read>(entry: &mut tar::Entry<'_, R>) -> Result<Meta> {
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

/// An ordinary entry of a layer, its path seen once in that layer: its
/// cleaned path and attributes; `None` for whiteouts and the root.
///
/// Errors: a path given twice in one layer, a bad name or entry type.
pub(super) fn path_entry<R: Read>(
    entry: &mut tar::Entry<'_, R>,
    seen: &mut HashSet<String>,
) -> Result<Option<(String, Meta)>> {
    let Name::Path(p) = name_of(&entry.path_bytes())? else {
        return Ok(None);
    };
    if !seen.insert(p.clone()) {
        bail!("path {p:?} appears twice in one layer");
    }
    let m = meta_of(entry)?;
    Ok(Some((p, m)))
}
