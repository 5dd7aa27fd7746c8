//! `airlock bundle cosign`: one more signature on a bundle's signed
//! document, so two release engineers on two machines can each sign the
//! same bundle for a trust document's threshold ([`super::trust`]).
//!
//! Owns: rewriting a bundle with its first entry (the signed document,
//! [`SIGNED_DOC`]) replaced by the same text carrying one more signature;
//! every later byte is copied as it is (the blobs and layout files the
//! document lists do not change, so their digests still hold). A bundle
//! split into volumes is signed by every key at `bundle create` instead.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;

use anyhow::{Context, Result, anyhow, bail};

use super::format::{BundleDoc, MAX_SIGNED_DOC, SIGNED_DOC};
use super::sign::{SigningKey, add_signature, unverified_text};

/// Tar block size (POSIX ustar), bytes.
const BLOCK: u64 = 512;

/// Writes `output` (created new, fsynced): the bundle `input` with a
/// signature by `key` added to its signed document. The signatures there
/// are kept and not checked (`bundle verify` or the site checks them).
/// Returns the bundle's id.
///
/// Errors: `input` is not a bundle (its first entry is not
/// [`SIGNED_DOC`], or not a bundle document), `output` exists, I/O.
/// On an error no `output` is left behind.
pub fn cosign(
    input: &Path,
    output: &Path,
    key: &SigningKey,
    progress: &indicatif::ProgressBar,
) -> Result<String> {
    let mut file = File::open(input).with_context(|| input.display().to_string())?;
    let (armored, rest_at) = first_entry(&mut file)
        .with_context(|| format!("{}: not a whole bundle", input.display()))?;
    let doc: BundleDoc = serde_json::from_str(&unverified_text(&armored)?).map_err(|e| {
        anyhow!(
            "{}: the signed document is not a bundle document: {e}",
            input.display()
        )
    })?;
    let signed = add_signature(&armored, key)?;
    let result = write(&mut file, rest_at, &signed, output, progress);
    if result.is_err() {
        let _ = std::fs::remove_file(output);
    }
    result.map(|()| doc.id)
}

/// The signed document's text and the offset where the next entry starts.
fn first_entry(file: &mut File) -> Result<(String, u64)> {
    let mut archive = tar::Archive::new(&mut *file);
    let mut entries = archive.entries()?.raw(true);
    let mut first = entries.next().ok_or_else(|| anyhow!("empty tar"))??;
    let path = first.path_bytes().into_owned();
    if path != SIGNED_DOC.as_bytes() || first.raw_header_position() != 0 {
        bail!("its first entry is not {SIGNED_DOC}");
    }
    let size = first.size();
    if size > MAX_SIGNED_DOC {
        bail!("{SIGNED_DOC} is larger than {MAX_SIGNED_DOC} bytes");
    }
    let rest_at = (first.raw_file_position() + size).div_ceil(BLOCK) * BLOCK;
    let mut text = String::new();
    first
        .read_to_string(&mut text)
        .map_err(|_| anyhow!("{SIGNED_DOC} is not UTF-8"))?;
    Ok((text, rest_at))
}

/// The new first entry, then `input` from `rest_at` on, into `output`.
fn write(
    input: &mut File,
    rest_at: u64,
    signed: &str,
    output: &Path,
    progress: &indicatif::ProgressBar,
) -> Result<()> {
    let mut out = File::create_new(output).with_context(|| output.display().to_string())?;
    let mut header = super::create::tar_header(signed.len() as u64);
    header.set_path(SIGNED_DOC)?;
    header.set_cksum();
    out.write_all(header.as_bytes())?;
    out.write_all(signed.as_bytes())?;
    let pad = (signed.len() as u64).div_ceil(BLOCK) * BLOCK - signed.len() as u64;
    out.write_all(&vec![0u8; pad as usize])?;
    let total = input.metadata()?.len();
    progress.set_length(total.saturating_sub(rest_at));
    input.seek(SeekFrom::Start(rest_at))?;
    std::io::copy(&mut progress.wrap_read(input), &mut out)?;
    out.sync_all()?;
    Ok(())
}
