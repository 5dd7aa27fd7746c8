//! Local files a process writes in a directory it owns, where anything
//! may have been left behind (a crash, an operator, an attack): what is
//! at the path is replaced, never written through.
//!
//! Owns: removing an entry whatever it is ([`remove_entry`]) and creating
//! a file fresh in its place ([`create_new`]). Used by the cell's install
//! directory (downloads, patches, assembled and certified rootfs, the
//! record) and by verified downloads. Never decides which paths are used.

use std::fs::File;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Removes `path` whatever it is (a directory with its contents; a
/// symlink itself, never its target; a FIFO or socket without opening
/// it). Errors: `NotFound`, or I/O.
pub fn remove_entry(path: &Path) -> std::io::Result<()> {
    if std::fs::symlink_metadata(path)?.is_dir() {
        std::fs::remove_dir_all(path)
    } else {
        std::fs::remove_file(path)
    }
}

/// A new, empty regular file at `path`, opened to read and write: any
/// entry there first is removed ([`remove_entry`]: a symlink or a hard
/// link to another file is unlinked, never written through; a FIFO is
/// never opened), and the file is created with `O_EXCL | O_NOFOLLOW`, so
/// one planted in between is refused, not used. Errors: I/O (a full or
/// read-only disk, a path that appeared again meanwhile).
pub fn create_new(path: &Path) -> std::io::Result<File> {
    match remove_entry(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    File::options()
        .read(true)
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What may be found where a file is about to be written: each is
    /// replaced, and nothing it pointed to is touched.
    #[test]
    fn create_new_replaces_whatever_is_there_without_writing_through() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, b"keep").unwrap();
        let at = dir.path().join("out");

        std::os::unix::fs::symlink(&victim, &at).unwrap();
        std::io::Write::write_all(&mut create_new(&at).unwrap(), b"new").unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
        assert_eq!(std::fs::read(&at).unwrap(), b"new");

        std::fs::remove_file(&at).unwrap();
        std::fs::hard_link(&victim, &at).unwrap();
        create_new(&at).unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
        assert_eq!(std::fs::read(&at).unwrap(), b"");

        std::fs::remove_file(&at).unwrap();
        let fifo = std::ffi::CString::new(at.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        create_new(&at).unwrap();
        assert!(std::fs::metadata(&at).unwrap().is_file());

        std::fs::remove_file(&at).unwrap();
        std::fs::create_dir_all(at.join("a/b")).unwrap();
        create_new(&at).unwrap();
        assert!(std::fs::metadata(&at).unwrap().is_file());
    }
}
