//! The torcx-style remote (issue 10): addon images for hosts that select
//! them with torcx profiles, and the signed contents documents that list them.
//!
//! Owns: the torcx JSON kinds ([`format`]), checking addon archives
//! ([`archive`]), the `[[addon]]` mirror-config entries and their bundle
//! entries ([`bundle`]), the room's state document `torcx` ([`table`]),
//! building and signing contents per remote, board and OS version
//! ([`contents`]), profile merging and checks ([`profile`]), the host side
//! `remote.json` ([`remote`]) and the `/torcx/...` routes ([`api`]).
//!
//! Never touches repositories or the OCI API (the registry never imports this
//! module either); it keeps its state as ONE named document, `torcx`, changed
//! only with [`crate::state::Op::Document`]. Addon archives are ordinary
//! blobs, verified by sha256 on import like any other.
//!
//! Format reference: `shared/reference/interop-formats.md` section 1 (torcx
//! @ e1ded85, frozen upstream).

pub mod api;
pub mod archive;
pub mod bundle;
pub mod contents;
pub mod format;
pub mod profile;
pub mod remote;
pub mod table;

/// The name of the room's document in the state tree.
pub const DOCUMENT: &str = "torcx";
