//! `airlock ls [REPO]`: what a store holds, as Hauler's `store info` shows
//! it. Without REPO: every repository (tags, size of its linked blobs),
//! then the stacks (state, promotion, rollout) and the torcx addons; with
//! REPO: its tags with digest, media type and image size (manifest, config
//! and layers; of an index, every platform image it holds). `--json` for
//! scripts.

use anyhow::{Result, bail};

use airlock::digest::Digest;
use airlock::names::RepositoryName;
use airlock::oci::{self, Manifest};
use airlock::state::{Repository, StateStore};
use airlock::store::{self, Blobstore};
use airlock::torcx::table::TorcxDoc;

use super::{DataArg, size};

#[derive(clap::Args)]
pub struct LsArgs {
    #[command(flatten)]
    data: DataArg,
    /// A repository: list its tags.
    repository: Option<RepositoryName>,
    /// JSON output.
    #[arg(long)]
    json: bool,
}

/// Pages read from the state at a time.
const PAGE: usize = 1000;

/// Every item of a paged listing: `fetch` (with `last`, the key of the
/// last item so far, `key` of it) `PAGE` at a time.
macro_rules! all_pages {
    (|$last:ident| $fetch:expr, $key:expr) => {{
        let mut out = Vec::new();
        loop {
            let $last = out.last().map($key);
            let page = $fetch.await?;
            let done = page.len() < PAGE;
            out.extend(page);
            if done {
                break out;
            }
        }
    }};
}

/// Bytes of the manifests and the blobs linked into `repo`.
async fn linked_bytes(repo: &Repository) -> Result<u64> {
    let blobs: Vec<(Digest, u64)> = all_pages!(
        |last| repo.blobs(last.as_ref(), PAGE),
        |(d, _): &(Digest, u64)| d.clone()
    );
    let manifests: Vec<(Digest, airlock::state::ManifestInfo)> = all_pages!(
        |last| repo.manifests(last.as_ref(), PAGE),
        |(d, _): &(Digest, airlock::state::ManifestInfo)| d.clone()
    );
    Ok(blobs.iter().map(|(_, n)| n).sum::<u64>()
        + manifests.iter().map(|(_, m)| m.size).sum::<u64>())
}

/// Every tag of `repo` with its digest.
async fn all_tags(repo: &Repository) -> Result<Vec<(airlock::names::Tag, Digest)>> {
    Ok(all_pages!(
        |last| repo.tags(last.as_deref(), PAGE),
        |(t, _): &(airlock::names::Tag, Digest)| t.as_str().to_string()
    ))
}

/// Size of the image `digest`: manifest, config and layers; of an index,
/// its own bytes plus every child image the store holds.
async fn image_size(store: &dyn Blobstore, digest: &Digest, depth: u8) -> Result<u64> {
    let bytes = store::get_verified(store, digest).await?;
    let m = Manifest::parse(&bytes)?;
    let mut total = bytes.len() as u64 + m.blobs().map(|b| b.size).sum::<u64>();
    if depth < 2 {
        for child in m
            .manifests
            .iter()
            .filter(|c| oci::is_manifest_type(&c.media_type))
        {
            // A child a bundle left out on purpose is not in the store.
            if let Ok(n) = Box::pin(image_size(store, &child.digest, depth + 1)).await {
                total += n;
            }
        }
    }
    Ok(total)
}

pub async fn run(args: LsArgs) -> Result<()> {
    let state = args.data.existing_state()?;
    match &args.repository {
        Some(name) => tags(&state, name, args.json).await,
        None => everything(&state, args.json).await,
    }
}

async fn tags(state: &StateStore, name: &RepositoryName, json: bool) -> Result<()> {
    let snap = state.snapshot().await?;
    let Some(repo) = state.repository(&snap, name).await? else {
        bail!("repository {name} not found");
    };
    let tags = all_tags(&repo).await?;
    let mut rows = Vec::new();
    for (tag, digest) in tags {
        let info = repo.manifest(&digest).await?;
        let media_type = info.map(|i| i.media_type).unwrap_or_default();
        let bytes = image_size(&**state.blobstore(), &digest, 0).await?;
        rows.push(serde_json::json!({
            "tag": tag.as_str(), "digest": digest, "mediaType": media_type, "size": bytes,
        }));
    }
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({ "repository": name, "tags": rows }))?
        );
        return Ok(());
    }
    println!("{:<24} {:<71} {:>10}  media type", "tag", "digest", "size");
    for r in &rows {
        println!(
            "{:<24} {:<71} {:>10}  {}",
            r["tag"].as_str().unwrap_or(""),
            r["digest"].as_str().unwrap_or(""),
            size(r["size"].as_u64().unwrap_or(0)),
            r["mediaType"].as_str().unwrap_or("")
        );
    }
    if rows.is_empty() {
        println!("(no tags)");
    }
    Ok(())
}

async fn everything(state: &StateStore, json: bool) -> Result<()> {
    let snap = state.snapshot().await?;
    let names = all_pages!(
        |last| state.repositories(&snap, last.as_deref(), PAGE),
        |n: &RepositoryName| n.as_str().to_string()
    );
    let mut repos = Vec::new();
    for name in names {
        let Some(repo) = state.repository(&snap, &name).await? else {
            continue;
        };
        let tags = all_tags(&repo).await?;
        repos.push(serde_json::json!({
            "repository": name, "tags": tags.len(), "size": linked_bytes(&repo).await?,
        }));
    }
    let stacks = airlock::stacks::ops::load_in(state, &snap).await?;
    let torcx: TorcxDoc = state
        .document(&snap, airlock::torcx::DOCUMENT)
        .await?
        .unwrap_or_default();
    if json {
        let stack_rows: Vec<_> = stacks
            .stacks
            .iter()
            .map(|(n, s)| s.view(n, stacks.default.as_ref() == Some(n)))
            .collect();
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "generation": snap.generation(),
                "repositories": repos,
                "stacks": stack_rows,
                "torcx": torcx,
            }))?
        );
        return Ok(());
    }
    println!("generation {}", snap.generation());
    println!("{:<48} {:>6} {:>10}", "repository", "tags", "size");
    for r in &repos {
        println!(
            "{:<48} {:>6} {:>10}",
            r["repository"].as_str().unwrap_or(""),
            r["tags"],
            size(r["size"].as_u64().unwrap_or(0))
        );
    }
    if repos.is_empty() {
        println!("(no repositories)");
    }
    if !stacks.stacks.is_empty() || !stacks.custom.is_empty() {
        println!();
        super::stack::print_table(&stacks);
    }
    if !torcx.remotes.is_empty() {
        println!(
            "\n{:<32} {:<24} {:>10}  format",
            "torcx remote", "addon", "size"
        );
        for (remote, t) in &torcx.remotes {
            for b in &t.builds {
                println!(
                    "{:<32} {:<24} {:>10}  {}",
                    remote,
                    format!("{}:{}", b.name, b.version),
                    size(b.size),
                    b.format
                );
            }
        }
    }
    Ok(())
}
