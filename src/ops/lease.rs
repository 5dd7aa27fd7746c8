//! Leases (issue 37 §6): of the replicas sharing one store, one at a time
//! runs each periodic job (the scrub, the periodic gc).
//!
//! The lease of job `J` is the object `leases/J`: one line of JSON,
//! `{"holder":"HOST:PID:NONCE","renewals":N,"renewed":"RFC 3339"}`, only
//! ever changed by compare-and-swap ([`Blobstore::swap`]: S3 `If-Match` /
//! `If-None-Match: *` in the probed form, the filesystem an `flock`), so
//! of two replicas taking it from one version exactly one wins.
//!
//! - The holder rewrites it every `ttl / 3` ([`Lease::step`]).
//! - Every other replica reads it at the same pace and takes it (a swap
//!   from the version it read) once that version stayed unchanged for
//!   `ttl` by its *own* monotonic clock, as Kubernetes' leader election
//!   does: no replica compares its wall clock with another's. An absent
//!   or released lease (empty holder) is taken at once.
//! - A holder that could not renew for `2/3 · ttl` (store errors, a
//!   stalled request) stops counting itself holder, before any other
//!   replica may take over; a stopping server releases its leases
//!   ([`Leases::release_all`]), so its job moves on at once.
//!
//! A lease decides who does the work, not whether the work is safe: gc
//! and scrub stay correct when two replicas run them at once (a paused
//! holder waking up after its lease passed on), they only do it twice.
//! The job's progress lives in the store (the scrub's cursor in
//! `reports/scrub.json`), so the next holder continues where the last
//! one saved it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use crate::store::{Blobstore, StoreError};

/// The key of job `job`'s lease.
pub fn key(job: &str) -> String {
    format!("leases/{job}")
}

/// The lease document (`leases/<job>`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LeaseDoc {
    /// `HOST:PID:NONCE` of the holder; empty when released.
    pub holder: String,
    /// Renewals by this holder since it took the lease.
    pub renewals: u64,
    /// When it was last written (RFC 3339 UTC; for people, never compared).
    pub renewed: String,
}

/// One replica's side of one job's lease: what it last saw and whether it
/// holds it.
pub struct Lease {
    store: Arc<dyn Blobstore>,
    key: String,
    ttl: Duration,
    me: String,
    /// The version last read and since when (our clock) it is unchanged.
    seen: Option<(String, Instant)>,
    /// When the step that last took or renewed the lease started.
    renewed_at: Option<Instant>,
}

impl Lease {
    /// This process's side of job `job`'s lease on `store`, lasting `ttl`
    /// past each renewal; holds nothing until [`Lease::step`] takes it.
    pub fn new(store: Arc<dyn Blobstore>, job: &str, ttl: Duration) -> Lease {
        let host = crate::state::user_at_host();
        let host = host.rsplit('@').next().unwrap_or(&host).to_string();
        Lease {
            store,
            key: key(job),
            ttl,
            me: format!(
                "{host}:{}:{:08x}",
                std::process::id(),
                rand::random::<u32>()
            ),
            seen: None,
            renewed_at: None,
        }
    }

    /// The holder name this side writes (`HOST:PID:NONCE`).
    pub fn me(&self) -> &str {
        &self.me
    }

    /// Whether this side holds the lease now: its last take or renewal
    /// started less than `2/3 · ttl` ago.
    pub fn held(&self) -> bool {
        self.renewed_at
            .is_some_and(|t| t.elapsed() < self.ttl * 2 / 3)
    }

    /// One round: reads the lease; renews it when held, takes it when it is
    /// absent, released, or unchanged for `ttl`; returns whether this side
    /// holds it afterwards. Errors: the store failed (the lease is then
    /// held only while [`Lease::held`] says so).
    pub async fn step(&mut self) -> Result<bool, StoreError> {
        let now = Instant::now();
        let current = self.store.read_versioned(&self.key).await?;
        let doc = current
            .as_ref()
            .and_then(|v| serde_json::from_str::<LeaseDoc>(&v.value).ok());
        let version = current.as_ref().map(|v| v.version.clone());
        if self.seen.as_ref().map(|(v, _)| v) != version.as_ref() {
            self.seen = version.map(|v| (v, now));
        }
        let mine = doc.as_ref().is_some_and(|d| d.holder == self.me);
        let free = match (&doc, &self.seen) {
            _ if current.is_none() => true,
            (Some(d), _) if mine || d.holder.is_empty() => true,
            (_, Some((_, since))) => now.duration_since(*since) >= self.ttl,
            _ => false,
        };
        if !free {
            self.renewed_at = None;
            return Ok(false);
        }
        let next = LeaseDoc {
            holder: self.me.clone(),
            renewals: if mine {
                doc.map_or(0, |d| d.renewals + 1)
            } else {
                0
            },
            renewed: crate::state::now_rfc3339(),
        };
        let value = serde_json::to_string(&next).map_err(|e| StoreError::Io(e.into()))?;
        if self.store.swap(&self.key, current.as_ref(), &value).await? {
            if !mine {
                tracing::info!(lease = %self.key, holder = %self.me, "lease taken: this replica runs the job");
            }
            self.renewed_at = Some(now);
            Ok(true)
        } else {
            self.renewed_at = None;
            Ok(false)
        }
    }

