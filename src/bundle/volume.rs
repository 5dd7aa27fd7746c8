//! Bundle volumes: one tar written as `NAME` or split into `NAME.000`,
//! `NAME.001`, ... of a fixed maximum size, and read back as one stream.
//!
//! Owns: file naming, rotation, fsync of written volumes (and their sizes
//! and sha256 for the volume list, [`super::volume_list`]), and the chained
//! reader, which checks each volume against the list when there is one.
//! Never looks inside the tar.

use std::fs::File;
use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use anyhow::{Context, Result, bail};

use super::volume_list::{VolumeEntry, VolumeList, VolumeProbe};
use crate::digest::{Algorithm, Hasher};

/// Smallest volume size accepted, in bytes (1 MiB).
pub const MIN_VOLUME: u64 = 1 << 20;

/// The name of volume `n` of `base`: `base.000`, `base.001`, ...
pub fn volume_name(base: &Path, n: usize) -> PathBuf {
    let mut s = base.as_os_str().to_owned();
    s.push(format!(".{n:03}"));
    PathBuf::from(s)
}

/// Writes one file, or volumes of at most `size` bytes each. Every file is
/// fsynced before the next is opened and at [`VolumeWriter::finish`].
pub struct VolumeWriter {
    base: PathBuf,
    size: Option<u64>,
    files: Vec<PathBuf>,
    /// Name, size and sha256 of every closed volume.
    written: Vec<VolumeEntry>,
    current: Option<BufWriter<File>>,
    hasher: Hasher,
    in_current: u64,
    total: u64,
}

impl VolumeWriter {
    /// Starts writing at `base` (or `base.000` with a volume size), creating
    /// its directory. Refuses to overwrite an existing file, and a volume
    /// size under [`MIN_VOLUME`].
    pub fn create(base: &Path, size: Option<u64>) -> Result<VolumeWriter> {
        if size.is_some_and(|s| s < MIN_VOLUME) {
            bail!("--volume-size must be at least 1M (1 MiB)");
        }
        if let Some(dir) = base.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        let mut w = VolumeWriter {
            base: base.to_path_buf(),
            size,
            files: Vec::new(),
            written: Vec::new(),
            current: None,
            hasher: Hasher::new(Algorithm::Sha256),
            in_current: 0,
            total: 0,
        };
        w.open_next()?;
        Ok(w)
    }

    fn open_next(&mut self) -> Result<()> {
        self.close_current()?;
        let path = match self.size {
            Some(_) => volume_name(&self.base, self.files.len()),
            None => self.base.clone(),
        };
        let file =
            File::create_new(&path).with_context(|| format!("creating {}", path.display()))?;
        self.files.push(path);
        self.current = Some(BufWriter::with_capacity(1 << 20, file));
        self.in_current = 0;
        Ok(())
    }

    fn close_current(&mut self) -> Result<()> {
        if let Some(w) = self.current.take() {
            let file = w.into_inner().map_err(|e| e.into_error())?;
            file.sync_all()?;
            let hasher = std::mem::replace(&mut self.hasher, Hasher::new(Algorithm::Sha256));
            let path = self.files.last().cloned().unwrap_or_default();
            self.written.push(VolumeEntry {
                name: path
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default(),
                size: self.in_current,
                sha256: hasher.finish(),
            });
        }
        Ok(())
    }

    /// Flushes and fsyncs the last file. Returns the files written and the total bytes.
    pub fn finish(&mut self) -> Result<(Vec<PathBuf>, u64)> {
        self.close_current()?;
        Ok((self.files.clone(), self.total))
    }

    /// After [`VolumeWriter::finish`] of a bundle split into volumes: its
    /// volume list (`None` for a single file).
    pub fn volume_list(&self, bundle: &str) -> Option<VolumeList> {
        let volume_size = self.size?;
        Some(VolumeList {
            kind: super::volume_list::KIND.into(),
            bundle: bundle.into(),
            volume_size,
            count: self.written.len(),
            volumes: self.written.clone(),
        })
    }

    /// Removes every file written (after an error).
    pub fn remove_all(&mut self) {
        self.current = None;
        for f in &self.files {
            let _ = std::fs::remove_file(f);
        }
    }
}

impl Write for VolumeWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if let Some(limit) = self.size
            && self.in_current >= limit
        {
            self.open_next().map_err(std::io::Error::other)?;
        }
        let room = self.size.map_or(buf.len() as u64, |l| l - self.in_current);
        let n = (buf.len() as u64).min(room) as usize;
        let w = self
            .current
            .as_mut()
            .ok_or_else(|| std::io::Error::other("volume writer closed"))?;
        let n = w.write(&buf[..n])?;
        self.hasher.update(&buf[..n]);
        self.in_current += n as u64;
        self.total += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self.current.as_mut() {
            Some(w) => w.flush(),
            None => Ok(()),
        }
    }
}

