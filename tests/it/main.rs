//! The integration tests, one module per surface, in one test binary: each
//! binary links the whole crate, so one binary instead of one per file
//! saves most of the suite's build time (CI's 40-minute budget).
//!
//! Two suites stay binaries of their own (`tests/metrics.rs`,
//! `tests/zero_copy.rs`): they assert exact values of airlock's process-wide
//! metrics registry, which the in-process servers of every other module
//! here would move too.
//!
//! Run one module with `cargo test --release --test it -- MODULE::`
//! (e.g. `registry_push::`), as docs/testing.md shows.

#[path = "../common/mod.rs"]
mod common;

mod auth_tls;
mod auth_users;
mod authz_matrix;
mod authz_routes;
mod backup_restore;
mod bosh_lifecycle;
mod bosh_properties;
mod bosh_release;
mod bosh_vm;
mod bundle_import;
mod bundle_volumes;
mod cell_sync;
mod chunks_casync;
mod cli_operator;
mod crash_safety;
mod damage;
mod disk_full;
mod e2e_skopeo;
mod fsck_rollback;
mod gc;
mod gc_retention;
mod hostile_clients;
mod import_trust;
mod kpack_builders;
mod manifest_rule;
mod metadata_copies;
mod one_parse;
mod pgp_interop;
mod proptest_parsers;
mod push_clients;
mod recovery;
mod registry_kept;
mod registry_pull;
mod registry_push;
mod registry_source;
mod replicas_balancer;
mod rootfs_delta_cell;
mod rootfs_delta_serve;
mod s3_backends;
mod s3_conditional;
mod sbom_feeds;
mod sbom_inventory;
mod sbom_versions;
mod sbom_vulns;
mod server_lean;
mod server_limits;
mod server_reload;
mod server_workers;
mod stacks_api;
mod stacks_candidates;
mod stacks_flatten;
mod stacks_lifecycle;
mod state_commit;
mod state_pages;
mod state_root_cache;
mod store_faults;
mod store_layout;
mod store_suite;
mod torcx;
mod trust_document;
mod ui_console;
mod upload_sessions;
mod upstream_keyless;
mod upstream_signatures;
