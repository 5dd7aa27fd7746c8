//! `GET /api/v1/repositories` (search by name prefix) and
//! `GET /api/v1/repositories/NAME` (a page of tags with digest, media
//! type, platforms, size and referrers; one tag's annotations and
//! referrers in detail; pull commands), within the caller's repositories.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::Result;
use crate::digest::Digest;
use crate::names::{RepositoryName, Tag};
use crate::oci::Manifest;
use crate::state::Repository;
use crate::ui::Context;
use crate::ui::http::{UiError, Viewer};

/// Repository-table pages read at most to fill one filtered page.
const MAX_SCAN_PAGES: usize = 10;

/// Child manifests of an index summarised at most.
const MAX_CHILDREN: usize = 64;

/// Referrers listed at most per manifest.
const MAX_REFERRERS: usize = 100;

/// A page of repository names.
#[derive(Debug, Clone, serde::Serialize)]
pub struct RepoList {
    /// The name prefix searched for.
    pub query: Option<String>,
    /// Names, sorted.
    pub repositories: Vec<String>,
    /// Pass as `after` for the next page.
    pub next: Option<String>,
}

/// Which tags of a repository to show.
#[derive(Debug, Clone, Default)]
pub struct Paging {
    /// Tags after this one (exclusive).
    pub after: Option<String>,
    /// Tags per page.
    pub limit: usize,
    /// The tag shown in detail.
    pub tag: Option<String>,
}

/// A repository's page.
#[derive(Debug, Clone, serde::Serialize)]
pub struct RepoView {
    /// The repository.
    pub name: String,
    /// This page of tags, sorted.
    pub tags: Vec<TagView>,
    /// Pass as `after` for the next page.
    pub next: Option<String>,
    /// The tag asked for with `tag=`, in detail.
    pub selected: Option<TagDetail>,
}

/// One tag in the list.
#[derive(Debug, Clone, serde::Serialize)]
pub struct TagView {
    /// The tag.
    pub tag: String,
    /// The manifest it points at.
    pub digest: Digest,
    /// The manifest's media type.
    pub media_type: String,
    /// Bytes of the manifest, config and layers (of every platform for an index).
    pub size: Option<u64>,
    /// `os/architecture[/variant]` of each platform.
    pub platforms: Vec<String>,
    /// Manifests whose subject is this one (signatures, SBOMs), up to 100.
    pub referrers: usize,
}

/// One tag in detail.
#[derive(Debug, Clone, serde::Serialize)]
pub struct TagDetail {
    /// The tag.
    pub tag: String,
    /// The manifest it points at.
    pub digest: Digest,
    /// What the manifest is.
    pub image: ImageSummary,
    /// Its referrers (up to 100).
    pub referrers: Vec<ReferrerView>,
    /// How to pull it.
    pub pull: PullCommands,
}

/// A referrer of a manifest.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ReferrerView {
    /// The referrer's digest.
    pub digest: Digest,
    /// Its media type.
    pub media_type: String,
    /// Its artifact type (e.g. an SBOM's or a signature's).
    pub artifact_type: Option<String>,
    /// Its size in bytes.
    pub size: u64,
}

/// What a manifest is, read once per digest (content never changes).
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct ImageSummary {
    /// The manifest's media type (its own field, else as recorded).
    pub media_type: Option<String>,
    /// Its artifact type.
    pub artifact_type: Option<String>,
    /// Bytes of the manifest, its config and layers (index: every child too).
    pub size: u64,
    /// One entry per platform.
    pub platforms: Vec<PlatformView>,
    /// The manifest's annotations (as given; shown escaped).
    pub annotations: BTreeMap<String, String>,
}

/// One platform of an image.
#[derive(Debug, Clone, serde::Serialize)]
pub struct PlatformView {
    /// `os/architecture[/variant]`, or `unknown`.
    pub platform: String,
    /// Its image manifest.
    pub digest: Digest,
    /// Bytes of that manifest, its config and layers.
    pub size: Option<u64>,
}

/// Commands that pull a tag.
#[derive(Debug, Clone, serde::Serialize)]
pub struct PullCommands {
    /// docker.
    pub docker: String,
    /// podman.
    pub podman: String,
    /// skopeo (into an OCI layout).
    pub skopeo: String,
    /// containerd's ctr with a hosts directory (`hosts.toml`).
    pub ctr: String,
}