    /// Gives the lease up if this side holds it (the holder is emptied), so
    /// another replica takes it at its next round. Errors: the store failed.
    pub async fn release(&mut self) -> Result<(), StoreError> {
        self.renewed_at = None;
        let Some(current) = self.store.read_versioned(&self.key).await? else {
            return Ok(());
        };
        let Ok(doc) = serde_json::from_str::<LeaseDoc>(&current.value) else {
            return Ok(());
        };
        if doc.holder != self.me {
            return Ok(());
        }
        let released = LeaseDoc {
            holder: String::new(),
            renewals: 0,
            renewed: crate::state::now_rfc3339(),
        };
        let value = serde_json::to_string(&released).map_err(|e| StoreError::Io(e.into()))?;
        self.store.swap(&self.key, Some(&current), &value).await?;
        tracing::info!(lease = %self.key, "lease released");
        Ok(())
    }
}

/// Whether this process holds a job's lease, kept current by the lease's
/// task ([`Leases::job`]).
#[derive(Clone)]
pub struct Held(watch::Receiver<bool>);

impl Held {
    /// A lease always held: one process alone on its store (tests, a
    /// backend without compare-and-swap).
    pub fn always() -> Held {
        // A closed channel keeps its last value: all `now` and `wait` read.
        let (_, rx) = watch::channel(true);
        Held(rx)
    }

    /// Whether it is held now.
    pub fn now(&self) -> bool {
        *self.0.borrow()
    }

    /// Completes once it is held.
    pub async fn wait(&mut self) {
        let _ = self.0.wait_for(|h| *h).await;
    }

    /// Completes once it is no longer held (never, while it stays held).
    pub async fn lost(&mut self) {
        if self.0.wait_for(|h| !*h).await.is_err() {
            // The lease's task is gone while held: stay held.
            std::future::pending::<()>().await;
        }
    }
}

/// A lease's task; aborted when dropped unless [`Leases::release`] took it.
struct Running {
    held: Held,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

/// The leases of one process on one store, one task per job, started on
/// first use.
#[derive(Clone)]
pub struct Leases {
    store: Arc<dyn Blobstore>,
    ttl: Duration,
    jobs: Arc<Mutex<HashMap<&'static str, Running>>>,
}

impl Leases {
    /// Leases on `store` lasting `ttl` past each renewal.
    pub fn new(store: Arc<dyn Blobstore>, ttl: Duration) -> Leases {
        Leases {
            store,
            ttl,
            jobs: Arc::default(),
        }
    }

    /// Whether this process holds job `job`'s lease, starting the task that
    /// takes and renews it (every `ttl / 3`) on first use.
    pub fn job(&self, job: &'static str) -> Held {
        let mut jobs = self.jobs.lock().expect("leases lock");
        if let Some(r) = jobs.get(job) {
            return r.held.clone();
        }
        let (tx, rx) = watch::channel(false);
        let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
        let mut lease = Lease::new(self.store.clone(), job, self.ttl);
        let round = self.ttl / 3;
        let task = tokio::spawn(async move {
            let gauge = crate::metrics::global()
                .lease_held
                .get_or_create(&crate::metrics::JobLabels { job })
                .clone();
            loop {
                let held = match tokio::time::timeout(round, lease.step()).await {
                    Ok(Ok(h)) => h,
                    Ok(Err(e)) => {
                        tracing::warn!(lease = job, error = %e, "lease: the store failed");
                        lease.held()
                    }
                    Err(_) => {
                        tracing::warn!(lease = job, "lease: the store did not answer in time");
                        lease.held()
                    }
                };
                if held != *tx.borrow() {
                    if !held {
                        tracing::info!(lease = job, "lease lost: another replica runs the job");
                    }
                    tx.send_replace(held);
                }
                gauge.set(i64::from(held));
                tokio::select! {
                    () = tokio::time::sleep(round) => {}
                    _ = &mut stopped => break,
                }
            }
            tx.send_replace(false);
            gauge.set(0);
            if let Err(e) = lease.release().await {
                tracing::warn!(lease = job, error = %e, "lease: cannot release");
            }
        });
        let held = Held(rx);
        jobs.insert(
            job,
            Running {
                held: held.clone(),
                stop: Some(stop),
                task: Some(task),
            },
        );
        held
    }

