//! `keep_tags` rules (zot's `keepTags`): which tags of a repository a rule
//! keeps, and why each tag is kept or goes.
//!
//! Owns: the rule ([`KeepTags`], `--keep-tags` and `[[gc.keep_tags]]`)
//! and its verdict over one repository's tags ([`judge`]). A tag the rule
//! applies to is kept when any of its criteria holds: among the `newest`
//! N by push time; pushed within `pushed_within_days`; the manifest it
//! names (for an index, the index itself) pulled, by tag or by digest,
//! within `pulled_within_days`, or the tag itself pulled by name within
//! it while it named another manifest (a tag moved since is still in use)
//! ([`crate::state::pulls`]: day resolution, so a pull on the day `D` days
//! before today still counts; no record means never pulled). Tags set before push times were recorded count as the
//! oldest. Never reads the store: the caller hands in the tags and the
//! pull record.

use std::time::SystemTime;

use crate::names::RepositoryName;
use crate::state::TagEntry;
use crate::state::pulls::{self, PullRecord};

/// One `[[gc.keep_tags]]` rule.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeepTags {
    /// Repositories the rule applies to: a pattern where `*` matches within
    /// one path segment and `**` across segments (`builds/**`).
    pub repositories: String,
    /// Tags the rule applies to (same pattern syntax, `*` for all)
    /// [default: *]; others are kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tags: Option<String>,
    /// Keep the N most recently pushed tags.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub newest: Option<usize>,
    /// Keep tags pushed within this many days.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pushed_within_days: Option<u64>,
    /// Keep tags whose manifest was pulled (a GET by tag or by digest,
    /// through any replica), or that were pulled by name, within this many
    /// days (at most 366: the pull record forgets older pulls).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pulled_within_days: Option<u64>,
}

impl KeepTags {
    /// Why the rule cannot be used, if it cannot: no repositories, no
    /// criterion, or `pulled_within_days` beyond what the record keeps.
    pub fn problem(&self) -> Option<String> {
        if self.repositories.is_empty() {
            return Some("needs repositories".into());
        }
        if self.newest.is_none()
            && self.pushed_within_days.is_none()
            && self.pulled_within_days.is_none()
        {
            return Some("needs newest, pushed_within_days or pulled_within_days".into());
        }
        if let Some(d) = self.pulled_within_days
            && d > u64::from(pulls::RECORD_DAYS)
        {
            return Some(format!(
                "pulled_within_days {d}: pulls are remembered for {} days",
                pulls::RECORD_DAYS
            ));
        }
        None
    }
}

impl std::str::FromStr for KeepTags {
    type Err = String;

    /// `REPOSITORIES:KEY=VALUE[,KEY=VALUE...]` (`--keep-tags`), keys
    /// `newest`, `pushed-within-days`, `pulled-within-days` and `tags`,
    /// e.g. `builds/**:newest=10,pulled-within-days=30`.
    fn from_str(s: &str) -> Result<KeepTags, String> {
        let bad = || {
            format!(
                "--keep-tags {s:?}: expected REPOSITORIES:newest=N,pushed-within-days=D,pulled-within-days=D[,tags=PATTERN]"
            )
        };
        let (repos, rest) = s.split_once(':').ok_or_else(bad)?;
        let mut rule = KeepTags {
            repositories: repos.to_string(),
            ..KeepTags::default()
        };
        for kv in rest.split(',').filter(|p| !p.is_empty()) {
            let (k, v) = kv.split_once('=').ok_or_else(bad)?;
            match k {
                "newest" => rule.newest = Some(v.parse().map_err(|_| bad())?),
                "pushed-within-days" | "pushed_within_days" => {
                    rule.pushed_within_days = Some(v.parse().map_err(|_| bad())?)
                }
                "pulled-within-days" | "pulled_within_days" => {
                    rule.pulled_within_days = Some(v.parse().map_err(|_| bad())?)
                }
                "tags" => rule.tags = Some(v.to_string()),
                _ => return Err(bad()),
            }
        }
        match rule.problem() {
            Some(p) => Err(format!("{}: {p}", bad())),
            None => Ok(rule),
        }
    }
}

/// What a rule decided for one tag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict<'a> {
    /// The tag.
    pub entry: &'a TagEntry,
    /// Kept (`true`) or removed.
    pub keep: bool,
    /// Why, e.g. `pulled 3 days ago (keep_tags "builds/**")` or `not
    /// pulled within 7 days (pushed 2026-11-02; never pulled; keep_tags
    /// "builds/**")`.
    pub reason: String,
}

