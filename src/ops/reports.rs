//! The last report of each maintenance command (`gc`, `fsck`), kept in the
//! store so that every replica and the console can show when it last ran
//! and what it found.
//!
//! Owns: the objects `reports/<command>.json` ([`key`]), outside the state
//! tree like cell reports: one small object per command, replaced by each
//! run (a dry run too, marked so by its report), never part of history or
//! rollback. Writing one never fails the run it reports: a failure is
//! logged ([`record_logged`]).

use bytes::Bytes;

use crate::store::{self, Blobstore, StoreError};

/// The commands whose reports are kept.
pub const COMMANDS: [&str; 2] = ["gc", "fsck"];

/// One kept report.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LastReport {
    /// `gc` or `fsck`.
    pub command: String,
    /// When the run ended, RFC 3339 UTC.
    pub time: String,
    /// Who ran it (`user@host`, or `serve` for the server's periodic gc).
    pub who: String,
    /// The command's JSON report (`gc --json`, `fsck --json`).
    pub report: serde_json::Value,
}

/// The object holding `command`'s last report.
pub fn key(command: &str) -> String {
    format!("reports/{command}.json")
}

/// Replaces `command`'s last report with `report`, run by `who` and ended now.
///
/// Errors: the store failed.
pub async fn record(
    store: &dyn Blobstore,
    command: &str,
    who: &str,
    report: &impl serde::Serialize,
) -> store::Result<()> {
    let last = LastReport {
        command: command.into(),
        time: crate::state::now_rfc3339(),
        who: who.into(),
        report: serde_json::to_value(report).map_err(|e| StoreError::Io(e.into()))?,
    };
    let bytes = serde_json::to_vec(&last).map_err(|e| StoreError::Io(e.into()))?;
    let mut w = store.writer(&key(command)).await?;
    w.write(Bytes::from(bytes)).await?;
    w.commit().await
}

/// [`record`], logging a failure instead of returning it.
pub async fn record_logged(
    store: &dyn Blobstore,
    command: &str,
    who: &str,
    report: &impl serde::Serialize,
) {
    if let Err(e) = record(store, command, who, report).await {
        tracing::warn!(command, error = %e, "could not keep the report");
    }
}

/// `command`'s last report; `None` when it never ran here (or its object
/// does not parse, which is logged).
///
/// Errors: the store failed.
pub async fn last(store: &dyn Blobstore, command: &str) -> store::Result<Option<LastReport>> {
    match store::read_all(store, &key(command)).await {
        Ok(bytes) => match serde_json::from_slice(&bytes) {
            Ok(r) => Ok(Some(r)),
            Err(e) => {
                tracing::warn!(command, error = %e, "unreadable last report ignored");
                Ok(None)
            }
        },
        Err(StoreError::NotFound(_)) => Ok(None),
        Err(e) => Err(e),
    }
}
