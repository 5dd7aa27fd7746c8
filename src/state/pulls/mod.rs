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

/// One stored object: [`KIND`] and the record.
#[derive(serde::Serialize, serde::Deserialize)]
struct Stored {
    kind: String,
    #[serde(flatten)]
    record: PullRecord,
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

    /// The record as one stored object (JSON).
    pub fn to_bytes(&self) -> Vec<u8> {
        let stored = Stored {
            kind: KIND.to_string(),
            record: self.clone(),
        };
        serde_json::to_vec(&stored).unwrap_or_default()
    }

    /// Parses a stored object read from `key`.
    ///
    /// Errors: `Corrupt` when it is not JSON of [`KIND`].
    pub fn from_bytes(key: &str, bytes: &[u8]) -> Result<PullRecord> {
        let corrupt = |cause: String| StateError::Corrupt {
            digest: key.to_string(),
            cause,
        };
        let stored: Stored = serde_json::from_slice(bytes).map_err(|e| corrupt(e.to_string()))?;
        if stored.kind != KIND {
            return Err(corrupt(format!("kind {:?}, expected {KIND}", stored.kind)));
        }
        Ok(stored.record)
    }
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
        for key in store.list(PREFIX).await? {
            match store::read_all(store, &key).await {
                Ok(bytes) => record.merge(PullRecord::from_bytes(&key, &bytes)?),
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
    }

    #[test]
    fn days_are_utc_days_since_the_epoch() {
        assert_eq!(day_of(UNIX_EPOCH), 0);
        assert_eq!(day_of(UNIX_EPOCH + Duration::from_secs(86_399)), 0);
        assert_eq!(day_of(UNIX_EPOCH + Duration::from_secs(86_400)), 1);
    }
}
