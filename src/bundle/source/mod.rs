//! Where `bundle create` reads images from, besides OCI layouts: registries
//! (`docker://`), the credentials to reach them, and the local content cache.
//!
//! Owns: parsing `docker://REGISTRY/REPO(:TAG|@DIGEST)` sources, the
//! `[[registry]]` table of the mirror config ([`RegistryConfig`]), and the
//! [`Remote`] that resolves a registry source to a root descriptor plus every
//! blob it needs, as files in the cache. Never writes the bundle tar and never
//! rewrites a manifest: `create` copies the cached files into the tar exactly
//! as they were pulled.
//!
//! `auth` reads credentials files, `http` speaks HTTP(S) with retries and the
//! token flow, `registry` walks and pulls images, `cache` owns the cache
//! directory.

pub mod auth;
pub mod cache;
pub mod http;
pub mod registry;
pub mod tags;

use std::path::{Path, PathBuf};

use anyhow::{Result, anyhow, bail};

use crate::digest::Digest;

pub use registry::Remote;

/// One `[[registry]]` table of the mirror config: per-host TLS settings.
///
/// ```toml
/// [[registry]]
/// host = "registry.example.org:5000"
/// ca_file = "site-ca.pem"     # optional, PEM, added to the system roots
/// tls_verify = false          # optional; plain HTTP or unverified TLS, this host only
/// ```
/// A relative `ca_file` is resolved against the config file's directory.
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegistryConfig {
    /// `HOST[:PORT]` exactly as written in `docker://` sources.
    pub host: String,
    /// PEM file of CA certificates trusted for this host, besides the system roots.
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
    /// `false`: accept any certificate, and fall back to plain HTTP when the
    /// host does not speak TLS (skopeo's `--src-tls-verify=false`). Default `true`.
    #[serde(default = "yes")]
    pub tls_verify: bool,
    /// Who must have signed every image from this host that has no
    /// `policy` of its own ([`crate::signatures::Policy`]).
    #[serde(default)]
    pub policy: Option<crate::signatures::Policy>,
}

fn yes() -> bool {
    true
}

/// What a `docker://` source names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegistryRef {
    /// `HOST[:PORT]` as written (`docker.io` is kept; see [`RegistryRef::endpoint`]).
    pub host: String,
    /// Repository path on that registry (`library/` added for a one-part docker.io name).
    pub repository: String,
    /// The tag or digest to read.
    pub reference: Reference,
    /// False when the source named neither a tag nor a digest (`latest` assumed).
    pub explicit: bool,
}

/// A tag or a digest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reference {
    /// A tag (distribution-spec tag grammar).
    Tag(String),
    /// A manifest digest.
    Digest(Digest),
}

impl Reference {
    /// The path segment: the tag or `alg:hex`.
    pub fn as_path(&self) -> String {
        match self {
            Reference::Tag(t) => t.clone(),
            Reference::Digest(d) => d.to_string(),
        }
    }
}

impl RegistryRef {
    /// The host to connect to: `registry-1.docker.io` for `docker.io`, else `host`.
    pub fn endpoint(&self) -> &str {
        if self.host == "docker.io" {
            "registry-1.docker.io"
        } else {
            &self.host
        }
    }
}

/// True when `source` uses the `docker://` transport.
pub fn is_registry(source: &str) -> bool {
    source.starts_with("docker://")
}

/// Parses `docker://HOST[:PORT]/REPO[:TAG|@DIGEST]` (skopeo's transport
/// syntax; the tag defaults to `latest`). The first path part is the host
/// (as in skopeo, no implicit `docker.io`). Errors name the source.
pub fn parse_registry_ref(source: &str) -> Result<RegistryRef> {
    let rest = source
        .strip_prefix("docker://")
        .ok_or_else(|| anyhow!("source {source:?}: not a docker:// source"))?;
    let (host, path) = rest
        .split_once('/')
        .ok_or_else(|| anyhow!("source {source:?}: expected docker://HOST/REPOSITORY[:TAG]"))?;
    if host.is_empty() || host.contains(['@', '?', '#']) {
        bail!("source {source:?}: invalid registry host {host:?}");
    }
    let mut explicit = true;
    let (name, reference) = if let Some((n, d)) = path.split_once('@') {
        let digest: Digest = d.parse().map_err(|e| anyhow!("source {source:?}: {e}"))?;
        (n, Reference::Digest(digest))
    } else {
        // A ':' after the last '/' starts the tag.
        let last = path.rsplit('/').next().unwrap_or(path);
        match last.split_once(':') {
            Some((_, t)) => (
                &path[..path.len() - t.len() - 1],
                Reference::Tag(t.to_string()),
            ),
            None => {
                explicit = false;
                (path, Reference::Tag("latest".into()))
            }
        }
    };
    if let Reference::Tag(t) = &reference {
        crate::names::Tag::try_from(t.clone()).map_err(|e| anyhow!("source {source:?}: {e}"))?;
    }
    let mut repository = name.to_string();
    crate::names::RepositoryName::try_from(repository.clone())
        .map_err(|e| anyhow!("source {source:?}: {e}"))?;
    if host == "docker.io" && !repository.contains('/') {
        repository = format!("library/{repository}");
    }
    Ok(RegistryRef {
        host: host.to_string(),
        repository,
        reference,
        explicit,
    })
}

