//! The book of upload sessions this process counts against the caps: in
//! total, per repository, per client address and per user (sessions and
//! bytes held), with each session's last activity.
//!
//! Owns: the counts and the choice of which sessions may make room. Never
//! touches the store: [`super::Uploads`] reconciles the book with what the
//! store says is open, removes the sessions chosen to make room, and holds
//! the per-session locks that tell a session with a request in progress.
//!
//! A session is counted from the POST that opens it until it is finished,
//! cancelled, swept, evicted, or found gone from the store (finished
//! through another replica). Counts are per process; what every process
//! agrees on is the store (see [`super::Uploads::create`]).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Mutex, MutexGuard};
use std::time::SystemTime;

use super::UploadLimits;
use super::session::UploadId;
use crate::names::RepositoryName;

/// Who a session counts against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    /// The repository it was opened in.
    pub repository: RepositoryName,
    /// The client's IP address, when the listener knows it.
    pub client: Option<IpAddr>,
    /// The user, when users are configured (`None` for the open policy).
    pub user: Option<String>,
}

/// A cap that is reached: which one, and its value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Full {
    /// `"registry"`, `"repository"`, `"client"` or `"user"`.
    pub scope: &'static str,
    /// The cap (sessions).
    pub cap: usize,
}

#[derive(Debug)]
struct Entry {
    owner: Owner,
    /// Bytes the session holds (its size after the last chunk).
    bytes: u64,
    /// The last request on it (here, or a chunk written through another
    /// replica, as the store's modification times tell).
    active: SystemTime,
    /// Its `info.json` is written: from then on, absent from the store means ended.
    stored: bool,
}

#[derive(Debug, Default)]
struct UserTotals {
    sessions: usize,
    /// Bytes held by the user's counted sessions.
    bytes: u64,
    /// Bytes of request bodies being received now (reserved chunk by chunk).
    receiving: u64,
}

#[derive(Debug, Default)]
struct Inner {
    limits: UploadLimits,
    sessions: HashMap<UploadId, Entry>,
    per_repository: HashMap<RepositoryName, usize>,
    per_client: HashMap<IpAddr, usize>,
    per_user: HashMap<String, UserTotals>,
}

/// The counted sessions (cheap to share inside [`super::Uploads`]).
#[derive(Debug)]
pub(super) struct Book {
    inner: Mutex<Inner>,
}

fn count_up<K: std::hash::Hash + Eq>(map: &mut HashMap<K, usize>, key: K) {
    *map.entry(key).or_default() += 1;
}

fn count_down<K: std::hash::Hash + Eq>(map: &mut HashMap<K, usize>, key: &K) {
    if let Some(n) = map.get_mut(key) {
        *n = n.saturating_sub(1);
        if *n == 0 {
            map.remove(key);
        }
    }
}

impl Inner {
    /// The first cap `owner`'s next session would pass, if any.
    fn full(&self, owner: &Owner) -> Option<Full> {
        let limits = &self.limits;
        let at = |n: usize, cap: usize| cap > 0 && n >= cap;
        if at(self.sessions.len(), limits.max_sessions) {
            return Some(Full {
                scope: "registry",
                cap: limits.max_sessions,
            });
        }
        let n = self.per_repository.get(&owner.repository).copied();
        if at(n.unwrap_or(0), limits.max_sessions_per_repository) {
            return Some(Full {
                scope: "repository",
                cap: limits.max_sessions_per_repository,
            });
        }
        let n = owner.client.and_then(|c| self.per_client.get(&c).copied());
        if at(n.unwrap_or(0), limits.max_sessions_per_client) {
            return Some(Full {
                scope: "client",
                cap: limits.max_sessions_per_client,
            });
        }
        let n = owner.user.as_ref().and_then(|u| self.per_user.get(u));
        if at(n.map_or(0, |t| t.sessions), limits.max_sessions_per_user) {
            return Some(Full {
                scope: "user",
                cap: limits.max_sessions_per_user,
            });
        }
        None
    }

    fn remove(&mut self, id: &UploadId) {
        let Some(e) = self.sessions.remove(id) else {
            return;
        };
        count_down(&mut self.per_repository, &e.owner.repository);
        if let Some(c) = e.owner.client {
            count_down(&mut self.per_client, &c);
        }
        if let Some(u) = &e.owner.user
            && let Some(t) = self.per_user.get_mut(u)
        {
            t.sessions = t.sessions.saturating_sub(1);
            t.bytes = t.bytes.saturating_sub(e.bytes);
            if t.sessions == 0 && t.receiving == 0 {
                self.per_user.remove(u);
            }
        }
    }
}

