//! Operations on a data directory: garbage collection ([`gc`]), the
//! consistency check ([`fsck`]) and whole-state rollback ([`rollback`]).
//!
//! Owns: what is kept (the retention policy, [`Retention`]), what the rooms
//! built on the registry keep ([`rooms`]), and the commands' reports (the
//! last of each kept in the store, [`reports`]). Runs
//! over every blobstore through [`crate::store::Blobstore`] (object times
//! from [`crate::store::Blobstore::list_meta`]); only the sweep of writers'
//! scratch differs per backend (filesystem `tmp/`, S3 multipart uploads). Never
//! changes a generation: GC removes only what no kept generation reaches,
//! rollback adds a generation.

pub mod backup;
pub mod fsck;
pub mod gc;
pub mod lease;
pub mod reports;
pub mod retention;
pub mod rollback;
pub mod rooms;
pub mod scrub;
pub mod write_lock;

use std::time::{Duration, SystemTime};

use crate::digest::Digest;
use crate::state::{StateDoc, StateError, StateStore};
use crate::store::StoreError;

/// Which generations GC keeps: the current one always, the last
/// `keep_generations`, and every one younger than `keep_days`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    /// The newest N generations are kept (at least 1: the current one).
    pub keep_generations: usize,
    /// Generations committed in the last D days are kept too.
    pub keep_days: u64,
}

impl Default for Retention {
    fn default() -> Self {
        Retention {
            keep_generations: 50,
            keep_days: 30,
        }
    }
}

/// The generations `retention` keeps, newest first, as (digest, document);
/// the history ends at the first generation already removed.
///
/// Errors: the current generation cannot be read, or an older one is
/// damaged (not merely removed): GC must not sweep what it cannot see.
pub async fn kept_generations(
    state: &StateStore,
    retention: Retention,
) -> anyhow::Result<Vec<(Digest, StateDoc)>> {
    let (history, broken) = state.history_partial().await?;
    match broken {
        None => {}
        Some(StateError::Store(StoreError::NotFound(_))) if !history.is_empty() => {}
        Some(e) => anyhow::bail!("state history cannot be read ({e}); run `airlock fsck`"),
    }
    let horizon = SystemTime::now() - Duration::from_secs(retention.keep_days * 86_400);
    Ok(history
        .into_iter()
        .enumerate()
        .filter(|(i, (_, doc))| *i < retention.keep_generations.max(1) || younger(doc, horizon))
        .map(|(_, g)| g)
        .collect())
}

/// Whether `doc` was committed after `horizon` (an unreadable time counts as young).
fn younger(doc: &StateDoc, horizon: SystemTime) -> bool {
    match time::OffsetDateTime::parse(&doc.time, &time::format_description::well_known::Rfc3339) {
        Ok(t) => SystemTime::from(t) > horizon,
        Err(_) => true,
    }
}

/// Parses a duration: `90s`, `15m`, `1h`, `7d`, or plain seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, mult) = match s.chars().last() {
        Some('s') => (&s[..s.len() - 1], 1),
        Some('m') => (&s[..s.len() - 1], 60),
        Some('h') => (&s[..s.len() - 1], 3600),
        Some('d') => (&s[..s.len() - 1], 86_400),
        _ => (s, 1),
    };
    num.parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(mult))
        .map(Duration::from_secs)
        .ok_or_else(|| format!("invalid duration {s:?} (e.g. 90s, 15m, 1h, 7d)"))
}

/// [`parse_duration`] of a setting that must be more than zero (an
/// expiry, a staleness bound).
///
/// Errors: what [`parse_duration`] refuses, and `0s`.
pub fn parse_positive_duration(s: &str) -> Result<Duration, String> {
    match parse_duration(s)? {
        d if d.is_zero() => Err("must be more than 0s".into()),
        d => Ok(d),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse() {
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert_eq!(parse_duration("2d"), Ok(Duration::from_secs(172_800)));
        assert!(parse_duration("x").is_err());
    }
}
