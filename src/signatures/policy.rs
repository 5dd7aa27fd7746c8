//! Who must have signed an image: the connected side's `policy` (per
//! `[[image]]`, or per `[[registry]]` for every image from that host) and
//! the site's `[[import.policy]]` rules (per repository glob).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

use super::PublicKey;
use crate::digest::Digest;
use crate::oci::Manifest;

/// A signature policy of the mirror config:
///
/// ```toml
/// [[image]]
/// source = "docker://registry.example.org/base/bookworm:latest"
/// repository = "stacks/bookworm"
/// tags = ["latest"]
/// policy = { keys = ["keys/release-cosign.pub"], each_platform = true }
/// ```
/// The image (and with `each_platform`, every platform manifest of an
/// index that the bundle carries) must carry a cosign signature by one of
/// `keys` ([`super::check`]); a relative path is resolved against the
/// config file's directory.
#[derive(Debug, Clone, Default, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct Policy {
    /// Cosign public keys (PEM `PUBLIC KEY`, ECDSA P-256 or Ed25519); a
    /// signature by any one of them counts.
    pub keys: Vec<PathBuf>,
    /// Of an index: each platform manifest carried needs its own
    /// signature, not only the index (`cosign sign --recursive`)
    /// [default: false].
    #[serde(default)]
    pub each_platform: bool,
}

impl Policy {
    /// The policy's keys, read (paths relative to `base`). Errors name the
    /// file; a policy without keys is refused.
    pub fn load_keys(&self, base: &Path) -> Result<Vec<PublicKey>> {
        if self.keys.is_empty() {
            bail!("policy has no keys");
        }
        self.keys
            .iter()
            .map(|p| PublicKey::load(&base.join(p)))
            .collect()
    }
}

/// One rule of the site's signature policy (`[[import.policy]]` of the
/// serve config): every image a bundle brings into a repository matching
/// one of `repositories` must be signed by one of `keys`.
///
/// ```toml
/// [[import.policy]]
/// repositories = ["stacks/**", "cf/*"]
/// keys = ["/var/vcap/jobs/airlock/config/release-cosign.pub"]
/// ```
#[derive(Debug, Clone, Default, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct SiteRule {
    /// Repository globs (`*` within a path segment, `**` across).
    pub repositories: Vec<String>,
    /// Cosign public keys (PEM `PUBLIC KEY`, ECDSA P-256 or Ed25519); a
    /// signature by any one of them counts. Paths as given (absolute, or
    /// relative to the directory airlock runs in).
    pub keys: Vec<PathBuf>,
    /// Of an index: each platform manifest carried needs its own
    /// signature, not only the index [default: false].
    #[serde(default)]
    pub each_platform: bool,
}

/// The site's rules with their keys read; empty: imports check no
/// upstream signatures.
#[derive(Debug, Clone, Default)]
pub struct SitePolicy {
    rules: Vec<(SiteRule, Vec<PublicKey>)>,
}

impl SitePolicy {
    /// Reads every rule's keys. Errors name the rule (`import.policy[N]`)
    /// and the file.
    pub fn load(rules: &[SiteRule]) -> Result<SitePolicy> {
        let mut loaded = Vec::new();
        for (i, r) in rules.iter().enumerate() {
            let keys = Policy {
                keys: r.keys.clone(),
                each_platform: r.each_platform,
            }
            .load_keys(Path::new(""))
            .with_context(|| format!("import.policy[{i}]"))?;
            if r.repositories.is_empty() {
                bail!("import.policy[{i}]: no repositories");
            }
            loaded.push((r.clone(), keys));
        }
        Ok(SitePolicy { rules: loaded })
    }

    /// True when no rule is set.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// The rules covering `repository`: (each_platform, keys) of each.
    pub fn rules_for<'a>(
        &'a self,
        repository: &'a str,
    ) -> impl Iterator<Item = (bool, &'a [PublicKey])> + 'a {
        self.rules
            .iter()
            .filter(move |(r, _)| {
                r.repositories
                    .iter()
                    .any(|g| crate::names::glob_match(g, repository))
            })
            .map(|(r, keys)| (r.each_platform, keys.as_slice()))
    }
}

/// The manifests a policy needs signed: the root `digest`, and with
/// `each_platform`, each child of an index (`manifest`: its bytes) that is
/// not in `absent` (left out by `platforms`).
pub fn to_sign(
    digest: &Digest,
    manifest: &[u8],
    each_platform: bool,
    absent: &[Digest],
) -> Result<Vec<Digest>> {
    let mut out = vec![digest.clone()];
    if each_platform {
        let m = Manifest::parse(manifest).with_context(|| format!("manifest {digest}"))?;
        out.extend(
            m.manifests
                .iter()
                .map(|d| d.digest.clone())
                .filter(|d| !absent.contains(d)),
        );
    }
    Ok(out)
}
