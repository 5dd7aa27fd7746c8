//! Package inventories: what an image's package databases say is installed
//! (dpkg, apk) and what its `os-release` says it is.
//!
//! Owns: choosing the files ([`WANTED`]), reading them from an image's
//! layers (through [`crate::stacks::flatten::pick_files`], which applies
//! whiteouts; nothing is extracted or flattened), parsing them, and the
//! purl of each package. Never writes to the store.
//!
//! Files: `dpkg.rs`, `apk.rs`, `os_release.rs` (the three formats); this
//! file holds [`Inventory`] and the readers.

mod apk;
mod dpkg;
mod os_release;

use std::collections::BTreeMap;
use std::io::Read;
use std::sync::Arc;

use anyhow::Result;

use super::version::Packaging;
use crate::stacks::flatten::{self, Layer, Wanted};
use crate::store::Blobstore;

/// The paths an inventory reads.
pub const WANTED: Wanted<'static> = Wanted {
    files: &[
        "var/lib/dpkg/status",
        "lib/apk/db/installed",
        "etc/os-release",
        "usr/lib/os-release",
    ],
    dirs: &["var/lib/dpkg/status.d"],
};

/// Largest package database file read, in bytes.
pub const MAX_DB_FILE: u64 = 64 << 20;

/// `layers` without their diff_ids (see [`Inventory::read`]).
fn digest_only(layers: &[Layer]) -> Vec<Layer> {
    layers
        .iter()
        .map(|l| Layer {
            diff_id: None,
            ..l.clone()
        })
        .collect()
}

/// One installed package.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Package {
    /// The database it comes from.
    pub packaging: Packaging,
    /// Binary package name (`libssl3`).
    pub name: String,
    /// Its version, as the database has it (`3.0.11-1~deb12u2`).
    pub version: String,
    /// Architecture (`amd64`, `x86_64`, `all`, `noarch`).
    pub arch: String,
    /// The source package (dpkg `Source`, apk origin), when the database names one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// The source version, when it differs from `version` (a binNMU).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_version: Option<String>,
    /// The license the database declares (apk `L`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub license: Option<String>,
}

impl Package {
    /// The source package name (its own name when the database names none).
    pub fn source_name(&self) -> &str {
        self.source.as_deref().unwrap_or(&self.name)
    }

    /// The version of its source package.
    pub fn source_version(&self) -> &str {
        self.source_version.as_deref().unwrap_or(&self.version)
    }
}

/// What is installed in one image.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Inventory {
    /// `os-release` fields (`ID`, `VERSION_ID`, `PRETTY_NAME`, ...); empty when the image has none.
    pub os: BTreeMap<String, String>,
    /// Installed packages, sorted by name, architecture and version.
    pub packages: Vec<Package>,
}

impl Inventory {
    /// Parses the files [`WANTED`] names (path → content).
    pub fn from_files(files: &BTreeMap<String, Vec<u8>>) -> Inventory {
        let text = |p: &str| {
            files
                .get(p)
                .map(|b| String::from_utf8_lossy(b).into_owned())
        };
        let mut packages = Vec::new();
        if let Some(t) = text("var/lib/dpkg/status") {
            dpkg::parse(&t, &mut packages);
        }
        for (path, bytes) in files.range("var/lib/dpkg/status.d/".to_string()..) {
            if !path.starts_with("var/lib/dpkg/status.d/") {
                break;
            }
            if !path.ends_with(".md5sums") {
                dpkg::parse(&String::from_utf8_lossy(bytes), &mut packages);
            }
        }
        if let Some(t) = text("lib/apk/db/installed") {
            apk::parse(&t, &mut packages);
        }
        let os = text("etc/os-release")
            .or_else(|| text("usr/lib/os-release"))
            .map(|t| os_release::parse(&t))
            .unwrap_or_default();
        let mut inv = Inventory { os, packages };
        inv.normalize();
        inv
    }

    /// Sorts the packages by name, architecture and version, and drops exact repeats.
    pub fn normalize(&mut self) {
        self.packages.sort_by(|a, b| {
            (&a.name, &a.arch)
                .cmp(&(&b.name, &b.arch))
                .then_with(|| a.packaging.compare(&a.version, &b.version))
        });
        self.packages.dedup();
    }

    /// The inventory of the file system `layers` make, each layer read
    /// through `open` and verified against its digest and size. The
    /// diff_id (a second hash, of the uncompressed bytes) is left to the
    /// flattening, which checks it: the digest already pins the content.
    pub fn read<'a>(
        layers: &[Layer],
        open: &mut dyn FnMut(&Layer) -> Result<Box<dyn Read + 'a>>,
    ) -> Result<Inventory> {
        let files = flatten::pick_files(&digest_only(layers), open, WANTED, MAX_DB_FILE)?;
        Ok(Inventory::from_files(&files))
    }

    /// [`Inventory::read`] over layers held in `store`.
    pub async fn read_stored(store: Arc<dyn Blobstore>, layers: Vec<Layer>) -> Result<Inventory> {
        let files =
            flatten::pick_from_store(store, digest_only(&layers), WANTED, MAX_DB_FILE).await?;
        Ok(Inventory::from_files(&files))
    }

    /// `os-release` `ID` (`debian`, `ubuntu`, `alpine`), if known.
    pub fn os_id(&self) -> Option<&str> {
        self.os.get("ID").map(String::as_str)
    }

    /// `os-release` `VERSION_ID` (`12`, `22.04`, `3.19.1`), if known.
    pub fn os_version(&self) -> Option<&str> {
        self.os.get("VERSION_ID").map(String::as_str)
    }

    /// The purl `distro` qualifier: `ID-VERSION_ID` (`debian-12`).
    pub fn distro(&self) -> Option<String> {
        Some(format!("{}-{}", self.os_id()?, self.os_version()?))
    }

    /// A one-line name of the system: `PRETTY_NAME`, else `ID VERSION_ID`, else `unknown`.
    pub fn os_name(&self) -> String {
        if let Some(p) = self.os.get("PRETTY_NAME") {
            return p.clone();
        }
        match (self.os_id(), self.os_version()) {
            (Some(i), Some(v)) => format!("{i} {v}"),
            (Some(i), None) => i.to_string(),
            _ => "unknown".into(),
        }
    }

    /// The package URL of `p` (purl spec, types `deb` and `apk`):
    /// `pkg:deb/debian/libssl3@3.0.11-1~deb12u2?arch=amd64&distro=debian-12`,
    /// with `upstream=SOURCE` (`SOURCE@VERSION` when the source version differs)
    /// when the package is built from another source package, as syft writes it.
    pub fn purl(&self, p: &Package) -> String {
        let namespace = self.os_id().unwrap_or(match p.packaging {
            Packaging::Deb => "debian",
            Packaging::Apk => "alpine",
        });
        let mut q = Vec::new();
        if !p.arch.is_empty() {
            q.push(("arch", p.arch.clone()));
        }
        if let Some(d) = self.distro() {
            q.push(("distro", d));
        }
        match (&p.source, &p.source_version) {
            (_, Some(v)) => q.push(("upstream", format!("{}@{v}", p.source_name()))),
            (Some(s), None) if s != &p.name => q.push(("upstream", s.clone())),
            _ => {}
        }
        super::purl::format(p.packaging.purl_type(), namespace, &p.name, &p.version, &q)
    }
}
