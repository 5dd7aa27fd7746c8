//! airlock: signed bundles, atomic import, and an OCI registry for air-gapped platforms.
//!
//! Layers (each module's docs say what it owns): `digest` and `names` are
//! value types; `store` keeps bytes; `state` keeps the metadata tree over the
//! store; `bundle` makes, verifies and imports bundles (recording their
//! stack candidates through `stacks::ops` and addons through `torcx`);
//! `registry` serves the OCI distribution API over `state`; `stacks` keeps
//! system stacks (promotion, rollout, flattened rootfs) over `state`,
//! sending rootfs tars as `registry` sends blobs; `torcx` is the torcx
//! remote room (its own state document, `/torcx` routes); `server` runs the
//! HTTP listener.
//! Lower layers never call higher ones.

pub mod bundle;
pub mod digest;
pub mod metrics;
pub mod names;
pub mod oci;
pub mod ops;
pub mod registry;
pub mod server;
pub mod stacks;
pub mod state;
pub mod store;
pub mod torcx;
