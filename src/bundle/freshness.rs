//! How fresh a bundle and a site are: each bundle's `expires` (a site
//! refuses a bundle past it, as apt refuses a `Release` file past its
//! `Valid-Until` and TUF a timestamp role past its expiry), and the newest
//! bundle a site has imported, so that a site kept on old media (a freeze
//! attack: every bundle validly signed, none recent) says so once it is
//! older than `[import] max_staleness`.
//!
//! Owns: the `expires` rule at import, the `imports` room document
//! ([`Newest`]: the newest bundle by creation time the site has
//! imported) and the staleness verdict that `/readyz`, `/metrics`, the
//! console and `airlock status` report. Never decides whom to trust
//! (`sign`) or what a tag may move to (`import::plan`).

use std::time::{Duration, SystemTime};

use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use super::format::BundleDoc;
use crate::state::{DocumentChange, Op};

/// How long a bundle stays importable when neither `bundle create
/// --expires-in` nor the mirror config's `expires_in` says: 30 days.
pub const DEFAULT_EXPIRES_IN: Duration = Duration::from_secs(30 * 86_400);

/// The state document that records the newest import ([`Newest`]).
pub const DOCUMENT: &str = "imports";

/// The `imports` room document: the newest bundle, by its `created` time,
/// that the site has imported. A bundle created earlier (an older bundle
/// imported late) leaves it unchanged, so it measures how recent the
/// site's newest content is, not when media last arrived.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ImportsDoc {
    /// The newest bundle imported.
    pub newest: Newest,
}

/// One imported bundle, as [`ImportsDoc::newest`] records it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Newest {
    /// The bundle's id.
    pub bundle: String,
    /// Its `created`, RFC 3339 UTC.
    pub created: String,
    /// Its `expires`, RFC 3339 UTC (absent for bundles made before
    /// bundles carried one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires: Option<String>,
    /// When the site imported it, RFC 3339 UTC.
    pub imported: String,
}

/// Errors of this module: one line, naming the bundle and the times.
#[derive(Debug, thiserror::Error)]
pub enum FreshnessError {
    /// The bundle's `expires` is past; `import --allow-expired --reason`
    /// overrides.
    #[error(
        "bundle {bundle} expired at {expires} (created {created}); a bundle past its expiry is refused (make a fresh one, or import --allow-expired --reason TEXT); nothing imported"
    )]
    Expired {
        /// The bundle's id.
        bundle: String,
        /// Its `created`.
        created: String,
        /// Its `expires`.
        expires: String,
    },
    /// A time field is not RFC 3339, or `expires` is not after `created`.
    #[error("bundle {bundle}: {field} {value:?} is not a valid RFC 3339 time{after}")]
    BadTime {
        /// The bundle's id.
        bundle: String,
        /// `created` or `expires`.
        field: &'static str,
        /// What the document says.
        value: String,
        /// Empty, or why a valid time is refused.
        after: &'static str,
    },
}

fn parse(bundle: &str, field: &'static str, value: &str) -> Result<OffsetDateTime, FreshnessError> {
    OffsetDateTime::parse(value, &Rfc3339).map_err(|_| FreshnessError::BadTime {
        bundle: bundle.to_string(),
        field,
        value: value.to_string(),
        after: "",
    })
}

/// RFC 3339 UTC of `t`, in whole seconds (as every time the state records).
fn format(t: OffsetDateTime) -> String {
    crate::state::rfc3339_of(t.unix_timestamp().max(0) as u64)
}

/// `created` (RFC 3339) plus `within`, as RFC 3339 UTC: a new bundle's
/// `expires`.
///
/// Errors: `created` is not RFC 3339, or the sum leaves the calendar.
pub fn expires_at(created: &str, within: Duration) -> Result<String, String> {
    let t = OffsetDateTime::parse(created, &Rfc3339)
        .map_err(|e| format!("created {created:?}: {e}"))?;
    let within = time::Duration::try_from(within).map_err(|e| e.to_string())?;
    t.checked_add(within)
        .map(format)
        .ok_or_else(|| format!("{created} plus the expiry is beyond the calendar"))
}

/// Checks `doc`'s `expires` against `now` (import, on the signed document,
/// before any blob is written). A document without `expires` (made before
/// bundles carried one) passes. Returns whether the bundle is expired and
/// let through by `allow` (the admin's reason), for the history entry.
///
/// Errors: [`FreshnessError::Expired`] past `expires` without `allow`;
/// [`FreshnessError::BadTime`] for an unreadable time or an `expires` not
/// after `created`.
pub fn check_expiry(
    doc: &BundleDoc,
    now: SystemTime,
    allow: Option<&str>,
) -> Result<bool, FreshnessError> {
    let Some(expires) = &doc.expires else {
        return Ok(false);
    };
    let created = parse(&doc.id, "created", &doc.created)?;
    let until = parse(&doc.id, "expires", expires)?;
    if until <= created {
        return Err(FreshnessError::BadTime {
            bundle: doc.id.clone(),
            field: "expires",
            value: expires.clone(),
            after: " after created",
        });
    }
    if OffsetDateTime::from(now) < until {
        return Ok(false);
    }
    match allow {
        Some(_) => Ok(true),
        None => Err(FreshnessError::Expired {
            bundle: doc.id.clone(),
            created: doc.created.clone(),
            expires: expires.clone(),
        }),
    }
}

