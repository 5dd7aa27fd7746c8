//! Checking addon archives before they are recorded (interop-formats.md §1.7).
//!
//! Owns: reading one archive front to back, once, while hashing it with
//! sha256 and sha512, and refusing what a host would choke on or what could
//! escape its unpack directory:
//! - `.torcx.tgz`: a gzip'd tar (multi-member gzip allowed, as Go reads it)
//!   whose entries are regular files, hard links, symlinks, directories,
//!   devices or fifos (plus PAX and GNU long-name headers of at most 64 KiB);
//!   every path and hard-link target is relative without `..` (a leading
//!   `./` is fine: `tar -C rootfs -czf X .`); `.torcx/manifest.json` must be
//!   present, of kind `image-manifest-v0`, and every path it lists must be
//!   absolute and name an entry of the archive;
//! - `.torcx.squashfs`: the superblock's magic `hsqs`, version 4.0, gzip or
//!   lz4 compression (what the client's kernel mounts), a block size that is
//!   a power of two from 4 KiB to 1 MiB matching `block_log`, and
//!   `bytes_used` within the file. The file system inside is not walked.
//!
//! Never writes anything and never extracts: it only reads a stream.

use std::collections::BTreeSet;
use std::io::Read;

use sha2::{Digest as _, Sha256, Sha512};

use super::format::{AddonFormat, Envelope, IMAGE_MANIFEST_V0, ImageManifest};
use crate::digest::Digest;

/// Largest `.torcx/manifest.json`, PAX or GNU long-name header read, in bytes.
const MAX_SMALL_ENTRY: u64 = 64 * 1024;

/// What a checked archive is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArchiveInfo {
    /// Size in bytes.
    pub size: u64,
    /// sha256 of the whole file.
    pub sha256: Digest,
    /// sha512 of the whole file, 128 lowercase hex digits.
    pub sha512: String,
    /// The image manifest (tgz only; a squashfs is not walked).
    pub manifest: Option<ImageManifest>,
}

/// A reader that hashes everything read through it.
struct Hashing<R> {
    inner: R,
    sha256: Sha256,
    sha512: Sha512,
    size: u64,
}

impl<R: Read> Read for Hashing<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.sha256.update(&buf[..n]);
        self.sha512.update(&buf[..n]);
        self.size += n as u64;
        Ok(n)
    }
}

impl<R: Read> Hashing<R> {
    fn finish(mut self, manifest: Option<ImageManifest>) -> Result<ArchiveInfo, String> {
        std::io::copy(&mut self, &mut std::io::sink()).map_err(|e| format!("reading: {e}"))?;
        let sha256 = format!("sha256:{}", hex::encode(self.sha256.finalize()))
            .parse()
            .map_err(|e| format!("{e}"))?;
        Ok(ArchiveInfo {
            size: self.size,
            sha256,
            sha512: hex::encode(self.sha512.finalize()),
            manifest,
        })
    }
}

