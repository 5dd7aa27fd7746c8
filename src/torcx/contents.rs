//! The contents a remote offers one board and OS version: the
//! `torcx-remote-contents-v1` document (cleartext-signed with the remote's
//! RSA key, interop-formats.md §1.4) and the legacy `torcx-package-list-v0`
//! (`torcx_manifest.json` plus a detached `.asc`, §1.5).
//!
//! Owns: choosing what is listed (the builds for exactly that target, minus
//! deprecated versions), the JSON bytes, and signing them. Never serves HTTP
//! and never reads the store.

use std::collections::BTreeMap;

use super::format::{
    Addon, ContentsImage, ContentsVersion, Envelope, PACKAGE_LIST_V0, Package, PackageList,
    PackageLocation, PackageVersion, REMOTE_CONTENTS_V1, RemoteContents, archive_file_name,
};
use super::table::{Build, RemoteTable, Target};
use crate::bundle::sign::{SignError, SigningKey};

/// The builds offered at `target`, grouped by name (sorted), and each
/// name's default version there.
fn grouped<'a>(
    remote: &'a RemoteTable,
    target: &'a Target,
) -> BTreeMap<&'a str, (Option<&'a str>, Vec<&'a Build>)> {
    let mut by_name: BTreeMap<&str, (Option<&str>, Vec<&Build>)> = BTreeMap::new();
    for b in remote.offered(target) {
        let slot = by_name.entry(b.name.as_str()).or_default();
        if b.default_for.contains(target) {
            slot.0 = Some(b.version.as_str());
        }
        slot.1.push(b);
    }
    by_name
}

/// The addons offered at `target`, sorted by name, each version entry made by `version`.
fn addons<V>(
    remote: &RemoteTable,
    target: &Target,
    version: impl Fn(&Build) -> V,
) -> Vec<Addon<V>> {
    grouped(remote, target)
        .into_iter()
        .map(|(name, (default, builds))| Addon {
            name: name.to_string(),
            default_version: default.map(str::to_string),
            versions: builds.iter().map(|b| version(b)).collect(),
        })
        .collect()
}

/// The site contents for `target`; `None` when the remote offers nothing there.
///
/// Every version carries `hash: "sha512-<hex>"` (never empty) and
/// `location: "<name>:<version>.torcx.<fmt>"` relative to the base URL.
pub fn site_contents(remote: &RemoteTable, target: &Target) -> Option<RemoteContents> {
    let images: Vec<ContentsImage> = addons(remote, target, |b| ContentsVersion {
        version: b.version.clone(),
        format: b.format,
        hash: format!("sha512-{}", b.sha512),
        location: archive_file_name(&b.name, &b.version, b.format),
    });
    (!images.is_empty()).then_some(RemoteContents { images })
}

/// The JSON text that is signed: pretty-printed, ending in `\n`.
pub fn contents_json(contents: &RemoteContents) -> String {
    let env = Envelope {
        kind: REMOTE_CONTENTS_V1.to_string(),
        value: contents,
    };
    let mut text = serde_json::to_string_pretty(&env).unwrap_or_default();
    text.push('\n');
    text
}

/// The cleartext-signed contents document (`Hash: SHA256`; armor with the
/// CRC24 line the client's 2018 Go armor decoder requires; nothing follows
/// the signature block), as the client fetches it.
///
/// Errors: signing failed.
pub fn sign_contents(contents: &RemoteContents, key: &SigningKey) -> Result<String, SignError> {
    key.clearsign(&contents_json(contents))
}

/// The legacy package list for `target`; `base_url` (ending in `/`) makes
/// each location an absolute `url`, as tectonic-torcx expects. `None` when
/// the remote offers nothing there.
pub fn package_list(remote: &RemoteTable, target: &Target, base_url: &str) -> Option<Vec<u8>> {
    let packages: Vec<Package> = addons(remote, target, |b| PackageVersion {
        version: b.version.clone(),
        hash: format!("sha512-{}", b.sha512),
        locations: vec![PackageLocation {
            url: Some(format!(
                "{base_url}{}",
                archive_file_name(&b.name, &b.version, b.format)
            )),
            path: None,
        }],
    });
    if packages.is_empty() {
        return None;
    }
    let env = Envelope {
        kind: PACKAGE_LIST_V0.to_string(),
        value: PackageList { packages },
    };
    let mut bytes = serde_json::to_vec_pretty(&env).unwrap_or_default();
    bytes.push(b'\n');
    Some(bytes)
}
