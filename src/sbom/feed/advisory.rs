//! The normalized advisory: one affected package of one vulnerability
//! record, in one distribution release, with its affected version ranges.
//! What import writes (one JSON line each) and matching reads; the same
//! for every feed format.

use crate::sbom::version::Packaging;

/// One range of affected versions (OSV `ranges[].events` of type
/// `ECOSYSTEM`, paired up): from `introduced` (`0`: the first version) up
/// to, not including, `fixed`, or up to and including `last_affected`;
/// open-ended when neither is given.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Range {
    /// First affected version (`0`: every version).
    #[serde(rename = "i")]
    pub introduced: String,
    /// First version with the fix.
    #[serde(rename = "f", default, skip_serializing_if = "Option::is_none")]
    pub fixed: Option<String>,
    /// Last affected version (when the feed gives no fix).
    #[serde(rename = "l", default, skip_serializing_if = "Option::is_none")]
    pub last_affected: Option<String>,
}

/// One advisory line.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Advisory {
    /// The record's id (`CVE-2026-1234`, `DSA-5555-1`, `ALPINE-CVE-...`).
    pub id: String,
    /// Its aliases (CVE ids of a DSA).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub aliases: Vec<String>,
    /// The OSV ecosystem (`Debian:12`, `Ubuntu:22.04:LTS`, `Alpine:v3.19`).
    #[serde(rename = "eco")]
    pub ecosystem: String,
    /// The (source) package name.
    #[serde(rename = "pkg")]
    pub package: String,
    /// Affected ranges.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ranges: Vec<Range>,
    /// Affected versions listed one by one (used when there are no ranges).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub versions: Vec<String>,
    /// `critical` ... `negligible`, `unknown` ([`super::severity::LEVELS`]).
    #[serde(rename = "sev")]
    pub severity: String,
    /// One line about it, when the feed has one (at most 200 characters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
}

impl Advisory {
    /// The id to show: a CVE id when the record is one or names one.
    pub fn cve_or_id(&self) -> &str {
        if self.id.starts_with("CVE-") {
            return &self.id;
        }
        self.aliases
            .iter()
            .find(|a| a.starts_with("CVE-"))
            .unwrap_or(&self.id)
    }

    /// Whether `version` is affected (ordered by `packaging`).
    pub fn affects(&self, packaging: Packaging, version: &str) -> bool {
        use std::cmp::Ordering::*;
        if self.ranges.is_empty() {
            return self
                .versions
                .iter()
                .any(|v| packaging.compare(v, version) == Equal);
        }
        self.ranges.iter().any(|r| {
            (r.introduced == "0" || packaging.compare(version, &r.introduced) != Less)
                && r.fixed
                    .as_ref()
                    .is_none_or(|f| packaging.compare(version, f) == Less)
                && r.last_affected
                    .as_ref()
                    .is_none_or(|l| packaging.compare(version, l) != Greater)
        })
    }

    /// The version that fixes `version`, if the feed names one.
    pub fn fixed_for(&self, packaging: Packaging, version: &str) -> Option<&str> {
        self.ranges
            .iter()
            .filter_map(|r| r.fixed.as_deref())
            .filter(|f| packaging.compare(version, f) == std::cmp::Ordering::Less)
            .min_by(|a, b| packaging.compare(a, b))
    }
}

/// A distribution release as both images and feeds can name it:
/// (`debian`, `12`), (`ubuntu`, `22.04`), (`alpine`, `3.19`); release `*`
/// stands for every release.
pub type Release = (String, String);

/// Debian's code names, for feeds that use them (the security tracker).
const DEBIAN_CODENAMES: [(&str, &str); 10] = [
    ("wheezy", "7"),
    ("jessie", "8"),
    ("stretch", "9"),
    ("buster", "10"),
    ("bullseye", "11"),
    ("bookworm", "12"),
    ("trixie", "13"),
    ("forky", "14"),
    ("duke", "15"),
    ("sid", "unstable"),
];

/// Debian's release number for a code name (itself when unknown).
pub fn debian_release(codename: &str) -> &str {
    DEBIAN_CODENAMES
        .iter()
        .find(|(c, _)| *c == codename)
        .map_or(codename, |(_, n)| n)
}

/// The release an OSV ecosystem names (`Debian:12`, `Debian:bookworm`,
/// `Ubuntu:22.04:LTS`, `Alpine:v3.19`, bare `Debian`). `None` for
/// ecosystems airlock does not match (other distributions, `Ubuntu:Pro:*`).
pub fn release_of_ecosystem(eco: &str) -> Option<Release> {
    let mut parts = eco.split(':');
    let family = parts.next()?.to_ascii_lowercase();
    let rel = parts.next().unwrap_or("*");
    let rel = match family.as_str() {
        "debian" => debian_release(rel).to_string(),
        "ubuntu" if rel != "Pro" => rel.to_string(),
        "alpine" => rel.trim_start_matches('v').to_string(),
        _ => return None,
    };
    Some((family, rel))
}

/// The release of an image from its `os-release` fields.
pub fn release_of_os(os: &std::collections::BTreeMap<String, String>) -> Option<Release> {
    let id = os.get("ID")?.to_ascii_lowercase();
    let rel = match id.as_str() {
        "debian" => match os.get("VERSION_ID") {
            Some(v) => v.clone(),
            None => {
                debian_release(os.get("VERSION_CODENAME").map_or("sid", String::as_str)).to_string()
            }
        },
        "ubuntu" => os.get("VERSION_ID")?.clone(),
        "alpine" => {
            let v = os.get("VERSION_ID")?;
            v.split('.').take(2).collect::<Vec<_>>().join(".")
        }
        _ => return None,
    };
    Some((id, rel))
}

/// The packaging of a release's family.
pub fn packaging_of(family: &str) -> Packaging {
    if family == "alpine" {
        Packaging::Apk
    } else {
        Packaging::Deb
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_and_releases() {
        let a = Advisory {
            id: "DSA-1".into(),
            aliases: vec!["CVE-2026-1234".into()],
            ecosystem: "Debian:12".into(),
            package: "openssl".into(),
            ranges: vec![Range {
                introduced: "0".into(),
                fixed: Some("3.0.11-1~deb12u2".into()),
                last_affected: None,
            }],
            versions: vec![],
            severity: "high".into(),
            summary: None,
        };
        assert!(a.affects(Packaging::Deb, "3.0.11-1~deb12u1"));
        assert!(!a.affects(Packaging::Deb, "3.0.11-1~deb12u2"));
        assert!(!a.affects(Packaging::Deb, "3.0.11-1"));
        assert_eq!(a.cve_or_id(), "CVE-2026-1234");
        assert_eq!(
            release_of_ecosystem("Debian:bookworm"),
            Some(("debian".into(), "12".into()))
        );
        assert_eq!(
            release_of_ecosystem("Alpine:v3.19"),
            Some(("alpine".into(), "3.19".into()))
        );
        assert_eq!(release_of_ecosystem("Ubuntu:Pro:22.04:LTS"), None);
        let os = [("ID", "alpine"), ("VERSION_ID", "3.19.1")]
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .into();
        assert_eq!(release_of_os(&os), Some(("alpine".into(), "3.19".into())));
    }
}
