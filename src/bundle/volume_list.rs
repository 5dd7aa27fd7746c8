//! The signed volume list of a bundle split into volumes (`bundle create
//! --volume-size`): `NAME.volumes.asc` beside `NAME.000`, `NAME.001`, ...,
//! an OpenPGP cleartext-signed JSON document (signed with the bundle's key):
//!
//! ```json
//! {"kind": "airlock-volumes-v1", "bundle": "<bundle id>", "volume_size": 41943040,
//!  "count": 3, "volumes": [{"name": "b.tar.000", "size": 41943040, "sha256": "sha256:…"}, …]}
//! ```
//!
//! With it one volume can be checked on its own before it travels (`airlock
//! bundle verify b.tar.002`), and an import names the volume at fault:
//! "volume 2 of 3 (b.tar.001) is out of order / missing / repeated / not
//! from this bundle". Copy the list onto every disc with its volume.
//!
//! Owns: the document, where it lives, and every check of volume files
//! against it (names, order, sizes, sha256). Never reads inside the tar.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use anyhow::{Context, Result, anyhow, bail};

use super::sign::{Keyring, SigningKey};
use crate::digest::{Algorithm, Digest, Hasher};

/// The document's `kind`.
pub const KIND: &str = "airlock-volumes-v1";

/// Suffix of the list's file name after the bundle's base name.
pub const SUFFIX: &str = ".volumes.asc";

/// The volume list document.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VolumeList {
    /// Always [`KIND`].
    pub kind: String,
    /// The bundle id (its signed document's `id`).
    pub bundle: String,
    /// The volume size the bundle was split at, in bytes.
    pub volume_size: u64,
    /// How many volumes.
    pub count: usize,
    /// Every volume, in order.
    pub volumes: Vec<VolumeEntry>,
}

/// One volume.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VolumeEntry {
    /// Its file name (no directory): `NAME.000`, ...
    pub name: String,
    /// Its size in bytes.
    pub size: u64,
    /// Its sha256.
    pub sha256: Digest,
}

/// The list of the volumes of bundle `base`: `base.volumes.asc`.
pub fn list_path(base: &Path) -> PathBuf {
    let mut s = base.as_os_str().to_owned();
    s.push(SUFFIX);
    PathBuf::from(s)
}

/// The list beside volume file `volume` (`DIR/NAME.NNN` → `DIR/NAME.volumes.asc`),
/// when the name is a volume's and the list exists.
pub fn beside(volume: &Path) -> Option<PathBuf> {
    let name = volume.file_name()?.to_str()?;
    let (base, n) = name.rsplit_once('.')?;
    if n.len() != 3 || !n.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let list = volume.with_file_name(format!("{base}{SUFFIX}"));
    list.exists().then_some(list)
}

impl VolumeList {
    /// Signs the list with each of `keys` and writes it to `path` (never overwriting; fsynced).
    pub fn write(&self, path: &Path, keys: &[&SigningKey]) -> Result<()> {
        use std::io::Write;
        let mut text = serde_json::to_string_pretty(self)?;
        text.push('\n');
        let signed = super::sign::clearsign_all(keys, &text)?;
        let mut f = std::fs::File::create_new(path)
            .with_context(|| format!("creating {}", path.display()))?;
        f.write_all(signed.as_bytes())?;
        f.sync_all()?;
        Ok(())
    }

    /// Reads the list at `path`, trusting only a signature by `keyring`.
    ///
    /// Errors: unreadable, not signed by a trusted key, not a volume list.
    pub fn load(path: &Path, keyring: &Keyring) -> Result<VolumeList> {
        let armored =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let verified = keyring.verify_cleartext(&armored).map_err(|e| {
            anyhow!(
                "volume list {}: signature check failed: {e}",
                path.display()
            )
        })?;
        let list: VolumeList = serde_json::from_str(&verified.text)
            .map_err(|e| anyhow!("volume list {}: not a volume list: {e}", path.display()))?;
        if list.kind != KIND || list.count != list.volumes.len() {
            bail!("volume list {}: not a {KIND} document", path.display());
        }
        Ok(list)
    }

    /// "volume 2 of 5 (b.tar.001)".
    pub fn describe(&self, i: usize) -> String {
        let name = self.volumes.get(i).map_or("?", |v| v.name.as_str());
        format!("volume {} of {} ({name})", i + 1, self.count)
    }

