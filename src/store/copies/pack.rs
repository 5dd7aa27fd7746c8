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
//! Format (`airlock.copies.v1`), all text up to the data:
//!
//! ```text
//! airlock.copies.v1 <header length, 10 digits> <n>\n
//! <digest> <length>\n          (n lines)
//! <the n blobs' bytes, in the order of the lines>
//! ```
//!
//! The header length counts every byte before the data, so an entry's
//! offset is the header length plus the lengths before it. The key is
//! `copies/packs/<2 hex>/<hex>` with the pack's own sha256. A reader
//! needs only the header to find an entry, and checks the entry against
//! its digest; a damaged entry is skipped (another pack may hold the same
//! blob), a damaged header makes the whole pack unreadable (`scrub`
//! reports it; `fsck` writes the current generation's missing copies
//! again).

use bytes::Bytes;

use crate::digest::Digest;
use crate::store::{Blobstore, ObjectMeta, Result, StoreError, matches};

/// Prefix of the packs.
pub const PACKS_PREFIX: &str = "copies/packs/";

/// The format's first word.
const MAGIC: &str = "airlock.copies.v1";

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
    let lines: String = kept
        .iter()
        .map(|(d, b)| format!("{d} {}\n", b.len()))
        .collect();
    // The first line has a fixed width once the length has 10 digits.
    let first = |len: usize| format!("{MAGIC} {len:010} {}\n", kept.len());
    let header_len = first(0).len() + lines.len();
    let data: usize = kept.iter().map(|(_, b)| b.len()).sum();
    let mut out = Vec::with_capacity(header_len + data);
    out.extend_from_slice(first(header_len).as_bytes());
    out.extend_from_slice(lines.as_bytes());
    for (_, b) in kept {
        out.extend_from_slice(b);
    }
    (Digest::sha256_of(&out), out)
}

/// The header length a pack's first bytes announce; `None` when they are
/// not a pack's first line.
fn header_len(bytes: &[u8]) -> Option<u64> {
    let end = bytes.iter().position(|&b| b == b'\n')?;
    let line = std::str::from_utf8(&bytes[..end]).ok()?;
    let mut words = line.split(' ');
    (words.next()? == MAGIC).then_some(())?;
    words.next()?.parse().ok()
}

/// The entries of a pack whose first bytes (at least its header) are
/// `bytes`. Errors: a one-line cause when the header is not a pack's.
pub fn decode(bytes: &[u8]) -> std::result::Result<Vec<Entry>, String> {
    let bad = |what: &str| format!("not a copy pack: {what}");
    let header_len = header_len(bytes).ok_or_else(|| bad("first line"))?;
    let header = bytes
        .get(..usize::try_from(header_len).map_err(|_| bad("header length"))?)
        .ok_or_else(|| bad("header cut short"))?;
    let text = std::str::from_utf8(header).map_err(|_| bad("header is not text"))?;
    let mut lines = text.lines();
    let n: usize = lines
        .next()
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| bad("entry count"))?;
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

/// The entries of the pack `m` (read from its header only). `Ok(None)`:
/// gone or cut shorter since `m` was listed. Errors: `Corrupt` naming the pack when its header is
/// damaged; the store failed.
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
    let want = header_len(&head).ok_or_else(|| corrupt("not a copy pack".into()))?;
    if want > head.len() as u64 {
        if want > m.size {
            return Err(corrupt("header cut short".into()));
        }
        let Some(all) = read(want).await? else {
            return Ok(None);
        };
        head = all;
    }
    decode(&head).map(Some).map_err(corrupt)
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
    let entries = decode(&bytes).map_err(|cause| StoreError::Corrupt(format!("{key}: {cause}")))?;
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
        let entries = decode(&bytes).unwrap();
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
        // A damaged header is refused, a short one too.
        let mut bad = bytes.clone();
        bad[0] ^= 1;
        assert!(decode(&bad).is_err());
        assert!(decode(&bytes[..20]).is_err());
        assert_eq!(decode(&encode(&[]).1).unwrap(), vec![]);
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
        assert!(matches!(
            entries(&store, &packs[0]).await,
            Err(StoreError::Corrupt(_))
        ));
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
