//! `airlock backup`, `restore`, `lock` and `unlock`: a site's backup and
//! restore (with or without BOSH: the job's bbr scripts call these).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;

use anyhow::Context;

use airlock::ops::{self, backup, write_lock};
use airlock::store::{Blobstore, OpenedStore};

use super::{DataArg, progress_bar};

/// The store: `--data`/`--store` flags, or the `[store]` of a serve
/// config (`--config`; flags given too override its keys): [`DataArg`].
type SiteStore = DataArg;

impl DataArg {
    async fn open_site(&self, create: bool) -> Result<(OpenedStore, String)> {
        let target = self.target()?;
        let url = target.url.to_string();
        let opened = target
            .open(create)
            .await
            .with_context(|| format!("opening the blobstore {url}"))?;
        Ok((opened, url))
    }
}

#[derive(clap::Args)]
pub struct BackupArgs {
    #[command(flatten)]
    site: SiteStore,
    /// The directory to write the backup into (created; must hold no
    /// backup yet): `backup.json` and `store/`.
    dir: PathBuf,
    /// Do not take the write lock: writes go on while the backup copies
    /// (the backup is still the generation current when it started).
    #[arg(long)]
    no_lock: bool,
    /// How long the lock the backup takes lasts past each renewal (it is
    /// renewed every third of it while the backup runs).
    #[arg(long, default_value = "10m", value_parser = ops::parse_duration)]
    lock_ttl: Duration,
}

#[derive(clap::Args)]
pub struct RestoreArgs {
    #[command(flatten)]
    site: SiteStore,
    /// A directory written by `airlock backup`.
    dir: PathBuf,
}

#[derive(clap::Args)]
pub struct LockArgs {
    #[command(flatten)]
    site: SiteStore,
    /// Who takes it (the same holder may take it again; others wait for
    /// it to expire or `unlock --force`).
    #[arg(long, default_value = "bbr")]
    holder: String,
    /// Why, shown in every refused write.
    #[arg(long, default_value = "backup")]
    reason: String,
    /// How long it lasts unless renewed (`airlock backup` under it renews
    /// it): a backup that dies leaves the site writable after this.
    #[arg(long, default_value = "10m", value_parser = ops::parse_duration)]
    ttl: Duration,
}

#[derive(clap::Args)]
pub struct UnlockArgs {
    #[command(flatten)]
    site: SiteStore,
    /// Release only this holder's lock.
    #[arg(long, default_value = "bbr", conflicts_with = "force")]
    holder: String,
    /// Release whoever holds it.
    #[arg(long)]
    force: bool,
}

/// Renews `holder`'s lock every third of `ttl` until aborted.
fn spawn_renewal(
    store: std::sync::Arc<dyn Blobstore>,
    holder: String,
    ttl: Duration,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(ttl / 3).await;
            match write_lock::renew(&*store, &holder).await {
                Ok(true) => {}
                Ok(false) => tracing::warn!(
                    holder,
                    "write lock no longer held: writes may go on during the backup"
                ),
                Err(e) => tracing::warn!(error = %e, "write lock not renewed; retried"),
            }
        }
    })
}

pub async fn backup(args: BackupArgs) -> Result<()> {
    let (opened, url) = args.site.open_site(false).await?;
    let store = opened.blobstore();
    let state = airlock::state::StateStore::new(store.clone());
    // Work under a lock in force (bbr's pre-backup-lock), else take one
    // (also over a lock past its expiry: its holder died). A lock in force
    // under this command's own holder name is an earlier run's that died
    // (kill -9): taken over, and released at the end like a new one.
    let holder = format!("backup:{}", airlock::state::user_at_host());
    let held = write_lock::read(&*store)
        .await?
        .filter(|(_, d)| d.in_force() && d.holder != holder)
        .map(|(_, d)| d);
    let mut taken = None;
    let renewal = match (&held, args.no_lock) {
        (_, true) => None,
        (Some(doc), false) => Some(spawn_renewal(
            store.clone(),
            doc.holder.clone(),
            Duration::from_secs(doc.ttl_secs),
        )),
        (None, false) => {
            write_lock::take(&*store, &holder, "airlock backup", args.lock_ttl).await?;
            tokio::time::sleep(write_lock::PROPAGATION).await;
            taken = Some(holder.clone());
            Some(spawn_renewal(store.clone(), holder, args.lock_ttl))
        }
    };
    let pb = progress_bar();
    let with_blobs = matches!(opened, OpenedStore::Fs(_));
    let result = backup::backup(&state, &url, &args.dir, with_blobs, &|n| pb.inc(n)).await;
    pb.finish_and_clear();
    if let Some(r) = renewal {
        r.abort();
    }
    if let Some(holder) = &taken {
        write_lock::release(&*store, Some(holder)).await?;
        // Every server reads the release within a refresh: wait for it.
        tokio::time::sleep(write_lock::PROPAGATION).await;
    }
    let manifest = result?;
    println!("{manifest}");
    Ok(())
}

pub async fn restore(args: RestoreArgs) -> Result<()> {
    // Not a backup: say so before creating the store.
    backup::read_manifest(&args.dir)?;
    let (opened, _) = args.site.open_site(true).await?;
    let state = airlock::state::StateStore::new(opened.blobstore());
    let pb = progress_bar();
    let result = backup::restore(&state, &args.dir, &airlock::state::user_at_host(), &|n| {
        pb.inc(n)
    })
    .await;
    pb.finish_and_clear();
    println!("{}", result?);
    Ok(())
}

pub async fn lock(args: LockArgs) -> Result<()> {
    let store = args.site.open_site(false).await?.0.blobstore();
    let doc = write_lock::take(&*store, &args.holder, &args.reason, args.ttl).await?;
    // Every server reads the lock within a refresh: wait for it.
    tokio::time::sleep(write_lock::PROPAGATION).await;
    println!(
        "write lock taken by {} ({}) for {} s past its last renewal: writes answer 503 on every server",
        doc.holder, doc.reason, doc.ttl_secs
    );
    Ok(())
}

pub async fn unlock(args: UnlockArgs) -> Result<()> {
    let store = args.site.open_site(false).await?.0.blobstore();
    let holder = (!args.force).then_some(args.holder.as_str());
    match write_lock::release(&*store, holder).await? {
        Some(doc) => {
            // Every server reads the release within a refresh: wait for it.
            tokio::time::sleep(write_lock::PROPAGATION).await;
            println!(
                "write lock of {} ({}) released: writes are accepted again",
                doc.holder, doc.reason
            );
        }
        None => println!("no write lock was held"),
    }
    Ok(())
}
