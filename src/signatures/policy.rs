//! Who must have signed an image: the connected side's `policy` (per
//! `[[image]]`, or per `[[registry]]` for every image from that host) and
//! the site's `[[import.policy]]` rules (per repository glob).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

use super::{Keyless, PublicKey, Signers, TrustedRoot};
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
/// `keys`, or a keyless one by one of `identities` checked against
/// `trusted_root` ([`super::check`]); a relative path is resolved against
/// the config file's directory. Keyless:
///
/// ```toml
/// policy = { trusted_root = "trusted_root.json", identities = [
///   { subject = "https://github.com/example/base/.github/workflows/release.yml@refs/heads/main",
///     issuer = "https://token.actions.githubusercontent.com" } ] }
/// ```
#[derive(Debug, Clone, Default, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct Policy {
    /// Cosign public keys (PEM `PUBLIC KEY`, ECDSA P-256 or Ed25519); a
    /// signature by any one of them counts.
    #[serde(default)]
    pub keys: Vec<PathBuf>,
    /// Keyless signers ([`super::Identity`]: certificate subject and OIDC
    /// issuer, exact or regex); needs `trusted_root`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub identities: Vec<super::Identity>,
    /// A sigstore `trusted_root.json` (Fulcio CAs, Rekor keys) that keyless
    /// signatures are checked against, offline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trusted_root: Option<PathBuf>,
    /// Of an index: each platform manifest carried needs its own
    /// signature, not only the index (`cosign sign --recursive`)
    /// [default: false].
    #[serde(default)]
    pub each_platform: bool,
}

impl Policy {
    /// The policy's signers, read (paths relative to `base`). Errors name
    /// the file; a policy with neither keys nor identities, identities
    /// without a trusted root (or a root without identities), an identity
    /// that is not one subject and one issuer, are refused.
    pub fn load(&self, base: &Path) -> Result<Signers> {
        if self.keys.is_empty() && self.identities.is_empty() {
            bail!("policy has no keys and no identities");
        }
        let keys = self
            .keys
            .iter()
            .map(|p| PublicKey::load(&base.join(p)))
            .collect::<Result<Vec<_>>>()?;
        let keyless = match (&self.trusted_root, self.identities.is_empty()) {
            (None, true) => None,
            (Some(_), true) => bail!("policy has a trusted_root but no identities"),
            (None, false) => {
                bail!("policy has identities but no trusted_root to check them against")
            }
            (Some(root), false) => {
                let identities = self
                    .identities
                    .iter()
                    .enumerate()
                    .map(|(i, id)| id.compile().with_context(|| format!("identities[{i}]")))
                    .collect::<Result<Vec<_>>>()?;
                Some(Keyless {
                    identities,
                    root: std::sync::Arc::new(TrustedRoot::load(&base.join(root))?),
                })
            }
        };
        Ok(Signers { keys, keyless })
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
    #[serde(default)]
    pub keys: Vec<PathBuf>,
    /// Keyless signers, as in the mirror config's [`Policy::identities`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub identities: Vec<super::Identity>,
    /// The `trusted_root.json` keyless signatures are checked against.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trusted_root: Option<PathBuf>,
    /// Of an index: each platform manifest carried needs its own
    /// signature, not only the index [default: false].
    #[serde(default)]
    pub each_platform: bool,
}

/// The site's rules with their keys read; empty: imports check no
/// upstream signatures.
#[derive(Debug, Clone, Default)]
pub struct SitePolicy {
    rules: Vec<(SiteRule, Signers)>,
}

impl SitePolicy {
    /// Reads every rule's keys. Errors name the rule (`import.policy[N]`)
    /// and the file.
    pub fn load(rules: &[SiteRule]) -> Result<SitePolicy> {
        let mut loaded = Vec::new();
        for (i, r) in rules.iter().enumerate() {
            let signers = Policy {
                keys: r.keys.clone(),
                identities: r.identities.clone(),
                trusted_root: r.trusted_root.clone(),
                each_platform: r.each_platform,
            }
            .load(Path::new(""))
            .with_context(|| format!("import.policy[{i}]"))?;
            if r.repositories.is_empty() {
                bail!("import.policy[{i}]: no repositories");
            }
            loaded.push((r.clone(), signers));
        }
        Ok(SitePolicy { rules: loaded })
    }

    /// True when no rule is set.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// The rules covering `repository`: (each_platform, signers) of each.
    pub fn rules_for<'a>(
        &'a self,
        repository: &'a str,
    ) -> impl Iterator<Item = (bool, &'a Signers)> + 'a {
        self.rules
            .iter()
            .filter(move |(r, _)| {
                r.repositories
                    .iter()
                    .any(|g| crate::names::glob_match(g, repository))
            })
            .map(|(r, signers)| (r.each_platform, signers))
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
