//! Bundles given on the command line: files, volumes in order (`NAME`
//! finds `NAME.000`, `NAME.001`, ...) or `-` for stdin, read as one stream.
//! Volumes with a signed volume list beside them (`NAME.volumes.asc`, or
//! `--volume-list`) are checked against it when a keyring is at hand: an
//! import or verify names the volume at fault.

use std::io::Read;
use std::path::{Path, PathBuf};

use anyhow::Result;

use airlock::bundle::sign::Keyring;
use airlock::bundle::volume::{ChainReader, expand_inputs};
use airlock::bundle::volume_list::{self, VolumeList, VolumeProbe};

/// The stream of a bundle, and what can explain a failure to read it.
pub struct BundleInput {
    /// The bundle's bytes.
    pub reader: Box<dyn Read + Send>,
    probe: Option<VolumeProbe>,
}

impl BundleInput {
    /// Opens `bundles`; with `keyring`, checks listed volumes (see the module docs).
    ///
    /// Errors: a missing file; a volume list that is not signed by `keyring`;
    /// volumes out of order, missing, repeated or not of the listed size.
    pub fn open(
        bundles: &[PathBuf],
        keyring: Option<&Keyring>,
        volume_list: Option<&Path>,
    ) -> Result<BundleInput> {
        let files = expand_inputs(bundles)?;
        let list = match (keyring, volume_list) {
            (Some(k), Some(p)) => Some(VolumeList::load(p, k)?),
            (Some(k), None) => match files.first().and_then(|f| volume_list::beside(f)) {
                Some(p) => Some(VolumeList::load(&p, k)?),
                None => None,
            },
            (None, _) => None,
        };
        let (chain, probe) = match list {
            Some(list) => {
                let (c, p) = ChainReader::listed(files, list)?;
                (c, Some(p))
            }
            None => (ChainReader::new(files), None),
        };
        Ok(BundleInput {
            reader: Box::new(std::io::BufReader::with_capacity(1 << 20, chain)),
            probe,
        })
    }

    /// `e`, put on the volume being read when that volume does not match
    /// its list (re-hashed from disk): "volume 2 of 5 (b.tar.001) is not
    /// from this bundle ...: <e>".
    pub fn blame(&self, e: anyhow::Error) -> anyhow::Error {
        match self.probe.as_ref().and_then(VolumeProbe::explain) {
            Some(volume) if !format!("{e:#}").contains(&volume) => e.context(volume),
            _ => e,
        }
    }
}