/// Expands one `[[image]]` into the images to pull, after tag selection:
/// `(source with its reference, tags to give it)`.
///
/// - `oci:` sources and `docker://` sources naming `:TAG` or `@DIGEST`: the
///   source as is, named `tags` (at least one).
/// - `docker://HOST/REPO` with `tags = [...]`: each of those source tags,
///   carried under its own name.
/// - `docker://HOST/REPO` with `tag_pattern` (and optional `max_tags`): the
///   source's tags that match, newest first ([`tags::select`]), each under
///   its own name.
///
/// Errors: `tag_pattern` with `tags`, with a reference or on an `oci:`
/// source; `max_tags` without `tag_pattern`; no tags at all; a pattern that
/// matches nothing.
pub fn expand(
    source: &str,
    tags: &[crate::names::Tag],
    pattern: Option<&str>,
    max_tags: Option<usize>,
    remote: Option<&mut Remote>,
) -> Result<Vec<(String, Vec<crate::names::Tag>)>> {
    if max_tags.is_some() && pattern.is_none() {
        bail!("source {source:?}: max_tags needs tag_pattern");
    }
    if pattern.is_some() && !tags.is_empty() {
        bail!("source {source:?}: give tags or tag_pattern, not both");
    }
    let named = |t: &str| -> Result<(String, Vec<crate::names::Tag>)> {
        let tag = crate::names::Tag::try_from(t.to_string())
            .map_err(|e| anyhow!("source {source:?}: {e}"))?;
        Ok((format!("{source}:{t}"), vec![tag]))
    };
    let explicit = !is_registry(source) || parse_registry_ref(source)?.explicit;
    match (pattern, remote) {
        (Some(_), _) if explicit => bail!(
            "source {source:?}: tag_pattern needs a docker://HOST/REPO source without :TAG or @DIGEST"
        ),
        (Some(p), Some(remote)) => {
            let available = remote.list_tags(source)?;
            tags::select(&available, p, max_tags)
                .map_err(|e| anyhow!("source {source}: {e}"))?
                .iter()
                .map(|t| named(t))
                .collect()
        }
        (Some(_), None) => bail!("source {source:?}: tag_pattern needs a docker:// source"),
        (None, _) if tags.is_empty() => bail!("source {source:?}: no tags"),
        (None, _) if explicit => Ok(vec![(source.to_string(), tags.to_vec())]),
        (None, _) => tags.iter().map(|t| named(t.as_str())).collect(),
    }
}

/// The default cache directory: `$XDG_CACHE_HOME/airlock`, else `$HOME/.cache/airlock`.
pub fn default_cache_dir() -> Result<PathBuf> {
    if let Some(x) = std::env::var_os("XDG_CACHE_HOME").filter(|x| !x.is_empty()) {
        return Ok(Path::new(&x).join("airlock"));
    }
    let home = std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .ok_or_else(|| anyhow!("neither XDG_CACHE_HOME nor HOME is set: pass --cache DIR"))?;
    Ok(Path::new(&home).join(".cache/airlock"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_sources() {
        let r = parse_registry_ref("docker://127.0.0.1:5000/a/b:1.0").unwrap();
        assert_eq!(r.host, "127.0.0.1:5000");
        assert_eq!(r.repository, "a/b");
        assert_eq!(r.reference, Reference::Tag("1.0".into()));
        let r = parse_registry_ref("docker://reg:5000/a/b").unwrap();
        assert_eq!(r.reference, Reference::Tag("latest".into()));
        let d = Digest::sha256_of(b"x");
        let r = parse_registry_ref(&format!("docker://reg/a@{d}")).unwrap();
        assert_eq!(r.reference, Reference::Digest(d));
        let r = parse_registry_ref("docker://docker.io/busybox:1").unwrap();
        assert_eq!(r.repository, "library/busybox");
        assert_eq!(r.endpoint(), "registry-1.docker.io");
        for bad in [
            "docker://",
            "docker://host",
            "docker://host/UPPER",
            "docker://host/a@sha256:12",
            "docker://host/a:bad tag",
            "oci:x",
        ] {
            assert!(parse_registry_ref(bad).is_err(), "{bad}");
        }
    }
}