/// Checks an archive of `format` read from `reader` (see the module docs)
/// and hashes all of it.
///
/// Errors: a one-line cause (`tgz: entry "../x" leaves the image`,
/// `squashfs: bad magic (not a squashfs image)`, ...).
pub fn check(reader: impl Read, format: AddonFormat) -> Result<ArchiveInfo, String> {
    let mut h = Hashing {
        inner: reader,
        sha256: Sha256::new(),
        sha512: Sha512::new(),
        size: 0,
    };
    match format {
        AddonFormat::Squashfs => {
            let mut sb = [0u8; 96];
            h.read_exact(&mut sb)
                .map_err(|_| "squashfs: shorter than a superblock (not a squashfs image)")?;
            let info = h.finish(None)?;
            check_superblock(&sb, info.size).map_err(|e| format!("squashfs: {e}"))?;
            Ok(info)
        }
        AddonFormat::Tgz => {
            let gz = flate2::read::MultiGzDecoder::new(&mut h);
            let manifest = check_tar(gz).map_err(|e| format!("tgz: {e}"))?;
            h.finish(Some(manifest))
        }
    }
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// The squashfs 4.0 superblock (96 bytes, little endian): magic at 0,
/// block_size at 12, compression at 20, block_log at 22, version at 28/30,
/// bytes_used at 40.
fn check_superblock(sb: &[u8; 96], file_size: u64) -> Result<(), String> {
    if &sb[0..4] != b"hsqs" {
        return Err("bad magic (not a squashfs image)".into());
    }
    let (major, minor) = (u16_at(sb, 28), u16_at(sb, 30));
    if (major, minor) != (4, 0) {
        return Err(format!(
            "version {major}.{minor}; torcx mounts squashfs 4.0"
        ));
    }
    let compression = u16_at(sb, 20);
    if !matches!(compression, 1 | 5) {
        return Err(format!(
            "compression id {compression}; torcx hosts mount gzip (1) or lz4 (5) images"
        ));
    }
    let block_size = u32_at(sb, 12);
    let block_log = u16_at(sb, 22);
    if !(4096..=1 << 20).contains(&block_size)
        || !block_size.is_power_of_two()
        || 1u32.checked_shl(block_log.into()) != Some(block_size)
    {
        return Err(format!(
            "block size {block_size} (log {block_log}) is not a power of two from 4 KiB to 1 MiB"
        ));
    }
    let bytes_used = u64::from_le_bytes(sb[40..48].try_into().unwrap_or([0xff; 8]));
    if bytes_used > file_size || bytes_used < 96 {
        return Err(format!(
            "superblock says {bytes_used} bytes used, the file has {file_size} (truncated?)"
        ));
    }
    Ok(())
}

/// `p` as a normalized relative path (`./a//b/` → `a/b`, `./` → ``); an
/// error for absolute paths, `..` components or non-UTF-8 bytes.
fn normalize(raw: &[u8], what: &str) -> Result<String, String> {
    let p = std::str::from_utf8(raw).map_err(|_| format!("{what} is not UTF-8"))?;
    if p.starts_with('/') {
        return Err(format!(
            "{what} {p:?} is absolute; paths must stay inside the image"
        ));
    }
    let mut parts = Vec::new();
    for c in p.split('/') {
        match c {
            "" | "." => {}
            ".." => return Err(format!("{what} {p:?} leaves the image (..)")),
            c => parts.push(c),
        }
    }
    Ok(parts.join("/"))
}

fn read_small<R: Read>(entry: &mut tar::Entry<'_, R>, what: &str) -> Result<Vec<u8>, String> {
    let size = entry.size();
    if size > MAX_SMALL_ENTRY {
        return Err(format!("{what} is {size} bytes, over {MAX_SMALL_ENTRY}"));
    }
    let mut buf = Vec::with_capacity(size as usize);
    entry
        .read_to_end(&mut buf)
        .map_err(|e| format!("reading {what}: {e}"))?;
    Ok(buf)
}

/// `path` and `linkpath` of a PAX extended header, when present.
type PaxPaths = (Option<Vec<u8>>, Option<Vec<u8>>);

/// Reads the [`PaxPaths`] of a PAX extended header.
fn pax_paths(data: &[u8]) -> Result<PaxPaths, String> {
    let mut path = None;
    let mut link = None;
    for ext in tar::PaxExtensions::new(data) {
        let ext = ext.map_err(|_| "malformed PAX header".to_string())?;
        match ext.key_bytes() {
            b"path" => path = Some(ext.value_bytes().to_vec()),
            b"linkpath" => link = Some(ext.value_bytes().to_vec()),
            _ => {}
        }
    }
    Ok((path, link))
}

fn strip_nul(mut v: Vec<u8>) -> Vec<u8> {
    while v.last() == Some(&0) {
        v.pop();
    }
    v
}

/// Walks the tar; returns the image manifest after checking its paths.
fn check_tar(reader: impl Read) -> Result<ImageManifest, String> {
    use tar::EntryType as T;
    let mut archive = tar::Archive::new(reader);
    let entries = archive
        .entries()
        .map_err(|e| format!("not a tar: {e}"))?
        .raw(true);
    let mut paths: BTreeSet<String> = BTreeSet::new();
    let mut manifest: Option<ImageManifest> = None;
    let mut long_name: Option<Vec<u8>> = None;
    let mut long_link: Option<Vec<u8>> = None;
    for entry in entries {
        let mut entry = entry.map_err(|e| format!("not a gzip'd tar or truncated: {e}"))?;
        let kind = entry.header().entry_type();
        match kind {
            T::GNULongName => {
                long_name = Some(strip_nul(read_small(&mut entry, "GNU long name")?));
                continue;
            }
            T::GNULongLink => {
                long_link = Some(strip_nul(read_small(&mut entry, "GNU long link")?));
                continue;
            }
            T::XHeader => {
                let data = read_small(&mut entry, "PAX header")?;
                let (p, l) = pax_paths(&data)?;
                long_name = p.or(long_name);
                long_link = l.or(long_link);
                continue;
            }
            T::XGlobalHeader => {
                read_small(&mut entry, "PAX global header")?;
                continue;
            }
            _ => {}
        }
        let raw_path = long_name
            .take()
            .unwrap_or_else(|| entry.path_bytes().into_owned());
        let raw_link = long_link
            .take()
            .or_else(|| entry.link_name_bytes().map(|l| l.into_owned()));
        let path = normalize(&raw_path, "entry")?;
        match kind {
            T::Regular
            | T::Continuous
            | T::Directory
            | T::Symlink
            | T::Char
            | T::Block
            | T::Fifo => {}
            T::Link => {
                let target = raw_link.ok_or_else(|| format!("hard link {path:?} has no target"))?;
                normalize(&target, "hard link target")?;
            }
            other => {
                return Err(format!(
                    "entry {path:?} has type {other:?}; torcx unpacks files, links, directories, devices and fifos only"
                ));
            }
        }
        if path == ".torcx/manifest.json" {
            if !matches!(kind, T::Regular | T::Continuous) {
                return Err(".torcx/manifest.json is not a regular file".into());
            }
            let bytes = read_small(&mut entry, ".torcx/manifest.json")?;
            let doc: Envelope<ImageManifest> = serde_json::from_slice(&bytes)
                .map_err(|e| format!(".torcx/manifest.json is not an image manifest: {e}"))?;
            if doc.kind != IMAGE_MANIFEST_V0 {
                return Err(format!(
                    ".torcx/manifest.json has kind {:?}, expected {IMAGE_MANIFEST_V0}",
                    doc.kind
                ));
            }
            manifest = Some(doc.value);
        }
        if !path.is_empty() {
            paths.insert(path);
        }
    }
    let manifest = manifest
        .ok_or("no .torcx/manifest.json in the archive (torcx needs it to propagate the image)")?;
    for p in manifest.paths() {
        let rel = p
            .strip_prefix('/')
            .ok_or_else(|| format!(".torcx/manifest.json lists {p:?}, which is not absolute"))?;
        let rel = normalize(rel.as_bytes(), ".torcx/manifest.json path")?;
        if !paths.contains(&rel) {
            return Err(format!(
                ".torcx/manifest.json lists {p:?}, which is not in the archive"
            ));
        }
    }
    Ok(manifest)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn superblock(magic: &[u8; 4], major: u16, compression: u16) -> Vec<u8> {
        let mut sb = vec![0u8; 4096];
        sb[0..4].copy_from_slice(magic);
        sb[12..16].copy_from_slice(&131072u32.to_le_bytes());
        sb[20..22].copy_from_slice(&compression.to_le_bytes());
        sb[22..24].copy_from_slice(&17u16.to_le_bytes());
        sb[28..30].copy_from_slice(&major.to_le_bytes());
        sb[40..48].copy_from_slice(&4096u64.to_le_bytes());
        sb
    }

    #[test]
    fn squashfs_superblocks() {
        let ok = superblock(b"hsqs", 4, 1);
        let info = check(&ok[..], AddonFormat::Squashfs).unwrap();
        assert_eq!(info.size, 4096);
        assert_eq!(info.sha512, hex::encode(Sha512::digest(&ok)));
        let e = check(&superblock(b"sqsh", 4, 1)[..], AddonFormat::Squashfs).unwrap_err();
        assert!(e.contains("bad magic"), "{e}");
        let e = check(&superblock(b"hsqs", 3, 1)[..], AddonFormat::Squashfs).unwrap_err();
        assert!(e.contains("version 3.0"), "{e}");
        let e = check(&superblock(b"hsqs", 4, 4)[..], AddonFormat::Squashfs).unwrap_err();
        assert!(e.contains("compression"), "{e}");
        let e = check(&ok[..100], AddonFormat::Squashfs).unwrap_err();
        assert!(e.contains("truncated"), "{e}");
    }

    #[test]
    fn paths_normalize_or_fail() {
        assert_eq!(normalize(b"./a//b/", "e").unwrap(), "a/b");
        assert_eq!(normalize(b"./", "e").unwrap(), "");
        assert!(normalize(b"a/../../b", "e").is_err());
        assert!(normalize(b"/etc/passwd", "e").is_err());
    }
}