impl Book {
    pub(super) fn new(limits: UploadLimits) -> Book {
        Book {
            inner: Mutex::new(Inner {
                limits,
                ..Inner::default()
            }),
        }
    }

    /// Replaces the caps (a config reload).
    pub(super) fn set_limits(&self, limits: UploadLimits) {
        self.lock().limits = limits;
    }

    /// The book, even after a panic elsewhere held its lock (the counts
    /// stay consistent: every change is one call under the lock).
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Counts session `id` of `owner`, or names the cap it would pass
    /// (nothing counted then).
    pub(super) fn admit(&self, id: &UploadId, owner: &Owner) -> Result<(), Full> {
        let mut inner = self.lock();
        if let Some(full) = inner.full(owner) {
            return Err(full);
        }
        count_up(&mut inner.per_repository, owner.repository.clone());
        if let Some(c) = owner.client {
            count_up(&mut inner.per_client, c);
        }
        if let Some(u) = &owner.user {
            inner.per_user.entry(u.clone()).or_default().sessions += 1;
        }
        inner.sessions.insert(
            id.clone(),
            Entry {
                owner: owner.clone(),
                bytes: 0,
                active: SystemTime::now(),
                stored: false,
            },
        );
        Ok(())
    }

    /// Marks `id`'s `info.json` as written.
    pub(super) fn stored(&self, id: &UploadId) {
        if let Some(e) = self.lock().sessions.get_mut(id) {
            e.stored = true;
        }
    }

    /// Stops counting `id` (finished, cancelled, removed or gone).
    pub(super) fn release(&self, id: &UploadId) {
        self.lock().remove(id);
    }

    /// Records activity on `id` at `at` (the later of what is known wins).
    pub(super) fn touch(&self, id: &UploadId, at: SystemTime) {
        if let Some(e) = self.lock().sessions.get_mut(id) {
            e.active = e.active.max(at);
        }
    }

    /// The last activity recorded for `id`, if counted here.
    pub(super) fn active(&self, id: &UploadId) -> Option<SystemTime> {
        self.lock().sessions.get(id).map(|e| e.active)
    }

    /// Records that `id` now holds `bytes` (its size), for its user's byte cap.
    pub(super) fn set_bytes(&self, id: &UploadId, bytes: u64) {
        let mut inner = self.lock();
        let Some(e) = inner.sessions.get_mut(id) else {
            return;
        };
        let before = std::mem::replace(&mut e.bytes, bytes);
        if let Some(u) = e.owner.user.clone()
            && let Some(t) = inner.per_user.get_mut(&u)
        {
            t.bytes = t.bytes.saturating_sub(before).saturating_add(bytes);
        }
    }

    /// Counted sessions whose `info.json` is written (what a listing of the
    /// store can confirm or refute).
    pub(super) fn stored_ids(&self) -> Vec<UploadId> {
        let inner = self.lock();
        inner
            .sessions
            .iter()
            .filter(|(_, e)| e.stored)
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// The sessions that count towards `full` for `owner`, least recently
    /// active first: the candidates to make room.
    pub(super) fn in_scope(&self, owner: &Owner, full: Full) -> Vec<UploadId> {
        let inner = self.lock();
        let mut ids: Vec<(SystemTime, UploadId)> = inner
            .sessions
            .iter()
            .filter(|(_, e)| {
                e.stored
                    && match full.scope {
                        "repository" => e.owner.repository == owner.repository,
                        "client" => e.owner.client == owner.client,
                        "user" => e.owner.user == owner.user,
                        _ => true,
                    }
            })
            .map(|(id, e)| (e.active, id.clone()))
            .collect();
        ids.sort();
        ids.into_iter().map(|(_, id)| id).collect()
    }

    /// The per-user byte cap (0: none).
    pub(super) fn user_byte_cap(&self) -> u64 {
        self.lock().limits.max_bytes_per_user
    }

    /// Bytes `user` holds in counted sessions plus bodies being received.
    pub(super) fn held(&self, user: &str) -> u64 {
        self.lock()
            .per_user
            .get(user)
            .map_or(0, |t| t.bytes.saturating_add(t.receiving))
    }

    /// Reserves `n` more bytes of a body `user` is sending; false (nothing
    /// reserved) when that would pass the per-user byte cap.
    pub(super) fn reserve(&self, user: &str, n: u64) -> bool {
        let mut inner = self.lock();
        let cap = inner.limits.max_bytes_per_user;
        if cap == 0 {
            return true;
        }
        let t = inner.per_user.entry(user.to_string()).or_default();
        let fits = t.bytes.saturating_add(t.receiving).saturating_add(n) <= cap;
        if fits {
            t.receiving += n;
        }
        fits
    }

    /// Gives back `n` bytes reserved by [`Book::reserve`] (the body ended).
    pub(super) fn unreserve(&self, user: &str, n: u64) {
        let mut inner = self.lock();
        if let Some(t) = inner.per_user.get_mut(user) {
            t.receiving = t.receiving.saturating_sub(n);
            if t.sessions == 0 && t.receiving == 0 {
                inner.per_user.remove(user);
            }
        }
    }

    /// How many sessions are counted.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.lock().sessions.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner(repo: &str, client: u8, user: Option<&str>) -> Owner {
        Owner {
            repository: repo.parse().unwrap(),
            client: Some(IpAddr::from([10, 0, 0, client])),
            user: user.map(str::to_string),
        }
    }

