//! The pull record (issue 23 §4): the day each manifest was last pulled,
//! for `gc`'s `pulled_within_days` (zot's `keepTags` `pulledWithin`).
//!
//! Owns: the record ([`PullRecord`]: repository → manifest digest and tag
//! → day), where it is stored, and reading it whole ([`load`]). The
//! registry notes each manifest GET in memory ([`PullRecorder::note`]: no
//! store write and no await on the request path); the server flushes the
//! notes to the store ([`PullRecorder::flush`]) every
//! `pull_record_interval` and when it stops; `gc` reads the merged record
//! through [`load`]. Never reads the state tree: the record names what
//! clients pulled, whether it still exists or not.
//!
//! A pull is a `GET` of a manifest, by tag or by digest, answered 200; a
//! `HEAD` is not (as in zot and Harbor: clients check with HEAD whether
//! they need to pull). Times are days since 1970-01-01 UTC ([`Day`]), so
//! the record holds one small number per manifest and tag, whatever the
//! number of pulls; entries older than [`RECORD_DAYS`] are dropped when a
//! replica writes.
//!
//! Store layout: `pulls/<replica>.json`, one object per server process
//! (a fresh id per start), each the whole record as that process knows it
//! (its own notes merged with every other object it read). Only its
//! process writes an object, so replicas on one bucket never overwrite
//! each other's notes, and merging is the maximum day per key, so reading
//! any set of objects in any order gives the same record. Objects not
//! rewritten for [`STALE_AFTER`] (stopped processes, quiet replicas) are
//! deleted by a replica that has written their content into its own
//! object first ([`recorder`]).

pub mod recorder;

pub use recorder::{PullRecorder, RecorderLimits};

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::{Result, StateError};
use crate::digest::Digest;
use crate::names::{RepositoryName, Tag};
use crate::store::{self, Blobstore, StoreError};

/// Days since 1970-01-01 UTC.
pub type Day = u32;

/// The prefix of the record's objects.
pub const PREFIX: &str = "pulls/";

/// The `kind` of a record object.
pub const KIND: &str = "airlock.pulls.v1";

/// How long a pull is remembered: 366 days. The longest
/// `pulled_within_days` a retention rule may ask for.
pub const RECORD_DAYS: Day = 366;

/// An object of [`PREFIX`] not rewritten for this long (24 hours) is folded
/// into the object of the next replica that writes, then deleted.
pub const STALE_AFTER: Duration = Duration::from_secs(24 * 3600);

/// The day of `t` (UTC); times before 1970 are day 0.
pub fn day_of(t: SystemTime) -> Day {
    let secs = t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    Day::try_from(secs / 86_400).unwrap_or(Day::MAX)
}

/// Today (UTC).
pub fn today() -> Day {
    day_of(SystemTime::now())
}

/// When each manifest and tag of each repository was last pulled.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PullRecord {
    /// Repository → its pulls.
    #[serde(default)]
    pub repositories: BTreeMap<RepositoryName, RepositoryPulls>,
}

/// The pulls of one repository.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RepositoryPulls {
    /// Manifest digest → the last day it was pulled (by tag or by digest).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub manifests: BTreeMap<Digest, Day>,
    /// Tag → the last day a manifest was pulled by it.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<Tag, Day>,
}

/// One stored object: [`KIND`], the checksum and the record.
#[derive(serde::Serialize, serde::Deserialize)]
struct Stored {
    kind: String,
    /// Lowercase hex SHA-256 of the object as serialized without this
    /// field (so a flipped digit of a day is found); absent in objects
    /// written before issue 38, which are read unchecked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    sha256: Option<String>,
    #[serde(flatten)]
    record: PullRecord,
}

impl Stored {
    /// The checksum of this object's serialization without `sha256`.
    fn checksum(&self) -> String {
        let plain = Stored {
            kind: self.kind.clone(),
            sha256: None,
            record: self.record.clone(),
        };
        let bytes = serde_json::to_vec(&plain).unwrap_or_default();
        crate::digest::Digest::sha256_of(&bytes).hex().to_string()
    }
}

