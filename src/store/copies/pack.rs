//! Copy packs: the second copies of one commit's metadata blobs, in one
//! object.
//!
//! Why one object per commit: on the filesystem every file a commit
//! creates costs an inode and a directory entry in the journal transaction
//! its fsync waits for; a copy per blob (six to ten per tag push) made a
//! tag PUT 1.3-1.6x slower, one pack with its write-back started costs
//! nothing measurable (docs/benchmarks.md, "Metadata copies"). On S3 it is
//! one PUT instead of one per blob.
//!
//! Format (`airlock.copies.v2`, written now), all text up to the data:
//!
//! ```text
//! airlock.copies.v2 <header length, 10 digits> <n>\n
//! <digest> <offset> <length>\n     (n lines)
//! <the n blobs' bytes, in the order of the lines>
//! ```
//!
//! Every entry locates itself (its offset is absolute), so one damaged
//! header field costs at most the entry of its line (issue 61 §3): a
//! reader takes the lines of the header the first line announces, and
//! when that line is damaged or the lines found are not the `n` it
//! announces, reads the whole pack and takes every line that is an entry
//! (`sha256:<hex> <offset> <length>`, its bytes inside the pack and after
//! the line). Each entry is checked against its digest when read, so a
//! damaged line never yields wrong bytes. The key is `copies/packs/<2
//! hex>/<hex>` with the pack's own sha256.
//!
//! The first format (`airlock.copies.v1`, entries `<digest> <length>`
//! located by summing the lengths before them) is still read.

use bytes::Bytes;

use crate::digest::Digest;
use crate::store::{Blobstore, ObjectMeta, Result, StoreError, matches};

/// Prefix of the packs.
pub const PACKS_PREFIX: &str = "copies/packs/";

/// The format's first word (written now).
const MAGIC: &str = "airlock.copies.v2";

/// The first format's first word (still read).
const MAGIC_V1: &str = "airlock.copies.v1";

/// How much of a pack a reader fetches first, hoping the header fits.
const HEADER_GUESS: u64 = 4096;

/// One blob in a pack: its digest and where its bytes are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The blob.
    pub digest: Digest,
    /// Offset of its first byte in the pack.
    pub offset: u64,
    /// Its length in bytes.
    pub len: u64,
}

/// The key of the pack whose content has sha256 `digest`:
/// `copies/packs/<2 hex>/<hex>`.
pub fn pack_key(digest: &Digest) -> String {
    let hex = digest.hex();
    format!("{PACKS_PREFIX}{}/{hex}", &hex[..2])
}

/// The pack of `blobs` (a digest repeated is stored once), and its
/// digest. Empty input gives an empty pack (`n` = 0).
pub fn encode(blobs: &[(Digest, Bytes)]) -> (Digest, Vec<u8>) {
    let mut seen = std::collections::HashSet::new();
    let kept: Vec<&(Digest, Bytes)> = blobs.iter().filter(|(d, _)| seen.insert(d)).collect();
    // Offsets depend on the header's length, which depends on the
    // offsets' digits: widen until it holds still.
    let first = |len: usize| format!("{MAGIC} {len:010} {}\n", kept.len());
    let lines = |header_len: usize| -> String {
        let mut at = header_len;
        kept.iter()
            .map(|(d, b)| {
                let line = format!("{d} {at} {}\n", b.len());
                at += b.len();
                line
            })
            .collect()
    };
    let mut header_len = first(0).len() + lines(0).len();
    loop {
        let len = first(0).len() + lines(header_len).len();
        if len == header_len {
            break;
        }
        header_len = len;
    }
    let data: usize = kept.iter().map(|(_, b)| b.len()).sum();
    let mut out = Vec::with_capacity(header_len + data);
    out.extend_from_slice(first(header_len).as_bytes());
    out.extend_from_slice(lines(header_len).as_bytes());
    debug_assert_eq!(out.len(), header_len);
    for (_, b) in kept {
        out.extend_from_slice(b);
    }
    (Digest::sha256_of(&out), out)
}

