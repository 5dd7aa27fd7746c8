//! Profiles (interop-formats.md §1.8): reading `profile-manifest-v0/v1`,
//! merging them as torcx does, and checking the result against what a
//! remote offers one board and OS version (`airlock torcx profile check`).
//!
//! Merge (torcx `mergeProfiles`): profiles apply in the order given (vendor,
//! oem, then the user profile); an image name in a later profile replaces
//! the earlier entry, an entry with an empty `reference` removes it; the
//! result is the remaining earlier entries followed by the later ones.
//!
//! Owns: those rules and the check's verdicts. Never reads files or the
//! store: callers pass bytes and a view of each remote.

use super::format::{
    DEFAULT_REFERENCE, Envelope, PROFILE_V0, PROFILE_V1, ProfileImage, ProfileValue,
    RemoteContents, archive_file_name,
};
use super::table::Deprecation;

/// Parses a profile of kind `profile-manifest-v0` or `-v1` (a v0 entry's
/// `remote` is ignored, as torcx does).
///
/// Errors: not JSON, another kind, or an image without a name.
pub fn parse(bytes: &[u8]) -> Result<Vec<ProfileImage>, String> {
    let env: Envelope<ProfileValue> =
        serde_json::from_slice(bytes).map_err(|e| format!("not a torcx profile: {e}"))?;
    let mut images = env.value.images;
    match env.kind.as_str() {
        PROFILE_V1 => {}
        PROFILE_V0 => images.iter_mut().for_each(|i| i.remote = None),
        k => return Err(format!("kind {k:?} is not {PROFILE_V0} or {PROFILE_V1}")),
    }
    if images.iter().any(|i| i.name.is_empty()) {
        return Err("an image has an empty name".into());
    }
    Ok(images)
}

/// Merges profiles in order (lowest first), see the module docs.
pub fn merge(profiles: &[Vec<ProfileImage>]) -> Vec<ProfileImage> {
    let mut merged: Vec<ProfileImage> = Vec::new();
    for upper in profiles {
        merged.retain(|lower| !upper.iter().any(|u| u.name == lower.name));
        let mut added: Vec<ProfileImage> = Vec::new();
        for u in upper.iter().filter(|u| !u.reference.is_empty()) {
            added.retain(|a| a.name != u.name);
            added.push(u.clone());
        }
        merged.extend(added);
    }
    merged
}

/// What a remote offers one target, as the check sees it.
#[derive(Debug, Clone, Default)]
pub struct RemoteView {
    /// The contents served there (`None`: nothing is served for the target).
    pub contents: Option<RemoteContents>,
    /// The remote's deprecations (to name why a version is missing).
    pub deprecations: Vec<Deprecation>,
}

/// The verdict for one merged image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// The image as merged.
    pub image: ProfileImage,
    /// True when a host can get it (or it needs no remote).
    pub ok: bool,
    /// One line: what it resolves to, or why it cannot be provided.
    pub message: String,
}

/// Checks every merged image against `lookup(remote)` (`None`: the remote is
/// unknown) for the OS version `os_version`.
pub fn check(
    merged: &[ProfileImage],
    os_version: &str,
    lookup: impl Fn(&str) -> Option<RemoteView>,
) -> Vec<Verdict> {
    merged
        .iter()
        .map(|image| {
            let (ok, message) = verdict(image, os_version, &lookup);
            Verdict {
                image: image.clone(),
                ok,
                message,
            }
        })
        .collect()
}

fn verdict(
    image: &ProfileImage,
    os_version: &str,
    lookup: &impl Fn(&str) -> Option<RemoteView>,
) -> (bool, String) {
    let Some(remote) = &image.remote else {
        return (
            true,
            "no remote: must already be in the host's local store".into(),
        );
    };
    let Some(view) = lookup(remote) else {
        return (
            false,
            format!("remote {remote:?} is not known to this airlock"),
        );
    };
    let Some(contents) = view.contents else {
        return (
            false,
            format!("remote {remote:?} offers nothing for this board and OS version"),
        );
    };
    let Some(entry) = contents.images.iter().find(|i| i.name == image.name) else {
        return (
            false,
            format!(
                "remote {remote:?} offers no {:?} for this board and OS version",
                image.name
            ),
        );
    };
    let version = if image.reference == DEFAULT_REFERENCE {
        match &entry.default_version {
            Some(v) => v.clone(),
            None => {
                return (
                    false,
                    format!(
                        "reference {DEFAULT_REFERENCE} but remote {remote:?} has no default version of {:?} here",
                        image.name
                    ),
                );
            }
        }
    } else {
        image.reference.clone()
    };
    match entry.versions.iter().find(|v| v.version == version) {
        Some(v) => (
            true,
            format!(
                "{} from {remote} ({})",
                archive_file_name(&image.name, &version, v.format),
                v.hash.get(..19).unwrap_or(&v.hash)
            ),
        ),
        None => {
            let why = view
                .deprecations
                .iter()
                .find(|d| d.name == image.name && d.version == version)
                .filter(|d| {
                    super::format::compare_os_versions(os_version, &d.from_os_version)
                        != std::cmp::Ordering::Less
                })
                .map(|d| {
                    format!(
                        "; deprecated from OS version {}: {}",
                        d.from_os_version, d.reason
                    )
                })
                .unwrap_or_default();
            let offered: Vec<&str> = entry.versions.iter().map(|v| v.version.as_str()).collect();
            (
                false,
                format!(
                    "{}:{version} is not offered by {remote:?} here (offered: {}){why}",
                    image.name,
                    offered.join(", ")
                ),
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn img(name: &str, reference: &str) -> ProfileImage {
        ProfileImage {
            name: name.into(),
            reference: reference.into(),
            remote: Some("r".into()),
        }
    }

    #[test]
    fn later_replaces_empty_masks_order_kept() {
        let vendor = vec![img("docker", "19.03"), img("rkt", "1.30"), img("kmod", "1")];
        let user = vec![img("extra", "2"), img("docker", "20.10"), img("rkt", "")];
        let merged = merge(&[vendor, user]);
        let names: Vec<(&str, &str)> = merged
            .iter()
            .map(|i| (i.name.as_str(), i.reference.as_str()))
            .collect();
        assert_eq!(names, [("kmod", "1"), ("extra", "2"), ("docker", "20.10")]);
    }

    #[test]
    fn v0_drops_remote_and_other_kinds_fail() {
        let v0 = br#"{"kind":"profile-manifest-v0","value":{"images":[{"name":"a","reference":"1","remote":"r"}]}}"#;
        assert_eq!(parse(v0).unwrap()[0].remote, None);
        assert!(parse(br#"{"kind":"remote-manifest-v0","value":{}}"#).is_err());
    }
}
