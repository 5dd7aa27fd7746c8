//! Bundles: the signed tar that carries images across the air gap (DESIGN.md "Bundle format v1").
//!
//! `format` defines the document and entry names, `freshness` a
//! bundle's expiry and how recent a site's newest import is, `create` writes bundles,
//! `cosign` adds a signature to one,
//! `import` verifies and imports them, `volume` splits and joins volumes,
//! `volume_list` signs and checks the list of a bundle's volumes,
//! `signed` checks and carries upstream cosign signatures at create,
//! `sign` wraps OpenPGP (rPGP), `trust` decides which signers may bring
//! in what (the site's trust document), `source` pulls `docker://` sources into a
//! local cache.

pub mod cosign;
pub mod create;
pub mod format;
pub mod freshness;
pub mod import;
pub mod journal;
pub mod sign;
mod signed;
pub mod source;
pub mod trust;
pub mod volume;
pub mod volume_list;
