//! Bundle volumes: one tar written as `NAME` or split into `NAME.000`,
//! `NAME.001`, ... of a fixed maximum size, and read back as one stream.
//!
//! Owns: file naming, rotation, fsync of written volumes, and the chained
//! reader. Never looks inside the tar.

use std::fs::File;
use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

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
    current: Option<BufWriter<File>>,
    in_current: u64,
    total: u64,
}

impl VolumeWriter {
    /// Starts writing at `base` (or `base.000` with a volume size). Refuses to
    /// overwrite an existing file, and a volume size under [`MIN_VOLUME`].
    pub fn create(base: &Path, size: Option<u64>) -> Result<VolumeWriter> {
        if size.is_some_and(|s| s < MIN_VOLUME) {
            bail!("--volume-size must be at least 1M (1 MiB)");
        }
        let mut w = VolumeWriter {
            base: base.to_path_buf(),
            size,
            files: Vec::new(),
            current: None,
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
        }
        Ok(())
    }

    /// Flushes and fsyncs the last file. Returns the files written and the total bytes.
    pub fn finish(&mut self) -> Result<(Vec<PathBuf>, u64)> {
        self.close_current()?;
        Ok((self.files.clone(), self.total))
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
    }
    if out.is_empty() {
        bail!("no bundle given");
    }
    Ok(out)
}

/// Reads several files (or stdin for `-`) as one stream, opening each in turn.
pub struct ChainReader {
    pending: std::vec::IntoIter<PathBuf>,
    current: Option<Box<dyn Read + Send>>,
}

impl ChainReader {
    /// Reads `files` in order (see [`expand_inputs`]).
    pub fn new(files: Vec<PathBuf>) -> ChainReader {
        ChainReader {
            pending: files.into_iter(),
            current: None,
        }
    }
}

impl Read for ChainReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        loop {
            if let Some(r) = self.current.as_mut() {
                let n = r.read(buf)?;
                if n > 0 || buf.is_empty() {
                    return Ok(n);
                }
                self.current = None;
            }
            let Some(next) = self.pending.next() else {
                return Ok(0);
            };
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
