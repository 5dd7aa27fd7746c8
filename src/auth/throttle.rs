//! Failed-login throttling per client address and per user name.
//!
//! Owns: counting failures in fixed windows (from the first failure of a
//! window) and refusing further attempts of a key that reached the limit
//! until its window ends. Bounded memory: at most [`MAX_KEYS`] keys are
//! tracked; when full, expired windows are dropped first, then the
//! oldest.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::ThrottleLimits;

/// Most keys (addresses + user names) tracked at once.
pub const MAX_KEYS: usize = 65_536;

/// Failure counters.
#[derive(Debug, Default)]
pub struct Throttle {
    limits: ThrottleLimits,
    windows: Mutex<HashMap<String, (Instant, u32)>>,
}

impl Throttle {
    /// Counters under `limits`.
    pub fn new(limits: ThrottleLimits) -> Throttle {
        Throttle {
            limits,
            windows: Mutex::new(HashMap::new()),
        }
    }

    /// `Some(wait)` when any of `keys` reached the limit in its current
    /// window (wait: until that window ends), else `None`.
    pub fn blocked(&self, keys: &[&str]) -> Option<Duration> {
        let now = Instant::now();
        let windows = self.windows.lock().ok()?;
        keys.iter()
            .filter_map(|k| windows.get(*k))
            .filter(|(start, n)| {
                *n >= self.limits.max_failures.max(1)
                    && now.duration_since(*start) < self.limits.window
            })
            .map(|(start, _)| {
                self.limits
                    .window
                    .saturating_sub(now.duration_since(*start))
            })
            .max()
    }

    /// Records one failure for each of `keys`.
    pub fn fail(&self, keys: &[&str]) {
        let now = Instant::now();
        let Ok(mut windows) = self.windows.lock() else {
            return;
        };
        if windows.len() + keys.len() > MAX_KEYS {
            let window = self.limits.window;
            windows.retain(|_, (start, _)| now.duration_since(*start) < window);
            while windows.len() + keys.len() > MAX_KEYS {
                let Some(oldest) = windows
                    .iter()
                    .min_by_key(|(_, (s, _))| *s)
                    .map(|(k, _)| k.clone())
                else {
                    break;
                };
                windows.remove(&oldest);
            }
        }
        for k in keys {
            let e = windows.entry((*k).to_string()).or_insert((now, 0));
            if now.duration_since(e.0) >= self.limits.window {
                *e = (now, 0);
            }
            e.1 = e.1.saturating_add(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_after_the_limit_per_key() {
        let t = Throttle::new(ThrottleLimits {
            max_failures: 2,
            window: Duration::from_secs(60),
        });
        assert!(t.blocked(&["addr:1.2.3.4"]).is_none());
        t.fail(&["addr:1.2.3.4", "user:ops"]);
        assert!(t.blocked(&["addr:1.2.3.4"]).is_none());
        t.fail(&["addr:1.2.3.4", "user:ops"]);
        let wait = t.blocked(&["addr:1.2.3.4"]).unwrap();
        assert!(wait > Duration::from_secs(55) && wait <= Duration::from_secs(60));
        assert!(t.blocked(&["user:ops"]).is_some());
        assert!(t.blocked(&["addr:5.6.7.8", "user:dev"]).is_none());
    }
}
