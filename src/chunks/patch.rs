//! Rootfs patches: a new rootfs as one zstd frame whose prefix is the
//! rootfs it replaces (zstd's patch mode: what `zstd --patch-from=OLD NEW`
//! writes and `zstd -d --patch-from=OLD` reads, so the stock `zstd` tool
//! applies an airlock patch too).
//!
//! Owns: the patch parameters (level [`LEVEL`], a window that spans both
//! files, long-distance matching, a content checksum) and the two
//! one-shot operations on whole byte slices: [`make`] (into a buffer of at
//! most a given size, so a patch that would not pay is never finished) and
//! [`apply`] (into an output of exactly the new rootfs's size, so zstd
//! needs no window buffer of its own: memory is the mapped files, not
//! the window). Never fetches or stores: `stacks::patch` makes one at
//! promotion and `cell::patch` applies it; both map their files.

use anyhow::{Result, bail};

use crate::digest::Digest;

/// zstd level of patches. Measured on a 150 MB bookworm rootfs with one
/// package rebuilt: level 3 takes 0.9 s, level 9 about 6 s and level 19
/// a minute, for patches within 10 % of each other; a patch is made once
/// per promotion and sent to every cell.
pub const LEVEL: i32 = 9;

/// The largest window zstd allows (`ZSTD_WINDOWLOG_MAX_64`): 2 GiB. A
/// patch of files larger than that together still works; matches are
/// then looked for in the last 2 GiB only.
pub const MAX_WINDOW_LOG: u32 = 31;

/// What a rootfs record keeps of its patch.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PatchRef {
    /// The rootfs the patch applies to: sha256 of its tar.
    pub from: Digest,
    /// That rootfs's size in bytes.
    pub from_size: u64,
    /// The patch blob: sha256 of its bytes.
    pub blob: Digest,
    /// The patch's size in bytes.
    pub size: u64,
}

/// The window log a patch from `from` bytes to `to` bytes uses: the
/// smallest power of two covering both (the frame's prefix is `from`, so
/// a match may reach back `from + to` bytes), between 10 and
/// [`MAX_WINDOW_LOG`].
pub fn window_log(from: u64, to: u64) -> u32 {
    let total = from.saturating_add(to).max(2);
    (64 - (total - 1).leading_zeros()).clamp(10, MAX_WINDOW_LOG)
}

fn zstd_error(what: &str, code: usize) -> anyhow::Error {
    anyhow::anyhow!("{what}: {}", zstd::zstd_safe::get_error_name(code))
}

/// The patch that turns `from` into `to`, or `None` when it would be
/// longer than `limit` bytes (a patch that does not pay is cut short, not
/// finished). Memory: `limit` bytes of output at most (touched only as far
/// as written) and zstd's match tables (about 50 MB at [`LEVEL`] with
/// long-distance matching); `from` and `to` are read in place (map them).
/// Errors: zstd refused a parameter.
pub fn make(from: &[u8], to: &[u8], limit: usize) -> Result<Option<Vec<u8>>> {
    use zstd::zstd_safe::{CCtx, CParameter};
    let mut cctx = CCtx::create();
    let wlog = window_log(from.len() as u64, to.len() as u64);
    for p in [
        CParameter::CompressionLevel(LEVEL),
        CParameter::WindowLog(wlog),
        CParameter::EnableLongDistanceMatching(true),
        CParameter::ContentSizeFlag(true),
        CParameter::ChecksumFlag(true),
    ] {
        cctx.set_parameter(p)
            .map_err(|c| zstd_error("patch parameter", c))?;
    }
    if !from.is_empty() {
        cctx.ref_prefix(from)
            .map_err(|c| zstd_error("patch prefix", c))?;
    }
    let mut out = Vec::with_capacity(limit);
    match cctx.compress2(&mut out, to) {
        Ok(_) => Ok(Some(out)),
        Err(c) if zstd::zstd_safe::get_error_name(c).contains("too small") => Ok(None),
        Err(c) => Err(zstd_error("making the patch", c)),
    }
}