/// The op that records `doc` as imported at `now` in the [`DOCUMENT`]
/// room document, when it is newer (by `created`) than the newest there.
/// A bundle whose `created` cannot be read leaves the document as it is
/// (import refuses such a bundle before this).
pub fn record_op(doc: &BundleDoc, now: SystemTime) -> Op {
    let entry = Newest {
        bundle: doc.id.clone(),
        created: doc.created.clone(),
        expires: doc.expires.clone(),
        imported: format(OffsetDateTime::from(now)),
    };
    Op::Document {
        name: DOCUMENT.into(),
        change: DocumentChange::json(move |current: Option<ImportsDoc>| {
            let newer = match &current {
                None => true,
                Some(cur) => match (
                    OffsetDateTime::parse(&entry.created, &Rfc3339),
                    OffsetDateTime::parse(&cur.newest.created, &Rfc3339),
                ) {
                    (Ok(new), Ok(old)) => new > old,
                    (Ok(_), Err(_)) => true,
                    (Err(_), _) => false,
                },
            };
            Ok(if newer {
                Some(ImportsDoc {
                    newest: entry.clone(),
                })
            } else {
                current
            })
        }),
    }
}

/// Whether the site is stale: the newest imported bundle was created
/// more than `max` before `now` (or nothing was ever imported). `None`
/// when fresh; otherwise one line saying how old the newest bundle is.
pub fn staleness(newest: Option<&Newest>, max: Duration, now: SystemTime) -> Option<String> {
    let max_text = human(max);
    let Some(n) = newest else {
        return Some(format!(
            "stale: no bundle imported yet (max_staleness {max_text})"
        ));
    };
    let created = OffsetDateTime::parse(&n.created, &Rfc3339).ok()?;
    let age = OffsetDateTime::from(now) - created;
    let age = Duration::try_from(age).unwrap_or(Duration::ZERO);
    (age > max).then(|| {
        format!(
            "stale: the newest bundle imported ({}, created {}, imported {}) is {} old, more than max_staleness {max_text}",
            n.bundle,
            n.created,
            n.imported,
            human(age)
        )
    })
}

/// `d` in its largest whole unit (`8d`, `5h`, `30m`, `12s`; rounded down).
fn human(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        86_400.. => format!("{}d", s / 86_400),
        3_600.. => format!("{}h", s / 3_600),
        60.. => format!("{}m", s / 60),
        _ => format!("{s}s"),
    }
}

/// What a site says of its freshness: the newest imported bundle and,
/// with a max staleness, the [`staleness`] line (what `/readyz`, the
/// console and `airlock status` print).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    /// The newest bundle imported (`None` when none was recorded).
    pub newest: Option<Newest>,
    /// Why the site is stale; `None` when fresh or not checked.
    pub stale: Option<String>,
}

/// The [`Report`] of the generation `snap` of `state`, checked against
/// `max` (`None`: not checked) at the current time.
///
/// Errors: the `imports` document of `snap` cannot be read.
pub async fn report(
    state: &crate::state::StateStore,
    snap: &crate::state::Snapshot,
    max: Option<Duration>,
) -> Result<Report, crate::state::StateError> {
    let newest = state
        .document::<ImportsDoc>(snap, DOCUMENT)
        .await?
        .map(|d| d.newest);
    let stale = max.and_then(|m| staleness(newest.as_ref(), m, SystemTime::now()));
    Ok(Report { newest, stale })
}

