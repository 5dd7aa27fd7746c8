//! What an import will change, decided before it commits (issue 24 §1):
//! every tag it creates, moves or leaves unchanged, and the refusals that
//! keep a site from moving backwards. A tag last set by a bundle created
//! later than this one is a downgrade (the replay of a stale but validly
//! signed bundle, the attack TUF's and Debian's `Valid-Until` guard
//! against): refused unless the admin allows it with a reason. A tag that
//! matches an immutable tag rule is never moved. Either refusal refuses
//! the import as a whole.
//!
//! Owns: the plan and its refusals. The commit checks the same rules again
//! on the root it lands on ([`crate::state::TagGuard`]), so a bundle
//! imported meanwhile by another process cannot be overtaken.

use super::*;
use crate::state::{BundleMark, Repository, TagGuard};

/// Whether the importer may write a repository ([`ImportOptions::may_write`]).
pub type MayWrite = Arc<dyn Fn(&crate::names::RepositoryName) -> bool + Send + Sync>;

/// How an import may change what the site serves.
#[derive(Clone, Default)]
pub struct ImportOptions {
    /// Verify and plan, then commit nothing (blobs written are removed again).
    pub dry_run: bool,
    /// Move tags that a later bundle set back to this bundle's images;
    /// the reason is recorded in history.
    pub allow_downgrade: Option<String>,
    /// Immutable tag rules (`[registry] immutable_tags`): `REPOS:TAGS` patterns.
    pub immutable_tags: Vec<String>,
    /// Whether the importer may write each repository (a user limited to
    /// some repository prefixes); checked on the signed document, before
    /// any blob is written. `None`: every repository.
    pub may_write: Option<MayWrite>,
    /// Import a bundle past its `expires`; the reason is recorded in
    /// history ([`crate::bundle::freshness`]).
    pub allow_expired: Option<String>,
    /// Whether the importer may repair a damaged current generation before
    /// committing (restore the newest generation that verifies, as
    /// `airlock fsck --repair`): it changes every repository, so only an
    /// importer limited to no repository may ([`super::repair`]).
    pub may_repair: bool,
    /// The site's upstream signature policy (`[[import.policy]]`): which
    /// cosign keys must have signed the images of which repositories
    /// ([`super::upstream`]); empty: none checked.
    pub signature_policy: crate::signatures::SitePolicy,
}

impl std::fmt::Debug for ImportOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ImportOptions")
            .field("dry_run", &self.dry_run)
            .field("allow_downgrade", &self.allow_downgrade)
            .field("allow_expired", &self.allow_expired)
            .field("immutable_tags", &self.immutable_tags)
            .field("may_write", &self.may_write.is_some())
            .field("may_repair", &self.may_repair)
            .field("signature_policy", &self.signature_policy)
            .finish()
    }
}

/// One tag of the bundle as the import sets it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct TagPlan {
    /// The repository.
    pub repository: crate::names::RepositoryName,
    /// The tag.
    pub tag: String,
    /// What it points at now (`None`: it is new).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub old: Option<Digest>,
    /// What the bundle points it at.
    pub new: Digest,
    /// `created`, `moved` or `unchanged`.
    pub action: &'static str,
    /// For a move back to an older bundle's image: which bundle set the
    /// tag, and when it was created.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub downgrade: Option<String>,
}

impl std::fmt::Display for TagPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let short = |d: &Digest| d.hex()[..12].to_string();
        match &self.old {
            Some(old) if self.action == "moved" => write!(
                f,
                "moved {}:{} {} -> {}",
                self.repository,
                self.tag,
                short(old),
                short(&self.new)
            )?,
            _ => write!(
                f,
                "{} {}:{} {}",
                self.action,
                self.repository,
                self.tag,
                short(&self.new)
            )?,
        }
        if let Some(d) = &self.downgrade {
            write!(f, " (downgrade: {d})")?;
        }
        Ok(())
    }
}

/// The bundle's signed creation time as a [`BundleMark`].
/// Errors: `created` is not RFC 3339.
pub(super) fn bundle_mark(doc: &BundleDoc) -> Result<BundleMark> {
    let t =
        time::OffsetDateTime::parse(&doc.created, &time::format_description::well_known::Rfc3339)
            .with_context(|| {
            format!(
                "bundle {}: created {:?} is not an RFC 3339 time",
                doc.id, doc.created
            )
        })?;
    Ok(BundleMark {
        id: doc.id.clone(),
        created: t.unix_timestamp().max(0) as u64,
    })
}

/// The guard the import's ops carry for `repository:tags`.
pub(super) fn guard(opts: &ImportOptions, mark: &BundleMark) -> TagGuard {
    TagGuard {
        bundle: Some(mark.clone()),
        allow_downgrade: opts.allow_downgrade.is_some(),
        frozen: false,
    }
}

