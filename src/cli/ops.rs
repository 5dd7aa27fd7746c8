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
    /// Remove manifests untagged for longer than the grace period (with
    /// their referrers, and children of removed indexes), as a commit
    /// recorded in history; what a stack, torcx remote or builder names is
    /// always kept (distribution's `--delete-untagged`).
    #[arg(long, env = "AIRLOCK_GC_DELETE_UNTAGGED")]
    pub delete_untagged: bool,
    /// Tag retention for repositories matching a pattern (repeatable):
    /// `REPOSITORIES:newest=N,pushed-within-days=D,pulled-within-days=D[,tags=PATTERN]`
    /// (any of the three criteria; a tag is kept when one holds); `*`
    /// matches within a path segment, `**` across (zot's `keepTags`).
    /// Pulls are those the servers recorded (`pull_record_interval`).
    #[arg(long = "keep-tags", value_name = "RULE")]
    pub keep_tags: Vec<ops::retention::KeepTags>,
    /// Tags never removed by --keep-tags (the serve config's
    /// `[registry] immutable_tags`, repeatable): `REPOS:TAGS` patterns.
    #[arg(long = "immutable-tag", value_name = "RULE")]
    pub immutable_tags: Vec<String>,
}

impl GcPolicy {
    /// The GC options of this policy.
    pub fn options(&self, dry_run: bool) -> gc::GcOptions {
        gc::GcOptions {
            retention: Retention {
                keep_generations: self.keep_generations as usize,
                keep_days: self.keep_days,
            },
            rules: ops::retention::Rules {
                delete_untagged: self.delete_untagged,
                keep_tags: self.keep_tags.clone(),
                grace: self.grace,
                immutable_tags: self.immutable_tags.clone(),
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
    /// Repair: first make a stack's missing derived blobs (rootfs, chunks,
    /// patch) again from its image; then, when the current generation is
    /// still damaged, find the newest generation whose whole tree verifies
    /// (scanning the store, without reading the damaged one), show the
    /// generations that are lost, and make it current as a new generation.
    #[arg(long)]
    repair: bool,
    /// With --repair: show what would be restored and lost; change nothing.
    #[arg(long, requires = "repair")]
    dry_run: bool,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args)]
pub struct ScrubArgs {
    #[command(flatten)]
    data: DataArg,
    /// Read at most this many MB (10^6 bytes) per second (0 = no limit).
    #[arg(long, default_value_t = 0)]
    rate: u64,
    /// Print the pass as JSON (`reports/scrub.json`).
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

pub async fn scrub(args: ScrubArgs) -> Result<()> {
    let state = args.data.existing_state()?;
    let opts = airlock::ops::scrub::ScrubOptions {
        rate: args.rate.saturating_mul(1_000_000),
        ..Default::default()
    };
    let p = airlock::ops::scrub::pass(state.blobstore(), &opts).await?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&p)?);
    } else {
        for d in &p.corrupt {
            println!("corrupt, quarantined: {d}");
        }
        println!(
            "scrubbed {} blobs ({}) since {}; {} corrupt",
            p.blobs,
            airlock::config::format_size(p.bytes),
            p.started,
            p.corrupt.len()
        );
    }
    if p.corrupt.is_empty() {
        Ok(())
    } else {
        anyhow::bail!(
            "{} corrupt blobs quarantined (a re-import or push of the same content repairs them)",
            p.corrupt.len()
        )
    }
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
    if report.problems.is_empty() {
        return Ok(());
    }
    if args.repair {
        if rederive(&state, &args).await? {
            return Ok(());
        }
        let who = airlock::state::user_at_host();
        match airlock::state::recover::recover(&state, args.dry_run, &who).await? {
            Some(r) if args.json => println!("{}", serde_json::to_string_pretty(&r)?),
            Some(r) => println!("{r}"),
            None => bail!(
                "fsck found {} problems, but the current generation verifies: nothing to restore (see above)",
                report.problems.len()
            ),
        }
        return Ok(());
    }
    bail!(
        "fsck found {} problems (airlock fsck --repair restores the newest generation that verifies)",
        report.problems.len()
    );
}

/// `fsck --repair`, first step: makes the stacks' missing derived blobs
/// again ([`airlock::stacks::rederive`]); `true` when that left fsck with
/// no problem (nothing more to repair).
async fn rederive(state: &airlock::state::StateStore, args: &FsckArgs) -> Result<bool> {
    let made = match airlock::stacks::rederive::run(state, args.dry_run).await {
        Ok(made) => made,
        // A current generation that cannot be read: restoring one is next.
        Err(e) => {
            tracing::debug!(error = %e, "stack table unreadable; no derived blob made again");
            return Ok(false);
        }
    };
    for m in &made {
        match (&m.error, args.dry_run) {
            (None, true) => println!(
                "would make again: {} {} of rootfs {}",
                m.what, m.blob, m.rootfs
            ),
            _ => println!("{m}"),
        }
    }
    if made.is_empty() || args.dry_run {
        return Ok(false);
    }
    let after = fsck::run(state, false).await?;
    for p in &after.problems {
        println!("still: {p}");
    }
    Ok(after.problems.is_empty())
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
