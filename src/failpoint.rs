//! Failpoints for crash tests: `AIRLOCK_FAILPOINT=<name>=<value>` makes a
//! process stop where a test wants it, as `kill -9` would. Unset (every
//! real run), each check is one environment lookup.
//!
//! The names: `import:after_bytes=N` (`bundle::import`),
//! `cell:after_chunks=N` (`cell::delta`), `gc:after_trash=kill|sleep:SECS`
//! (`ops::gc`), `fs:after_writes=N` (the filesystem store: after its Nth
//! file put in place under a key, whichever write that is: a blob, a copy
//! pack, an object, the root).

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

/// The value of the failpoint `name` (`AIRLOCK_FAILPOINT=<name>=<value>`),
/// `None` when another or none is set.
pub fn value(name: &str) -> Option<String> {
    let fp = std::env::var("AIRLOCK_FAILPOINT").ok()?;
    Some(fp.strip_prefix(name)?.strip_prefix('=')?.to_string())
}

/// The numeric value of the failpoint `name`.
pub fn number(name: &str) -> Option<u64> {
    value(name)?.parse().ok()
}

/// Ends the process with SIGKILL, as `kill -9` would.
pub fn crash_here() {
    tracing::warn!("AIRLOCK_FAILPOINT reached: killing this process");
    // SAFETY: sending a signal to our own process has no memory-safety preconditions.
    unsafe {
        libc::kill(libc::getpid(), libc::SIGKILL);
    }
}

/// Counts one file of the filesystem store put in place; crashes at the
/// Nth of `fs:after_writes=N`.
pub fn fs_write_done() {
    static LEFT: OnceLock<Option<AtomicU64>> = OnceLock::new();
    let left = LEFT.get_or_init(|| number("fs:after_writes").map(AtomicU64::new));
    if let Some(left) = left
        && left.fetch_sub(1, Ordering::SeqCst) == 1
    {
        crash_here();
    }
}
