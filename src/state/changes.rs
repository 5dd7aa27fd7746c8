//! What one change, and one generation, changed: tags created, moved and
//! removed, and room documents changed (issue 24 §1, issue 25 §6).
//!
//! Owns: [`Changes`], derived by the committer from the edits a change
//! made (never declared by the caller, so a push, an import, a rollback
//! and a retention run are described alike), returned with the
//! [`super::Commit`] and stored with the generation as a document of its
//! own (`StateDoc::changes`) that `airlock history` and the console read.

use crate::digest::Digest;
use crate::names::RepositoryName;

/// Tag changes kept with one generation at most; beyond, only counted
/// ([`Changes::more_tags`]).
pub const MAX_TAG_CHANGES: usize = 10_000;

/// One tag set, moved or removed: `old` → `new` (`None`: absent).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TagChange {
    /// The repository.
    pub repository: RepositoryName,
    /// The tag.
    pub tag: String,
    /// What it pointed at before (`None`: it is new).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub old: Option<Digest>,
    /// What it points at now (`None`: removed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub new: Option<Digest>,
}

impl TagChange {
    /// `created`, `moved` or `removed`.
    pub fn action(&self) -> &'static str {
        match (&self.old, &self.new) {
            (None, _) => "created",
            (Some(_), Some(_)) => "moved",
            (Some(_), None) => "removed",
        }
    }
}

impl std::fmt::Display for TagChange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let short = |d: &Option<Digest>| {
            d.as_ref()
                .map_or_else(|| "-".to_string(), |d| d.hex()[..12].to_string())
        };
        write!(
            f,
            "{} {}:{} {} -> {}",
            self.action(),
            self.repository,
            self.tag,
            short(&self.old),
            short(&self.new)
        )
    }
}

/// What a change or a generation changed.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Changes {
    /// Tags created, moved or removed, by repository and tag.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<TagChange>,
    /// Tag changes beyond [`MAX_TAG_CHANGES`], not listed.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub more_tags: u64,
    /// Room documents changed (`stacks`, `torcx`, ...).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub documents: Vec<String>,
}

/// The `kind` of a stored [`ChangesDoc`].
pub const CHANGES_KIND: &str = "airlock.changes.v1";

/// What a generation changed, as stored with it (`StateDoc::changes`):
/// [`Changes`] with its kind and generation first, so that the changes of
/// a generation whose state document is damaged can still be found by a
/// scan of the store and listed as lost by a recovery (issue 61 §4).
/// Documents written before kept neither (readers of [`Changes`] ignore
/// both).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ChangesDoc {
    /// [`CHANGES_KIND`].
    pub kind: String,
    /// The generation whose changes these are.
    pub generation: u64,
    /// The changes.
    #[serde(flatten)]
    pub changes: Changes,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Changes {
    /// Whether nothing is listed.
    pub fn is_empty(&self) -> bool {
        self.tags.is_empty() && self.more_tags == 0 && self.documents.is_empty()
    }

    /// Adds `other` (a later change of the same generation).
    pub fn extend(&mut self, other: Changes) {
        for t in other.tags {
            if self.tags.len() < MAX_TAG_CHANGES {
                self.tags.push(t);
            } else {
                self.more_tags += 1;
            }
        }
        self.more_tags += other.more_tags;
        for d in other.documents {
            if !self.documents.contains(&d) {
                self.documents.push(d);
            }
        }
    }

    /// A one-line summary: `2 tags created, 1 moved; stacks changed`.
    pub fn summary(&self) -> String {
        let count = |a: &str| self.tags.iter().filter(|t| t.action() == a).count();
        let mut parts = Vec::new();
        for a in ["created", "moved", "removed"] {
            let n = count(a);
            if n > 0 {
                parts.push(format!("{n} tags {a}"));
            }
        }
        if self.more_tags > 0 {
            parts.push(format!("{} more tag changes", self.more_tags));
        }
        if !self.documents.is_empty() {
            parts.push(format!("{} changed", self.documents.join(", ")));
        }
        if parts.is_empty() {
            "nothing".into()
        } else {
            parts.join("; ")
        }
    }
}