impl PullCommands {
    /// The commands for `host/name:tag` (`tls`: the server speaks HTTPS).
    pub fn new(host: &str, name: &str, tag: &str, tls: bool) -> PullCommands {
        let r = format!("{host}/{name}:{tag}");
        let last = name.rsplit('/').next().unwrap_or(name);
        let (podman, skopeo, ctr) = if tls {
            ("", "", "")
        } else {
            (
                "--tls-verify=false ",
                "--src-tls-verify=false ",
                "--plain-http ",
            )
        };
        PullCommands {
            docker: format!("docker pull {r}"),
            podman: format!("podman pull {podman}{r}"),
            skopeo: format!("skopeo copy {skopeo}docker://{r} oci:{last}:{tag}"),
            ctr: format!("ctr images pull --hosts-dir /etc/containerd/certs.d {ctr}{r}"),
        }
    }
}

/// Up to `limit` repositories the viewer may read whose names start with
/// `query`, after `after`.
///
/// Errors: the state cannot be read.
pub async fn list(
    ctx: &dyn Context,
    viewer: &Viewer,
    query: Option<&String>,
    after: Option<&String>,
    limit: usize,
) -> Result<RepoList> {
    let state = ctx.state();
    let snap = state.snapshot().await?;
    let prefix = query.map_or("", String::as_str);
    let mut out = Vec::new();
    // The prefix itself, when no cursor is past it (names after a cursor
    // are listed exclusively).
    let mut cursor = match after {
        Some(a) => Some(a.clone()),
        None if prefix.is_empty() => None,
        None => {
            if let Ok(n) = prefix.parse::<RepositoryName>()
                && state.repository(&snap, &n).await?.is_some()
                && viewer.scope.covers(n.as_str())
            {
                out.push(n.to_string());
            }
            Some(prefix.to_string())
        }
    };
    let mut more = false;
    'pages: for _ in 0..MAX_SCAN_PAGES {
        let page = state.repositories(&snap, cursor.as_deref(), 1000).await?;
        let full = page.len() == 1000;
        for n in &page {
            if !n.as_str().starts_with(prefix) {
                break 'pages;
            }
            cursor = Some(n.to_string());
            if !viewer.scope.covers(n.as_str()) {
                continue;
            }
            if out.len() == limit {
                more = true;
                break 'pages;
            }
            out.push(n.to_string());
        }
        if !full {
            break;
        }
        more = true;
    }
    Ok(RepoList {
        query: query.cloned(),
        next: (more && !out.is_empty())
            .then(|| out.last().cloned())
            .flatten(),
        repositories: out,
    })
}

/// The repository `name` with a page of its tags.
///
/// Errors: 403 outside the viewer's repositories, 404 when it does not
/// exist (or `tag` does not), the state cannot be read.
pub async fn show(
    ctx: &dyn Context,
    viewer: &Viewer,
    name: &RepositoryName,
    paging: &Paging,
) -> Result<RepoView> {
    let console = ctx
        .console()
        .ok_or_else(|| UiError::not_found("console off"))?;
    // Who may read it is declared in `server::routes` and enforced by the
    // access layer before this runs.
    let state = ctx.state();
    let snap = state.snapshot().await?;
    let repo = state
        .repository(&snap, name)
        .await?
        .ok_or_else(|| UiError::not_found(format!("no repository {name}")))?;
    let mut listed = repo.tags(paging.after.as_deref(), paging.limit + 1).await?;
    let more = listed.len() > paging.limit;
    listed.truncate(paging.limit);
    let mut tags = Vec::with_capacity(listed.len());
    for (tag, digest) in &listed {
        let info = repo.manifest(digest).await?;
        let image = summary(ctx, digest).await;
        tags.push(TagView {
            tag: tag.to_string(),
            digest: digest.clone(),
            media_type: info.map(|i| i.media_type).unwrap_or_default(),
            size: image.as_ref().map(|i| i.size),
            platforms: image
                .map(|i| i.platforms.iter().map(|p| p.platform.clone()).collect())
                .unwrap_or_default(),
            referrers: repo.referrers(digest, None, MAX_REFERRERS).await?.len(),
        });
    }
    let selected = match &paging.tag {
        Some(t) => Some(detail(ctx, viewer, &repo, name, t, console.config.tls).await?),
        None => None,
    };
    Ok(RepoView {
        name: name.to_string(),
        next: more.then(|| tags.last().map(|t| t.tag.clone())).flatten(),
        tags,
        selected,
    })
}

