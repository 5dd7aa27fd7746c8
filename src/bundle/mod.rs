//! Bundles: the signed tar that carries images across the air gap (DESIGN.md "Bundle format v1").
pub mod sign;
