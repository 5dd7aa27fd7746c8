//! The `vulnfeeds` state document: every imported feed by name, with its
//! date, the blob the bundle carried and the normalized advisories made
//! from it. A room document of its own (DESIGN "Code layout"); GC keeps
//! the blobs it names (`ops::rooms` keeps every digest an unknown room
//! document names).

use std::collections::BTreeMap;

use crate::digest::Digest;

/// The document's name in the state tree.
pub const DOC_NAME: &str = "vulnfeeds";
/// Its `kind`.
pub const KIND: &str = "airlock.vulnfeeds.v1";

/// A blob: digest and size in bytes.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct BlobRef {
    /// Content digest.
    pub digest: Digest,
    /// Size in bytes.
    pub size: u64,
}

/// One imported feed.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FeedRecord {
    /// `osv` or `debian-tracker`.
    pub format: String,
    /// The data's date, `YYYY-MM-DD` (newest `modified` of its records, or
    /// as the mirror config or the source file says).
    pub date: String,
    /// The feed as the bundle carried it.
    pub source: BlobRef,
    /// The normalized advisories (JSON lines of [`super::advisory::Advisory`]).
    pub advisories: BlobRef,
    /// How many advisory lines.
    pub count: u64,
    /// The bundle that carried it.
    pub bundle: String,
    /// When it was imported, RFC 3339.
    pub imported: String,
}

/// The whole document.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FeedTable {
    /// Always [`KIND`].
    pub kind: String,
    /// Feeds by name.
    #[serde(default)]
    pub feeds: BTreeMap<String, FeedRecord>,
}

impl Default for FeedTable {
    fn default() -> FeedTable {
        FeedTable {
            kind: KIND.into(),
            feeds: BTreeMap::new(),
        }
    }
}

/// How old data of `date` (`YYYY-MM-DD`) is on `today`, in whole days.
pub fn age_days(date: &str, today: time::Date) -> Option<i64> {
    let d = time::Date::parse(
        date,
        time::macros::format_description!("[year]-[month]-[day]"),
    )
    .ok()?;
    Some((today - d).whole_days())
}

/// "data from 2026-11-28, 3 days old" (`today`: the current UTC date).
pub fn age_line(date: &str, today: time::Date) -> String {
    match age_days(date, today) {
        Some(0) => format!("data from {date}, today"),
        Some(1) => format!("data from {date}, 1 day old"),
        Some(n) => format!("data from {date}, {n} days old"),
        None => format!("data from {date}"),
    }
}

/// The current UTC date.
pub fn today() -> time::Date {
    time::OffsetDateTime::now_utc().date()
}

#[cfg(test)]
mod tests {
    #[test]
    fn ages() {
        let today = time::macros::date!(2026 - 12 - 01);
        assert_eq!(
            super::age_line("2026-11-28", today),
            "data from 2026-11-28, 3 days old"
        );
        assert_eq!(
            super::age_line("2026-12-01", today),
            "data from 2026-12-01, today"
        );
    }
}
