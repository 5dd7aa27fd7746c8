//! Bundles: the signed tar that carries images across the air gap (DESIGN.md "Bundle format v1").
//!
//! `format` defines the document and entry names, `freshness` a
//! bundle's expiry and how recent a site's newest import is, `create` writes bundles,
//! `import` verifies and imports them, `volume` splits and joins volumes,
//! `volume_list` signs and checks the list of a bundle's volumes,
//! `sign` wraps OpenPGP (rPGP), `source` pulls `docker://` sources into a
//! local cache.

pub mod create;
pub mod format;
pub mod freshness;
pub mod import;
pub mod journal;
pub mod sign;
pub mod source;
pub mod volume;
pub mod volume_list;
