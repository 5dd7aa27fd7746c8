//! The torcx JSON kinds and names, exactly as the torcx client reads them
//! (interop-formats.md §1.2-1.8): every document is `{"kind", "value"}`.
//!
//! Owns: the serde types of `remote-manifest-v0`, `torcx-remote-contents-v1`,
//! `torcx-package-list-v0`, `image-manifest-v0` and `profile-manifest-v0/v1`,
//! the addon archive file name `<name>:<version>.torcx.<fmt>`, and the
//! grammar of remote, addon, version, board and OS version names. Never does
//! I/O.

use std::fmt;

/// `kind` of a host's `remote.json` (§1.3).
pub const REMOTE_MANIFEST_V0: &str = "remote-manifest-v0";
/// `kind` of the signed contents document (§1.4).
pub const REMOTE_CONTENTS_V1: &str = "torcx-remote-contents-v1";
/// `kind` of the legacy package list `torcx_manifest.json` (§1.5).
pub const PACKAGE_LIST_V0: &str = "torcx-package-list-v0";
/// `kind` of `.torcx/manifest.json` inside an archive (§1.7).
pub const IMAGE_MANIFEST_V0: &str = "image-manifest-v0";
/// `kind` of a profile without remotes (§1.8).
pub const PROFILE_V0: &str = "profile-manifest-v0";
/// `kind` of a profile whose images may name a remote (§1.8).
pub const PROFILE_V1: &str = "profile-manifest-v1";
/// The profile reference that means the remote's `defaultVersion`
/// (torcx's `DefaultTagRef`).
pub const DEFAULT_REFERENCE: &str = "com.coreos.cl";
/// File name of the signed contents under a base URL.
pub const CONTENTS_FILE: &str = "torcx_remote_contents.json.asc";
/// File name of the legacy package list (its detached signature adds `.asc`).
pub const PACKAGE_LIST_FILE: &str = "torcx_manifest.json";

/// The `{"kind": ..., "value": ...}` envelope of every torcx document.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Envelope<T> {
    /// The document kind, e.g. [`REMOTE_CONTENTS_V1`].
    pub kind: String,
    /// The document.
    pub value: T,
}

/// Archive formats torcx unpacks (§1.7).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum AddonFormat {
    /// `.torcx.tgz`: a gzipped tar of a partial root file system.
    Tgz,
    /// `.torcx.squashfs`: a squashfs 4.0 image.
    Squashfs,
}

impl AddonFormat {
    /// `tgz` or `squashfs`.
    pub fn as_str(self) -> &'static str {
        match self {
            AddonFormat::Tgz => "tgz",
            AddonFormat::Squashfs => "squashfs",
        }
    }
}

impl fmt::Display for AddonFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The archive file name the client stores and later finds images by:
/// `<name>:<version>.torcx.<fmt>` (§1.6 step 6).
pub fn archive_file_name(name: &str, version: &str, format: AddonFormat) -> String {
    format!("{name}:{version}.torcx.{format}")
}

/// Splits an archive file name into (name, version, format); `None` unless
/// it is exactly `<name>:<version>.torcx.<tgz|squashfs>` with valid tokens.
pub fn parse_archive_file_name(file: &str) -> Option<(String, String, AddonFormat)> {
    let (stem, format) = if let Some(s) = file.strip_suffix(".torcx.tgz") {
        (s, AddonFormat::Tgz)
    } else {
        (file.strip_suffix(".torcx.squashfs")?, AddonFormat::Squashfs)
    };
    let (name, version) = stem.split_once(':')?;
    check_token("addon name", name).ok()?;
    check_token("version", version).ok()?;
    Some((name.to_string(), version.to_string(), format))
}

/// Checks a remote, addon, version, board or OS version name: 1 to 128
/// characters of `A-Z a-z 0-9 . _ + -`, not starting with `.` or `-`.
/// So none holds `/` or `:` and each is safe as one URL path segment.
///
/// Errors: a one-line cause naming `what`.
pub fn check_token(what: &str, s: &str) -> Result<(), String> {
    let ok = !s.is_empty()
        && s.len() <= 128
        && !s.starts_with(['.', '-'])
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'+' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{what} {s:?} is not 1-128 characters of A-Z a-z 0-9 . _ + - (not starting with . or -)"
        ))
    }
}

/// Compares OS versions (`3033.2.0` < `3033.2.10`): dot-separated parts,
/// numerically when both are numbers, else as text.
pub fn compare_os_versions(a: &str, b: &str) -> std::cmp::Ordering {
    let mut pa = a.split('.');
    let mut pb = b.split('.');
    loop {
        match (pa.next(), pb.next()) {
            (None, None) => return std::cmp::Ordering::Equal,
            (None, Some(_)) => return std::cmp::Ordering::Less,
            (Some(_), None) => return std::cmp::Ordering::Greater,
            (Some(x), Some(y)) => {
                let o = match (x.parse::<u64>(), y.parse::<u64>()) {
                    (Ok(m), Ok(n)) => m.cmp(&n),
                    _ => x.cmp(y),
                };
                if o != std::cmp::Ordering::Equal {
                    return o;
                }
            }
        }
    }
}

