//! The import journal: what an import in progress may write, so garbage
//! collection can tell a live import from a failed one.
//!
//! Owns: the object `imports/<uuid>` ([`crate::store::journal_key`]) written
//! before an import writes its first blob and removed once its root swap is
//! done. It names the import's process (host, boot, pid and start time) and
//! every blob the bundle lists. While the process lives, `gc` keeps those
//! blobs (an import relies on blobs it found already present). When the
//! import failed (it renames its journal to `imports/<uuid>.failed`, which
//! needs no free space) or its process is gone (killed), `gc` removes the blobs it wrote that no kept generation
//! references at once, without waiting for the grace period, and then the
//! journal. Never read by anything but `gc`.

use bytes::Bytes;

use crate::digest::Digest;
use crate::store::{self, Blobstore};

/// Prefix of the journal objects.
pub const PREFIX: &str = "imports/";

/// Where a failed import moves its journal (a rename: it needs no space
/// on a full disk): `imports/<uuid>.failed`.
pub fn failed_key(key: &str) -> String {
    format!("{key}.failed")
}

/// Whether the journal at `key` is one of a failed import.
pub fn is_failed_key(key: &str) -> bool {
    key.ends_with(".failed")
}

/// One import's journal.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Journal {
    /// The bundle id.
    pub bundle: String,
    /// When the import started, RFC 3339 UTC.
    pub time: String,
    /// `/etc/hostname` of the importing machine.
    pub host: String,
    /// `/proc/sys/kernel/random/boot_id` at the time.
    pub boot: String,
    /// The importing process id.
    pub pid: u32,
    /// Its start time in clock ticks since boot (`/proc/<pid>/stat` field 22),
    /// so a reused pid is not mistaken for it.
    pub start: u64,
    /// Every blob the bundle lists (written or found present).
    pub blobs: Vec<Digest>,
}

fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

fn host() -> String {
    std::fs::read_to_string("/etc/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// Field 22 of `/proc/<pid>/stat` (start time in clock ticks), `None` when
/// there is no such process.
fn start_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces; fields after its `)` are plain.
    let rest = &stat[stat.rfind(')')? + 2..];
    rest.split(' ').nth(19)?.parse().ok()
}

impl Journal {
    /// A journal for this process importing `bundle` with `blobs`.
    pub fn new(bundle: &str, blobs: Vec<Digest>) -> Journal {
        let pid = std::process::id();
        Journal {
            bundle: bundle.to_string(),
            time: crate::state::now_rfc3339(),
            host: host(),
            boot: boot_id(),
            pid,
            start: start_ticks(pid).unwrap_or(0),
            blobs,
        }
    }

    /// Whether the import's process (on this machine) no longer runs: it
    /// was killed. An import on another machine counts as live (GC's grace
    /// period covers it); a failed one renamed its journal ([`failed_key`]).
    pub fn is_dead(&self) -> bool {
        if self.host != host() {
            return false;
        }
        if self.boot != boot_id() {
            return true;
        }
        start_ticks(self.pid) != Some(self.start)
    }

    /// Writes the journal at `key` (replacing it) and makes it durable.
    /// Errors: the store failed.
    pub async fn put(&self, store: &dyn Blobstore, key: &str) -> store::Result<()> {
        let bytes = serde_json::to_vec(self).map_err(|e| store::StoreError::Io(e.into()))?;
        let mut w = store.writer(key).await?;
        w.write(Bytes::from(bytes)).await?;
        w.commit().await?;
        store.sync().await
    }

    /// Reads the journal at `key`; `None` when absent or unreadable.
    pub async fn get(store: &dyn Blobstore, key: &str) -> Option<Journal> {
        let bytes = store::read_all(store, key).await.ok()?;
        serde_json::from_slice(&bytes).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_live_and_a_reused_pid_is_not() {
        let mut j = Journal::new("b", vec![]);
        assert!(j.start > 0);
        assert!(!j.is_dead());
        j.start += 1;
        assert!(j.is_dead(), "same pid, other start time: another process");
        assert!(is_failed_key(&failed_key("imports/x")));
    }
}
