//! The store's layout version: which release's layout the objects of a
//! store follow, so that a later release reads (or explicitly migrates) a
//! store an earlier one wrote, and an older binary refuses a store it
//! cannot read before it changes anything (issue 42 §3).
//!
//! The version lives in one small object, `refs/layout`, a JSON document
//! `{"layout": N, "written_by": "airlock X.Y.Z", "check": "<16 hex>"}`.
//! Every command that may write (`serve`, `import`, `push`:
//! [`crate::store::open`] with `create`) writes it when it is absent, by
//! compare-and-swap; every command that opens a store reads it first and
//! stops with one line naming both versions when the store's is newer than
//! [`LAYOUT_VERSION`]. A store written before the marker existed has no
//! `refs/layout`: it is layout 1, the layout this marker was introduced
//! with.
//!
//! `check` is the first 16 hex digits of the sha256 of `layout N
//! written_by`: a flipped byte is told apart from a newer release. A
//! marker is trusted when its check holds, or when it has none (an earlier
//! release wrote it; a writer adds the check) and names a layout this
//! build reads; anything else (a check that fails, text that is no marker,
//! a layout newer than this build named without a check, which no release
//! writes, a directory or unreadable object in its place) is damage: the
//! store is opened as the layout its state says (every state document
//! names its layout in `kind`), the damage is reported (`/readyz` 503
//! "degraded", `fsck` exit 1) and `airlock fsck --repair` writes the marker
//! again ([`repair`]). No single damaged object refuses a store.
//!
//! A later release that changes the layout raises [`LAYOUT_VERSION`],
//! reads every older version it lists in [`READS`] (or migrates it,
//! explicitly, with a history entry) and keeps a fixture store of each
//! older version under `tests/fixtures/` that its tests must read.

use serde::{Deserialize, Serialize};

use super::{Blobstore, Result, StoreError};

/// The key of the marker.
pub const LAYOUT_KEY: &str = "refs/layout";

/// The layout this build writes. 1: blobs under `blobs/sha256/<2 hex>/`,
/// `refs/root` naming a `State` document of paged repository, stacks,
/// torcx, users and pull-record tables (docs/architecture.md).
pub const LAYOUT_VERSION: u32 = 1;

/// The oldest layout this build reads as it is.
pub const READS: std::ops::RangeInclusive<u32> = 1..=LAYOUT_VERSION;

/// The stored marker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LayoutMarker {
    /// The layout version.
    pub layout: u32,
    /// The release that wrote the marker, e.g. `airlock 0.1.0`.
    pub written_by: String,
    /// [`LayoutMarker::sum`] of the two fields above; absent in markers
    /// written before it was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub check: Option<String>,
}

impl LayoutMarker {
    /// The marker this build writes.
    pub fn current() -> LayoutMarker {
        let mut m = LayoutMarker {
            layout: LAYOUT_VERSION,
            written_by: this_release(),
            check: None,
        };
        m.check = Some(m.sum());
        m
    }

    /// The first 16 hex digits of the sha256 of `layout N written_by`.
    pub fn sum(&self) -> String {
        let d = crate::digest::Digest::sha256_of(
            format!("layout {} {}", self.layout, self.written_by).as_bytes(),
        );
        d.hex()[..16].to_string()
    }

