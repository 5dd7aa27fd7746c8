//! System stacks: the root file systems cells run and builders build on,
//! promoted by an admin, rolled out to a share of cells, rolled back.
//!
//! Rooms inside:
//! - [`table`]: the stack table (the `stacks` state document) and every rule
//!   for changing it; pure data.
//! - [`rollout`]: the stable hash that picks the cells of a rollout.
//! - [`image`]: pinning `REPO:TAG` to a digest, walking an image to its
//!   platforms, configs and layers.
//! - [`flatten`]: one uncompressed rootfs tar per platform image, kept as a blob.
//! - [`patch`]: the zstd patch a promotion makes from the rootfs it replaces.
//! - [`rederive`]: making those derived blobs (rootfs, chunks, patch) again
//!   when one is missing (`airlock fsck --repair`).
//! - [`candidates`]: a bundle's stack candidates checked for flattenability
//!   at `bundle create` and at import.
//! - [`ops`]: promote, rollout, rollback, set-state, set-default, each one
//!   root swap; shared by the CLI and the HTTP API.
//! - [`kpack`]: builder image checks and the kpack ClusterStack.
//! - [`cf`]: the Cloud Controller stacks config and the cells' garden/rep properties.
//! - [`cells`]: what cells report they installed, `stack status` and its
//!   Prometheus gauges.
//! - [`api`]: the `/stacks/v1` HTTP routes.
//!
//! Layering: `api` and the CLI call `ops`, `cells`, `kpack` and `cf`; those
//! read and change `state` (through [`crate::state::Op::Document`]) and the
//! store; `table` and `rollout` depend on nothing but value types. Never
//! speaks the OCI distribution API (that is `registry`).

pub mod api;
pub mod candidates;
pub mod cells;
pub mod cf;
pub mod custom;
pub mod flatten;
pub mod image;
pub mod kpack;
pub mod lifecycle;
pub mod ops;
pub mod patch;
pub mod rederive;
pub mod rollout;
pub mod table;

pub use table::{ImageRef, StackName, StackState, StackTable};

/// Why a stack operation failed; [`api`] maps each to one HTTP status.
#[derive(Debug, thiserror::Error)]
pub enum StackError {
    /// Bad input (a name, a percentage, a reference): 400.
    #[error("{0}")]
    Invalid(String),
    /// A stack, image or promotion that does not exist: 404.
    #[error("{0}")]
    NotFound(String),
    /// The caller may not do this (a policy or role refused): 403.
    #[error("{0}")]
    Denied(String),
    /// The change contradicts the stack's current rollout: 409.
    #[error("{0}")]
    Conflict(String),
    /// A builder image lacks what kpack requires: 422.
    #[error("promotion refused: {0}")]
    Refused(String),
    /// An image that cannot be a stack (no config, bad layer): 422.
    #[error("{0}")]
    Image(String),
    /// The state or the store failed: 500.
    #[error(transparent)]
    State(#[from] crate::state::StateError),
    /// Anything else (I/O while flattening): 500.
    #[error(transparent)]
    Other(#[from] anyhow::Error),
}

impl From<crate::store::StoreError> for StackError {
    fn from(e: crate::store::StoreError) -> StackError {
        StackError::State(e.into())
    }
}