/// Expands the command line's bundle arguments into the files to read, in order:
/// `-` is stdin; an existing file is itself; a missing `NAME` whose `NAME.000`
/// exists becomes `NAME.000`, `NAME.001`, ... up to the first gap.
pub fn expand_inputs(args: &[PathBuf]) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for a in args {
        if a.as_os_str() == "-" || a.exists() {
            out.push(a.clone());
            continue;
        }
        if !volume_name(a, 0).exists() {
            bail!(
                "bundle {} not found (nor {})",
                a.display(),
                volume_name(a, 0).display()
            );
        }
        let mut n = 0;
        while volume_name(a, n).exists() {
            out.push(volume_name(a, n));
            n += 1;
        }
        if let Some(later) = (n + 1..1000).find(|&k| volume_name(a, k).exists()) {
            bail!(
                "volume {} ({}) is missing: {} exists",
                n + 1,
                volume_name(a, n).display(),
                volume_name(a, later).display()
            );
        }
    }
    if out.is_empty() {
        bail!("no bundle given");
    }
    Ok(out)
}

/// Reads several files (or stdin for `-`) as one stream, opening each in
/// turn; with a volume list, checks each volume's size and sha256 when it
/// ends (an error names the volume).
pub struct ChainReader {
    files: Arc<Vec<PathBuf>>,
    next: usize,
    current: Option<Box<dyn Read + Send>>,
    listed: Option<Listed>,
}

/// The checks of listed volumes while they are read.
struct Listed {
    list: Arc<VolumeList>,
    hasher: Hasher,
    size: u64,
    /// The volume being read, shared with the [`VolumeProbe`].
    current: Arc<AtomicUsize>,
}

impl ChainReader {
    /// Reads `files` in order (see [`expand_inputs`]).
    pub fn new(files: Vec<PathBuf>) -> ChainReader {
        ChainReader {
            files: Arc::new(files),
            next: 0,
            current: None,
            listed: None,
        }
    }

    /// Reads the volumes `files` of the bundle `list` describes: checks
    /// their names, order and sizes now ([`VolumeList::check_files`]) and
    /// each volume's sha256 when it ends. The probe explains a failure of
    /// whoever reads as the fault of the volume being read, when it is.
    pub fn listed(files: Vec<PathBuf>, list: VolumeList) -> Result<(ChainReader, VolumeProbe)> {
        list.check_files(&files)?;
        let mut r = ChainReader::new(files);
        let list = Arc::new(list);
        let current = Arc::new(AtomicUsize::new(0));
        r.listed = Some(Listed {
            list: list.clone(),
            hasher: Hasher::new(Algorithm::Sha256),
            size: 0,
            current: current.clone(),
        });
        let probe = VolumeProbe {
            list,
            files: r.files.clone(),
            current,
        };
        Ok((r, probe))
    }

    /// The volume that just ended is checked against the list.
    fn volume_ended(&mut self) -> std::io::Result<()> {
        let Some(l) = self.listed.as_mut() else {
            return Ok(());
        };
        let i = l.current.load(Ordering::Relaxed);
        let hasher = std::mem::replace(&mut l.hasher, Hasher::new(Algorithm::Sha256));
        let size = std::mem::take(&mut l.size);
        l.list
            .check_read(i, size, &hasher.finish())
            .map_err(|e| std::io::Error::other(format!("{e:#}")))?;
        l.current.store(i + 1, Ordering::Relaxed);
        Ok(())
    }
}

impl Read for ChainReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        loop {
            if let Some(r) = self.current.as_mut() {
                let n = r.read(buf)?;
                if n > 0 || buf.is_empty() {
                    if let Some(l) = self.listed.as_mut() {
                        l.hasher.update(&buf[..n]);
                        l.size += n as u64;
                    }
                    return Ok(n);
                }
                self.current = None;
                self.volume_ended()?;
            }
            let Some(next) = self.files.get(self.next).cloned() else {
                return Ok(0);
            };
            self.next += 1;
            self.current = Some(if next.as_os_str() == "-" {
                Box::new(std::io::stdin())
            } else {
                let f = File::open(&next).map_err(|e| {
                    std::io::Error::new(e.kind(), format!("{}: {e}", next.display()))
                })?;
                Box::new(f)
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_and_rejoin() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().join("b.tar");
        let len = 2 * MIN_VOLUME as usize + 1000;
        let data: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
        assert!(VolumeWriter::create(&base, Some(MIN_VOLUME - 1)).is_err());
        let mut w = VolumeWriter::create(&base, Some(MIN_VOLUME)).unwrap();
        w.write_all(&data).unwrap();
        let (files, total) = w.finish().unwrap();
        assert_eq!(total, len as u64);
        assert_eq!(files.len(), 3);
        assert_eq!(std::fs::metadata(&files[0]).unwrap().len(), MIN_VOLUME);
        assert_eq!(std::fs::metadata(&files[2]).unwrap().len(), 1000);
        let inputs = expand_inputs(std::slice::from_ref(&base)).unwrap();
        assert_eq!(inputs, files);
        let mut back = Vec::new();
        ChainReader::new(inputs).read_to_end(&mut back).unwrap();
        assert_eq!(back, data);
    }
}