/// Whether `repository:tag` matches one of `rules`.
fn immutable(rules: &[String], repository: &crate::names::RepositoryName, tag: &str) -> bool {
    rules.iter().any(|rule| {
        let (repos, tags) = rule.rsplit_once(':').unwrap_or((rule.as_str(), "*"));
        crate::names::glob_match(repos, repository.as_str()) && crate::names::glob_match(tags, tag)
    })
}

/// Refuses the bundle before anything is written when it is past its
/// `expires` without the override ([`check_expiry`]) or writes a
/// repository the importer may not write.
pub(super) fn check_access(doc: &BundleDoc, opts: &ImportOptions) -> Result<()> {
    check_expiry(doc, opts)?;
    let Some(may) = &opts.may_write else {
        return Ok(());
    };
    let mut outside: Vec<String> = doc
        .images
        .iter()
        .filter(|i| !may(&i.repository))
        .map(|i| i.repository.to_string())
        .collect();
    outside.sort();
    outside.dedup();
    if !outside.is_empty() {
        return Err(anyhow!(AccessDenied(format!(
            "bundle {} writes repositories outside this user's: {}; nothing imported",
            doc.id,
            outside.join(", ")
        ))));
    }
    Ok(())
}

/// Whether `doc` is past its `expires` and let through by
/// `opts.allow_expired` (for the history entry).
///
/// Errors: [`Refused`] for a bundle past its expiry without the override,
/// or with an unreadable or impossible expiry.
pub(super) fn check_expiry(doc: &BundleDoc, opts: &ImportOptions) -> Result<bool> {
    crate::bundle::freshness::check_expiry(
        doc,
        std::time::SystemTime::now(),
        opts.allow_expired.as_deref(),
    )
    .map_err(|e| anyhow!(Refused(e.to_string())))
}

/// An import refused by the site's rules: a downgrade or an expired
/// bundle without the admin's override, or an immutable tag moved (HTTP
/// 409).
#[derive(Debug)]
pub struct Refused(pub String);

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Refused {}

/// An import refused for the importer's rights (HTTP 403).
#[derive(Debug)]
pub struct AccessDenied(pub String);

impl std::fmt::Display for AccessDenied {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for AccessDenied {}

/// The tags `doc` sets, against the current state; refuses (nothing
/// committed) when one would move back to an older bundle without
/// `allow_downgrade`, or move an immutable tag.
pub(super) async fn plan_tags(
    state: &StateStore,
    doc: &BundleDoc,
    opts: &ImportOptions,
) -> Result<Vec<TagPlan>> {
    let mark = bundle_mark(doc)?;
    let snap = state.snapshot().await?;
    let mut plan = Vec::new();
    for img in &doc.images {
        let repo: Option<Repository> = state.repository(&snap, &img.repository).await?;
        for tag in &img.tags {
            let old = match &repo {
                Some(r) => r.tag(tag).await?,
                None => None,
            };
            let action = match &old {
                None => "created",
                Some(o) if o == &img.digest => "unchanged",
                Some(_) => "moved",
            };
            let mut downgrade = None;
            if let (Some(r), Some(o), "moved") = (&repo, &old, action)
                && let Some(prev) = r.tag_mark(o, tag.as_str()).await?.and_then(|m| m.bundle)
                && prev.created > mark.created
            {
                downgrade = Some(format!(
                    "set by bundle {} created {}",
                    prev.id,
                    crate::state::rfc3339_of(prev.created)
                ));
            }
            plan.push(TagPlan {
                repository: img.repository.clone(),
                tag: tag.to_string(),
                old,
                new: img.digest.clone(),
                action,
                downgrade,
            });
        }
    }
    let frozen: Vec<String> = plan
        .iter()
        .filter(|p| p.action == "moved" && immutable(&opts.immutable_tags, &p.repository, &p.tag))
        .map(|p| format!("{}:{}", p.repository, p.tag))
        .collect();
    if !frozen.is_empty() && !opts.dry_run {
        return Err(anyhow!(Refused(format!(
            "bundle {} would move immutable tags (registry.immutable_tags): {}; nothing imported",
            doc.id,
            frozen.join(", ")
        ))));
    }
    let downgrades: Vec<String> = plan
        .iter()
        .filter_map(|p| {
            Some(format!(
                "{}:{} ({})",
                p.repository,
                p.tag,
                p.downgrade.as_ref()?
            ))
        })
        .collect();
    if !downgrades.is_empty() && opts.allow_downgrade.is_none() && !opts.dry_run {
        return Err(anyhow!(Refused(format!(
            "downgrade refused: bundle {} was created {}, before the bundles that set {}; nothing imported (airlock import --allow-downgrade --reason TEXT to move them back)",
            doc.id,
            doc.created,
            downgrades.join(", ")
        ))));
    }
    Ok(plan)
}
