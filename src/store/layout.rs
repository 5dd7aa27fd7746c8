//! The store's layout version: which release's layout the objects of a
//! store follow, so that a later release reads (or explicitly migrates) a
//! store an earlier one wrote, and an older binary refuses a store it
//! cannot read before it changes anything (issue 42 §3).
//!
//! The version lives in one small object, `refs/layout`, a JSON document
//! `{"layout": N, "written_by": "airlock X.Y.Z"}`. Every command that may
//! write (`serve`, `import`, `push`: [`crate::store::open`] with `create`)
//! writes it when it is absent, by compare-and-swap; every command that
//! opens a store reads it first and stops with one line naming both
//! versions when the store's is newer than [`LAYOUT_VERSION`]. A store
//! written before the marker existed has no `refs/layout`: it is layout 1,
//! the layout this marker was introduced with.
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
}

impl LayoutMarker {
    /// The marker this build writes.
    pub fn current() -> LayoutMarker {
        LayoutMarker {
            layout: LAYOUT_VERSION,
            written_by: this_release(),
        }
    }
}

/// `airlock <crate version>`.
fn this_release() -> String {
    format!("airlock {}", env!("CARGO_PKG_VERSION"))
}

/// Reads the store's layout version, writing this build's marker when
/// there is none and `write` is set; `place` names the store in errors.
/// Returns the store's layout version (1 for a store without a marker
/// and not written).
///
/// Errors ([`StoreError::Layout`] with a one-line cause; nothing is
/// written):
/// the marker is newer than this build reads ("the store … has layout
/// version 2 (written by airlock 0.2.0); this airlock 0.1.0 reads layout
/// versions 1 to 1: run a release that reads it; nothing was changed"),
/// is older than [`READS`], or cannot be parsed; or ([`StoreError::Io`])
/// the read failed.
pub async fn check(store: &dyn Blobstore, place: &str, write: bool) -> Result<u32> {
    let marker = match store.read_versioned(LAYOUT_KEY).await? {
        Some(found) => parse(&found.value, place)?,
        None if write => {
            // The backend ends the object with a newline.
            let text = serde_json::to_string(&LayoutMarker::current()).unwrap_or_default();
            if store.swap(LAYOUT_KEY, None, &text).await? {
                return Ok(LAYOUT_VERSION);
            }
            // Another writer recorded one first: check that one.
            match store.read_versioned(LAYOUT_KEY).await? {
                Some(found) => parse(&found.value, place)?,
                None => return Ok(LAYOUT_VERSION),
            }
        }
        None => return Ok(1),
    };
    if READS.contains(&marker.layout) {
        return Ok(marker.layout);
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

/// The marker in `text`. Errors: not the marker's JSON.
fn parse(text: &str, place: &str) -> Result<LayoutMarker> {
    serde_json::from_str(text).map_err(|e| {
        StoreError::Layout(format!(
            "the store {place} has a {LAYOUT_KEY} that is not a layout marker ({e}); nothing was changed"
        ))
    })
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

    #[tokio::test]
    async fn a_writer_records_the_layout_a_reader_does_not() {
        let (dir, store) = store();
        assert_eq!(check(&store, "d", false).await.unwrap(), 1);
        assert!(!dir.path().join(LAYOUT_KEY).exists());
        assert_eq!(check(&store, "d", true).await.unwrap(), LAYOUT_VERSION);
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
        // A second writer finds it and leaves it as it is.
        assert_eq!(check(&store, "d", true).await.unwrap(), LAYOUT_VERSION);
        assert_eq!(
            std::fs::read_to_string(dir.path().join(LAYOUT_KEY)).unwrap(),
            text
        );
    }

    #[tokio::test]
    async fn a_newer_or_damaged_marker_is_refused_unchanged() {
        let (dir, store) = store();
        let newer = "{\"layout\":7,\"written_by\":\"airlock 9.0.0\"}\n";
        std::fs::create_dir_all(dir.path().join("refs")).unwrap();
        std::fs::write(dir.path().join(LAYOUT_KEY), newer).unwrap();
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
        std::fs::write(dir.path().join(LAYOUT_KEY), "7\n").unwrap();
        let e = check(&store, "d", true).await.unwrap_err().to_string();
        assert!(e.contains("not a layout marker"), "{e}");
    }
}