fn raise<K: Ord>(map: &mut BTreeMap<K, Day>, key: K, day: Day) {
    let d = map.entry(key).or_insert(day);
    *d = (*d).max(day);
}

impl PullRecord {
    /// Records a pull of `digest` in `repository` (by `tag`, if given) on
    /// `day`; an earlier day than the one recorded changes nothing.
    pub fn note(
        &mut self,
        repository: &RepositoryName,
        digest: &Digest,
        tag: Option<&Tag>,
        day: Day,
    ) {
        let r = self.repositories.entry(repository.clone()).or_default();
        raise(&mut r.manifests, digest.clone(), day);
        if let Some(t) = tag {
            raise(&mut r.tags, t.clone(), day);
        }
    }

    /// Merges `other` into this record: the later day of each key.
    pub fn merge(&mut self, other: PullRecord) {
        for (name, pulls) in other.repositories {
            let r = self.repositories.entry(name).or_default();
            for (d, day) in pulls.manifests {
                raise(&mut r.manifests, d, day);
            }
            for (t, day) in pulls.tags {
                raise(&mut r.tags, t, day);
            }
        }
    }

    /// Drops what was last pulled more than [`RECORD_DAYS`] before `today`.
    pub fn prune(&mut self, today: Day) {
        let horizon = today.saturating_sub(RECORD_DAYS);
        self.repositories.retain(|_, r| {
            r.manifests.retain(|_, d| *d >= horizon);
            r.tags.retain(|_, d| *d >= horizon);
            !r.manifests.is_empty() || !r.tags.is_empty()
        });
    }

    /// The day `digest` was last pulled from `repository` (by tag or by
    /// digest); `None`: never (or more than [`RECORD_DAYS`] ago).
    pub fn last_pulled(&self, repository: &RepositoryName, digest: &Digest) -> Option<Day> {
        self.repositories
            .get(repository)?
            .manifests
            .get(digest)
            .copied()
    }

    /// The day a manifest was last pulled from `repository` by `tag`
    /// (whichever manifest the tag named then); `None`: never (or more
    /// than [`RECORD_DAYS`] ago).
    pub fn tag_last_pulled(&self, repository: &RepositoryName, tag: &Tag) -> Option<Day> {
        self.repositories.get(repository)?.tags.get(tag).copied()
    }

    /// Whether nothing is recorded.
    pub fn is_empty(&self) -> bool {
        self.repositories.is_empty()
    }

    /// Manifest and tag entries recorded.
    pub fn len(&self) -> usize {
        self.repositories
            .values()
            .map(|r| r.manifests.len() + r.tags.len())
            .sum()
    }

    /// The record as one stored object (JSON, with its checksum).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut stored = Stored {
            kind: KIND.to_string(),
            sha256: None,
            record: self.clone(),
        };
        stored.sha256 = Some(stored.checksum());
        serde_json::to_vec(&stored).unwrap_or_default()
    }

    /// Parses and checks a stored object read from `key`.
    ///
    /// Errors: `Corrupt` when it is not JSON of [`KIND`] or does not match
    /// its checksum.
    pub fn from_bytes(key: &str, bytes: &[u8]) -> Result<PullRecord> {
        Self::checked(bytes).map_err(|cause| StateError::Corrupt {
            digest: key.to_string(),
            cause,
        })
    }

    /// [`Self::from_bytes`] with the cause as one line.
    fn checked(bytes: &[u8]) -> std::result::Result<PullRecord, String> {
        let stored: Stored = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
        if stored.kind != KIND {
            return Err(format!("kind {:?}, expected {KIND}", stored.kind));
        }
        if let Some(sum) = &stored.sha256
            && *sum != stored.checksum()
        {
            return Err("content does not match its checksum".to_string());
        }
        Ok(stored.record)
    }
}

/// The keys of the record's objects: those under [`PREFIX`], and those
/// whose second copy alone is left (a deleted object, which a read then
/// restores: the copy is deleted first, so a lone copy is damage).
/// Errors: the store failed.
async fn object_keys(store: &dyn Blobstore) -> store::Result<Vec<String>> {
    let mut keys = store.list(PREFIX).await?;
    let copies = store.list(&store::copies::keyed_copy_key(PREFIX)).await?;
    for c in copies {
        if let Some(key) = c.strip_prefix(store::copies::COPIES_PREFIX)
            && !keys.iter().any(|k| k == key)
        {
            keys.push(key.to_string());
        }
    }
    Ok(keys)
}