/// The unix time (seconds) of `newest`'s `created`, for the metrics gauge.
pub fn created_secs(newest: &Newest) -> Option<i64> {
    OffsetDateTime::parse(&newest.created, &Rfc3339)
        .ok()
        .map(|t| t.unix_timestamp())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(created: &str, expires: Option<&str>) -> BundleDoc {
        BundleDoc {
            format: super::super::format::FORMAT_V1.into(),
            id: "b1".into(),
            created: created.into(),
            expires: expires.map(str::to_string),
            creator: String::new(),
            images: Vec::new(),
            layout: super::super::format::LayoutDigests {
                oci_layout: crate::digest::Digest::sha256_of(b""),
                index_json: crate::digest::Digest::sha256_of(b""),
            },
            blobs: Vec::new(),
            required: Vec::new(),
            addons: Vec::new(),
            torcx_contents: Vec::new(),
            stacks: Vec::new(),
            feeds: Vec::new(),
        }
    }

    fn at(s: &str) -> SystemTime {
        OffsetDateTime::parse(s, &Rfc3339).unwrap().into()
    }

    #[test]
    fn expires_is_created_plus_the_window() {
        assert_eq!(
            expires_at("2026-12-05T10:00:00Z", Duration::from_secs(30 * 86_400)).unwrap(),
            "2027-01-04T10:00:00Z"
        );
        assert!(expires_at("yesterday", Duration::from_secs(1)).is_err());
    }

    #[test]
    fn a_bundle_past_its_expiry_is_refused_unless_allowed() {
        let d = doc("2026-12-01T00:00:00Z", Some("2026-12-02T00:00:00Z"));
        assert!(!check_expiry(&d, at("2026-12-01T23:59:59Z"), None).unwrap());
        let err = check_expiry(&d, at("2026-12-02T00:00:00Z"), None).unwrap_err();
        assert_eq!(
            err.to_string(),
            "bundle b1 expired at 2026-12-02T00:00:00Z (created 2026-12-01T00:00:00Z); a bundle past its expiry is refused (make a fresh one, or import --allow-expired --reason TEXT); nothing imported"
        );
        assert!(check_expiry(&d, at("2027-01-01T00:00:00Z"), Some("late media")).unwrap());
        // Made before bundles carried an expiry: passes.
        assert!(
            !check_expiry(
                &doc("2020-01-01T00:00:00Z", None),
                at("2027-01-01T00:00:00Z"),
                None
            )
            .unwrap()
        );
    }

    #[test]
    fn bad_times_are_named() {
        let d = doc("2026-12-01T00:00:00Z", Some("soon"));
        assert_eq!(
            check_expiry(&d, at("2026-12-01T00:00:00Z"), None)
                .unwrap_err()
                .to_string(),
            "bundle b1: expires \"soon\" is not a valid RFC 3339 time"
        );
        let d = doc("2026-12-01T00:00:00Z", Some("2026-11-30T00:00:00Z"));
        assert_eq!(
            check_expiry(&d, at("2026-11-01T00:00:00Z"), Some("x"))
                .unwrap_err()
                .to_string(),
            "bundle b1: expires \"2026-11-30T00:00:00Z\" is not a valid RFC 3339 time after created"
        );
    }

    #[test]
    fn only_a_newer_bundle_replaces_the_newest() {
        let apply = |cur: Option<&[u8]>, d: &BundleDoc, now: &str| -> ImportsDoc {
            let Op::Document { change, .. } = record_op(d, at(now)) else {
                unreachable!()
            };
            serde_json::from_slice(&change.apply(cur).unwrap().unwrap()).unwrap()
        };
        let first = apply(
            None,
            &doc("2026-12-01T00:00:00Z", None),
            "2026-12-03T00:00:00Z",
        );
        assert_eq!(first.newest.created, "2026-12-01T00:00:00Z");
        assert_eq!(first.newest.imported, "2026-12-03T00:00:00Z");
        let bytes = serde_json::to_vec(&first).unwrap();
        let mut older = doc("2026-11-01T00:00:00Z", None);
        older.id = "old".into();
        assert_eq!(apply(Some(&bytes), &older, "2026-12-04T00:00:00Z"), first);
        let mut newer = doc("2026-12-02T00:00:00Z", Some("2027-01-01T00:00:00Z"));
        newer.id = "new".into();
        let n = apply(Some(&bytes), &newer, "2026-12-04T00:00:00Z");
        assert_eq!(n.newest.bundle, "new");
        assert_eq!(n.newest.expires.as_deref(), Some("2027-01-01T00:00:00Z"));
    }

    #[test]
    fn staleness_is_measured_from_the_newest_bundles_creation() {
        let n = Newest {
            bundle: "b1".into(),
            created: "2026-12-01T00:00:00Z".into(),
            expires: None,
            imported: "2026-12-03T00:00:00Z".into(),
        };
        let week = Duration::from_secs(7 * 86_400);
        assert_eq!(staleness(Some(&n), week, at("2026-12-08T00:00:00Z")), None);
        assert_eq!(
            staleness(Some(&n), week, at("2026-12-09T00:00:00Z")).unwrap(),
            "stale: the newest bundle imported (b1, created 2026-12-01T00:00:00Z, imported 2026-12-03T00:00:00Z) is 8d old, more than max_staleness 7d"
        );
        assert_eq!(
            staleness(None, week, at("2026-12-09T00:00:00Z")).unwrap(),
            "stale: no bundle imported yet (max_staleness 7d)"
        );
        assert_eq!(created_secs(&n), Some(1_796_083_200));
    }
}
