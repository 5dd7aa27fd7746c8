//! `airlock gc`, `fsck` and `rollback`: operations on a data directory.

use anyhow::{Result, bail};

use airlock::ops::{self, Retention, fsck, gc, rollback};

use super::DataArg;

/// Retention and grace, shared by `gc` and `serve --gc-interval`.
#[derive(clap::Args, Clone)]
pub struct GcPolicy {
    /// Keep the newest N generations (and everything they reach).
    #[arg(long, env = "AIRLOCK_GC_KEEP_GENERATIONS", default_value_t = 50, value_parser = clap::value_parser!(u64).range(1..))]
    pub keep_generations: u64,
    /// Keep every generation committed in the last D days too.
    #[arg(long, env = "AIRLOCK_GC_KEEP_DAYS", default_value_t = 30)]
    pub keep_days: u64,
    /// Keep unreferenced blobs, pushed-blob links and scratch files younger
    /// than this (`90s`, `15m`, `1h`, `7d`); blobs left by failed or killed
    /// imports are removed at once.
    #[arg(long, env = "AIRLOCK_GC_GRACE", default_value = "1h", value_parser = ops::parse_duration)]
    pub grace: std::time::Duration,
}

impl GcPolicy {
    /// The GC options of this policy.
    pub fn options(&self, dry_run: bool) -> gc::GcOptions {
        gc::GcOptions {
            retention: Retention {
                keep_generations: self.keep_generations as usize,
                keep_days: self.keep_days,
            },
            grace: self.grace,
            dry_run,
        }
    }
}

#[derive(clap::Args)]
pub struct GcArgs {
    #[command(flatten)]
    data: DataArg,
    #[command(flatten)]
    policy: GcPolicy,
    /// Report what would be removed; remove nothing.
    #[arg(long)]
    dry_run: bool,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args)]
pub struct FsckArgs {
    #[command(flatten)]
    data: DataArg,
    /// Re-hash every stored blob (corrupt ones are moved to quarantine/).
    #[arg(long)]
    deep: bool,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args)]
pub struct RollbackArgs {
    #[command(flatten)]
    data: DataArg,
    /// The generation to make current again (see `airlock history`).
    #[arg(long)]
    to: u64,
    /// Why, recorded in history.
    #[arg(long, default_value = "")]
    reason: String,
}

pub async fn gc(args: GcArgs) -> Result<()> {
    let opened = args.data.open(false)?;
    let state = airlock::state::StateStore::new(opened.blobstore());
    let report = gc::run(&opened, &state, &args.policy.options(args.dry_run)).await?;
    let who = airlock::state::user_at_host();
    airlock::ops::reports::record_logged(&**state.blobstore(), "gc", &who, &report).await;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!("{report}");
    }
    Ok(())
}

pub async fn fsck(args: FsckArgs) -> Result<()> {
    let state = args.data.existing_state()?;
    let report = fsck::run(&state, args.deep).await?;
    let who = airlock::state::user_at_host();
    airlock::ops::reports::record_logged(&**state.blobstore(), "fsck", &who, &report).await;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        for p in &report.problems {
            println!("{p}");
        }
        for p in &report.warnings {
            println!("warning: older generation: {p}");
        }
        println!(
            "generation {}: {} generations, {} objects checked, {} blobs re-hashed, {} quarantined, {} problems",
            report.generation,
            report.generations_checked,
            report.objects_checked,
            report.blobs_rehashed,
            report.quarantined.len(),
            report.problems.len()
        );
    }
    if !report.problems.is_empty() {
        bail!("fsck found {} problems", report.problems.len());
    }
    Ok(())
}

pub async fn rollback(args: RollbackArgs) -> Result<()> {
    let state = args.data.existing_state()?;
    let r = rollback::rollback(
        &state,
        args.to,
        &args.reason,
        &airlock::state::user_at_host(),
    )
    .await?;
    println!(
        "rolled back to generation {}: generation {} ({})",
        r.to, r.generation, r.digest
    );
    Ok(())
}
