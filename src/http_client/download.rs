//! A verified, resumable download of content whose digest and size are
//! known in advance (an OCI blob, a stack rootfs).
//!
//! The body is streamed into a file (constant memory: one chunk at a time
//! through a 1 MiB buffer) while it is hashed. A body that stops early is
//! resumed with `Range: bytes=N-` (RFC 9110 §14.2); a server that answers
//! 200 to it is read again from the start; a 206 must start at byte N
//! (`Content-Range`). After the last byte the file is fsynced and its
//! digest compared: a mismatch is an error, and the caller removes the file.

use std::future::Future;
use std::io::{Seek, SeekFrom, Write};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::{Context, Result, anyhow, bail};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::header::CONTENT_RANGE;
use hyper::{Response, StatusCode};

use super::{Counters, READ_TIMEOUT};
use crate::digest::{Digest, Hasher};

/// What to download and where to count it.
pub struct Download<'a> {
    /// The digest the content must hash to.
    pub expected: &'a Digest,
    /// Its size in bytes; more is an error, less is resumed.
    pub size: u64,
    /// The file written: whatever is at the path is replaced, never
    /// written through ([`crate::files::create_new`]).
    pub file: &'a Path,
    /// Advanced by each byte received (and moved back on a restart).
    pub progress: &'a indicatif::ProgressBar,
    /// `retries` counts body failures.
    pub counters: &'a Counters,
    /// Body bytes received, when the caller counts them.
    pub bytes: Option<&'a AtomicU64>,
    /// Resumes after a failed body before giving up.
    pub max_retries: u32,
}

impl Download<'_> {
    /// Runs the download: `fetch(None)` asks for the whole content,
    /// `fetch(Some(n))` for bytes `n-`. `fetch` returns the response (it
    /// does its own request retries and turns statuses it knows into
    /// errors); 200 and 206 are read, any other status is an error.
    /// Errors: a status, too many bytes, a `Content-Range` not starting
    /// where asked, a body that keeps failing, a digest mismatch
    /// ("content hashes to ..."), or I/O on the file.
    pub async fn run<F, Fut>(&self, mut fetch: F) -> Result<()>
    where
        F: FnMut(Option<u64>) -> Fut,
        Fut: Future<Output = Result<Response<Incoming>>>,
    {
        let path = self.file;
        let file = crate::files::create_new(path)
            .with_context(|| format!("creating {}", path.display()))?;
        let mut file = std::io::BufWriter::with_capacity(1 << 20, file);
        let mut hasher = Hasher::new(self.expected.algorithm());
        let mut have = 0u64;
        let mut failures = 0;
        loop {
            let resp = fetch((have > 0).then_some(have)).await?;
            match resp.status() {
                StatusCode::OK => {
                    if have > 0 {
                        // The server ignored Range: start over.
                        file.flush()?;
                        file.get_mut().set_len(0)?;
                        file.get_mut().seek(SeekFrom::Start(0))?;
                        hasher = Hasher::new(self.expected.algorithm());
                        self.progress.dec(have);
                        have = 0;
                    }
                }
                StatusCode::PARTIAL_CONTENT if have > 0 => {
                    let start = resp
                        .headers()
                        .get(CONTENT_RANGE)
                        .and_then(|v| v.to_str().ok())
                        .and_then(|v| v.strip_prefix("bytes "))
                        .and_then(|v| v.split('-').next())
                        .and_then(|v| v.parse::<u64>().ok());
                    if start != Some(have) {
                        bail!(
                            "asked for bytes {have}- and got Content-Range starting at {start:?}"
                        );
                    }
                }
                s => bail!("{s}"),
            }
            let mut body = resp.into_body();
            let why = loop {
                match tokio::time::timeout(READ_TIMEOUT, body.frame()).await {
                    Err(_) => break format!("stalled for {} s", READ_TIMEOUT.as_secs()),
                    Ok(None) => break String::new(),
                    Ok(Some(Err(e))) => break e.to_string(),
                    Ok(Some(Ok(frame))) => {
                        if let Ok(data) = frame.into_data() {
                            let n = data.len() as u64;
                            if have + n > self.size {
                                bail!("server sent more than the {} bytes expected", self.size);
                            }
                            hasher.update(&data);
                            file.write_all(&data)
                                .with_context(|| format!("writing {}", path.display()))?;
                            have += n;
                            self.progress.inc(n);
                            if let Some(b) = self.bytes {
                                b.fetch_add(n, Ordering::Relaxed);
                            }
                        }
                    }
                }
            };
            if have == self.size {
                break;
            }
            failures += 1;
            self.counters.retries.fetch_add(1, Ordering::Relaxed);
            if failures > self.max_retries {
                let why = if why.is_empty() {
                    "connection closed early".into()
                } else {
                    why
                };
                bail!(
                    "download stopped at byte {have} of {}: {why} (after {failures} attempts)",
                    self.size
                );
            }
            tokio::time::sleep(std::time::Duration::from_millis(250 << failures.min(5))).await;
        }
        let f = file
            .into_inner()
            .map_err(|e| anyhow!("writing {}: {}", path.display(), e.error()))?;
        f.sync_all()?;
        let got = hasher.finish();
        if got != *self.expected {
            bail!("content hashes to {got}, not {}", self.expected);
        }
        Ok(())
    }
}
