//! Offline vulnerability feeds: `[[feed]]` in the mirror config, carried in
//! a bundle as one blob, verified and normalized at import, kept per name
//! with its date in the `vulnfeeds` document.
//!
//! Formats: `osv` (OSV JSON records of the Debian, Ubuntu and Alpine
//! ecosystems: a directory of `*.json` files, one `.json` record, or JSON
//! lines; carried as JSON lines, one compact record each) and
//! `debian-tracker` (the Debian security tracker's JSON, carried byte for
//! byte).
//!
//! Rooms inside: [`advisory`] (the normalized form and its matching rule),
//! [`osv`] and [`tracker`] (the two formats), [`severity`], [`table`] (the
//! state document), [`pack`] (connected side: source → carried blob),
//! [`import`] (site side: carried blob → normalized blob + document).
//! Never reads images; matching is [`super::scan`].

pub mod advisory;
pub mod import;
pub mod osv;
pub mod pack;
pub mod severity;
pub mod table;
pub mod tracker;

use std::io::{BufRead, Read};

use anyhow::{Result, bail};

pub use advisory::Advisory;

/// Largest OSV record (one JSON line) accepted, in bytes.
pub const MAX_RECORD: usize = 16 << 20;

/// A feed's format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Format {
    /// OSV JSON records.
    #[default]
    Osv,
    /// The Debian security tracker's JSON.
    DebianTracker,
}

impl Format {
    /// `osv` or `debian-tracker`.
    pub fn as_str(self) -> &'static str {
        match self {
            Format::Osv => "osv",
            Format::DebianTracker => "debian-tracker",
        }
    }
}

/// One `[[feed]]` of the mirror config.
///
/// ```toml
/// [[feed]]
/// name = "debian-osv"
/// source = "./feeds/debian"      # a directory of OSV *.json, a .json record or a .jsonl file
/// # format = "osv"               # or "debian-tracker"
/// # date = "2026-11-28"          # default: newest `modified` (osv), the file's mtime (tracker)
/// ```
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FeedSource {
    /// The feed's name: an import replaces the feed of the same name.
    pub name: String,
    /// A directory or file (relative to the config file's directory).
    pub source: String,
    /// Its format (default `osv`).
    #[serde(default)]
    pub format: Format,
    /// The data's date, `YYYY-MM-DD`, when the source does not tell it.
    #[serde(default)]
    pub date: Option<String>,
}

/// A feed in the signed bundle document; its blob is listed in `blobs`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FeedEntry {
    /// The feed's name.
    pub name: String,
    /// Its format.
    pub format: Format,
    /// The data's date, `YYYY-MM-DD`.
    pub date: String,
    /// The carried blob.
    pub digest: crate::digest::Digest,
    /// Its size in bytes.
    pub size: u64,
    /// OSV records (osv) or source packages (debian-tracker) it holds.
    pub records: u64,
}

/// What normalizing a feed found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Normalized {
    /// Records (osv) or source packages (tracker) read.
    pub records: u64,
    /// Advisories written.
    pub advisories: u64,
    /// Newest `modified` date of the records (osv only).
    pub newest: Option<String>,
}

/// Reads one line of at most [`MAX_RECORD`] bytes into `buf` (without the
/// newline); `false` at the end. Errors: a longer line, I/O.
pub fn read_line(r: &mut impl BufRead, buf: &mut Vec<u8>) -> Result<bool> {
    buf.clear();
    let n = r.take(MAX_RECORD as u64 + 1).read_until(b'\n', buf)?;
    if n == 0 {
        return Ok(false);
    }
    if buf.last() == Some(&b'\n') {
        buf.pop();
    } else if buf.len() > MAX_RECORD {
        bail!("a record is over {MAX_RECORD} bytes");
    }
    Ok(true)
}

/// Reads a carried feed blob of `format` and calls `emit` for each
/// advisory, in bounded memory (one record, or one tracker package, at a
/// time). Errors: the first malformed record, with its line number.
pub fn normalize(
    format: Format,
    reader: impl Read,
    emit: &mut dyn FnMut(Advisory) -> Result<()>,
) -> Result<Normalized> {
    let mut out = Normalized::default();
    match format {
        Format::Osv => {
            let mut r = std::io::BufReader::with_capacity(1 << 20, reader);
            let mut line = Vec::new();
            let mut n = 0u64;
            while read_line(&mut r, &mut line)? {
                n += 1;
                if line.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                let mut count = 0;
                let date = osv::read_record(&line, &mut |a| {
                    count += 1;
                    emit(a)
                })
                .map_err(|e| anyhow::anyhow!("OSV feed line {n}: {e:#}"))?;
                out.records += 1;
                out.advisories += count;
                if out.newest.as_ref().is_none_or(|d| &date > d) {
                    out.newest = Some(date);
                }
            }
        }
        Format::DebianTracker => {
            let mut count = 0;
            out.records = tracker::read(reader, &mut |a| {
                count += 1;
                emit(a)
            })?;
            out.advisories = count;
        }
    }
    Ok(out)
}