/// What a pack's first line announces: its format (`true`: the first,
/// v1), header length and entry count; `None` when the bytes do not begin
/// with a pack's first line.
fn first_line(bytes: &[u8]) -> Option<(bool, u64, usize)> {
    let end = bytes.iter().position(|&b| b == b'\n')?;
    let line = std::str::from_utf8(&bytes[..end]).ok()?;
    let mut words = line.split(' ');
    let v1 = match words.next()? {
        MAGIC => false,
        MAGIC_V1 => true,
        _ => return None,
    };
    let header_len = words.next()?.parse().ok()?;
    let n = words.next()?.parse().ok()?;
    words.next().is_none().then_some((v1, header_len, n))
}

/// The v2 entry a header line states, when it is one whose bytes lie in
/// a pack of `size` bytes after the line (which ends at `line_end`).
fn entry_line(line: &[u8], line_end: u64, size: u64) -> Option<Entry> {
    let text = std::str::from_utf8(line).ok()?;
    let mut words = text.split(' ');
    let digest: Digest = words.next()?.parse().ok()?;
    let offset: u64 = words.next()?.parse().ok()?;
    let len: u64 = words.next()?.parse().ok()?;
    (words.next().is_none() && offset >= line_end && offset.checked_add(len)? <= size).then_some(
        Entry {
            digest,
            offset,
            len,
        },
    )
}

/// The v2 entries stated by the lines of `bytes` (a pack of `size` bytes,
/// or its first bytes); lines that are not entries are skipped. A line
/// that is not one entry may be two whose newline was damaged: the entry
/// its leading digits end, and one starting at each digest inside it, are
/// taken.
fn scan_entries(bytes: &[u8], size: u64) -> Vec<Entry> {
    let mut out = Vec::new();
    let mut at = 0u64;
    for line in bytes.split(|&b| b == b'\n') {
        let end = at + line.len() as u64 + 1;
        match entry_line(line, end, size) {
            Some(e) => out.push(e),
            None => out.extend(merged_entries(line, end, size)),
        }
        at = end;
    }
    out
}

/// The entries inside a line that is not one (see [`scan_entries`]).
fn merged_entries(line: &[u8], end: u64, size: u64) -> Vec<Entry> {
    let mut out = Vec::new();
    // The first: its third field's leading digits.
    let spaces: Vec<usize> = line
        .iter()
        .enumerate()
        .filter(|(_, b)| **b == b' ')
        .map(|(i, _)| i)
        .take(2)
        .collect();
    if let [_, second] = spaces[..] {
        let digits = line[second + 1..]
            .iter()
            .take_while(|b| b.is_ascii_digit())
            .count();
        if let Some(e) = entry_line(&line[..second + 1 + digits], end, size) {
            out.push(e);
        }
    }
    // The others: from each digest's algorithm onwards.
    for (i, _) in line.iter().enumerate().skip(1) {
        if (line[i..].starts_with(b"sha256:") || line[i..].starts_with(b"sha512:"))
            && let Some(e) = entry_line(&line[i..], end, size)
        {
            out.push(e);
        }
    }
    out
}

/// The entries of a pack whose first bytes (at least its header) are
/// `bytes`, of `size` bytes in all (a v2 pack's lines are checked against
/// it). Errors: a one-line cause when the header is not a pack's, or not
/// whole (for v2: its first line, or fewer lines than it announces; then
/// [`entries`] scans the whole pack).
pub fn decode(bytes: &[u8], size: u64) -> std::result::Result<Vec<Entry>, String> {
    let bad = |what: &str| format!("not a copy pack: {what}");
    let (v1, header_len, n) = first_line(bytes).ok_or_else(|| bad("first line"))?;
    let header = bytes
        .get(..usize::try_from(header_len).map_err(|_| bad("header length"))?)
        .ok_or_else(|| bad("header cut short"))?;
    if !v1 {
        let entries = scan_entries(header, size);
        if entries.len() != n {
            return Err(bad("entry count"));
        }
        return Ok(entries);
    }
    let text = std::str::from_utf8(header).map_err(|_| bad("header is not text"))?;
    let mut lines = text.lines();
    lines.next();
    let mut entries = Vec::with_capacity(n.min(1 << 16));
    let mut offset = header_len;
    for line in lines {
        let (d, len) = line.split_once(' ').ok_or_else(|| bad("entry line"))?;
        let digest: Digest = d.parse().map_err(|_| bad("entry digest"))?;
        let len: u64 = len.parse().map_err(|_| bad("entry length"))?;
        entries.push(Entry {
            digest,
            offset,
            len,
        });
        offset = offset.checked_add(len).ok_or_else(|| bad("entry length"))?;
    }
    if entries.len() != n {
        return Err(bad("entry count"));
    }
    Ok(entries)
}

