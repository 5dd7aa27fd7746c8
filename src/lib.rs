//! airlock: signed bundles, atomic import, and an OCI registry for air-gapped platforms.
//!
//! Layers (each module's docs say what it owns): `digest` and `names` are
//! value types; `store` keeps bytes; `state` keeps the metadata tree over the
//! store; `bundle` makes, verifies and imports bundles (recording their
//! stack candidates through `stacks::ops` and addons through `torcx`);
//! `registry` serves the OCI distribution API over `state`; `stacks` keeps
//! system stacks (promotion, rollout, flattened rootfs) over `state`,
//! sending rootfs tars as `registry` sends blobs; `torcx` is the torcx
//! remote room (its own state document, `/torcx` routes); `admin` is the
//! `/admin/v1` room (imports over HTTP); `auth` is users, roles and
//! permissions; `events` queues what changed (promotions, imports) in the
//! store and delivers it to webhooks; `server` runs the HTTP listener (TLS,
//! the access layer); `config` reads the serve config file and builds the
//! server from it; `http_client` is the outgoing HTTP(S) client that
//! `bundle` (registry sources) and `cell` (the cell-side stack installer, a
//! client of `/stacks/v1`) share; `sbom` is what is inside images and
//! stacks (inventories, SBOM referrers, stack diffs, vulnerability feeds).
//! `chunks` is casync's chunker, blob index and chunk stores (rootfs deltas:
//! `stacks` chunks and serves, `cell` assembles).
//! `ui` is the web console (`/ui/`, `/api/v1/`), a view over all of them.
//! `files` replaces local files without writing through what was there
//! (the cell's install directory, verified downloads).
//! Lower layers never call higher ones.

pub mod admin;
pub mod auth;
pub mod bundle;
pub mod cell;
pub mod chunks;
pub mod config;
pub mod digest;
pub mod events;
pub mod failpoint;
pub mod files;
pub mod http_client;
pub mod metrics;
pub mod names;
pub mod oci;
pub mod ops;
pub mod registry;
pub mod sbom;
pub mod server;
pub mod signatures;
pub mod stacks;
pub mod state;
pub mod store;
pub mod torcx;
pub mod ui;