    /// Stops job `job`'s lease task and releases the lease if held.
    pub async fn release(&self, job: &'static str) {
        let running = self.jobs.lock().expect("leases lock").remove(job);
        if let Some(mut r) = running
            && let (Some(stop), Some(task)) = (r.stop.take(), r.task.take())
        {
            let _ = stop.send(());
            let _ = task.await;
        }
    }

    /// Releases every lease (a stopping server), so each job moves on to
    /// another replica at its next round instead of after `ttl`.
    pub async fn release_all(&self) {
        let jobs: Vec<&'static str> = self
            .jobs
            .lock()
            .expect("leases lock")
            .keys()
            .copied()
            .collect();
        for job in jobs {
            self.release(job).await;
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(t) = &self.task {
            t.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::fs::FsStore;

    fn store() -> (tempfile::TempDir, Arc<dyn Blobstore>) {
        let dir = tempfile::tempdir().unwrap();
        let fs = FsStore::open(dir.path()).unwrap();
        (dir, Arc::new(fs))
    }

    async fn doc(store: &dyn Blobstore, job: &str) -> LeaseDoc {
        let v = store.read_versioned(&key(job)).await.unwrap().unwrap();
        serde_json::from_str(&v.value).unwrap()
    }

    #[tokio::test]
    async fn one_holder_and_a_takeover_after_the_ttl() {
        let (_dir, s) = store();
        let ttl = Duration::from_millis(300);
        let mut a = Lease::new(s.clone(), "scrub", ttl);
        let mut b = Lease::new(s.clone(), "scrub", ttl);
        assert_ne!(a.me(), b.me());
        assert!(a.step().await.unwrap(), "an absent lease is taken");
        assert!(!b.step().await.unwrap(), "held by a");
        assert!(a.step().await.unwrap(), "renewed");
        assert_eq!(doc(&*s, "scrub").await.renewals, 1);
        // b's clock starts at the version it saw: a renewal restarts it.
        tokio::time::sleep(ttl / 2).await;
        assert!(a.step().await.unwrap());
        tokio::time::sleep(ttl / 2 + Duration::from_millis(20)).await;
        assert!(!b.step().await.unwrap(), "renewed within the ttl: kept");
        // a stops renewing: b takes over once the version is ttl old.
        tokio::time::sleep(ttl + Duration::from_millis(20)).await;
        assert!(!a.held(), "a stops counting itself holder after 2/3 ttl");
        assert!(b.step().await.unwrap(), "taken after the ttl");
        assert_eq!(doc(&*s, "scrub").await.holder, b.me());
        assert!(!a.step().await.unwrap(), "a sees it lost");
        // A release hands it over at once.
        b.release().await.unwrap();
        assert_eq!(doc(&*s, "scrub").await.holder, "");
        assert!(a.step().await.unwrap(), "a released lease is taken at once");
    }

    #[tokio::test]
    async fn racing_takers_have_one_winner() {
        let (_dir, s) = store();
        for round in 0..20 {
            let job: &'static str = if round % 2 == 0 { "gc" } else { "scrub" };
            if let Some(v) = s.read_versioned(&key(job)).await.unwrap() {
                let released = r#"{"holder":"","renewals":0,"renewed":""}"#;
                assert!(s.swap(&key(job), Some(&v), released).await.unwrap());
            }
            let mut leases: Vec<Lease> = (0..8)
                .map(|_| Lease::new(s.clone(), job, Duration::from_secs(30)))
                .collect();
            let won = futures_util::future::join_all(leases.iter_mut().map(|l| l.step())).await;
            let winners = won.into_iter().filter(|w| *w.as_ref().unwrap()).count();
            assert_eq!(winners, 1, "round {round}");
        }
    }

    #[tokio::test]
    async fn the_task_holds_and_releases() {
        let (_dir, s) = store();
        let leases = Leases::new(s.clone(), Duration::from_millis(300));
        let mut held = leases.job("gc");
        tokio::time::timeout(Duration::from_secs(5), held.wait())
            .await
            .unwrap();
        let other = Leases::new(s.clone(), Duration::from_millis(300));
        let mut theirs = other.job("gc");
        tokio::time::sleep(Duration::from_millis(700)).await;
        assert!(held.now() && !theirs.now(), "renewed: kept by the first");
        leases.release_all().await;
        assert!(!held.now());
        tokio::time::timeout(Duration::from_secs(5), theirs.wait())
            .await
            .unwrap();
        assert!(Held::always().now());
    }
}
