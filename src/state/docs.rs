//! The metadata documents: immutable JSON blobs that form airlock's state tree.
//!
//! Layout `airlock.state.v2` (written now): `refs/root` → [`StateDoc`] →
//! the repository table, a paged tree (`super::page`) of repository name →
//! the root page of that repository's own paged tree (keys in
//! `super::repo`). The [`StateDoc`] also names one document per room
//! (`documents`).
//!
//! Every document is stored as a blob under the sha256 of its canonical JSON
//! (serde_json, maps sorted), so an unchanged document keeps its digest.

use std::collections::BTreeMap;

use crate::digest::Digest;

/// One generation of the state (DESIGN.md "State model").
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StateDoc {
    /// [`STATE_KIND`] (`airlock.state.v2`, paged): the layout, which says
    /// what `repositories` names. A copy of a generation (rollback) keeps it.
    pub kind: String,
    /// 1 for the first change, +1 per root swap.
    pub generation: u64,
    /// The previous generation's `StateDoc` digest.
    pub parent: Option<Digest>,
    /// When the change was committed, RFC 3339 UTC.
    pub time: String,
    /// Why (e.g. `import bundle <id>`, `push stacks/bookworm:latest`).
    pub reason: String,
    /// Who made the change (`user@host` on the CLI, the authenticated
    /// user over HTTP; several joined by `, ` for a batched generation).
    pub who: String,
    /// The client address(es) of a change made over HTTP (`ip:port`,
    /// several joined by `, `); absent for CLI changes and older generations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// The root page of the repository table (a paged tree of name →
    /// repository root page; the empty leaf page when there are none).
    pub repositories: Digest,
    /// Named documents of the rooms built on the registry (`stacks`,
    /// `torcx`, ...): name → document digest. Each room owns its document's
    /// schema; `state` only stores and swaps them ([`crate::state::Op::Document`]).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub documents: BTreeMap<String, Digest>,
    /// What this generation changed ([`super::Changes`], a document of its
    /// own); absent when nothing listable changed, and in generations
    /// written before it was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub changes: Option<Digest>,
}

/// The `kind` of a [`StateDoc`] of the paged layout (written now).
pub const STATE_KIND: &str = "airlock.state.v2";

/// What a manifest is, as recorded when it entered the repository.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ManifestInfo {
    /// The media type it is served with (`Content-Type`).
    #[serde(rename = "mediaType")]
    pub media_type: String,
    /// Size in bytes.
    pub size: u64,
    /// The `subject` it refers to (OCI referrers), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<Digest>,
    /// `artifactType`, else the config media type (referrers descriptors).
    #[serde(
        rename = "artifactType",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub artifact_type: Option<String>,
}