/// Applies `patch` to `from`, writing the new rootfs into `out`, which
/// must be exactly its size. Memory: zstd's decoder context (no window
/// buffer: the output is the window). Errors: not one zstd frame, a frame
/// whose declared size is not `out`'s, corrupt data, a content checksum
/// mismatch (a `from` that is not the patch's), or fewer bytes than `out`.
/// The caller still checks the output's sha256.
pub fn apply(from: &[u8], patch: &[u8], out: &mut [u8]) -> Result<()> {
    use zstd::zstd_safe::{DCtx, DParameter};
    match zstd::zstd_safe::get_frame_content_size(patch) {
        Ok(Some(n)) if n == out.len() as u64 => {}
        Ok(Some(n)) => bail!("patch makes {n} bytes, the rootfs has {}", out.len()),
        Ok(None) => bail!("patch does not declare its content size"),
        Err(_) => bail!("patch is not a zstd frame"),
    }
    match zstd::zstd_safe::find_frame_compressed_size(patch) {
        Ok(n) if n == patch.len() => {}
        _ => bail!("patch is not exactly one zstd frame"),
    }
    let mut dctx = DCtx::create();
    dctx.set_parameter(DParameter::WindowLogMax(MAX_WINDOW_LOG))
        .map_err(|c| zstd_error("patch parameter", c))?;
    if !from.is_empty() {
        dctx.ref_prefix(from)
            .map_err(|c| zstd_error("patch prefix", c))?;
    }
    let want = out.len();
    let n = dctx
        .decompress(out, patch)
        .map_err(|c| zstd_error("applying the patch", c))?;
    if n != want {
        bail!("patch made {n} bytes, the rootfs has {want}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pseudo-random bytes (xorshift), compressible by nothing.
    fn noise(n: usize, mut s: u64) -> Vec<u8> {
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                s as u8
            })
            .collect()
    }

    #[test]
    fn window_covers_both_files() {
        assert_eq!(window_log(0, 0), 10);
        assert_eq!(window_log(512, 512), 10);
        assert_eq!(window_log(1 << 20, 1 << 20), 21);
        assert_eq!(window_log((1 << 20) + 1, 1 << 20), 22);
        assert_eq!(window_log(150_000_000, 150_000_001), 29);
        assert_eq!(window_log(u64::MAX, 1), MAX_WINDOW_LOG);
    }

    #[test]
    fn a_patch_moves_what_changed_and_applies_to_its_base_only() {
        let v1 = noise(4 << 20, 1);
        let mut v2 = v1.clone();
        v2[1_000_000..1_000_100].copy_from_slice(&noise(100, 2));
        v2.extend_from_slice(&noise(5000, 3));
        let p = make(&v1, &v2, v2.len() / 8).unwrap().unwrap();
        // The changed 100 and appended 5000 bytes are incompressible noise:
        // the patch carries them and little else.
        assert!(p.len() > 5100 && p.len() < 5100 + 2000, "{}", p.len());
        let mut out = vec![0u8; v2.len()];
        apply(&v1, &p, &mut out).unwrap();
        assert!(out == v2);

        let mut other = v1.clone();
        other[10] ^= 1;
        let e = apply(&other, &p, &mut out).unwrap_err().to_string();
        assert!(e.contains("applying the patch"), "{e}");
        let mut short = vec![0u8; v2.len() - 1];
        let e = apply(&v1, &p, &mut short).unwrap_err().to_string();
        assert!(e.contains("patch makes"), "{e}");
        let mut two = p.clone();
        two.extend_from_slice(&p);
        let e = apply(&v1, &two, &mut out).unwrap_err().to_string();
        assert!(e.contains("exactly one zstd frame"), "{e}");
        let e = apply(&v1, b"not zstd", &mut out).unwrap_err().to_string();
        assert!(e.contains("not a zstd frame"), "{e}");
    }

    #[test]
    fn a_patch_that_does_not_pay_is_not_finished() {
        let v1 = noise(1 << 20, 1);
        let v2 = noise(1 << 20, 9);
        assert!(make(&v1, &v2, v2.len() / 8).unwrap().is_none());
    }

    /// The stock zstd tool reads airlock's patch (`zstd -d --patch-from`).
    #[test]
    fn zstd_cli_applies_the_patch() {
        let dir = tempfile::tempdir().unwrap();
        let v1 = noise(2 << 20, 4);
        let mut v2 = v1.clone();
        v2[7..9].copy_from_slice(b"!!");
        let p = make(&v1, &v2, v2.len() / 8).unwrap().unwrap();
        std::fs::write(dir.path().join("v1"), &v1).unwrap();
        std::fs::write(dir.path().join("p.zst"), &p).unwrap();
        let st = std::process::Command::new("zstd")
            .args(["-q", "-d", "--long=31", "--patch-from"])
            .arg(dir.path().join("v1"))
            .arg(dir.path().join("p.zst"))
            .arg("-o")
            .arg(dir.path().join("v2"))
            .status()
            .expect("zstd not found: apt-get install zstd");
        assert!(st.success());
        assert!(std::fs::read(dir.path().join("v2")).unwrap() == v2);
    }
}
