//! Retention rules (issue 23 §4): what `gc` removes from repositories
//! before it marks, so images nobody can name any more stop holding disk.
//!
//! Owns: the rules (`[gc] delete_untagged`, `[[gc.keep_tags]]`, as
//! distribution's `garbage-collect --delete-untagged` and zot's `keepTags`)
//! and the plan they make: which tags and manifests go, each with why.
//! Applied as one ordinary commit, so history and `rollback` still see
//! what went until the generations holding it age out of
//! [`super::Retention`]. Never removes blobs itself: the sweep does, once
//! no kept generation reaches them.
//!
//! The plan, per repository:
//! 1. `keep_tags` rules (first rule whose `repositories` pattern matches;
//!    tags not matching its `tags` pattern are kept): a tag is kept when it
//!    is among the `newest` N by push time, was pushed within
//!    `pushed_within_days`, or its manifest was pulled within
//!    `pulled_within_days` ([`keep_tags`], reading the pull record of
//!    [`crate::state::pulls`] once per run).
//! 2. `delete_untagged`: a manifest is kept when a tag names it, when a
//!    room document names it (a stack promotion, current or any rollback
//!    target; a torcx remote; a kpack builder image), when it lost its last
//!    tag within the grace period, when it is a child of a kept index, or
//!    when it is a referrer (signature, SBOM) of a kept manifest; every
//!    other manifest goes (a referrer whose subject was never pushed too).
//!    Blobs only removed manifests referenced are unlinked from the
//!    repository.

pub mod keep_tags;

pub use keep_tags::{KeepTags, Verdict, judge};

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};

use crate::digest::Digest;
use crate::names::RepositoryName;
use crate::oci::Manifest;
use crate::state::pulls::{self, PullRecord};
use crate::state::{Op, Repository, StateStore, TagEntry};
use crate::store;
use keep_tags::day;

/// The retention rules of one `gc` run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rules {
    /// Remove manifests untagged for longer than `grace` (and not kept
    /// otherwise, see the module docs).
    pub delete_untagged: bool,
    /// Tag retention per repository pattern.
    pub keep_tags: Vec<KeepTags>,
    /// How long a manifest may stay untagged before it goes.
    pub grace: Duration,
    /// Immutable tag rules (`REPOS:TAGS` patterns): such tags are never
    /// removed by `keep_tags`.
    pub immutable_tags: Vec<String>,
}

impl Rules {
    /// Whether the rules remove anything at all.
    pub fn active(&self) -> bool {
        self.delete_untagged || !self.keep_tags.is_empty()
    }
}

/// What the plan removes.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Removal {
    /// A tag.
    Tag {
        /// Its repository.
        repository: RepositoryName,
        /// The tag.
        tag: String,
        /// The manifest it pointed at.
        digest: Digest,
        /// Why it goes.
        reason: String,
    },
    /// A manifest (and its tags, if any were left).
    Manifest {
        /// Its repository.
        repository: RepositoryName,
        /// The manifest.
        digest: Digest,
        /// Why it goes.
        reason: String,
    },
    /// A blob unlinked from the repository: only removed manifests named it.
    Blob {
        /// Its repository.
        repository: RepositoryName,
        /// The blob.
        digest: Digest,
    },
}

impl std::fmt::Display for Removal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Removal::Tag {
                repository,
                tag,
                digest,
                reason,
            } => write!(f, "tag {repository}:{tag} ({digest}): {reason}"),
            Removal::Manifest {
                repository,
                digest,
                reason,
            } => write!(f, "manifest {repository}@{digest}: {reason}"),
            Removal::Blob { repository, digest } => write!(
                f,
                "blob {repository}@{digest}: only removed manifests referenced it"
            ),
        }
    }
}

/// Whether `name` matches `pattern` (`*` within a segment, `**` across).
pub fn matches(pattern: &str, name: &str) -> bool {
    crate::names::glob_match(pattern, name)
}

fn unix(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// Every digest the room documents of the current generation name (stack
/// promotions and their rollback targets, torcx remotes, builder images):
/// never removed by retention.
async fn pinned(state: &StateStore) -> Result<HashSet<Digest>> {
    let snap = state.snapshot().await?;
    let mut out = HashSet::new();
    let Some(doc) = &snap.state else {
        return Ok(out);
    };
    for (name, d) in &doc.documents {
        let bytes = store::get_verified(&**state.blobstore(), d)
            .await
            .with_context(|| format!("room document {name}"))?;
        let v: serde_json::Value =
            serde_json::from_slice(&bytes).with_context(|| format!("room document {name}"))?;
        super::rooms::digests_in(&v, &mut out);
    }
    Ok(out)
}

/// What the rules decided: the removals, and each tag a `keep_tags`
/// rule looked at and kept (with why).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// What goes.
    pub removals: Vec<Removal>,
    /// Tags a `keep_tags` rule kept.
    pub kept: Vec<Kept>,
}

/// A tag a `keep_tags` rule kept.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Kept {
    /// Its repository.
    pub repository: RepositoryName,
    /// The tag.
    pub tag: String,
    /// The manifest it points at.
    pub digest: Digest,
    /// Why it stays (`pulled 3 days ago (keep_tags "builds/**")`).
    pub reason: String,
}

