//! Connected side: a `[[feed]]` source made into the one blob a bundle
//! carries, checked record by record with the same reader import uses (so
//! a feed that would be refused at the site is refused here first).

use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

use super::{FeedEntry, FeedSource, Format, osv, read_line};
use crate::digest::{Algorithm, Hasher};

/// A packed feed: its bundle entry and the file holding the blob.
#[derive(Debug)]
pub struct Packed {
    /// For the signed document.
    pub entry: FeedEntry,
    /// The blob's file (in `scratch`, or the source file itself).
    pub path: PathBuf,
}

/// A `Write` that hashes and counts what it writes.
struct Hashing<W> {
    inner: W,
    hasher: Hasher,
    size: u64,
}

impl<W: Write> Write for Hashing<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hasher.update(&buf[..n]);
        self.size += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// Every `*.json` file below `dir`, sorted by path.
fn json_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).with_context(|| format!("reading {}", d.display()))? {
            let e = e?;
            let t = e.file_type()?;
            if t.is_dir() {
                stack.push(e.path());
            } else if t.is_file() && e.path().extension().is_some_and(|x| x == "json") {
                out.push(e.path());
            }
        }
    }
    out.sort();
    Ok(out)
}

fn check_date(d: &str) -> Result<String> {
    osv::date_of(&format!("{d}T00:00:00Z")).with_context(|| format!("date {d:?} is not YYYY-MM-DD"))
}

/// Writes one record (checked) as a compact JSON line; returns its date.
fn put_record(out: &mut impl Write, json: &[u8], what: &dyn Fn() -> String) -> Result<String> {
    let date = osv::read_record(json, &mut |_| Ok(())).with_context(what)?;
    let v: serde_json::Value = serde_json::from_slice(json).with_context(what)?;
    serde_json::to_writer(&mut *out, &v)?;
    out.write_all(b"\n")?;
    Ok(date)
}

/// Packs `src` (paths relative to `base`) into a blob file under `scratch`
/// (OSV) or points at the source file (tracker), checking every record.
/// Errors: a missing source, a malformed record (named by file or line),
/// a bad `date`.
pub fn pack(src: &FeedSource, base: &Path, scratch: &Path) -> Result<Packed> {
    let path = base.join(&src.source);
    let meta = std::fs::metadata(&path)
        .with_context(|| format!("feed {}: {}", src.name, path.display()))?;
    let configured = src.date.as_deref().map(check_date).transpose()?;
    match src.format {
        Format::Osv => {
            std::fs::create_dir_all(scratch)?;
            let blob = scratch.join(format!("feed-{}.jsonl", uuid::Uuid::new_v4()));
            let mut out = Hashing {
                inner: BufWriter::with_capacity(1 << 20, File::create(&blob)?),
                hasher: Hasher::new(Algorithm::Sha256),
                size: 0,
            };
            let mut newest: Option<String> = None;
            let mut records = 0u64;
            let mut note = |d: String| {
                records += 1;
                if newest.as_ref().is_none_or(|n| &d > n) {
                    newest = Some(d);
                }
            };
            let name = &src.name;
            if meta.is_dir() {
                for f in json_files(&path)? {
                    let mut bytes = Vec::new();
                    File::open(&f)?
                        .take(super::MAX_RECORD as u64 + 1)
                        .read_to_end(&mut bytes)?;
                    if bytes.len() > super::MAX_RECORD {
                        bail!(
                            "feed {name}: {} is over {} bytes",
                            f.display(),
                            super::MAX_RECORD
                        );
                    }
                    note(put_record(&mut out, &bytes, &|| {
                        format!("feed {name}: {}", f.display())
                    })?);
                }
            } else if path.extension().is_some_and(|x| x == "jsonl") {
                let mut r = BufReader::with_capacity(1 << 20, File::open(&path)?);
                let (mut line, mut n) = (Vec::new(), 0u64);
                while read_line(&mut r, &mut line)? {
                    n += 1;
                    if !line.iter().all(u8::is_ascii_whitespace) {
                        note(put_record(&mut out, &line, &|| {
                            format!("feed {name}: {} line {n}", path.display())
                        })?);
                    }
                }
            } else {
                if meta.len() > super::MAX_RECORD as u64 {
                    bail!(
                        "feed {name}: {} is {} bytes, over the {} bytes of one record (import refuses it)",
                        path.display(),
                        meta.len(),
                        super::MAX_RECORD
                    );
                }
                let bytes = std::fs::read(&path)?;
                note(put_record(&mut out, &bytes, &|| {
                    format!("feed {name}: {}", path.display())
                })?);
            }
            out.flush()?;
            let date = configured.or(newest).ok_or_else(|| {
                anyhow::anyhow!("feed {name}: no OSV records in {}", path.display())
            })?;
            Ok(Packed {
                entry: FeedEntry {
                    name: name.clone(),
                    format: Format::Osv,
                    date,
                    digest: out.hasher.finish(),
                    size: out.size,
                    records,
                },
                path: blob,
            })
        }
        Format::DebianTracker => {
            let records = super::tracker::read(File::open(&path)?, &mut |_| Ok(()))
                .with_context(|| format!("feed {}: {}", src.name, path.display()))?;
            let mut sink = Hashing {
                inner: std::io::sink(),
                hasher: Hasher::new(Algorithm::Sha256),
                size: 0,
            };
            std::io::copy(&mut File::open(&path)?, &mut sink)?;
            let (digest, size) = (sink.hasher.finish(), sink.size);
            let date = match configured {
                Some(d) => d,
                None => {
                    let m: time::OffsetDateTime = meta.modified()?.into();
                    m.date().to_string()
                }
            };
            Ok(Packed {
                entry: FeedEntry {
                    name: src.name.clone(),
                    format: Format::DebianTracker,
                    date,
                    digest,
                    size,
                    records,
                },
                path,
            })
        }
    }
}