    /// The marker as stored (one line of JSON; the backend adds the
    /// newline).
    fn text(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// `airlock <crate version>`.
fn this_release() -> String {
    format!("airlock {}", env!("CARGO_PKG_VERSION"))
}

/// What [`check`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checked {
    /// The layout the store is opened as.
    pub version: u32,
    /// `Some(cause)` when `refs/layout` is damaged (see the module docs):
    /// the store is opened as layout [`LAYOUT_VERSION`] and the damage is
    /// to be reported until [`repair`] writes the marker again.
    pub damage: Option<String>,
}

/// What the object at `refs/layout` says.
enum Read {
    /// No marker: layout 1.
    Absent,
    /// A trusted marker.
    Marker(LayoutMarker),
    /// Damage, with its cause.
    Damaged(String),
}

/// Reads and judges `refs/layout` (the module docs' rule).
///
/// Errors: the store failed otherwise than by the object itself (an
/// unreadable object in its place is damage, not an error).
async fn read(store: &dyn Blobstore) -> Result<Read> {
    let found = match store.read_versioned(LAYOUT_KEY).await {
        Ok(Some(found)) => found,
        Ok(None) => return Ok(Read::Absent),
        // A directory (or another unreadable thing) in its place.
        Err(StoreError::Io(e)) if e.kind() != std::io::ErrorKind::PermissionDenied => {
            return Ok(Read::Damaged(format!("{LAYOUT_KEY} cannot be read: {e}")));
        }
        Err(e) => return Err(e),
    };
    let marker: LayoutMarker = match serde_json::from_str(&found.value) {
        Ok(m) => m,
        Err(e) => {
            return Ok(Read::Damaged(format!(
                "{LAYOUT_KEY} is not a layout marker ({e})"
            )));
        }
    };
    Ok(match &marker.check {
        Some(c) if *c == marker.sum() => Read::Marker(marker),
        Some(_) => Read::Damaged(format!(
            "{LAYOUT_KEY} fails its check (it reads layout {} written by {:?})",
            marker.layout, marker.written_by
        )),
        None if READS.contains(&marker.layout) => Read::Marker(marker),
        None => Read::Damaged(format!(
            "{LAYOUT_KEY} names layout {} without the check every release that writes it adds",
            marker.layout
        )),
    })
}

/// Reads the store's layout version, writing this build's marker when
/// there is none (or adding the check to an earlier release's) and
/// `write` is set; `place` names the store in errors. A damaged marker is
/// not refused: [`Checked::damage`] says why, logged once here.
///
/// Errors ([`StoreError::Layout`] with a one-line cause; nothing is
/// written): the marker is trusted and newer than this build reads ("the
/// store … has layout version 2 (written by airlock 0.2.0); this airlock
/// 0.1.0 reads layout versions 1 to 1: run a release that reads it;
/// nothing was changed"), or older than [`READS`]; or ([`StoreError::Io`])
/// the store failed.
pub async fn check(store: &dyn Blobstore, place: &str, write: bool) -> Result<Checked> {
    let ok = |version| Checked {
        version,
        damage: None,
    };
    let marker = match read(store).await? {
        Read::Marker(m) => m,
        Read::Damaged(cause) => {
            tracing::error!(
                store = place,
                cause,
                "the store's layout marker is damaged: opened as layout {LAYOUT_VERSION}; run airlock fsck --repair"
            );
            return Ok(Checked {
                version: LAYOUT_VERSION,
                damage: Some(cause),
            });
        }
        Read::Absent if write => {
            if store
                .swap(LAYOUT_KEY, None, &LayoutMarker::current().text())
                .await?
            {
                return Ok(ok(LAYOUT_VERSION));
            }
            // Another writer recorded one first: check that one.
            return Box::pin(check(store, place, false)).await;
        }
        Read::Absent => return Ok(ok(1)),
    };
    if READS.contains(&marker.layout) {
        if write && marker.check.is_none() {
            // An earlier release's marker: the same, with its check.
            let found = store.read_versioned(LAYOUT_KEY).await?;
            let mut with = marker.clone();
            with.check = Some(with.sum());
            let _ = store.swap(LAYOUT_KEY, found.as_ref(), &with.text()).await?;
        }
        return Ok(ok(marker.layout));
    }
    Err(StoreError::Layout(format!(
        "the store {place} has layout version {} (written by {}); this {} reads layout versions {} to {}: {}; nothing was changed",
        marker.layout,
        marker.written_by,
        this_release(),
        READS.start(),
        READS.end(),
        if marker.layout > LAYOUT_VERSION {
            "run a release that reads it"
        } else {
            "no release since reads it unmigrated"
        }
    )))
}

/// The check of an opened store's marker without writing (what `fsck`
/// reports): `Some(cause)` when it is damaged.
///
/// Errors: the store failed.
pub async fn damage(store: &dyn Blobstore) -> Result<Option<String>> {
    Ok(match read(store).await? {
        Read::Damaged(cause) => Some(cause),
        Read::Absent | Read::Marker(_) => None,
    })
}

/// Writes this build's marker over a damaged one (`fsck --repair`); what
/// stood in its place is moved aside to `quarantine/refs-layout.<unix
/// seconds>.<nanoseconds>` when it can be read, and removed otherwise. Returns the damage
/// repaired (`None`: nothing to do). Only for a store whose state this
/// build reads (the caller checked the current state document's kind).
///
/// Errors: the store failed.
pub async fn repair(store: &dyn Blobstore) -> Result<Option<String>> {
    let Read::Damaged(cause) = read(store).await? else {
        return Ok(None);
    };
    // Unique to the nanosecond: a second repair within the same second
    // must not meet the first one's aside (a directory cannot be renamed
    // over a file).
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let aside = format!(
        "quarantine/refs-layout.{}.{:09}",
        now.as_secs(),
        now.subsec_nanos()
    );
    if store.rename(LAYOUT_KEY, &aside).await.is_err() {
        store.delete(LAYOUT_KEY).await?;
    }
    let text = LayoutMarker::current().text();
    if !store.swap(LAYOUT_KEY, None, &text).await? {
        let found = store.read_versioned(LAYOUT_KEY).await?;
        store.swap(LAYOUT_KEY, found.as_ref(), &text).await?;
    }
    tracing::warn!(cause, aside, "layout marker written again");
    Ok(Some(cause))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::fs::FsStore;

    fn store() -> (tempfile::TempDir, FsStore) {
        let dir = tempfile::tempdir().unwrap();
        let store = FsStore::open(dir.path()).unwrap();
        (dir, store)
    }

    fn version(v: u32) -> Checked {
        Checked {
            version: v,
            damage: None,
        }
    }

    #[tokio::test]
    async fn a_writer_records_the_layout_a_reader_does_not() {
        let (dir, store) = store();
        assert_eq!(check(&store, "d", false).await.unwrap(), version(1));
        assert!(!dir.path().join(LAYOUT_KEY).exists());
        assert_eq!(
            check(&store, "d", true).await.unwrap(),
            version(LAYOUT_VERSION)
        );
        let text = std::fs::read_to_string(dir.path().join(LAYOUT_KEY)).unwrap();
        let marker: LayoutMarker = serde_json::from_str(&text).unwrap();
        assert!(
            text.ends_with("}\n") && text.lines().count() == 1,
            "{text:?}"
        );
        assert_eq!(marker.layout, LAYOUT_VERSION);
        assert_eq!(
            marker.written_by,
            format!("airlock {}", env!("CARGO_PKG_VERSION"))
        );
        assert_eq!(marker.check.as_deref(), Some(marker.sum().as_str()));
        // A second writer finds it and leaves it as it is.
        assert_eq!(
            check(&store, "d", true).await.unwrap(),
            version(LAYOUT_VERSION)
        );
        assert_eq!(
            std::fs::read_to_string(dir.path().join(LAYOUT_KEY)).unwrap(),
            text
        );
    }

    #[tokio::test]
    async fn an_earlier_releases_marker_gets_its_check() {
        let (dir, store) = store();
        let old = "{\"layout\":1,\"written_by\":\"airlock 0.0.9\"}\n";
        std::fs::write(dir.path().join(LAYOUT_KEY), old).unwrap();
        assert_eq!(check(&store, "d", false).await.unwrap(), version(1));
        assert_eq!(
            std::fs::read_to_string(dir.path().join(LAYOUT_KEY)).unwrap(),
            old
        );
        assert_eq!(check(&store, "d", true).await.unwrap(), version(1));
        let text = std::fs::read_to_string(dir.path().join(LAYOUT_KEY)).unwrap();
        let marker: LayoutMarker = serde_json::from_str(&text).unwrap();
        assert_eq!(marker.written_by, "airlock 0.0.9");
        assert_eq!(marker.check, Some(marker.sum()));
    }

    #[tokio::test]
    async fn a_newer_marker_is_refused_unchanged() {
        let (dir, store) = store();
        let mut m = LayoutMarker {
            layout: 7,
            written_by: "airlock 9.0.0".into(),
            check: None,
        };
        m.check = Some(m.sum());
        let newer = format!("{}\n", m.text());
        std::fs::write(dir.path().join(LAYOUT_KEY), &newer).unwrap();
        let e = check(&store, "d", true).await.unwrap_err().to_string();
        assert!(
            e.contains("the store d has layout version 7 (written by airlock 9.0.0)")
                && e.contains(&format!("reads layout versions 1 to {LAYOUT_VERSION}"))
                && e.contains("nothing was changed")
                && !e.contains('\n'),
            "{e}"
        );
        assert_eq!(
            std::fs::read_to_string(dir.path().join(LAYOUT_KEY)).unwrap(),
            newer
        );
        assert_eq!(
            repair(&store).await.unwrap(),
            None,
            "a newer marker is no damage"
        );
    }

    /// Issue 61 §2: every kind of damage to the marker is told apart from
    /// a newer release: the store opens (as this build's layout), nothing
    /// is written by the check, and `repair` writes the marker again.
    #[tokio::test]
    async fn a_damaged_marker_is_damage_not_a_newer_release() {
        let good = LayoutMarker::current().text();
        let flipped = good.replacen("\"layout\":1", "\"layout\":3", 1);
        assert_ne!(flipped, good);
        let checkless_newer = "{\"layout\":3,\"written_by\":\"airlock 0.1.0\"}";
        let bad_sum = good.replacen("\"check\":\"", "\"check\":\"0", 1);
        let cases: Vec<(&str, Option<Vec<u8>>)> = vec![
            ("trailing bytes", Some(format!("{good}\nxx").into_bytes())),
            ("a digit", Some(flipped.into_bytes())),
            (
                "a digit, no check",
                Some(checkless_newer.as_bytes().to_vec()),
            ),
            ("a check", Some(bad_sum.into_bytes())),
            ("not json", Some(b"7\n".to_vec())),
            ("empty", Some(Vec::new())),
            ("not utf-8", Some(b"{\"layout\":\xff}".to_vec())),
            ("a directory", None),
        ];
        for (what, bytes) in cases {
            let (dir, store) = store();
            let path = dir.path().join(LAYOUT_KEY);
            match &bytes {
                Some(b) => std::fs::write(&path, b).unwrap(),
                None => std::fs::create_dir_all(path.join("x")).unwrap(),
            }
            let c = check(&store, "d", true).await.unwrap();
            assert_eq!(c.version, LAYOUT_VERSION, "{what}");
            assert!(c.damage.is_some(), "{what}: {c:?}");
            assert_eq!(
                path.is_dir(),
                bytes.is_none(),
                "{what}: the check wrote nothing"
            );
            if let Some(b) = &bytes {
                assert_eq!(&std::fs::read(&path).unwrap(), b, "{what}");
            }
            assert!(damage(&store).await.unwrap().is_some(), "{what}");
            assert!(repair(&store).await.unwrap().is_some(), "{what}");
            assert_eq!(damage(&store).await.unwrap(), None, "{what}");
            assert_eq!(
                check(&store, "d", false).await.unwrap(),
                version(LAYOUT_VERSION)
            );
            let aside = std::fs::read_dir(dir.path().join("quarantine"))
                .unwrap()
                .count();
            assert_eq!(aside, 1, "{what}: what stood there is kept aside");
        }
    }
}
