//! Open blob-upload sessions and the bytes they hold, per user, on top of
//! the registry's own server-wide and per-repository caps (issue 12 §7).
//!
//! Owns: the per-user count and byte total, learned from the registry's
//! answers as the access layer sees them (a 202 to `POST .../blobs/uploads/`
//! opens a session named by `Docker-Upload-UUID`; a 202 to a `PATCH` reports
//! the session's size in `Range: 0-<last>`; a 201/204/404 to the session's
//! `PUT` or `DELETE` closes it), the bytes of request bodies still being
//! received ([`UserSessions::reserve`]), and forgetting sessions after the
//! upload expiry as the registry sweeps them. Counts are per process (each
//! replica keeps its own).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

use super::UserLimits;

/// One open session: when it was opened and the bytes it holds.
#[derive(Debug, Clone, Copy)]
struct Open {
    since: Instant,
    bytes: u64,
}

#[derive(Debug, Default)]
struct Mine {
    open: HashMap<String, Open>,
    /// Bytes of request bodies being received now (reserved chunks).
    receiving: u64,
}

/// Upload sessions (and their bytes) each user has open.
#[derive(Debug, Default)]
pub struct UserSessions {
    limits: UserLimits,
    users: Mutex<HashMap<String, Mine>>,
}

impl UserSessions {
    /// Under `limits` (a cap of 0: none).
    pub fn new(limits: UserLimits) -> UserSessions {
        UserSessions {
            limits,
            users: Mutex::new(HashMap::new()),
        }
    }

    /// The caps.
    pub fn limits(&self) -> UserLimits {
        self.limits
    }

    /// Runs `f` on `user`'s entry after dropping expired sessions.
    fn with<T>(&self, user: &str, f: impl FnOnce(&mut Mine) -> T) -> Option<T> {
        let mut users = self.users.lock().ok()?;
        let mine = users.entry(user.to_string()).or_default();
        let expiry = self.limits.expiry;
        mine.open.retain(|_, o| o.since.elapsed() < expiry);
        let out = f(mine);
        if mine.open.is_empty() && mine.receiving == 0 {
            users.remove(user);
        }
        Some(out)
    }

    /// Whether `user` may open one more session (false: at the cap).
    pub fn admits(&self, user: &str) -> bool {
        let cap = self.limits.sessions;
        cap == 0 || self.with(user, |m| m.open.len() < cap).unwrap_or(true)
    }

    /// Bytes `user` holds in open sessions plus bodies being received.
    pub fn held(&self, user: &str) -> u64 {
        self.with(user, |m| {
            m.open.values().map(|o| o.bytes).sum::<u64>() + m.receiving
        })
        .unwrap_or(0)
    }

    /// Reserves `n` more bytes of a body `user` is sending; false (nothing
    /// reserved) when that would pass the byte cap.
    pub fn reserve(&self, user: &str, n: u64) -> bool {
        let cap = self.limits.bytes;
        if cap == 0 {
            return true;
        }
        self.with(user, |m| {
            let held = m.open.values().map(|o| o.bytes).sum::<u64>() + m.receiving;
            let fits = held.saturating_add(n) <= cap;
            if fits {
                m.receiving += n;
            }
            fits
        })
        .unwrap_or(true)
    }

    /// Gives back `n` reserved bytes (the body ended; what was stored is
    /// then reported by [`UserSessions::stored`] or [`UserSessions::closed`]).
    pub fn release(&self, user: &str, n: u64) {
        self.with(user, |m| m.receiving = m.receiving.saturating_sub(n));
    }

    /// Records session `id` as opened by `user`.
    pub fn opened(&self, user: &str, id: &str) {
        self.with(user, |m| {
            m.open.insert(
                id.to_string(),
                Open {
                    since: Instant::now(),
                    bytes: 0,
                },
            )
        });
    }

    /// Records that session `id` of `user` now holds `bytes`.
    pub fn stored(&self, user: &str, id: &str, bytes: u64) {
        self.with(user, |m| {
            if let Some(o) = m.open.get_mut(id) {
                o.bytes = bytes;
            }
        });
    }

    /// Records session `id` as finished or cancelled.
    pub fn closed(&self, user: &str, id: &str) {
        self.with(user, |m| m.open.remove(id));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn limits(sessions: usize, bytes: u64) -> UserLimits {
        UserLimits {
            sessions,
            bytes,
            expiry: Duration::from_secs(60),
        }
    }

    #[test]
    fn caps_sessions_per_user() {
        let s = UserSessions::new(limits(2, 0));
        s.opened("a", "1");
        assert!(s.admits("a"));
        s.opened("a", "2");
        assert!(!s.admits("a"));
        assert!(s.admits("b"));
        s.closed("a", "1");
        assert!(s.admits("a"));
    }

    #[test]
    fn caps_bytes_per_user() {
        let s = UserSessions::new(limits(0, 100));
        s.opened("a", "1");
        assert!(s.reserve("a", 60));
        assert!(!s.reserve("a", 41), "60 + 41 > 100");
        assert!(s.reserve("b", 100), "another user has its own cap");
        s.release("a", 60);
        s.stored("a", "1", 60);
        assert_eq!(s.held("a"), 60);
        assert!(s.reserve("a", 40));
        assert!(!s.reserve("a", 1));
        s.release("a", 40);
        s.closed("a", "1");
        assert_eq!(s.held("a"), 0);
        assert!(s.reserve("a", 100));
    }
}
