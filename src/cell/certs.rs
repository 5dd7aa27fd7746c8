//! Adding an operator's trusted CA certificates to a rootfs tar, as Cloud
//! Foundry's `*-rootfs-setup` jobs do with their `trusted_certs` property
//! (air-gapped sites run private CAs).
//!
//! The tar is copied entry by entry, raw (PAX and GNU extension records
//! byte for byte, so names, owners, modes, xattrs and mtimes are kept),
//! into a new uncompressed tar: `etc/ssl/certs/ca-certificates.crt` (the
//! bundle OpenSSL, GnuTLS, curl and Go read on Debian, Ubuntu and Alpine)
//! gets the PEM appended (after a newline when it did not end in one); a
//! rootfs without it gets the file (0644, root), and the missing `etc`,
//! `etc/ssl`, `etc/ssl/certs` directories (0755), at the end. When the
//! rootfs has `usr/local/share/ca-certificates/` the PEM is also added there
//! as `airlock-trusted-certs.crt`, so an `update-ca-certificates` run inside
//! a container keeps it. Memory: one entry's data in flight, except the CA
//! bundle itself (read whole, at most [`MAX_CA_BUNDLE`] bytes).

use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::Path;

use anyhow::{Context, Result, bail};

/// The CA bundle the PEM is appended to, as a tar path.
pub const CA_BUNDLE: &str = "etc/ssl/certs/ca-certificates.crt";
/// Where `update-ca-certificates` looks for local CAs.
const LOCAL_CA_DIR: &str = "usr/local/share/ca-certificates";
/// The file written into [`LOCAL_CA_DIR`].
const LOCAL_CA_FILE: &str = "usr/local/share/ca-certificates/airlock-trusted-certs.crt";
/// Largest CA bundle (or PAX record set) read into memory.
pub const MAX_CA_BUNDLE: u64 = 64 << 20;

/// A tar path without a leading `./` or `/` and without a trailing `/`.
fn normalize(path: &[u8]) -> String {
    let s = String::from_utf8_lossy(path);
    let s = s.trim_start_matches("./").trim_start_matches('/');
    s.trim_end_matches('/').to_string()
}

/// A header for a new entry owned by root with `mode`, dated `mtime`.
fn new_header(
    path: &str,
    kind: tar::EntryType,
    mode: u32,
    size: u64,
    mtime: u64,
) -> Result<tar::Header> {
    let mut h = tar::Header::new_ustar();
    h.set_path(path)?;
    h.set_entry_type(kind);
    h.set_mode(mode);
    h.set_uid(0);
    h.set_gid(0);
    h.set_size(size);
    h.set_mtime(mtime);
    h.set_cksum();
    Ok(h)
}

/// Appends a regular file `path` (0644, root) holding `data`.
fn add_file<W: Write>(
    out: &mut tar::Builder<W>,
    path: &str,
    data: &[u8],
    mtime: u64,
) -> Result<()> {
    let h = new_header(
        path,
        tar::EntryType::Regular,
        0o644,
        data.len() as u64,
        mtime,
    )?;
    out.append(&h, data)?;
    Ok(())
}

/// Copies the rootfs tar `src` to `dst` with `pem` added (see the module
/// docs). Errors: `src` is not a tar, the CA bundle is not a regular file
/// (a link cannot be appended to), or I/O.
pub fn add_trusted_certs(src: &Path, dst: &Path, pem: &[u8]) -> Result<()> {
    let input = File::open(src).with_context(|| format!("opening {}", src.display()))?;
    let mut archive = tar::Archive::new(BufReader::with_capacity(1 << 20, input));
    let output =
        crate::files::create_new(dst).with_context(|| format!("creating {}", dst.display()))?;
    let mut out = tar::Builder::new(BufWriter::with_capacity(1 << 20, output));
    let mut pax_path: Option<String> = None;
    let mut seen_dirs = [false; 3];
    let dirs = ["etc", "etc/ssl", "etc/ssl/certs"];
    let mut bundle_done = false;
    let mut local_dir = false;
    let mut newest = 0u64;
    for entry in archive.entries()?.raw(true) {
        let mut entry = entry.with_context(|| format!("reading {}", src.display()))?;
        let header = entry.header().clone();
        let kind = header.entry_type();
        if kind.is_pax_local_extensions() || kind.is_gnu_longname() || kind.is_gnu_longlink() {
            if header.size()? > MAX_CA_BUNDLE {
                bail!("tar extension record of {} bytes", header.size()?);
            }
            let mut data = Vec::new();
            entry.read_to_end(&mut data)?;
            if kind.is_pax_local_extensions() {
                for ext in tar::PaxExtensions::new(&data).flatten() {
                    if ext.key() == Ok("path") {
                        pax_path = Some(normalize(ext.value_bytes()));
                    }
                }
            } else if kind.is_gnu_longname() {
                pax_path = Some(normalize(data.strip_suffix(b"\0").unwrap_or(&data)));
            }
            out.append(&header, data.as_slice())?;
            continue;
        }
        let path = pax_path
            .take()
            .unwrap_or_else(|| normalize(&header.path_bytes()));
        newest = newest.max(header.mtime().unwrap_or(0));
        if let Some(i) = dirs.iter().position(|d| *d == path) {
            seen_dirs[i] = kind.is_dir();
        }
        local_dir |= path == LOCAL_CA_DIR && kind.is_dir();
        if path == CA_BUNDLE {
            if !kind.is_file() {
                bail!(
                    "{CA_BUNDLE} in the rootfs is not a regular file (type {kind:?}): cannot add trusted certs"
                );
            }
            if header.size()? > MAX_CA_BUNDLE {
                bail!("{CA_BUNDLE} in the rootfs is over {MAX_CA_BUNDLE} bytes");
            }
            let mut data = Vec::new();
            entry.read_to_end(&mut data)?;
            if !data.is_empty() && !data.ends_with(b"\n") {
                data.push(b'\n');
            }
            data.extend_from_slice(pem);
            let mut h = header;
            h.set_size(data.len() as u64);
            h.set_cksum();
            out.append(&h, data.as_slice())?;
            bundle_done = true;
            continue;
        }
        out.append(&header, &mut entry)?;
    }
    if !bundle_done {
        for (i, dir) in dirs.iter().enumerate() {
            if !seen_dirs[i] {
                out.append(
                    &new_header(
                        &format!("{dir}/"),
                        tar::EntryType::Directory,
                        0o755,
                        0,
                        newest,
                    )?,
                    std::io::empty(),
                )?;
            }
        }
        add_file(&mut out, CA_BUNDLE, pem, newest)?;
    }
    if local_dir {
        add_file(&mut out, LOCAL_CA_FILE, pem, newest)?;
    }
    let mut w = out.into_inner()?;
    w.flush()?;
    w.into_inner()
        .map_err(|e| e.into_error())?
        .sync_all()
        .with_context(|| format!("syncing {}", dst.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalizes_paths() {
        assert_eq!(normalize(b"./etc/ssl/"), "etc/ssl");
        assert_eq!(normalize(b"/etc/ssl/certs/ca-certificates.crt"), CA_BUNDLE);
    }
}
