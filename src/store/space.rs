//! Free space: the floor below which writes are refused, and recognising a
//! full disk.
//!
//! Owns: the floor setting (`--min-free-space`, `AIRLOCK_MIN_FREE_SPACE`:
//! bytes with K/M/G/T suffixes, or a percentage `N%` of the file system;
//! default the smaller of 1 GiB and 1 %, `0` turns it off) and the check,
//! one `statvfs(2)` per object write call. A refusal is an I/O error of kind
//! `StorageFull`, exactly like `ENOSPC`, so every caller handles both the
//! same way (HTTP 507, a failed import, nothing committed).

use std::path::Path;

/// The least free space writes leave on the store's file system.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum FreeSpaceFloor {
    /// No floor (only a full disk stops writes).
    Off,
    /// At least this many bytes free.
    Bytes(u64),
    /// At least this share of the file system free (0 < p < 100).
    Percent(f64),
    /// The smaller of 1 GiB and 1 % of the file system (the default).
    Default,
}

/// Free and total bytes of the file system holding `path` (for the caller:
/// `f_bavail`, what an unprivileged writer may use).
pub fn usage(path: &Path) -> std::io::Result<(u64, u64)> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::other("path holds a NUL byte"))?;
    // SAFETY: statvfs writes into the zeroed struct we own; `c` is a valid C string.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let frsize = st.f_frsize as u64;
    Ok((st.f_bavail as u64 * frsize, st.f_blocks as u64 * frsize))
}

impl FreeSpaceFloor {
    /// Parses `0` (off), `default` (the smaller of 1 GiB and 1 %), a size
    /// (`512M`, `2G`: [`crate::config::parse_size`]), or a share of the file
    /// system (`5%`). Errors: a one-line cause.
    pub fn parse(s: &str) -> Result<FreeSpaceFloor, String> {
        let s = s.trim();
        match s {
            "0" => return Ok(FreeSpaceFloor::Off),
            "default" => return Ok(FreeSpaceFloor::Default),
            _ => {}
        }
        if let Some(p) = s.strip_suffix('%') {
            return match p.trim().parse::<f64>() {
                Ok(v) if v > 0.0 && v < 100.0 => Ok(FreeSpaceFloor::Percent(v)),
                _ => Err(format!(
                    "invalid free-space floor {s:?}: a percentage is above 0 and below 100"
                )),
            };
        }
        crate::config::parse_size(s).map(FreeSpaceFloor::Bytes)
    }

    /// The floor in bytes on a file system of `total` bytes.
    pub fn bytes(self, total: u64) -> u64 {
        match self {
            FreeSpaceFloor::Off => 0,
            FreeSpaceFloor::Bytes(b) => b,
            FreeSpaceFloor::Percent(p) => (total as f64 * p / 100.0) as u64,
            FreeSpaceFloor::Default => (1u64 << 30).min(total / 100),
        }
    }

    /// Fails with a `StorageFull` error naming the floor when writing
    /// `more` bytes under `path` would leave less free space than the floor.
    pub fn check(self, path: &Path, more: u64) -> std::io::Result<()> {
        if self == FreeSpaceFloor::Off {
            return Ok(());
        }
        let (free, total) = usage(path)?;
        let floor = self.bytes(total);
        if free.saturating_sub(more) < floor {
            return Err(std::io::Error::new(
                std::io::ErrorKind::StorageFull,
                format!(
                    "free space on the store's file system ({free} bytes) is below the floor of {floor} bytes (--min-free-space); run `airlock gc` or add space"
                ),
            ));
        }
        Ok(())
    }
}

/// Whether `e` means the disk (or quota, or the floor) is full.
pub fn is_no_space(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::StorageFull
        || e.kind() == std::io::ErrorKind::QuotaExceeded
        || matches!(e.raw_os_error(), Some(libc::ENOSPC) | Some(libc::EDQUOT))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floors_in_bytes() {
        assert_eq!(FreeSpaceFloor::Default.bytes(1 << 40), 1 << 30);
        assert_eq!(FreeSpaceFloor::Default.bytes(1000 << 20), 10 << 20);
        let huge = FreeSpaceFloor::Bytes(u64::MAX);
        let e = huge.check(Path::new("/"), 0).unwrap_err();
        assert!(is_no_space(&e));
    }
}