/// Reads and checks the record object `key`, from its second copy when it
/// is damaged (then written back, [`store::copies::read_keyed`]).
///
/// Errors: `NotFound` (gone: folded into another object), `Corrupt`
/// naming the key when no copy passes, the store failed.
pub async fn read_object(store: &dyn Blobstore, key: &str) -> store::Result<PullRecord> {
    store::copies::read_keyed(store, key, PullRecord::checked).await
}

/// Writes the record object `key` and, on a store that keeps metadata
/// copies, its second copy. Errors: the store failed.
pub async fn write_object(
    store: &dyn Blobstore,
    key: &str,
    record: &PullRecord,
) -> store::Result<()> {
    store::copies::put_keyed(store, key, &record.to_bytes()).await
}

/// What [`check_objects`] found.
#[derive(Debug, Default)]
pub struct ObjectsCheck {
    /// Objects checked.
    pub checked: usize,
    /// (key, what was done): an object or its second copy written again
    /// from the other.
    pub repaired: Vec<(String, String)>,
    /// (key, cause): objects with no good copy left.
    pub damaged: Vec<(String, String)>,
}

/// Checks every object of the record and, on a store that keeps copies,
/// its second copy: a damaged object with a good copy, and a missing or
/// damaged copy of a good object, are written again from the other (for
/// `fsck` and `scrub`). Errors: the store failed.
pub async fn check_objects(store: &dyn Blobstore) -> store::Result<ObjectsCheck> {
    use store::copies::CopyState;
    let mut out = ObjectsCheck::default();
    for key in object_keys(store).await? {
        out.checked += 1;
        // The object read once: checked, then compared with its copy.
        let (bytes, cause) = match store::read_all(store, &key).await {
            Ok(bytes) => {
                let cause = PullRecord::checked(&bytes).err();
                (bytes, cause)
            }
            Err(StoreError::NotFound(_)) => (Vec::new(), Some("missing".to_string())),
            Err(e) => return Err(e),
        };
        if let Some(cause) = cause {
            match read_object(store, &key).await {
                Ok(_) => out.repaired.push((
                    key,
                    format!("was damaged ({cause}); restored from its second copy"),
                )),
                Err(StoreError::NotFound(_)) => {}
                Err(StoreError::Corrupt(cause)) => out.damaged.push((key, cause)),
                Err(e) => return Err(e),
            }
            continue;
        }
        if store.metadata_copies() < 2 {
            continue;
        }
        match store::copies::check_keyed_copy(store, &key, &bytes, PullRecord::checked).await? {
            CopyState::Good => {}
            CopyState::Written => out
                .repaired
                .push((key, "its second copy was missing; written again".into())),
            CopyState::Rewritten => out
                .repaired
                .push((key, "its second copy was damaged; written again".into())),
        }
    }
    Ok(out)
}

/// How often [`load`] starts over when an object vanished while it read
/// (a replica folded it into its own and deleted it).
const LOAD_ATTEMPTS: usize = 5;

