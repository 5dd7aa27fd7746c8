//! A re-import onto a damaged current generation (issue 24 §4): when the
//! commit (or its plan) meets a missing or corrupt metadata object of the
//! current generation (its state document, a page, a room document), the
//! import first restores the newest generation whose whole tree verifies
//! ([`crate::state::recover`], what `airlock fsck --repair` does), then
//! plans and commits again on top of it. The bundle's blobs, manifests
//! included, are already written by then (a quarantined or missing one is
//! written again like any absent blob), so the second attempt reads
//! nothing more from the bundle.
//!
//! Restoring changes every repository (the generations after the restored
//! one are lost), so only an importer limited to no repository may do it
//! ([`ImportOptions::may_repair`]); a dry run says what it would restore.

use anyhow::{Result, anyhow, bail};

use super::plan::{AccessDenied, ImportOptions};
use crate::state::recover::{Recovery, recover};
use crate::state::{StateError, StateStore};

/// Whether `e` is damage to the stored state ([`StateError::is_damage`]).
pub(super) fn is_damage(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<StateError>()
            .is_some_and(StateError::is_damage)
    })
}

/// Restores the newest generation that verifies, after `cause` (damage met
/// by the import), recorded as done by `who`. Returns what was restored
/// and lost.
///
/// Errors: the importer may not repair ([`AccessDenied`]); a dry run (the
/// error says what a real import would restore); no generation verifies,
/// or the current one verifies after all (then `cause` is not damage a
/// restore can fix, and is returned as it was).
pub(super) async fn repair(
    state: &StateStore,
    opts: &ImportOptions,
    who: &str,
    cause: anyhow::Error,
) -> Result<Recovery> {
    if !opts.may_repair {
        return Err(anyhow!(AccessDenied(format!(
            "the current generation is damaged ({cause:#}); repairing it changes every repository: an admin of every repository must re-import or run `airlock fsck --repair`; nothing imported"
        ))));
    }
    let Some(recovery) = recover(state, opts.dry_run, who).await? else {
        return Err(cause);
    };
    if opts.dry_run {
        bail!(
            "the current generation is damaged ({cause:#}); this import would first repair it:\n{recovery}\nnothing committed"
        );
    }
    tracing::warn!(
        restored = recovery.restored.generation,
        lost = recovery.lost.len(),
        cause = %format!("{cause:#}"),
        "import repaired a damaged current generation"
    );
    Ok(recovery)
}