    fn limits() -> UploadLimits {
        UploadLimits {
            max_sessions: 4,
            max_sessions_per_repository: 3,
            max_sessions_per_client: 2,
            max_sessions_per_user: 2,
            max_bytes_per_user: 100,
            ..UploadLimits::default()
        }
    }

    #[test]
    fn each_cap_is_named_and_a_release_frees_its_place() {
        let book = Book::new(limits());
        let ids: Vec<UploadId> = (0..6).map(|_| UploadId::new()).collect();
        book.admit(&ids[0], &owner("a", 1, None)).unwrap();
        book.admit(&ids[1], &owner("a", 1, None)).unwrap();
        let full = book.admit(&ids[2], &owner("a", 1, None)).unwrap_err();
        assert_eq!(
            full,
            Full {
                scope: "client",
                cap: 2
            }
        );
        book.admit(&ids[2], &owner("a", 2, Some("u"))).unwrap();
        let full = book.admit(&ids[3], &owner("a", 3, None)).unwrap_err();
        assert_eq!(full.scope, "repository");
        book.admit(&ids[3], &owner("b", 3, Some("u"))).unwrap();
        let full = book.admit(&ids[4], &owner("c", 4, None)).unwrap_err();
        assert_eq!(
            full,
            Full {
                scope: "registry",
                cap: 4
            }
        );
        book.release(&ids[0]);
        let full = book.admit(&ids[4], &owner("c", 4, Some("u"))).unwrap_err();
        assert_eq!(
            full,
            Full {
                scope: "user",
                cap: 2
            }
        );
        book.admit(&ids[4], &owner("c", 4, Some("v"))).unwrap();
        assert_eq!(book.len(), 4);
    }

    #[test]
    fn candidates_are_in_scope_stored_and_least_recently_active_first() {
        let book = Book::new(limits());
        let (a, b, c) = (UploadId::new(), UploadId::new(), UploadId::new());
        book.admit(&a, &owner("r", 1, None)).unwrap();
        book.admit(&b, &owner("r", 1, None)).unwrap();
        book.admit(&c, &owner("r", 2, None)).unwrap();
        let full = Full {
            scope: "client",
            cap: 2,
        };
        assert!(
            book.in_scope(&owner("r", 1, None), full).is_empty(),
            "not stored yet"
        );
        for id in [&a, &b, &c] {
            book.stored(id);
        }
        let t0 = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1 << 40);
        book.touch(&a, t0 + std::time::Duration::from_secs(5));
        book.touch(&b, t0);
        assert_eq!(
            book.in_scope(&owner("r", 1, None), full),
            vec![b.clone(), a.clone()]
        );
        let all = book.in_scope(
            &owner("r", 1, None),
            Full {
                scope: "registry",
                cap: 3,
            },
        );
        assert_eq!(all.len(), 3);
        assert_eq!(all[2], a, "the most recently active comes last");
    }

    #[test]
    fn user_bytes_follow_sessions_and_reservations() {
        let book = Book::new(limits());
        let id = UploadId::new();
        book.admit(&id, &owner("r", 1, Some("u"))).unwrap();
        assert!(book.reserve("u", 60));
        assert!(!book.reserve("u", 41), "60 + 41 > 100");
        assert!(book.reserve("w", 100), "another user has its own cap");
        book.unreserve("u", 60);
        book.set_bytes(&id, 60);
        assert_eq!(book.held("u"), 60);
        assert!(book.reserve("u", 40));
        assert!(!book.reserve("u", 1));
        book.unreserve("u", 40);
        book.release(&id);
        assert_eq!(book.held("u"), 0);
        assert!(book.reserve("u", 100));
    }
}