async fn detail(
    ctx: &dyn Context,
    viewer: &Viewer,
    repo: &Repository,
    name: &RepositoryName,
    tag: &str,
    tls: bool,
) -> Result<TagDetail> {
    let t: Tag = tag
        .parse()
        .map_err(|e| UiError::invalid(format!("tag: {e}")))?;
    let digest = repo
        .tag(&t)
        .await?
        .ok_or_else(|| UiError::not_found(format!("no tag {name}:{tag}")))?;
    let image = summary(ctx, &digest)
        .await
        .map_or_else(ImageSummary::default, |s| (*s).clone());
    let referrers = repo
        .referrers(&digest, None, MAX_REFERRERS)
        .await?
        .into_iter()
        .map(|(d, i)| ReferrerView {
            digest: d,
            media_type: i.media_type,
            artifact_type: i.artifact_type,
            size: i.size,
        })
        .collect();
    let host = viewer.host.as_deref().unwrap_or("REGISTRY");
    Ok(TagDetail {
        tag: tag.to_string(),
        pull: PullCommands::new(host, name.as_str(), tag, tls),
        digest,
        image,
        referrers,
    })
}

/// The summary of manifest `digest` (cached by digest); `None` when its
/// blob cannot be read or parsed (the list still shows the tag).
async fn summary(ctx: &dyn Context, digest: &Digest) -> Option<Arc<ImageSummary>> {
    let cache = &ctx.console()?.cache;
    if let Some(s) = cache.images.get(digest) {
        return Some(s);
    }
    let store = ctx.state().blobstore();
    let bytes = crate::store::get_verified(&**store, digest).await.ok()?;
    let m = Manifest::parse(&bytes).ok()?;
    let mut s = ImageSummary {
        media_type: m.media_type.clone(),
        artifact_type: m.artifact_type.clone(),
        size: bytes.len() as u64,
        platforms: Vec::new(),
        annotations: m.annotations.clone().unwrap_or_default(),
    };
    if m.manifests.is_empty() {
        s.size += image_bytes(&m);
        s.platforms.push(PlatformView {
            platform: config_platform(&**store, &m).await,
            digest: digest.clone(),
            size: Some(s.size),
        });
    } else {
        for child in m.manifests.iter().take(MAX_CHILDREN) {
            let size = match crate::store::get_verified(&**store, &child.digest).await {
                Ok(b) => Manifest::parse(&b)
                    .ok()
                    .map(|cm| b.len() as u64 + image_bytes(&cm)),
                Err(_) => None,
            };
            s.size += size.unwrap_or(child.size);
            let platform = child
                .platform_parts()
                .map(|(os, arch, v)| platform_name(&os, &arch, v))
                .unwrap_or_else(|| "unknown".into());
            s.platforms.push(PlatformView {
                platform,
                digest: child.digest.clone(),
                size,
            });
        }
    }
    let s = Arc::new(s);
    cache.images.put(digest.clone(), s.clone());
    Some(s)
}

/// Bytes of an image manifest's config and layers.
fn image_bytes(m: &Manifest) -> u64 {
    m.config.as_ref().map_or(0, |c| c.size) + m.layers.iter().map(|l| l.size).sum::<u64>()
}

fn platform_name(os: &str, arch: &str, variant: Option<&str>) -> String {
    match variant {
        Some(v) => format!("{os}/{arch}/{v}"),
        None => format!("{os}/{arch}"),
    }
}

/// The platform an image manifest's config names (`os`, `architecture`,
/// `variant`), or `unknown` (an artifact, an unreadable config).
async fn config_platform(store: &dyn crate::store::Blobstore, m: &Manifest) -> String {
    let Some(c) = &m.config else {
        return "unknown".into();
    };
    if c.size > 1 << 20 {
        return "unknown".into();
    }
    let Ok(bytes) = crate::store::get_verified(store, &c.digest).await else {
        return "unknown".into();
    };
    let v: serde_json::Value = serde_json::from_slice(&bytes).unwrap_or_default();
    match (v["os"].as_str(), v["architecture"].as_str()) {
        (Some(os), Some(arch)) => platform_name(os, arch, v["variant"].as_str()),
        _ => "unknown".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pull_commands() {
        let p = PullCommands::new("reg.local:5000", "stacks/bb", "v2", false);
        assert_eq!(p.docker, "docker pull reg.local:5000/stacks/bb:v2");
        assert_eq!(
            p.podman,
            "podman pull --tls-verify=false reg.local:5000/stacks/bb:v2"
        );
        assert_eq!(
            p.skopeo,
            "skopeo copy --src-tls-verify=false docker://reg.local:5000/stacks/bb:v2 oci:bb:v2"
        );
        assert_eq!(
            p.ctr,
            "ctr images pull --hosts-dir /etc/containerd/certs.d --plain-http reg.local:5000/stacks/bb:v2"
        );
        let t = PullCommands::new("reg", "a", "1", true);
        assert_eq!(t.podman, "podman pull reg/a:1");
    }
}
