//! The room's state document `torcx`: remotes, their addon builds (name,
//! version, format, hashes, the boards and OS versions each is built for,
//! where it is the default), deprecations and vendor-signed contents.
//!
//! Owns: the schema of the document and the pure functions that change it
//! (they run inside [`crate::state::DocumentChange::json`] and may run again
//! after a lost race). Never does I/O and never signs anything.

use std::collections::{BTreeMap, BTreeSet};

use super::format::{AddonFormat, compare_os_versions};
use crate::digest::Digest;

/// `kind` of the [`TorcxDoc`].
pub const KIND: &str = "airlock.torcx.v1";

/// The whole document.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TorcxDoc {
    /// Always [`KIND`].
    pub kind: String,
    /// Remote name (reverse DNS by convention) → its table.
    pub remotes: BTreeMap<String, RemoteTable>,
}

impl TorcxDoc {
    /// Every blob the document keeps: each build's archive and each vendor
    /// contents document. For garbage collection ([`crate::ops::gc`]).
    pub fn blobs(&self) -> impl Iterator<Item = &Digest> {
        self.remotes.values().flat_map(|r| {
            r.builds
                .iter()
                .map(|b| &b.sha256)
                .chain(r.vendor.iter().map(|v| &v.digest))
        })
    }
}

impl Default for TorcxDoc {
    fn default() -> Self {
        TorcxDoc {
            kind: KIND.into(),
            remotes: BTreeMap::new(),
        }
    }
}

/// A board and an OS version: what one contents document is for.
#[derive(
    Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub struct Target {
    /// Board, e.g. `amd64-usr` (`${COREOS_BOARD}`).
    pub board: String,
    /// OS version, e.g. `3033.2.0` (`${VERSION_ID}`).
    pub os_version: String,
}

/// One remote.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RemoteTable {
    /// Addon builds, sorted; each (name, version, format, target) appears at most once.
    #[serde(default)]
    pub builds: Vec<Build>,
    /// Addon versions left out of the contents from some OS version on.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deprecations: Vec<Deprecation>,
    /// Vendor-signed contents carried byte for byte, by target.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub vendor: Vec<VendorContents>,
}

/// One addon archive and where it applies.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub struct Build {
    /// Addon name.
    pub name: String,
    /// Version (profile reference).
    pub version: String,
    /// Archive format.
    pub format: AddonFormat,
    /// sha256 of the archive: its blob, and its `ETag`.
    pub sha256: Digest,
    /// sha512 of the archive, 128 lowercase hex digits (the contents' `hash`).
    pub sha512: String,
    /// Size in bytes.
    pub size: u64,
    /// Board × OS version it is built for.
    pub targets: BTreeSet<Target>,
    /// Targets where it is the `defaultVersion`.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub default_for: BTreeSet<Target>,
}

/// An addon version withdrawn from OS version `from_os_version` on (all boards).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub struct Deprecation {
    /// Addon name.
    pub name: String,
    /// Version withdrawn.
    pub version: String,
    /// First OS version whose contents leave it out ([`compare_os_versions`]).
    pub from_os_version: String,
    /// Why, shown by `torcx profile check` and `torcx list`.
    pub reason: String,
}

/// A vendor's signed `torcx_remote_contents.json.asc`, served byte for byte.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub struct VendorContents {
    /// Board and OS version it is served for.
    pub target: Target,
    /// The blob holding the armored document.
    pub digest: Digest,
    /// Its size in bytes.
    pub size: u64,
    /// The signed creation time (RFC 3339) of the bundle that carried it:
    /// contents from a bundle created earlier do not replace it (issue 24 §1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bundle_created: Option<String>,
}

impl RemoteTable {
    /// The deprecation withdrawing `name:version` at `os_version`, if any.
    pub fn deprecation(&self, name: &str, version: &str, os_version: &str) -> Option<&Deprecation> {
        self.deprecations.iter().find(|d| {
            d.name == name
                && d.version == version
                && compare_os_versions(os_version, &d.from_os_version) != std::cmp::Ordering::Less
        })
    }

    /// Builds offered at `target`: built for it and not withdrawn there.
    pub fn offered<'a>(&'a self, target: &'a Target) -> impl Iterator<Item = &'a Build> + 'a {
        self.builds.iter().filter(move |b| {
            b.targets.contains(target)
                && self
                    .deprecation(&b.name, &b.version, &target.os_version)
                    .is_none()
        })
    }

    /// The vendor contents for `target`, if carried.
    pub fn vendor_for(&self, target: &Target) -> Option<&VendorContents> {
        self.vendor.iter().find(|v| &v.target == target)
    }
}