/// `value` of `torcx-remote-contents-v1` (§1.4).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RemoteContents {
    /// One entry per addon name.
    pub images: Vec<ContentsImage>,
}

/// One addon of a contents document (`images[]`, §1.4) or of a package
/// list (`packages[]`, §1.5): both have the same shape, only their version
/// entries differ ([`ContentsVersion`], [`PackageVersion`]).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Addon<V> {
    /// Addon name.
    pub name: String,
    /// What the profile reference `com.coreos.cl` resolves to, if anything.
    #[serde(
        rename = "defaultVersion",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub default_version: Option<String>,
    /// The versions on offer.
    pub versions: Vec<V>,
}

/// One addon of a contents document.
pub type ContentsImage = Addon<ContentsVersion>;

/// One version of an addon in a contents document.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ContentsVersion {
    /// Version (profile `reference`).
    pub version: String,
    /// `tgz` or `squashfs`.
    pub format: AddonFormat,
    /// `sha512-<128 hex>`; never empty (an empty hash switches the client's check off).
    pub hash: String,
    /// Relative to the base URL: `<name>:<version>.torcx.<fmt>`.
    pub location: String,
}

/// `value` of `torcx-package-list-v0` (§1.5), the legacy `torcx_manifest.json`.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PackageList {
    /// One entry per addon name.
    pub packages: Vec<Package>,
}

/// One addon of a package list.
pub type Package = Addon<PackageVersion>;

/// One version of a package list entry.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PackageVersion {
    /// Version.
    pub version: String,
    /// `sha512-<128 hex>`.
    pub hash: String,
    /// Where to fetch it: `{"url": ...}` entries.
    pub locations: Vec<PackageLocation>,
}

/// A package location: an absolute URL (`url`) or a path in the OS image (`path`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PackageLocation {
    /// Absolute URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Path on the host (e.g. `/usr/share/torcx/store/docker:17.06.torcx.tgz`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
}

/// `value` of `image-manifest-v0` (§1.7): absolute paths inside the image.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ImageManifest {
    /// Binaries linked into `${RUNDIR}/bin/`.
    #[serde(default)]
    pub bin: Vec<String>,
    /// systemd units.
    #[serde(default)]
    pub units: Vec<String>,
    /// systemd-networkd files.
    #[serde(default)]
    pub network: Vec<String>,
    /// sysusers.d files.
    #[serde(default)]
    pub sysusers: Vec<String>,
    /// tmpfiles.d files.
    #[serde(default)]
    pub tmpfiles: Vec<String>,
    /// udev rules.
    #[serde(default)]
    pub udev_rules: Vec<String>,
}

impl ImageManifest {
    /// Every listed path, all kinds.
    pub fn paths(&self) -> impl Iterator<Item = &String> {
        self.bin
            .iter()
            .chain(&self.units)
            .chain(&self.network)
            .chain(&self.sysusers)
            .chain(&self.tmpfiles)
            .chain(&self.udev_rules)
    }
}

/// `value` of `profile-manifest-v0` / `-v1` (§1.8).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ProfileValue {
    /// The selected images.
    #[serde(default)]
    pub images: Vec<ProfileImage>,
}

/// One image of a profile.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ProfileImage {
    /// Addon name.
    pub name: String,
    /// Version, `com.coreos.cl` for the remote's default; empty masks a lower profile's entry.
    #[serde(default)]
    pub reference: String,
    /// The remote to fetch it from (v1 only); `None`: the local store only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote: Option<String>,
}

/// `value` of `remote-manifest-v0` (§1.3), the host's `remote.json`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RemoteManifest {
    /// Base URL; `${COREOS_BOARD}`, `${VERSION_ID}`, `${ID}` templates; ends in `/`.
    pub base_url: String,
    /// Keyrings, relative to the directory of `remote.json`.
    pub keys: Vec<RemoteKey>,
}

/// One key entry of a [`RemoteManifest`].
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RemoteKey {
    /// File name of an armored public keyring beside `remote.json`.
    pub armored_keyring: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn archive_names_round_trip_and_reject_tricks() {
        let n = archive_file_name("docker", "19.03", AddonFormat::Squashfs);
        assert_eq!(n, "docker:19.03.torcx.squashfs");
        assert_eq!(
            parse_archive_file_name(&n),
            Some(("docker".into(), "19.03".into(), AddonFormat::Squashfs))
        );
        for bad in [
            "docker.torcx.tgz",
            "docker:.torcx.tgz",
            ":1.torcx.tgz",
            "../x:1.torcx.tgz",
            "docker:1.torcx.tar",
            "a:b:c.torcx.tgz",
        ] {
            assert_eq!(parse_archive_file_name(bad), None, "{bad}");
        }
    }

    #[test]
    fn os_versions_compare_numerically() {
        use std::cmp::Ordering::*;
        assert_eq!(compare_os_versions("3033.2.0", "3033.2.10"), Less);
        assert_eq!(compare_os_versions("3033.2.1", "3033.2.1"), Equal);
        assert_eq!(compare_os_versions("3034", "3033.9.9"), Greater);
        assert_eq!(compare_os_versions("3033.2", "3033.2.0"), Less);
    }
}
