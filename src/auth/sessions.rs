//! Open blob-upload sessions per user, on top of the registry's own
//! server-wide and per-repository caps.
//!
//! Owns: the per-user count, learned from the registry's answers as the
//! access layer sees them (a 202 to `POST .../blobs/uploads/` opens a session
//! named by `Docker-Upload-UUID`; a 201/204/404 to the session's `PUT` or
//! `DELETE` closes it), with sessions forgotten after the upload expiry as
//! the registry sweeps them.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Upload sessions each user has open.
#[derive(Debug, Default)]
pub struct UserSessions {
    cap: usize,
    expiry: Duration,
    open: Mutex<HashMap<String, HashMap<String, Instant>>>,
}

impl UserSessions {
    /// At most `cap` open sessions per user (0: no per-user cap); a
    /// session is forgotten `expiry` after it was opened.
    pub fn new(cap: usize, expiry: Duration) -> UserSessions {
        UserSessions {
            cap,
            expiry,
            open: Mutex::new(HashMap::new()),
        }
    }

    /// Whether `user` may open one more session (false: at the cap).
    pub fn admits(&self, user: &str) -> bool {
        if self.cap == 0 {
            return true;
        }
        let Ok(mut open) = self.open.lock() else {
            return true;
        };
        let Some(mine) = open.get_mut(user) else {
            return true;
        };
        let expiry = self.expiry;
        mine.retain(|_, t| t.elapsed() < expiry);
        mine.len() < self.cap
    }

    /// The cap (0: none).
    pub fn cap(&self) -> usize {
        self.cap
    }

    /// Records session `id` as opened by `user`.
    pub fn opened(&self, user: &str, id: &str) {
        if self.cap == 0 {
            return;
        }
        if let Ok(mut open) = self.open.lock() {
            open.entry(user.to_string())
                .or_default()
                .insert(id.to_string(), Instant::now());
        }
    }

    /// Records session `id` as finished or cancelled.
    pub fn closed(&self, user: &str, id: &str) {
        if let Ok(mut open) = self.open.lock()
            && let Some(mine) = open.get_mut(user)
        {
            mine.remove(id);
            if mine.is_empty() {
                open.remove(user);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_per_user() {
        let s = UserSessions::new(2, Duration::from_secs(60));
        s.opened("a", "1");
        assert!(s.admits("a"));
        s.opened("a", "2");
        assert!(!s.admits("a"));
        assert!(s.admits("b"));
        s.closed("a", "1");
        assert!(s.admits("a"));
    }
}