impl std::fmt::Display for Kept {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "tag {}:{} ({}): {}",
            self.repository, self.tag, self.digest, self.reason
        )
    }
}

/// What every repository's plan reads.
struct Inputs<'a> {
    state: &'a StateStore,
    rules: &'a Rules,
    /// Digests room documents name.
    pinned: HashSet<Digest>,
    /// The pull record, when a rule asks about pulls.
    pulled: Option<PullRecord>,
    now: SystemTime,
}

/// The plan of `rules` over the current generation of `state`, at `now`.
///
/// Errors: the state, a kept index manifest or (with a
/// `pulled_within_days` rule) the pull record cannot be read.
pub async fn plan(state: &StateStore, rules: &Rules, now: SystemTime) -> Result<Plan> {
    let mut out = Plan::default();
    if !rules.active() {
        return Ok(out);
    }
    let pulled = if rules
        .keep_tags
        .iter()
        .any(|r| r.pulled_within_days.is_some())
    {
        let record = pulls::load(&**state.blobstore())
            .await
            .context("reading the pull record (pulls/)")?;
        if record.is_empty() {
            tracing::warn!(
                "the pull record (pulls/) is empty: every tag counts as never pulled \
                 (servers write it every pull_record_interval and when they stop)"
            );
        }
        Some(record)
    } else {
        None
    };
    let inputs = Inputs {
        state,
        rules,
        pinned: pinned(state).await?,
        pulled,
        now,
    };
    let snap = state.snapshot().await?;
    let mut last: Option<RepositoryName> = None;
    loop {
        let page = state
            .repositories(&snap, last.as_ref().map(|n| n.as_str()), 1000)
            .await?;
        let Some(end) = page.last().cloned() else {
            break;
        };
        for name in page {
            let Some(repo) = state.repository(&snap, &name).await? else {
                continue;
            };
            plan_repository(&inputs, &name, &repo, &mut out).await?;
        }
        last = Some(end);
    }
    Ok(out)
}

async fn all_tags(repo: &Repository) -> Result<Vec<TagEntry>> {
    let mut out: Vec<TagEntry> = Vec::new();
    loop {
        let after = out.last().map(|e| (e.manifest.clone(), e.tag.to_string()));
        let page = repo
            .tag_entries(after.as_ref().map(|(d, t)| (d, t.as_str())), 1000)
            .await?;
        if page.is_empty() {
            return Ok(out);
        }
        out.extend(page);
    }
}

