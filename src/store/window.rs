//! Mapped windows: read-only mappings of a range of a store file that say
//! which file range their memory is, so that a socket writer holding a
//! slice of one can send the file range with `sendfile(2)` instead of
//! copying the bytes (see `server::conn::sendfile`).
//!
//! Owns: [`Window`] (a mapping, optionally registered) and the process-wide
//! table of registered windows ([`lookup`]). Never writes to sockets and
//! never decides what is served: a slice found here is the same bytes as
//! the file range it names (both are the file's page cache), so a writer
//! that sends either sends the same bytes, and one that finds nothing
//! writes the slice as it is.

use std::collections::BTreeMap;
use std::fs::File;
use std::sync::{Arc, Mutex, MutexGuard};

/// Registered windows by start address: (end address, file, file offset of
/// the start).
type Table = BTreeMap<usize, (usize, Arc<File>, u64)>;

static TABLE: Mutex<Table> = Mutex::new(BTreeMap::new());

fn table() -> MutexGuard<'static, Table> {
    // A panic while the lock was held cannot leave the map half-updated
    // (each operation is one insert, remove or lookup).
    TABLE.lock().unwrap_or_else(|e| e.into_inner())
}

/// A read-only mapping of `len` bytes of a file from `offset`, usable as a
/// `Bytes` owner ([`bytes::Bytes::from_owner`]). When registered, its memory
/// range is in the table until it is dropped (removed before it is
/// unmapped, so an address in the table always names a live mapping of the
/// file recorded with it).
pub struct Window {
    map: memmap2::Mmap,
    /// The file and offset, when registered.
    registered: Option<(Arc<File>, u64)>,
}

impl Window {
    /// Maps bytes `offset..offset + len` of `file` (`offset` a multiple of
    /// the page size, `len` > 0), and registers the mapping when `register`
    /// (the caller serves these bytes as they are on disk, so a socket may
    /// send them from the file). Errors: those of `mmap(2)`.
    ///
    /// The file must not change while mapped: store objects are written
    /// under `tmp/` and renamed into place, never modified in place, and an
    /// unlinked file stays mapped until the window is dropped.
    pub fn map(
        file: &Arc<File>,
        offset: u64,
        len: usize,
        register: bool,
    ) -> std::io::Result<Window> {
        // SAFETY: read-only mapping of an immutable store object (see
        // above); a byte changed on disk by someone else (the corruption
        // tests' `dd`) is seen through the mapping as through read(2),
        // which is no worse, and verification decides what is served.
        let map = unsafe {
            memmap2::MmapOptions::new()
                .offset(offset)
                .len(len)
                .map(&**file)?
        };
        let _ = map.advise(memmap2::Advice::Sequential);
        let registered = register.then(|| (file.clone(), offset));
        if let Some((file, offset)) = &registered {
            let start = map.as_ptr() as usize;
            table().insert(start, (start + map.len(), file.clone(), *offset));
        }
        Ok(Window { map, registered })
    }
}

impl AsRef<[u8]> for Window {
    fn as_ref(&self) -> &[u8] {
        &self.map
    }
}

impl Drop for Window {
    fn drop(&mut self) {
        if self.registered.is_some() {
            table().remove(&(self.map.as_ptr() as usize));
        }
        // `map` is unmapped after this, once it is out of the table.
    }
}

/// The file and file offset whose bytes `slice` is, when `slice` lies
/// wholly inside a registered [`Window`]. The answer stays right as long as
/// `slice` is borrowed (its window cannot be dropped meanwhile).
pub fn lookup(slice: &[u8]) -> Option<(Arc<File>, u64)> {
    if slice.is_empty() {
        return None;
    }
    let start = slice.as_ptr() as usize;
    let end = start + slice.len();
    let table = table();
    let (base, (limit, file, offset)) = table.range(..=start).next_back()?;
    (end <= *limit).then(|| (file.clone(), offset + (start - base) as u64))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn slices_of_registered_windows_name_their_file_range() {
        let mut f = tempfile::tempfile().unwrap();
        let page = 4096usize;
        f.write_all(&vec![7u8; 3 * page]).unwrap();
        let file = Arc::new(f);
        let w = Window::map(&file, page as u64, 2 * page, true).unwrap();
        let bytes = w.as_ref();
        let (_, at) = lookup(&bytes[10..100]).unwrap();
        assert_eq!(at, page as u64 + 10);
        assert!(lookup(&[1u8, 2, 3]).is_none(), "memory outside any window");
        let plain = Window::map(&file, 0, page, false).unwrap();
        assert!(lookup(plain.as_ref()).is_none(), "an unregistered window");
        let start = bytes.as_ptr() as usize;
        drop(w);
        assert!(
            table().range(start..start + 1).next().is_none(),
            "a dropped window leaves the table"
        );
    }
}
