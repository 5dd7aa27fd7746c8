//! What is inside each image and stack: package inventories, SBOMs (SPDX
//! 2.3, CycloneDX 1.5) attached as OCI referrers, stack diffs, and offline
//! vulnerability feeds matched against inventories.
//!
//! Rooms inside:
//! - [`version`]: dpkg and apk version ordering (pure);
//! - [`inventory`]: reading package databases and `os-release` from an
//!   image's layers (through `stacks::flatten::pick_files`);
//! - [`purl`], [`spdx`], [`cyclonedx`]: the documents; [`referrer`]: the
//!   OCI artifact that attaches one to its image;
//! - [`bundle`]: the connected side (`bundle create` attaches SBOMs and
//!   packs feeds); [`site`]: inventories and attaching at the site;
//! - [`diff`]: stack diffs (pure); [`feed`]: feeds, their import and the
//!   `vulnfeeds` document; [`scan`]: matching; [`report`]: what the CLI,
//!   the API, the lifecycle and the metrics show; [`api`]: `GET /api/v1/vulns`.
//!
//! Layering: depends on `stacks` (images, flattening, the stack table),
//! `state` and `store`; nothing below depends on it (the bundle pipeline
//! calls its hooks). Never speaks the OCI distribution API and never
//! changes the stack table.

pub mod api;
mod blobio;
pub mod bundle;
pub mod compare;
pub mod cyclonedx;
pub mod diff;
pub mod feed;
pub mod inventory;
pub mod purl;
pub mod referrer;
pub mod report;
pub mod scan;
pub mod site;
pub mod spdx;
pub mod version;
