//! Tag selection for registry sources: `tags = [...]` or `tag_pattern` with
//! `max_tags` (as skopeo sync and Hauler users write them).
//!
//! Owns: matching a source's tag list against a pattern and ordering tags
//! "newest first" by semantic version. Never talks to the network: the tag
//! list comes from [`super::Remote::list_tags`].
//!
//! Ordering: a tag that reads as a version (`v` optional, one to three
//! numeric parts, an optional `-PRERELEASE` and `+BUILD`) sorts by its
//! numbers, a release above its pre-releases (`1.2.0` > `1.2.0-rc.1`),
//! pre-releases lexically; missing parts are 0 (`1.2` = `1.2.0`). Tags that
//! are not versions come after every version, in reverse lexical order.

use std::cmp::Ordering;

use anyhow::{Result, anyhow, bail};

/// A tag read as a version: numbers and pre-release.
#[derive(Debug, PartialEq, Eq)]
struct Version {
    nums: [u64; 3],
    pre: Option<String>,
}

fn parse_version(tag: &str) -> Option<Version> {
    let t = tag.strip_prefix('v').unwrap_or(tag);
    let t = t.split_once('+').map_or(t, |(a, _)| a);
    let (core, pre) = match t.split_once('-') {
        Some((c, p)) if !p.is_empty() => (c, Some(p.to_string())),
        Some(_) => return None,
        None => (t, None),
    };
    let parts: Vec<&str> = core.split('.').collect();
    if parts.is_empty() || parts.len() > 3 {
        return None;
    }
    let mut nums = [0u64; 3];
    for (i, p) in parts.iter().enumerate() {
        if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        nums[i] = p.parse().ok()?;
    }
    Some(Version { nums, pre })
}

/// Newest first (see the module docs).
fn newest_first(a: &str, b: &str) -> Ordering {
    match (parse_version(a), parse_version(b)) {
        (Some(va), Some(vb)) => vb
            .nums
            .cmp(&va.nums)
            .then_with(|| match (&va.pre, &vb.pre) {
                (None, None) => Ordering::Equal,
                (None, Some(_)) => Ordering::Less,
                (Some(_), None) => Ordering::Greater,
                (Some(x), Some(y)) => y.cmp(x),
            })
            .then_with(|| b.cmp(a)),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => b.cmp(a),
    }
}

/// The tags of `available` that `pattern` (a `regex` crate expression,
/// unanchored like skopeo sync's: write `^...$` to match whole tags)
/// matches, newest first, at most `max` of them. Errors: an invalid
/// pattern, or no tag matching.
pub fn select(available: &[String], pattern: &str, max: Option<usize>) -> Result<Vec<String>> {
    let re = regex::Regex::new(pattern).map_err(|e| anyhow!("tag_pattern {pattern:?}: {e}"))?;
    let mut tags: Vec<String> = available
        .iter()
        .filter(|t| re.is_match(t))
        .cloned()
        .collect();
    if tags.is_empty() {
        bail!(
            "tag_pattern {pattern:?} matches none of the {} tags",
            available.len()
        );
    }
    tags.sort_by(|a, b| newest_first(a, b));
    tags.dedup();
    if let Some(m) = max {
        tags.truncate(m);
    }
    Ok(tags)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newest_by_version_then_the_rest() {
        let tags: Vec<String> = [
            "1.0",
            "1.10",
            "1.2",
            "v1.9.1",
            "1.10-rc.1",
            "latest",
            "edge",
            "1.10.0+b7",
            "2.0-beta",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        assert_eq!(select(&tags, ".", None).unwrap(), expected_order());
        assert_eq!(
            select(&tags, r"^1\.[0-9]+$", Some(2)).unwrap(),
            ["1.10", "1.2"]
        );
        assert!(select(&tags, "^nothing$", None).is_err());
        assert!(select(&tags, "(", None).is_err());
    }

    fn expected_order() -> Vec<String> {
        // 2.0-beta is a pre-release of 2.0.0: newer than every 1.x.
        [
            "2.0-beta",
            "1.10.0+b7",
            "1.10",
            "1.10-rc.1",
            "v1.9.1",
            "1.2",
            "1.0",
            "latest",
            "edge",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    }
}