/// Records `build` in `remote` of `doc`: the same name, version and format
/// at the same targets is replaced (a rebuild), the targets in its
/// `default_for` stop being the default of any other version of the name,
/// an identical archive (same sha256) merges its targets, and a build left
/// with no targets is dropped. Applying it twice changes nothing more.
pub fn record_build(doc: &mut TorcxDoc, remote: &str, build: Build) {
    let table = doc.remotes.entry(remote.to_string()).or_default();
    for b in &mut table.builds {
        if b.name == build.name
            && b.version == build.version
            && b.format == build.format
            && b.sha256 != build.sha256
        {
            b.targets.retain(|t| !build.targets.contains(t));
            b.default_for.retain(|t| !build.targets.contains(t));
        }
        if b.name == build.name && b.sha256 != build.sha256 {
            b.default_for.retain(|t| !build.default_for.contains(t));
        }
    }
    match table.builds.iter_mut().find(|b| {
        b.name == build.name
            && b.version == build.version
            && b.format == build.format
            && b.sha256 == build.sha256
    }) {
        Some(same) => {
            same.targets.extend(build.targets);
            same.default_for.extend(build.default_for);
        }
        None => table.builds.push(build),
    }
    for b in &mut table.builds {
        b.default_for.retain(|t| b.targets.contains(t));
    }
    table.builds.retain(|b| !b.targets.is_empty());
    table.builds.sort();
}

/// Records vendor-signed contents for `target` of `remote` (replacing any before).
///
/// Errors: the target's contents came from a bundle created later than
/// `contents`' (a downgrade), unless `allow_downgrade`.
pub fn record_vendor(
    doc: &mut TorcxDoc,
    remote: &str,
    contents: VendorContents,
    allow_downgrade: bool,
) -> Result<(), String> {
    let table = doc.remotes.entry(remote.to_string()).or_default();
    if let Some(old) = table.vendor.iter().find(|v| v.target == contents.target)
        && let (Some(was), Some(new)) = (&old.bundle_created, &contents.bundle_created)
        && was > new
        && !allow_downgrade
    {
        return Err(format!(
            "downgrade refused: torcx contents of {remote} for {}/{} came from a bundle created {was}; this bundle was created {new}, earlier (import --allow-downgrade --reason TEXT)",
            contents.target.board, contents.target.os_version
        ));
    }
    table.vendor.retain(|v| v.target != contents.target);
    table.vendor.push(contents);
    table.vendor.sort();
    Ok(())
}

/// Withdraws `name:version` of `remote` from `from_os_version` on (replacing
/// an earlier deprecation of the same version).
///
/// Errors: the remote is not known, or no build of `name:version` exists in it.
pub fn deprecate(doc: &mut TorcxDoc, remote: &str, dep: Deprecation) -> Result<(), String> {
    let table = doc
        .remotes
        .get_mut(remote)
        .ok_or_else(|| format!("remote {remote:?} is not known"))?;
    if !table
        .builds
        .iter()
        .any(|b| b.name == dep.name && b.version == dep.version)
    {
        return Err(format!(
            "remote {remote:?} has no addon {}:{}",
            dep.name, dep.version
        ));
    }
    table
        .deprecations
        .retain(|d| !(d.name == dep.name && d.version == dep.version));
    table.deprecations.push(dep);
    table.deprecations.sort();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(os: &str) -> Target {
        Target {
            board: "amd64-usr".into(),
            os_version: os.into(),
        }
    }

    fn build(version: &str, seed: &[u8], targets: &[&str], defaults: &[&str]) -> Build {
        Build {
            name: "docker".into(),
            version: version.into(),
            format: AddonFormat::Tgz,
            sha256: Digest::sha256_of(seed),
            sha512: "0".repeat(128),
            size: 1,
            targets: targets.iter().map(|o| t(o)).collect(),
            default_for: defaults.iter().map(|o| t(o)).collect(),
        }
    }

    #[test]
    fn rebuilds_replace_and_defaults_move() {
        let mut doc = TorcxDoc::default();
        record_build(
            &mut doc,
            "r",
            build("19.03", b"a", &["1", "2"], &["1", "2"]),
        );
        record_build(&mut doc, "r", build("20.10", b"b", &["2"], &["2"]));
        let once = doc.clone();
        record_build(&mut doc, "r", build("20.10", b"b", &["2"], &["2"]));
        assert_eq!(doc, once, "idempotent");
        let r = &doc.remotes["r"];
        assert_eq!(r.builds.len(), 2);
        assert_eq!(r.builds[0].default_for, [t("1")].into());
        assert_eq!(r.builds[1].default_for, [t("2")].into());
        // A rebuild of 19.03 for OS 1 replaces the old archive there only.
        record_build(&mut doc, "r", build("19.03", b"c", &["1"], &[]));
        let r = &doc.remotes["r"];
        let old = r
            .builds
            .iter()
            .find(|b| b.sha256 == Digest::sha256_of(b"a"))
            .unwrap();
        assert_eq!(old.targets, [t("2")].into());
        assert!(old.default_for.is_empty());
    }

    #[test]
    fn deprecations_apply_from_their_os_version_on() {
        let mut doc = TorcxDoc::default();
        record_build(
            &mut doc,
            "r",
            build("19.03", b"a", &["3033.2.0", "3033.10.0"], &[]),
        );
        let dep = |v: &str| Deprecation {
            name: "docker".into(),
            version: v.into(),
            from_os_version: "3033.3".into(),
            reason: "EOL".into(),
        };
        assert!(deprecate(&mut doc, "r", dep("18.06")).is_err());
        assert!(deprecate(&mut doc, "nope", dep("19.03")).is_err());
        deprecate(&mut doc, "r", dep("19.03")).unwrap();
        let r = &doc.remotes["r"];
        assert_eq!(r.offered(&t("3033.2.0")).count(), 1);
        assert_eq!(r.offered(&t("3033.10.0")).count(), 0);
    }
}
