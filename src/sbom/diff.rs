//! Stack diffs: what changes between two inventories (packages added,
//! removed, upgraded, downgraded, with versions ordered by the package's
//! own system; `os-release` fields changed). Pure: two inventories in, a
//! value out; text for the CLI, JSON for `--json`, the promotion record
//! and the `stack.promoted` event.

use std::collections::BTreeMap;

use super::inventory::{Inventory, Package};

/// One package change.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Change {
    /// Package name.
    pub name: String,
    /// Architecture.
    pub arch: String,
    /// Version before (absent for an added package).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// Version after (absent for a removed package).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
}

/// One `os-release` field change.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct OsChange {
    /// The field (`VERSION_ID`, `PRETTY_NAME`).
    pub key: String,
    /// Before (absent: added).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// After (absent: removed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
}

/// What changes from one inventory to another.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StackDiff {
    /// Packages only in the new one.
    pub added: Vec<Change>,
    /// Packages only in the old one.
    pub removed: Vec<Change>,
    /// Packages with a greater version.
    pub upgraded: Vec<Change>,
    /// Packages with a smaller version.
    pub downgraded: Vec<Change>,
    /// `os-release` fields that differ.
    pub os_release: Vec<OsChange>,
    /// Packages in both with the same version.
    pub unchanged: usize,
}

impl StackDiff {
    /// True when nothing differs.
    pub fn is_empty(&self) -> bool {
        self.added.is_empty()
            && self.removed.is_empty()
            && self.upgraded.is_empty()
            && self.downgraded.is_empty()
            && self.os_release.is_empty()
    }

    /// `3 upgraded, 1 added, 0 removed, 0 downgraded, os-release unchanged`.
    pub fn summary(&self) -> String {
        format!(
            "{} upgraded, {} downgraded, {} added, {} removed, {} unchanged; os-release {}",
            self.upgraded.len(),
            self.downgraded.len(),
            self.added.len(),
            self.removed.len(),
            self.unchanged,
            if self.os_release.is_empty() {
                "unchanged"
            } else {
                "changed"
            }
        )
    }

    /// The text the CLI prints: the summary, then one line per change.
    pub fn text(&self) -> String {
        let mut out = format!("{}\n", self.summary());
        let v = |s: &Option<String>| s.clone().unwrap_or_default();
        for c in &self.os_release {
            out.push_str(&format!(
                "  os-release {}: {:?} -> {:?}\n",
                c.key,
                v(&c.from),
                v(&c.to)
            ));
        }
        for (mark, list) in [("^", &self.upgraded), ("v", &self.downgraded)] {
            for c in list {
                out.push_str(&format!(
                    "  {mark} {} ({}) {} -> {}\n",
                    c.name,
                    c.arch,
                    v(&c.from),
                    v(&c.to)
                ));
            }
        }
        for c in &self.added {
            out.push_str(&format!("  + {} ({}) {}\n", c.name, c.arch, v(&c.to)));
        }
        for c in &self.removed {
            out.push_str(&format!("  - {} ({}) {}\n", c.name, c.arch, v(&c.from)));
        }
        out
    }
}

/// The diff from `old` to `new`. Packages are matched by (name,
/// architecture); when a name appears twice for one architecture (a
/// database listing two versions) the greatest version counts.
pub fn diff(old: &Inventory, new: &Inventory) -> StackDiff {
    fn index(inv: &Inventory) -> BTreeMap<(&str, &str), &Package> {
        // Sorted by version within (name, arch): the last one wins.
        inv.packages
            .iter()
            .map(|p| ((p.name.as_str(), p.arch.as_str()), p))
            .collect()
    }
    let (a, b) = (index(old), index(new));
    let mut d = StackDiff::default();
    for (k, p) in &a {
        let change = |to: Option<&Package>| Change {
            name: k.0.to_string(),
            arch: k.1.to_string(),
            from: Some(p.version.clone()),
            to: to.map(|q| q.version.clone()),
        };
        match b.get(k) {
            None => d.removed.push(change(None)),
            Some(q) => match p.packaging.compare(&p.version, &q.version) {
                std::cmp::Ordering::Less => d.upgraded.push(change(Some(q))),
                std::cmp::Ordering::Greater => d.downgraded.push(change(Some(q))),
                std::cmp::Ordering::Equal => d.unchanged += 1,
            },
        }
    }
    for (k, q) in &b {
        if !a.contains_key(k) {
            d.added.push(Change {
                name: k.0.to_string(),
                arch: k.1.to_string(),
                from: None,
                to: Some(q.version.clone()),
            });
        }
    }
    let keys: std::collections::BTreeSet<&String> = old.os.keys().chain(new.os.keys()).collect();
    for k in keys {
        let (f, t) = (old.os.get(k), new.os.get(k));
        if f != t {
            d.os_release.push(OsChange {
                key: k.clone(),
                from: f.cloned(),
                to: t.cloned(),
            });
        }
    }
    d
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sbom::version::Packaging;

    fn pkg(name: &str, version: &str) -> Package {
        Package {
            packaging: Packaging::Deb,
            name: name.into(),
            version: version.into(),
            arch: "amd64".into(),
            source: None,
            source_version: None,
            license: None,
        }
    }

    #[test]
    fn four_kinds_and_os_release() {
        let old = Inventory {
            os: [("VERSION_ID".to_string(), "12".to_string())].into(),
            packages: vec![
                pkg("a", "1.0"),
                pkg("b", "2.0~rc1"),
                pkg("c", "1:0.9"),
                pkg("d", "1"),
            ],
        };
        let new = Inventory {
            os: [("VERSION_ID".to_string(), "12.1".to_string())].into(),
            packages: vec![
                pkg("a", "1.0"),
                pkg("b", "2.0"),
                pkg("c", "5.0"),
                pkg("e", "1"),
            ],
        };
        let d = diff(&old, &new);
        assert_eq!(
            d.upgraded
                .iter()
                .map(|c| c.name.as_str())
                .collect::<Vec<_>>(),
            ["b"]
        );
        assert_eq!(
            d.downgraded
                .iter()
                .map(|c| c.name.as_str())
                .collect::<Vec<_>>(),
            ["c"]
        );
        assert_eq!(d.added[0].name, "e");
        assert_eq!(d.removed[0].name, "d");
        assert_eq!(d.unchanged, 1);
        assert_eq!(d.os_release[0].to.as_deref(), Some("12.1"));
    }
}