/// Stores the pack of `blobs` ([`Blobstore::put_copy_pack`]); nothing for
/// no blobs. Errors: the store failed.
pub async fn write(store: &dyn Blobstore, blobs: &[(Digest, Bytes)]) -> Result<()> {
    if blobs.is_empty() {
        return Ok(());
    }
    let (digest, bytes) = encode(blobs);
    store.put_copy_pack(&digest, Bytes::from(bytes)).await
}

/// The entries of the pack `m`, read from its header; when the header is
/// damaged (its first line, or fewer lines than it announces), from every
/// line of the whole pack that states an entry (see the module docs: one
/// damaged field costs the entry of its line). `Ok(None)`: gone or cut
/// shorter since `m` was listed. Errors: `Corrupt` naming the pack when no
/// line of it states an entry (a v1 pack with a damaged header, or no
/// pack); the store failed.
pub async fn entries(store: &dyn Blobstore, m: &ObjectMeta) -> Result<Option<Vec<Entry>>> {
    let corrupt = |cause: String| StoreError::Corrupt(format!("{}: {cause}", m.key));
    let read = |end: u64| async move {
        match crate::store::read_range(store, &m.key, 0, end).await {
            Ok(b) => Ok(Some(b)),
            // Gone, or shorter than when it was listed: changed meanwhile.
            Err(StoreError::NotFound(_) | StoreError::Range { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    };
    let Some(mut head) = read(m.size.min(HEADER_GUESS)).await? else {
        return Ok(None);
    };
    let announced = first_line(&head).map(|(_, len, _)| len);
    if let Some(want) = announced.filter(|w| *w > head.len() as u64 && *w <= m.size) {
        let Some(all) = read(want).await? else {
            return Ok(None);
        };
        head = all;
    }
    let cause = match decode(&head, m.size) {
        Ok(entries) => return Ok(Some(entries)),
        Err(cause) => cause,
    };
    if first_line(&head).is_some_and(|(v1, _, _)| v1) {
        return Err(corrupt(cause));
    }
    // A damaged v2 header: every line of the pack that states an entry.
    let Some(all) = read(m.size).await? else {
        return Ok(None);
    };
    let found = scan_entries(&all, m.size);
    if found.is_empty() {
        return Err(corrupt(cause));
    }
    tracing::warn!(
        pack = m.key,
        cause,
        entries = found.len(),
        "copy pack with a damaged header: its entries found line by line"
    );
    Ok(Some(found))
}

/// The bytes of `entry` in the pack `key`, when they match its digest;
/// `None` when they do not, the pack is shorter, or it is gone. Errors:
/// the store failed.
pub async fn read_entry(
    store: &dyn Blobstore,
    key: &str,
    entry: &Entry,
) -> Result<Option<Vec<u8>>> {
    let end = entry.offset.saturating_add(entry.len);
    match crate::store::read_range(store, key, entry.offset, end).await {
        Ok(b) if b.len() as u64 == entry.len && matches(&entry.digest, &b).is_ok() => Ok(Some(b)),
        // Past the end: a pack cut short (a power cut before its write-back).
        Ok(_) | Err(StoreError::NotFound(_) | StoreError::Range { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Every pack, newest first.
pub async fn list(store: &dyn Blobstore) -> Result<Vec<ObjectMeta>> {
    let mut packs = store.list_meta(PACKS_PREFIX).await?;
    packs.sort_by(|a, b| b.modified.cmp(&a.modified).then(a.key.cmp(&b.key)));
    Ok(packs)
}

/// A good copy of `digest` from any pack, searching the newest first (a
/// blob a commit wrote again is in its newer pack). For the rare read of a
/// damaged blob: it reads every pack's header in the worst case, and keeps
/// no index in memory. `None`: no pack holds a good copy. Errors: the
/// store failed (a pack with a damaged header is skipped).
pub async fn find(store: &dyn Blobstore, digest: &Digest) -> Result<Option<Vec<u8>>> {
    for m in list(store).await? {
        let entries = match entries(store, &m).await {
            Ok(Some(e)) => e,
            Ok(None) | Err(StoreError::Corrupt(_)) => continue,
            Err(e) => return Err(e),
        };
        for e in entries.iter().filter(|e| e.digest == *digest) {
            if let Some(bytes) = read_entry(store, &m.key, e).await? {
                return Ok(Some(bytes));
            }
        }
    }
    Ok(None)
}

/// The blobs of the pack `key` whose bytes do not match their digests, read
/// whole (`scrub`). `Ok(None)`: gone meanwhile. Errors: `Corrupt` naming
/// the pack when its header is damaged; the store failed.
pub async fn damaged_entries(store: &dyn Blobstore, key: &str) -> Result<Option<Vec<Digest>>> {
    let bytes = match crate::store::read_all(store, key).await {
        Ok(b) => b,
        Err(StoreError::NotFound(_)) => return Ok(None),
        Err(e) => return Err(e),
    };
    let size = bytes.len() as u64;
    let entries = match decode(&bytes, size) {
        Ok(e) => e,
        // A damaged v2 header: its entries line by line (the header is
        // still reported: scrub and fsck write the copies again).
        Err(cause) => {
            let found = scan_entries(&bytes, size);
            if found.is_empty() || first_line(&bytes).is_some_and(|(v1, _, _)| v1) {
                return Err(StoreError::Corrupt(format!("{key}: {cause}")));
            }
            found
        }
    };
    Ok(Some(
        entries
            .into_iter()
            .filter(|e| {
                let span = usize::try_from(e.offset)
                    .ok()
                    .zip(usize::try_from(e.offset.saturating_add(e.len)).ok())
                    .and_then(|(a, b)| bytes.get(a..b));
                span.is_none_or(|b| matches(&e.digest, b).is_err())
            })
            .map(|e| e.digest)
            .collect(),
    ))
}

/// What [`sweep`] removed.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Swept {
    /// Packs removed (dry run: that would be).
    pub packs: u64,
    /// Live copies moved from partly dead packs into one new pack.
    pub carried: u64,
    /// Bytes of the packs removed.
    pub bytes: u64,
}

/// `gc` of the packs last written before `cutoff`: a pack holding any blob
/// `live` does not hold is removed, after its live blobs are carried into
/// one new pack. So after a gc the packs hold no copy of a blob it removed
/// (a read of a missing blob would otherwise bring it back from its copy:
/// a generation gc dropped would reappear in `history`), and at most the
/// live metadata plus what was written within the grace period; each gc
/// rewrites the live copies that shared a pack with dead ones. A pack whose header
/// is damaged is removed (its copies cannot be found; `fsck` writes the
/// current generation's again). With `dry_run` nothing is written or
/// removed, and the counts say what would be. Errors: the store failed.
pub async fn sweep(
    store: &dyn Blobstore,
    live: &(dyn Fn(&Digest) -> bool + Sync),
    cutoff: std::time::SystemTime,
    dry_run: bool,
) -> Result<Swept> {
    let mut carry: Vec<(Digest, Bytes)> = Vec::new();
    let mut doomed = Vec::new();
    for m in list(store)
        .await?
        .into_iter()
        .filter(|m| m.modified < cutoff)
    {
        let entries = match entries(store, &m).await {
            Ok(Some(e)) => e,
            Ok(None) => continue,
            Err(StoreError::Corrupt(cause)) => {
                tracing::warn!(cause, "gc: copy pack with a damaged header removed");
                doomed.push(m);
                continue;
            }
            Err(e) => return Err(e),
        };
        let kept: Vec<&Entry> = entries.iter().filter(|e| live(&e.digest)).collect();
        if kept.len() == entries.len() {
            continue;
        }
        for e in kept {
            if let Some(b) = read_entry(store, &m.key, e).await? {
                carry.push((e.digest.clone(), Bytes::from(b)));
            }
        }
        doomed.push(m);
    }
    let swept = Swept {
        packs: doomed.len() as u64,
        carried: carry.len() as u64,
        bytes: doomed.iter().map(|m| m.size).sum(),
    };
    if !dry_run {
        // The carried copies are stored before their old packs go.
        write(store, &carry).await?;
        for m in doomed {
            store.delete(&m.key).await?;
        }
    }
    Ok(swept)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blob(s: &str) -> (Digest, Bytes) {
        (Digest::sha256_of(s.as_bytes()), Bytes::from(s.to_string()))
    }

    #[test]
    fn a_pack_round_trips_and_its_header_gives_every_entry() {
        let blobs = vec![blob("one"), blob("two two"), blob("one"), blob("")];
        let (digest, bytes) = encode(&blobs);
        assert_eq!(digest, Digest::sha256_of(&bytes));
        let entries = decode(&bytes, bytes.len() as u64).unwrap();
        assert_eq!(entries.len(), 3, "a repeated digest is stored once");
        for (e, want) in entries.iter().zip(["one", "two two", ""]) {
            assert_eq!(e.digest, Digest::sha256_of(want.as_bytes()));
            let at = usize::try_from(e.offset).unwrap();
            assert_eq!(&bytes[at..at + want.len()], want.as_bytes());
        }
        let end = entries.last().map(|e| e.offset + e.len).unwrap();
        assert_eq!(end, bytes.len() as u64);
        let key = pack_key(&digest);
        crate::store::check_key(&key).unwrap();
        assert!(key.starts_with("copies/packs/"));
        // A damaged first line is no whole header, a short one neither.
        let size = bytes.len() as u64;
        let mut bad = bytes.clone();
        bad[0] ^= 1;
        assert!(decode(&bad, size).is_err());
        assert!(decode(&bytes[..20], size).is_err());
        let empty = encode(&[]).1;
        assert_eq!(decode(&empty, empty.len() as u64).unwrap(), vec![]);
    }

    /// Issue 61 §3: one flipped byte anywhere in a pack's header costs at
    /// most the entry of its line; every other copy is still found.
    #[tokio::test]
    async fn one_damaged_header_byte_costs_one_entry_at_most() {
        let blobs: Vec<(Digest, Bytes)> = (0..12)
            .map(|i| {
                blob(&format!(
                    "{{\"page\":{i},\"x\":\"{}\"}}",
                    "y".repeat(i * 37)
                ))
            })
            .collect();
        let (_, bytes) = encode(&blobs);
        let (_, header_len, _) = first_line(&bytes).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let store = crate::store::fs::FsStore::open(dir.path()).unwrap();
        let key = "copies/packs/00/damaged";
        let path = dir.path().join(key);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        for at in 0..header_len as usize {
            for flip in [0x01u8, 0x10, 0x40] {
                let mut damaged = bytes.clone();
                damaged[at] ^= flip;
                std::fs::write(&path, &damaged).unwrap();
                let m = ObjectMeta {
                    key: key.into(),
                    size: damaged.len() as u64,
                    modified: std::time::SystemTime::now(),
                };
                let entries = entries(&store, &m).await.unwrap().unwrap();
                let mut readable = 0;
                for (d, b) in &blobs {
                    for e in entries.iter().filter(|e| e.digest == *d) {
                        if read_entry(&store, key, e).await.unwrap().as_deref() == Some(&b[..]) {
                            readable += 1;
                            break;
                        }
                    }
                }
                assert!(
                    readable >= blobs.len() - 1,
                    "byte {at} ^ {flip:#x}: {readable} of {} copies readable",
                    blobs.len()
                );
            }
        }
    }

    /// A pack of the first format (`airlock.copies.v1`) is still read.
    #[test]
    fn a_first_format_pack_is_read() {
        let (a, b) = (blob("first"), blob("second!"));
        let lines = format!("{} {}\n{} {}\n", a.0, a.1.len(), b.0, b.1.len());
        let first = |len: usize| format!("{MAGIC_V1} {len:010} 2\n");
        let header_len = first(0).len() + lines.len();
        let mut bytes = first(header_len).into_bytes();
        bytes.extend_from_slice(lines.as_bytes());
        bytes.extend_from_slice(&a.1);
        bytes.extend_from_slice(&b.1);
        let entries = decode(&bytes, bytes.len() as u64).unwrap();
        assert_eq!(entries.len(), 2);
        assert_eq!(entries[1].offset as usize, header_len + a.1.len());
        assert_eq!(entries[1].digest, b.0);
    }

    /// A blob is found in a pack, and in an older pack when the newer
    /// pack's entry is damaged; a pack with a damaged header is skipped.
    #[tokio::test]
    async fn find_skips_damaged_entries_and_headers() {
        let dir = tempfile::tempdir().unwrap();
        let store = crate::store::fs::FsStore::open(dir.path()).unwrap();
        let (d, b) = blob("the page");
        write(&store, &[blob("other"), (d.clone(), b.clone())])
            .await
            .unwrap();
        assert_eq!(find(&store, &d).await.unwrap().unwrap(), b);
        // Damage that pack's entry: none left.
        let packs = list(&store).await.unwrap();
        let path = dir.path().join(&packs[0].key);
        let mut bytes = std::fs::read(&path).unwrap();
        let n = bytes.len();
        bytes[n - 2] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        assert_eq!(find(&store, &d).await.unwrap(), None);
        // A second pack holding it (another commit wrote it again).
        write(&store, &[(d.clone(), b.clone())]).await.unwrap();
        assert_eq!(find(&store, &d).await.unwrap().unwrap(), b);
        bytes[0] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        assert_eq!(find(&store, &d).await.unwrap().unwrap(), b);
        // Its entries are still found, line by line.
        let found = entries(&store, &packs[0]).await.unwrap().unwrap();
        assert_eq!(found.len(), 2);
        // A pack cut short (or empty) after a power cut: skipped too, also
        // when it shrank after it was listed.
        bytes[0] ^= 1;
        for len in [bytes.len() - 3, 0] {
            std::fs::write(&path, &bytes[..len]).unwrap();
            assert_eq!(find(&store, &d).await.unwrap().unwrap(), b, "{len}");
            assert!(entries(&store, &packs[0]).await.unwrap().is_none());
        }
        let fresh = list(&store).await.unwrap();
        let empty = fresh.iter().find(|m| m.key == packs[0].key).unwrap();
        assert!(matches!(
            entries(&store, empty).await,
            Err(StoreError::Corrupt(_))
        ));
    }

    /// `ensure` finds copies in packs and writes only the missing ones.
    #[tokio::test]
    async fn ensure_finds_packed_copies() {
        let dir = tempfile::tempdir().unwrap();
        let store = crate::store::fs::FsStore::open(dir.path()).unwrap();
        let (a, b, c) = (blob(&"a".repeat(1117)), blob("bb"), blob("ccc"));
        write(&store, &[a.clone(), b.clone()]).await.unwrap();
        let states = super::super::ensure(&store, &[b.clone(), a.clone(), c.clone(), b.clone()])
            .await
            .unwrap();
        use super::super::CopyState::*;
        assert_eq!(states, vec![Good, Good, Written, Good], "a digest twice");
        assert_eq!(find(&store, &c.0).await.unwrap().unwrap(), c.1);
    }

    /// gc keeps a pack whose blobs are all live, removes a dead one, and
    /// carries the live copy of a partly dead one into a new pack.
    #[tokio::test]
    async fn sweep_removes_dead_packs_and_carries_partly_dead_ones() {
        let dir = tempfile::tempdir().unwrap();
        let store = crate::store::fs::FsStore::open(dir.path()).unwrap();
        let big = |s: &str| blob(&s.repeat(400));
        let (live_a, live_b, dead) = (big("a"), big("b"), big("d"));
        write(&store, std::slice::from_ref(&live_a)).await.unwrap(); // all live
        write(&store, std::slice::from_ref(&dead)).await.unwrap(); // all dead
        write(&store, &[live_b.clone(), dead.clone(), big("e")])
            .await
            .unwrap(); // a third live
        let live = |d: &Digest| *d == live_a.0 || *d == live_b.0;
        let later = std::time::SystemTime::now() + std::time::Duration::from_secs(60);
        let dry = sweep(&store, &live, later, true).await.unwrap();
        assert_eq!((dry.packs, dry.carried), (2, 1));
        assert_eq!(
            list(&store).await.unwrap().len(),
            3,
            "a dry run removes nothing"
        );
        // Nothing is older than a cutoff in the past.
        let past = std::time::SystemTime::UNIX_EPOCH;
        assert_eq!(
            sweep(&store, &live, past, false).await.unwrap(),
            Swept::default()
        );
        assert_eq!(sweep(&store, &live, later, false).await.unwrap(), dry);
        assert_eq!(list(&store).await.unwrap().len(), 2);
        for (d, b) in [live_a, live_b] {
            assert_eq!(find(&store, &d).await.unwrap().unwrap(), b);
        }
        assert_eq!(find(&store, &dead.0).await.unwrap(), None);
    }
}