fn unix(t: SystemTime) -> u64 {
    t.duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The calendar day (UTC) of `secs` since the epoch, `2026-11-02`.
pub fn day(secs: u64) -> String {
    let t = time::OffsetDateTime::from_unix_timestamp(secs as i64)
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    format!("{}", t.date())
}

/// `today`, `1 day ago`, `N days ago`.
fn ago(days: u32) -> String {
    match days {
        0 => "today".into(),
        1 => "1 day ago".into(),
        n => format!("{n} days ago"),
    }
}

/// The verdict of `rule` on each tag of `tags` (the tags of `repository`
/// that the rule applies to), at `now`, with `pulled` the pull record
/// (needed when the rule has `pulled_within_days`; `None` counts as no
/// pull at all). Order: newest push first.
pub fn judge<'a>(
    rule: &KeepTags,
    repository: &RepositoryName,
    mut tags: Vec<&'a TagEntry>,
    pulled: Option<&PullRecord>,
    now: SystemTime,
) -> Vec<Verdict<'a>> {
    tags.sort_by(|a, b| {
        b.pushed
            .cmp(&a.pushed)
            .then(a.tag.as_str().cmp(b.tag.as_str()))
    });
    let horizon = rule
        .pushed_within_days
        .map(|d| unix(now).saturating_sub(d.saturating_mul(86_400)));
    let today = pulls::day_of(now);
    let scope = format!("keep_tags {:?}", rule.repositories);
    tags.into_iter()
        .enumerate()
        .map(|(rank, e)| {
            let pushed = e.pushed.map_or("before push times were kept".into(), |p| {
                format!("pushed {}", day(p))
            });
            let last = pulled.and_then(|r| r.last_pulled(repository, &e.manifest));
            let pulled_ago = last.map(|d| today.saturating_sub(d));
            let tag_ago = pulled
                .and_then(|r| r.tag_last_pulled(repository, &e.tag))
                .map(|d| today.saturating_sub(d));
            let mut kept = Vec::new();
            let mut not = Vec::new();
            if let Some(n) = rule.newest {
                if rank < n {
                    kept.push(format!("among the newest {n}"));
                } else {
                    not.push(format!("not among the newest {n}"));
                }
            }
            if let Some(d) = rule.pushed_within_days {
                if horizon.is_some_and(|h| e.pushed.is_some_and(|p| p >= h)) {
                    kept.push(format!("{pushed}, within {d} days"));
                } else {
                    not.push(format!("not pushed within {d} days"));
                }
            }
            if let Some(d) = rule.pulled_within_days {
                let within = |a: &u32| u64::from(*a) <= d;
                match (pulled_ago.filter(within), tag_ago.filter(within)) {
                    (Some(a), _) => kept.push(format!("pulled {}", ago(a))),
                    (None, Some(a)) => kept.push(format!(
                        "tag pulled {} (when it named another manifest)",
                        ago(a)
                    )),
                    (None, None) => not.push(format!("not pulled within {d} days")),
                }
            }
            let keep = !kept.is_empty();
            let reason = if keep {
                format!("{} ({scope})", kept.join(", "))
            } else {
                let mut when = vec![pushed];
                if rule.pulled_within_days.is_some() {
                    when.push(
                        pulled_ago
                            .map_or("never pulled".into(), |a| format!("last pulled {}", ago(a))),
                    );
                }
                format!("{} ({}; {scope})", not.join(", "), when.join("; "))
            };
            Verdict {
                entry: e,
                keep,
                reason,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::digest::Digest;
    use std::time::Duration;

    fn entry(tag: &str, pushed: u64) -> TagEntry {
        TagEntry {
            tag: tag.parse().unwrap(),
            manifest: Digest::sha256_of(tag.as_bytes()),
            pushed: Some(pushed),
            bundle: None,
        }
    }

    #[test]
    fn parses_and_checks_rules() {
        let r: KeepTags = "builds/**:pulled-within-days=7,tags=v*".parse().unwrap();
        assert_eq!(r.pulled_within_days, Some(7));
        assert_eq!(r.tags.as_deref(), Some("v*"));
        assert!("kpack/*".parse::<KeepTags>().is_err());
        assert!("kpack/*:tags=x".parse::<KeepTags>().is_err());
        assert!("kpack/*:pulled-within-days=x".parse::<KeepTags>().is_err());
        let too_long = "a:pulled-within-days=367".parse::<KeepTags>().unwrap_err();
        assert!(too_long.contains("366 days"), "{too_long}");
    }

    #[test]
    fn pulled_within_keeps_what_was_pulled_by_tag_or_digest() {
        let now = std::time::UNIX_EPOCH + Duration::from_secs(20_000 * 86_400 + 3600);
        let repo: RepositoryName = "app".parse().unwrap();
        let (a, b, c, d) = (entry("a", 1), entry("b", 2), entry("c", 3), entry("d", 4));
        let moved = entry("moved", 0);
        let mut record = PullRecord::default();
        record.note(&repo, &a.manifest, Some(&a.tag), 20_000 - 3);
        record.note(&repo, &c.manifest, None, 20_000 - 7);
        record.note(&repo, &d.manifest, None, 20_000 - 8);
        // `moved` was pulled by name while it named another manifest.
        let before = Digest::sha256_of(b"the manifest moved once named");
        record.note(&repo, &before, Some(&moved.tag), 20_000 - 1);
        let rule: KeepTags = "app:pulled-within-days=7".parse().unwrap();
        let verdicts = judge(
            &rule,
            &repo,
            vec![&a, &b, &c, &d, &moved],
            Some(&record),
            now,
        );
        let got: Vec<(&str, bool, &str)> = verdicts
            .iter()
            .map(|v| (v.entry.tag.as_str(), v.keep, v.reason.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                (
                    "d",
                    false,
                    "not pulled within 7 days (pushed 1970-01-01; last pulled 8 days ago; keep_tags \"app\")"
                ),
                ("c", true, "pulled 7 days ago (keep_tags \"app\")"),
                (
                    "b",
                    false,
                    "not pulled within 7 days (pushed 1970-01-01; never pulled; keep_tags \"app\")"
                ),
                ("a", true, "pulled 3 days ago (keep_tags \"app\")"),
                (
                    "moved",
                    true,
                    "tag pulled 1 day ago (when it named another manifest) (keep_tags \"app\")"
                ),
            ]
        );
        // Without a record nothing was pulled; other criteria still keep.
        let rule: KeepTags = "app:newest=1,pulled-within-days=7".parse().unwrap();
        let verdicts = judge(&rule, &repo, vec![&a, &b], None, now);
        assert!(verdicts[0].keep && verdicts[0].reason.starts_with("among the newest 1"));
        assert!(!verdicts[1].keep);
        assert!(
            verdicts[1]
                .reason
                .starts_with("not among the newest 1, not pulled within 7 days"),
            "{}",
            verdicts[1].reason
        );
    }
}