async fn plan_repository(
    inputs: &Inputs<'_>,
    name: &RepositoryName,
    repo: &Repository,
    plan: &mut Plan,
) -> Result<()> {
    let Inputs {
        state,
        rules,
        pinned,
        now,
        ..
    } = inputs;
    let out = &mut plan.removals;
    let tags = all_tags(repo).await?;
    let mut removed_tags: HashSet<(Digest, String)> = HashSet::new();
    if let Some(rule) = rules
        .keep_tags
        .iter()
        .find(|r| matches(&r.repositories, name.as_str()))
    {
        let frozen = |tag: &str| {
            rules.immutable_tags.iter().any(|r| {
                let (repos, tags) = r.rsplit_once(':').unwrap_or((r.as_str(), "*"));
                matches(repos, name.as_str()) && matches(tags, tag)
            })
        };
        let subject: Vec<&TagEntry> = tags
            .iter()
            .filter(|e| matches(rule.tags.as_deref().unwrap_or("*"), e.tag.as_str()))
            .filter(|e| !frozen(e.tag.as_str()))
            .collect();
        for v in judge(rule, name, subject, inputs.pulled.as_ref(), *now) {
            let (tag, digest) = (v.entry.tag.to_string(), v.entry.manifest.clone());
            if v.keep {
                plan.kept.push(Kept {
                    repository: name.clone(),
                    tag,
                    digest,
                    reason: v.reason,
                });
                continue;
            }
            removed_tags.insert((digest.clone(), tag.clone()));
            out.push(Removal::Tag {
                repository: name.clone(),
                tag,
                digest,
                reason: v.reason,
            });
        }
    }
    if !rules.delete_untagged {
        return Ok(());
    }
    let tagged: HashSet<Digest> = tags
        .iter()
        .filter(|e| !removed_tags.contains(&(e.manifest.clone(), e.tag.to_string())))
        .map(|e| e.manifest.clone())
        .collect();
    let untagged_now: HashSet<Digest> = removed_tags.into_iter().map(|(d, _)| d).collect();
    let cutoff = unix(*now).saturating_sub(rules.grace.as_secs());
    // Every manifest, and the roots of what is kept.
    let mut manifests = BTreeMap::new();
    let mut last: Option<Digest> = None;
    loop {
        let page = repo.manifests(last.as_ref(), 1000).await?;
        let Some((end, _)) = page.last().cloned() else {
            break;
        };
        manifests.extend(page);
        last = Some(end);
    }
    let mut kept: BTreeSet<Digest> = BTreeSet::new();
    let mut since = BTreeMap::new();
    for d in manifests.keys() {
        let untagged = repo.untagged_since(d).await?;
        let young = untagged.is_some_and(|t| t > cutoff);
        if tagged.contains(d) || pinned.contains(d) || young || untagged_now.contains(d) {
            kept.insert(d.clone());
        }
        since.insert(d.clone(), untagged);
    }
    // Closure: children of kept indexes, referrers of kept manifests.
    let mut todo: Vec<Digest> = kept.iter().cloned().collect();
    while let Some(d) = todo.pop() {
        let mut next = Vec::new();
        for (r, _) in repo.referrers(&d, None, usize::MAX).await? {
            next.push(r);
        }
        if let Some(i) = manifests
            .get(&d)
            .filter(|i| crate::oci::is_index_type(&i.media_type))
        {
            let bytes = store::get_verified(&**state.blobstore(), &d)
                .await
                .with_context(|| format!("index {name}@{d}"))?;
            let m = Manifest::read(&bytes, Some(&i.media_type))
                .with_context(|| format!("index {name}@{d}"))?;
            next.extend(m.manifests.into_iter().map(|c| c.digest));
        }
        for n in next {
            if manifests.contains_key(&n) && kept.insert(n.clone()) {
                todo.push(n);
            }
        }
    }
    let mut removed = Vec::new();
    for (d, info) in &manifests {
        if kept.contains(d) {
            continue;
        }
        removed.push(d.clone());
        let reason = match (&info.subject, since.get(d).copied().flatten()) {
            (Some(s), _) if !manifests.contains_key(s) => {
                format!("referrer of {s}, which this repository does not hold")
            }
            (Some(s), _) => format!("referrer of {s}, which goes too"),
            (None, Some(t)) => format!("untagged since {} (delete_untagged)", day(t)),
            (None, None) => "untagged (delete_untagged)".to_string(),
        };
        out.push(Removal::Manifest {
            repository: name.clone(),
            digest: d.clone(),
            reason,
        });
    }
    if removed.is_empty() {
        return Ok(());
    }
    // Blobs linked here that only removed manifests name.
    let blobs_of = async |digests: Vec<Digest>| -> Result<HashSet<Digest>> {
        let mut out = HashSet::new();
        for d in &digests {
            let bytes = store::get_verified(&**state.blobstore(), d)
                .await
                .with_context(|| format!("manifest {name}@{d}"))?;
            let recorded = manifests.get(d).map(|i| i.media_type.as_str());
            if let Ok(m) = Manifest::read(&bytes, recorded) {
                out.extend(m.blobs().map(|b| b.digest.clone()));
            }
        }
        Ok(out)
    };
    let still = blobs_of(kept.iter().cloned().collect()).await?;
    let mut gone: Vec<Digest> = blobs_of(removed)
        .await?
        .into_iter()
        .filter(|b| !still.contains(b))
        .collect();
    gone.sort();
    for b in gone {
        if repo.blob(&b).await?.is_some() {
            out.push(Removal::Blob {
                repository: name.clone(),
                digest: b,
            });
        }
    }
    Ok(())
}

/// The ops that carry out `plan`: tags deleted, manifests deleted.
pub fn ops(plan: &[Removal]) -> Vec<Op> {
    let mut ops = Vec::new();
    for r in plan {
        match r {
            Removal::Tag {
                repository, tag, ..
            } => {
                if let Ok(tag) = tag.parse() {
                    ops.push(Op::DeleteTag {
                        repo: repository.clone(),
                        tag,
                    });
                }
            }
            Removal::Manifest {
                repository, digest, ..
            } => ops.push(Op::DeleteManifest {
                repo: repository.clone(),
                digest: digest.clone(),
            }),
            Removal::Blob { repository, digest } => ops.push(Op::UnlinkBlob {
                repo: repository.clone(),
                digest: digest.clone(),
            }),
        }
    }
    ops
}

/// Carries out `plan` as one commit (`who` recorded); returns the
/// generation, `None` when there was nothing to remove.
///
/// Errors: the commit failed (a tag or manifest removed meanwhile makes it
/// fail as a whole; the next run plans again).
pub async fn apply(state: &StateStore, plan: &[Removal], who: &str) -> Result<Option<u64>> {
    if plan.is_empty() {
        return Ok(None);
    }
    let (tags, manifests) = plan.iter().fold((0, 0), |(t, m), r| match r {
        Removal::Tag { .. } => (t + 1, m),
        Removal::Manifest { .. } => (t, m + 1),
        Removal::Blob { .. } => (t, m),
    });
    let commit = state
        .commit(
            &format!("gc retention: {tags} tags, {manifests} manifests removed"),
            who,
            &ops(plan),
        )
        .await?;
    Ok(Some(commit.generation))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns() {
        assert!(matches("builds/*", "builds/app"));
        assert!(!matches("builds/*", "builds/team/app"));
        assert!(matches("builds/**", "builds/team/app"));
        assert!(matches("*", "v1.2"));
        assert!(matches("v1.*", "v1.2"));
        assert!(!matches("v1.*", "v2.0"));
        assert!(matches("**", "a/b/c"));
        assert!(!matches("a", "ab"));
    }
}