    fn index_of(&self, file: &Path) -> Option<usize> {
        let name = file.file_name()?.to_str()?;
        self.volumes.iter().position(|v| v.name == name)
    }

    /// Checks the files given for an import before anything is read: each
    /// is a volume of this bundle, none twice, none missing, in order, each
    /// of its listed size. Errors name the volume at fault.
    pub fn check_files(&self, files: &[PathBuf]) -> Result<()> {
        let mut given: Vec<usize> = Vec::with_capacity(files.len());
        for f in files {
            let i = self.index_of(f).ok_or_else(|| {
                anyhow!(
                    "{} is not a volume of bundle {} (its volume list names {} to {})",
                    f.display(),
                    self.bundle,
                    self.volumes.first().map_or("", |v| v.name.as_str()),
                    self.volumes.last().map_or("", |v| v.name.as_str()),
                )
            })?;
            if given.contains(&i) {
                bail!("{} is repeated", self.describe(i));
            }
            given.push(i);
        }
        if let Some(missing) = (0..self.count).find(|i| !given.contains(i)) {
            bail!("{} is missing", self.describe(missing));
        }
        if let Some((place, &i)) = given.iter().enumerate().find(|(p, i)| p != *i) {
            bail!(
                "{} is out of order: given as file {} of {}",
                self.describe(i),
                place + 1,
                files.len()
            );
        }
        for (i, f) in files.iter().enumerate() {
            let size = std::fs::metadata(f)
                .with_context(|| format!("{}: {}", self.describe(i), f.display()))?
                .len();
            self.check_size(i, size)?;
        }
        Ok(())
    }

    fn check_size(&self, i: usize, size: u64) -> Result<()> {
        let listed = self.volumes[i].size;
        if size != listed {
            bail!(
                "{} is not from this bundle: it has {size} bytes, the volume list says {listed}",
                self.describe(i)
            );
        }
        Ok(())
    }

    /// Checks volume `i` read whole: `size` bytes hashing to `sha256`.
    pub fn check_read(&self, i: usize, size: u64, sha256: &Digest) -> Result<()> {
        self.check_size(i, size)?;
        let listed = &self.volumes[i].sha256;
        if sha256 != listed {
            bail!(
                "{} is not from this bundle (or damaged): its content hashes to {sha256}, the volume list says {listed}",
                self.describe(i)
            );
        }
        Ok(())
    }

    /// Checks one volume file on its own (`bundle verify b.tar.002`); returns its index.
    pub fn check_one(&self, file: &Path) -> Result<usize> {
        let i = self.index_of(file).ok_or_else(|| {
            anyhow!(
                "{} is not a volume of bundle {}",
                file.display(),
                self.bundle
            )
        })?;
        let (size, sha256) = hash_file(file)?;
        self.check_read(i, size, &sha256)?;
        Ok(i)
    }
}

/// Size and sha256 of a file.
pub fn hash_file(path: &Path) -> Result<(u64, Digest)> {
    let mut f = std::fs::File::open(path).with_context(|| format!("{}", path.display()))?;
    let mut h = Hasher::new(Algorithm::Sha256);
    let mut buf = vec![0u8; 1 << 20];
    let mut size = 0u64;
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            return Ok((size, h.finish()));
        }
        h.update(&buf[..n]);
        size += n as u64;
    }
}

/// What an import reading listed volumes knows when it fails: which volume
/// it was in, so the failure can be put on that volume.
#[derive(Debug, Clone)]
pub struct VolumeProbe {
    pub(super) list: Arc<VolumeList>,
    pub(super) files: Arc<Vec<PathBuf>>,
    /// The volume being read (index into `files`).
    pub(super) current: Arc<AtomicUsize>,
}

impl VolumeProbe {
    /// After a failed read: when the volume being read does not match the
    /// list (its whole file re-hashed), the volume's fault in words;
    /// `None` when it does (the cause is elsewhere).
    pub fn explain(&self) -> Option<String> {
        let i = self.current.load(Ordering::Relaxed);
        let file = self.files.get(i)?;
        let result = hash_file(file).and_then(|(size, d)| self.list.check_read(i, size, &d));
        result.err().map(|e| format!("{e:#}"))
    }
}
