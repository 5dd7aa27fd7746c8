//! The metadata documents: immutable JSON blobs that form airlock's state tree.
//!
//! `refs/root` → [`StateDoc`] → [`RepoTable`] → one [`Repository`] per repository;
//! the [`StateDoc`] also names one document per room (`documents`).
//! Every document is stored as a blob under the sha256 of its canonical JSON
//! (serde_json, maps sorted), so an unchanged document keeps its digest.

use std::collections::BTreeMap;

use crate::digest::Digest;
use crate::names::{RepositoryName, Tag};

/// One generation of the state (DESIGN.md "State model").
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StateDoc {
    /// Always `airlock.state.v1`.
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
    /// The [`RepoTable`] digest.
    pub repositories: Digest,
    /// Named documents of the rooms built on the registry (`stacks`,
    /// `torcx`, ...): name → document digest. Each room owns its document's
    /// schema; `state` only stores and swaps them ([`crate::state::Op::Document`]).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub documents: BTreeMap<String, Digest>,
}

/// The `kind` of a [`StateDoc`].
pub const STATE_KIND: &str = "airlock.state.v1";

/// Repository name → [`Repository`] document digest.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RepoTable {
    /// Sorted by name.
    pub repositories: BTreeMap<RepositoryName, Digest>,
}

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

/// One repository: its tags, manifests and the blobs linked into it.
/// A blob is served from a repository only if it is linked here.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Repository {
    /// Tag → manifest digest.
    pub tags: BTreeMap<Tag, Digest>,
    /// Manifest digest → what it is.
    pub manifests: BTreeMap<Digest, ManifestInfo>,
    /// Linked blob digest → size in bytes (configs, layers, other blobs).
    pub blobs: BTreeMap<Digest, u64>,
}
