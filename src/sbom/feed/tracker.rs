//! The Debian security tracker's JSON (`/tracker/data/json`): an object
//! of source packages, each an object of issues (`CVE-...`, `TEMP-...`),
//! each with `releases` by code name holding `status` (`resolved`, `open`,
//! `undetermined`), `fixed_version` (`0`: never affected) and `urgency`.
//! Read as a stream, one package at a time (memory bounded by the largest
//! package, never the whole file).
//!
//! Each (package, issue, release) that is `resolved` with a version or
//! `open` becomes an [`Advisory`] of ecosystem `Debian:<codename>`;
//! `undetermined` ones and those never affected are left out.

use std::collections::BTreeMap;
use std::fmt;
use std::io::Read;

use anyhow::Result;
use serde::de::{DeserializeSeed, MapAccess, Visitor};

use super::advisory::{Advisory, Range};
use super::severity;

#[derive(serde::Deserialize)]
struct Issue {
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    releases: BTreeMap<String, Release>,
}

#[derive(serde::Deserialize)]
struct Release {
    status: String,
    #[serde(default)]
    fixed_version: Option<String>,
    #[serde(default)]
    urgency: Option<String>,
}

fn advisories(
    package: &str,
    issues: BTreeMap<String, Issue>,
    emit: &mut dyn FnMut(Advisory) -> Result<()>,
) -> Result<()> {
    for (id, issue) in issues {
        for (codename, rel) in issue.releases {
            let fixed = match (rel.status.as_str(), rel.fixed_version) {
                ("resolved", Some(v)) if v == "0" => continue,
                ("resolved", Some(v)) => Some(v),
                ("open", _) => None,
                _ => continue,
            };
            emit(Advisory {
                id: id.clone(),
                aliases: Vec::new(),
                ecosystem: format!("Debian:{codename}"),
                package: package.to_string(),
                ranges: vec![Range {
                    introduced: "0".into(),
                    fixed,
                    last_affected: None,
                }],
                versions: Vec::new(),
                severity: rel
                    .urgency
                    .as_deref()
                    .and_then(severity::from_label)
                    .unwrap_or("unknown")
                    .into(),
                summary: issue
                    .description
                    .as_ref()
                    .map(|d| d.chars().take(200).collect()),
            })?;
        }
    }
    Ok(())
}

struct Top<'e> {
    emit: &'e mut dyn FnMut(Advisory) -> Result<()>,
    packages: u64,
}

impl<'de> Visitor<'de> for &mut Top<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object of source packages")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(package) = map.next_key::<String>()? {
            let issues: BTreeMap<String, Issue> = map.next_value()?;
            advisories(&package, issues, self.emit).map_err(serde::de::Error::custom)?;
            self.packages += 1;
        }
        Ok(())
    }
}

impl<'de> DeserializeSeed<'de> for &mut Top<'_> {
    type Value = ();

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_map(self)
    }
}

/// Reads a tracker JSON stream, calling `emit` for each advisory; returns
/// the number of source packages. Errors: not JSON, not the tracker's shape.
pub fn read(reader: impl Read, emit: &mut dyn FnMut(Advisory) -> Result<()>) -> Result<u64> {
    let mut top = Top { emit, packages: 0 };
    let mut de =
        serde_json::Deserializer::from_reader(std::io::BufReader::with_capacity(1 << 20, reader));
    (&mut top)
        .deserialize(&mut de)
        .map_err(|e| anyhow::anyhow!("not Debian security tracker JSON: {e}"))?;
    de.end()
        .map_err(|e| anyhow::anyhow!("trailing data after the tracker JSON: {e}"))?;
    Ok(top.packages)
}

#[cfg(test)]
mod tests {
    #[test]
    fn releases_become_advisories() {
        let json = br#"{
          "openssl": {
            "CVE-2026-1": {"description": "d", "scope": "remote", "releases": {
              "bookworm": {"status": "resolved", "fixed_version": "3.0.11-1~deb12u2", "urgency": "high",
                           "repositories": {"bookworm": "3.0.11-1~deb12u2"}},
              "trixie": {"status": "resolved", "fixed_version": "0", "urgency": "unimportant"},
              "sid": {"status": "open", "urgency": "low**"}}},
            "TEMP-0000001-1": {"releases": {"bookworm": {"status": "undetermined"}}}
          },
          "zlib": {}
        }"#;
        let mut got = Vec::new();
        let n = super::read(&json[..], &mut |a| {
            got.push(a);
            Ok(())
        })
        .unwrap();
        assert_eq!(n, 2);
        let line = |a: &super::Advisory| {
            format!(
                "{} {} {} {:?} {}",
                a.id, a.ecosystem, a.package, a.ranges[0].fixed, a.severity
            )
        };
        assert_eq!(
            got.iter().map(line).collect::<Vec<_>>(),
            [
                "CVE-2026-1 Debian:bookworm openssl Some(\"3.0.11-1~deb12u2\") high",
                "CVE-2026-1 Debian:sid openssl None low",
            ]
        );
        assert!(super::read(&b"[1, 2]"[..], &mut |_| Ok(())).is_err());
    }
}