/// The whole record: every object of [`PREFIX`] merged.
///
/// Errors: the store failed, or an object is not a record (`Corrupt`,
/// naming its key: a retention rule must not treat what it cannot read as
/// never pulled; remove the object to go on without it).
pub async fn load(store: &dyn Blobstore) -> Result<PullRecord> {
    let mut attempt = 0;
    'again: loop {
        attempt += 1;
        let mut record = PullRecord::default();
        for key in object_keys(store).await? {
            match read_object(store, &key).await {
                Ok(r) => record.merge(r),
                // Folded into another object, which may have been read
                // before it was rewritten: read them all again.
                Err(StoreError::NotFound(_)) if attempt < LOAD_ATTEMPTS => continue 'again,
                Err(StoreError::NotFound(_)) => {}
                Err(e) => return Err(e.into()),
            }
        }
        return Ok(record);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repo(s: &str) -> RepositoryName {
        s.parse().unwrap()
    }

    fn digest(seed: &str) -> Digest {
        Digest::sha256_of(seed.as_bytes())
    }

    #[test]
    fn merge_keeps_the_later_day_of_each_key() {
        let (app, a, b) = (repo("builds/app"), digest("a"), digest("b"));
        let v1: Tag = "v1".parse().unwrap();
        let mut one = PullRecord::default();
        one.note(&app, &a, Some(&v1), 100);
        one.note(&app, &b, None, 90);
        let mut two = PullRecord::default();
        two.note(&app, &a, None, 95);
        two.note(&app, &b, Some(&v1), 120);
        two.note(&repo("other"), &a, None, 7);
        let mut ab = one.clone();
        ab.merge(two.clone());
        let mut ba = two;
        ba.merge(one);
        assert_eq!(ab, ba);
        assert_eq!(ab.last_pulled(&app, &a), Some(100));
        assert_eq!(ab.last_pulled(&app, &b), Some(120));
        assert_eq!(ab.repositories[&app].tags[&v1], 120);
        assert_eq!(ab.last_pulled(&repo("other"), &a), Some(7));
        assert_eq!(ab.last_pulled(&repo("other"), &b), None);
        // An earlier note changes nothing.
        let mut again = ab.clone();
        again.note(&app, &a, Some(&v1), 3);
        assert_eq!(again, ab);
    }

    #[test]
    fn prune_forgets_what_is_older_than_the_record_keeps() {
        let app = repo("app");
        let mut r = PullRecord::default();
        r.note(&app, &digest("old"), None, 1000);
        r.note(&app, &digest("new"), None, 1000 + RECORD_DAYS);
        r.note(&repo("gone"), &digest("x"), None, 999);
        r.prune(1000 + RECORD_DAYS);
        assert_eq!(r.last_pulled(&app, &digest("old")), Some(1000));
        r.prune(1001 + RECORD_DAYS);
        assert_eq!(r.last_pulled(&app, &digest("old")), None);
        assert_eq!(
            r.last_pulled(&app, &digest("new")),
            Some(1000 + RECORD_DAYS)
        );
        assert_eq!(r.repositories.len(), 1);
    }

    #[test]
    fn stored_form_round_trips_and_is_checked() {
        let mut r = PullRecord::default();
        r.note(
            &repo("a/b"),
            &digest("x"),
            Some(&"latest".parse().unwrap()),
            20_000,
        );
        let bytes = r.to_bytes();
        let text = String::from_utf8(bytes.clone()).unwrap();
        assert!(text.contains(r#""kind":"airlock.pulls.v1""#), "{text}");
        assert_eq!(PullRecord::from_bytes("pulls/x.json", &bytes).unwrap(), r);
        let err = PullRecord::from_bytes("pulls/x.json", b"{\"kind\":\"other\"}").unwrap_err();
        assert!(err.to_string().contains("pulls/x.json"), "{err}");
        let bad = br#"{"kind":"airlock.pulls.v1","repositories":{"a":{"manifests":{"nope":1}}}}"#;
        assert!(PullRecord::from_bytes("pulls/x.json", bad).is_err());
        // A flipped digit of a day is still JSON of the kind: the checksum
        // finds it.
        let flipped = text.replace("20000", "20001").into_bytes();
        let err = PullRecord::from_bytes("pulls/x.json", &flipped).unwrap_err();
        assert!(err.to_string().contains("checksum"), "{err}");
        // An object written before the checksum is read unchecked.
        let old =
            br#"{"kind":"airlock.pulls.v1","repositories":{"a/b":{"tags":{"latest":20000}}}}"#;
        let read = PullRecord::from_bytes("pulls/x.json", old).unwrap();
        assert_eq!(
            read.tag_last_pulled(&repo("a/b"), &"latest".parse().unwrap()),
            Some(20_000)
        );
    }

    #[test]
    fn days_are_utc_days_since_the_epoch() {
        assert_eq!(day_of(UNIX_EPOCH), 0);
        assert_eq!(day_of(UNIX_EPOCH + Duration::from_secs(86_399)), 0);
        assert_eq!(day_of(UNIX_EPOCH + Duration::from_secs(86_400)), 1);
    }
}
