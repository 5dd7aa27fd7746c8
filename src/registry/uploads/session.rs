//! What one upload session is in the store: its id, its `info.json`, the
//! keys of its chunks, and the `Content-Range` arithmetic of a chunk.
//!
//! Owns: the `uploads/<uuid>/...` key grammar. Never reads or writes the
//! store (that is [`super::Uploads`]).

use std::net::IpAddr;

use super::{Result, UploadError};
use crate::names::RepositoryName;

/// Prefix of every upload object.
pub const UPLOADS_PREFIX: &str = "uploads/";

/// A session id: a v4 UUID in lower-case hyphenated form (the form the
/// `Location` header carries). Parsing through [`UploadId::parse`] is the
/// only way to get one, so a session id can never escape `uploads/<id>/`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct UploadId(pub(super) String);

impl UploadId {
    /// A fresh random id.
    pub fn new() -> UploadId {
        UploadId(uuid::Uuid::new_v4().hyphenated().to_string())
    }

    /// `Some` for a canonical lower-case hyphenated UUID, else `None`.
    pub fn parse(s: &str) -> Option<UploadId> {
        let u = uuid::Uuid::try_parse(s).ok()?;
        let canonical = u.hyphenated().to_string();
        (canonical == s).then_some(UploadId(canonical))
    }

    /// The id as sent in `Location` and `Docker-Upload-UUID`.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// `uploads/<id>/info.json`.
    pub(super) fn info_key(&self) -> String {
        format!("{UPLOADS_PREFIX}{}/info.json", self.0)
    }

    /// `uploads/<id>/`.
    pub(super) fn dir(&self) -> String {
        format!("{UPLOADS_PREFIX}{}/", self.0)
    }

    /// `uploads/<id>/<offset as 20 digits>`: the chunk starting at `offset`.
    pub(super) fn part_key(&self, offset: u64) -> String {
        format!("{UPLOADS_PREFIX}{}/{offset:020}", self.0)
    }

    /// The session a key under `uploads/` belongs to, when it names one.
    pub(super) fn of_key(key: &str) -> Option<UploadId> {
        UploadId::parse(key.strip_prefix(UPLOADS_PREFIX)?.split('/').next()?)
    }

    /// The offset a chunk key names (`None` for `info.json` or a stray key).
    pub(super) fn part_offset(key: &str) -> Option<u64> {
        let name = key.rsplit('/').next()?;
        let digits = name.len() == 20 && name.bytes().all(|b| b.is_ascii_digit());
        if digits { name.parse().ok() } else { None }
    }
}

impl Default for UploadId {
    fn default() -> UploadId {
        UploadId::new()
    }
}

/// `uploads/<uuid>/info.json`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SessionInfo {
    /// The repository the session was opened in; other repositories do not see it.
    pub repository: RepositoryName,
    /// When the session was opened, RFC 3339 UTC (for people).
    pub started: String,
    /// When the session was opened, seconds since the Unix epoch (for expiry).
    pub started_unix: u64,
    /// The IP address of the client that opened it, when known (for the
    /// per-client session cap).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<IpAddr>,
    /// The user who opened it, when users are configured (for the per-user caps).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
}

/// Checks a chunk's `Content-Range` against the session's size `offset`;
/// returns the chunk's announced length. A range not starting at `offset`
/// or ending before its start is out of order (416); one whose length
/// overflows `u64` is [`UploadError::RangeInvalid`] (400). Checked
/// arithmetic only: a length never wraps.
pub(super) fn check_range(range: Option<(u64, u64)>, offset: u64) -> Result<Option<u64>> {
    let Some((start, end)) = range else {
        return Ok(None);
    };
    if start != offset || end < start {
        return Err(UploadError::OutOfOrder { start, offset });
    }
    (end - start)
        .checked_add(1)
        .map(Some)
        .ok_or(UploadError::RangeInvalid { start, end })
}

/// Parses a chunk's `Content-Range`: `<start>-<end>` (distribution-spec
/// regex `^[0-9]+-[0-9]+$`, inclusive end). A `bytes ` prefix (RFC 9110
/// form, sent by some clients) is accepted too. `None`: malformed.
pub fn parse_content_range(value: &str) -> Option<(u64, u64)> {
    let v = value.trim();
    let v = v.strip_prefix("bytes ").unwrap_or(v);
    let v = v.split('/').next()?;
    let (a, b) = v.split_once('-')?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|c| c.is_ascii_digit());
    if !digits(a) || !digits(b) {
        return None;
    }
    Some((a.parse().ok()?, b.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids() {
        let id = UploadId::new();
        assert_eq!(UploadId::parse(id.as_str()), Some(id.clone()));
        assert!(UploadId::parse("../x").is_none());
        assert!(UploadId::parse(&id.as_str().to_uppercase()).is_none());
        assert!(UploadId::parse(&id.as_str().replace('-', "")).is_none());
        assert!(id.part_key(5).ends_with("/00000000000000000005"));
        assert_eq!(UploadId::of_key(&id.part_key(5)), Some(id.clone()));
        assert_eq!(UploadId::of_key(&id.info_key()), Some(id.clone()));
        assert_eq!(UploadId::part_offset(&id.part_key(5)), Some(5));
        assert_eq!(UploadId::part_offset(&id.info_key()), None);
        assert_eq!(UploadId::of_key("uploads/not-a-uuid/x"), None);
    }

    #[test]
    fn range_lengths_never_wrap() {
        assert_eq!(check_range(None, 7).unwrap(), None);
        assert_eq!(check_range(Some((0, 0)), 0).unwrap(), Some(1));
        assert_eq!(check_range(Some((5, 9)), 5).unwrap(), Some(5));
        assert!(matches!(
            check_range(Some((0, u64::MAX)), 0),
            Err(UploadError::RangeInvalid {
                start: 0,
                end: u64::MAX
            })
        ));
        assert_eq!(check_range(Some((1, u64::MAX)), 1).unwrap(), Some(u64::MAX));
        assert!(matches!(
            check_range(Some((5, 4)), 5),
            Err(UploadError::OutOfOrder {
                start: 5,
                offset: 5
            })
        ));
        assert!(matches!(
            check_range(Some((3, 9)), 0),
            Err(UploadError::OutOfOrder {
                start: 3,
                offset: 0
            })
        ));
    }

    #[test]
    fn content_ranges() {
        assert_eq!(parse_content_range("0-99"), Some((0, 99)));
        assert_eq!(parse_content_range("bytes 100-199/*"), Some((100, 199)));
        assert_eq!(parse_content_range("0-"), None);
        assert_eq!(parse_content_range("-5"), None);
        assert_eq!(parse_content_range("a-b"), None);
        assert_eq!(parse_content_range("1-2-3"), None);
    }
}
