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
    /// With --repair: show what would be made again, restored and lost; change nothing.
    #[arg(long, requires = "repair")]
    dry_run: bool,
    /// Print the report as one JSON object (with --repair: `{"fsck", "rederived", "recovery", "after"}`).
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
        for d in &p.repaired {
            println!("repaired from its other copy: {d}");
        }
        for d in &p.damaged {
            println!("damaged, no good copy: {d}");
        }
        println!(
            "scrubbed {} blobs ({}) since {}; {} corrupt, {} repaired from their other copies",
            p.blobs,
            airlock::config::format_size(p.bytes),
            p.started,
            p.corrupt.len(),
            p.repaired.len()
        );
    }
    if p.corrupt.is_empty() {
        Ok(())
    } else {
        anyhow::bail!(
            "{} corrupt blobs quarantined (a re-import or push of the same content repairs them; a stack's rootfs, chunks or patch: airlock fsck --repair)",
            p.corrupt.len()
        )
    }
}

pub async fn fsck(args: FsckArgs) -> Result<()> {
    let state = args.data.existing_state()?;
    let report = fsck::run(&state, args.deep).await?;
    let who = airlock::state::user_at_host();
    airlock::ops::reports::record_logged(&**state.blobstore(), "fsck", &who, &report).await;
    if !args.json {
        print_report(&report);
    }
    if !args.repair {
        if args.json {
            println!("{}", serde_json::to_string_pretty(&report)?);
        }
        if report.problems.is_empty() {
            return Ok(());
        }
        let hint = if report.only_derived() {
            "airlock fsck --repair makes the stacks' derived blobs again"
        } else {
            "airlock fsck --repair restores the newest generation that verifies"
        };
        bail!("fsck found {} problems ({hint})", report.problems.len());
    }
    let mut out = Repair {
        fsck: report,
        ..Repair::default()
    };
    let result = repair(&state, &args, &who, &mut out).await;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&out)?);
    }
    result
}

/// What `fsck --repair` found and did (`--json`: this object).
#[derive(Default, serde::Serialize)]
struct Repair {
    /// The check before the repair.
    fsck: fsck::FsckReport,
    /// Each stack's derived blob found missing, and whether it was (or, in
    /// a dry run, would be) made again.
    rederived: Vec<airlock::stacks::rederive::Rederived>,
    /// The layout marker's damage, when it was (or, in a dry run, would
    /// be) written again ([`airlock::store::layout::repair`]).
    layout: Option<String>,
    /// The generation that records a damaged record of changes (lost, no
    /// generation restored).
    restated: Option<u64>,
    /// The generation restored, when the current one was damaged.
    recovery: Option<airlock::state::recover::Recovery>,
    /// The check after the repair (not in a dry run, nor when nothing was done).
    after: Option<fsck::FsckReport>,
}

/// `fsck --repair`: makes the stacks' missing derived blobs again
/// ([`airlock::stacks::rederive`]); when a problem is left that is not one
/// of those, restores the newest generation that verifies
/// ([`airlock::state::recover`]) and makes again what that generation's
/// stacks lack; then checks again. Ok when nothing is left to repair (a dry
/// run: when everything found would be repaired).
async fn repair(
    state: &airlock::state::StateStore,
    args: &FsckArgs,
    who: &str,
    out: &mut Repair,
) -> Result<()> {
    if out.fsck.problems.is_empty() {
        return Ok(());
    }
    let mut left = out.fsck.clone();
    if left.problems.iter().any(|p| p.kind == "layout") {
        let store = &**state.blobstore();
        out.layout = match args.dry_run {
            true => airlock::store::layout::damage(store).await?,
            false => airlock::store::layout::repair(store).await?,
        };
        if let Some(cause) = &out.layout
            && !args.json
        {
            let done = if args.dry_run {
                "would be written"
            } else {
                "written"
            };
            println!("refs/layout {done} again ({cause})");
        }
        left.problems.retain(|p| p.kind != "layout");
        if left.problems.is_empty() && args.dry_run {
            return Ok(());
        }
        if !args.dry_run {
            left = fsck::run(state, false).await?;
            if left.problems.is_empty() {
                out.after = Some(left);
                return Ok(());
            }
        }
    }
    if !left.problems.is_empty() && left.problems.iter().all(|p| p.kind == "record") {
        let lost: Vec<&str> = left.problems.iter().map(|p| p.object.as_str()).collect();
        let reason = format!(
            "repaired: the record of what the previous generation changed is damaged beyond its copies ({}); its tag changes are lost from history",
            lost.join(", ")
        );
        if args.dry_run {
            if !args.json {
                println!("would record as a new generation: {reason}");
            }
            return Ok(());
        }
        let g = airlock::state::recover::restate(state, &reason, who).await?;
        if !args.json {
            println!("recorded as generation {g}: {reason}");
        }
        out.restated = Some(g);
        let after = fsck::run(state, false).await?;
        let n = after.problems.len();
        out.after = Some(after);
        return match n {
            0 => Ok(()),
            _ => bail!("problems are left after the repair (see above)"),
        };
    }
    rederive(state, args, &mut out.rederived).await;
    let left = if args.dry_run || out.rederived.is_empty() {
        left
    } else {
        fsck::run(state, false).await?
    };
    if !left.only_derived() {
        out.recovery = airlock::state::recover::recover(state, args.dry_run, who).await?;
        if let Some(r) = &out.recovery
            && !args.json
        {
            println!("{r}");
        }
        if out.recovery.is_some() && !args.dry_run {
            rederive(state, args, &mut out.rederived).await;
        }
    }
    let cannot = out.rederived.iter().filter(|e| e.error.is_some()).count();
    if args.dry_run {
        if cannot == 0 && (left.only_derived() || out.recovery.is_some()) {
            return Ok(());
        }
    } else if out.recovery.is_some() || !out.rederived.is_empty() {
        let after = fsck::run(state, false).await?;
        if !args.json {
            for p in &after.problems {
                println!("still: {}: {}", p.kind, p.object);
            }
        }
        let n = after.problems.len();
        out.after = Some(after);
        if n == 0 {
            return Ok(());
        }
    }
    if cannot > 0 {
        bail!("{cannot} derived stack blobs cannot be made again (see above)");
    }
    if out.recovery.is_none() && !left.only_derived() {
        bail!(
            "fsck found {} problems, but the current generation verifies: nothing to restore (see above)",
            left.problems.len()
        );
    }
    bail!("problems are left after the repair (see above)")
}

/// Runs [`airlock::stacks::rederive`] (nothing when the stack table cannot
/// be read: restoring a generation is next), adding its entries to `made`
/// (an entry made in an earlier run keeps its place) and printing them.
async fn rederive(
    state: &airlock::state::StateStore,
    args: &FsckArgs,
    made: &mut Vec<airlock::stacks::rederive::Rederived>,
) {
    let found = match airlock::stacks::rederive::run(state, args.dry_run).await {
        Ok(found) => found,
        Err(e) => {
            tracing::debug!(error = %e, "stack table unreadable; no derived blob made again");
            return;
        }
    };
    for m in found {
        if !args.json {
            match (&m.error, args.dry_run) {
                (None, true) => println!(
                    "would {}",
                    m.to_string().replacen("made again", "make again", 1)
                ),
                _ => println!("{m}"),
            }
        }
        airlock::stacks::rederive::merge(made, m);
    }
}

/// The human form of an fsck report.
fn print_report(report: &fsck::FsckReport) {
    for p in &report.problems {
        println!("{p}");
    }
    for p in &report.warnings {
        println!("warning: older generation: {p}");
    }
    for p in &report.repaired {
        println!("{p}");
    }
    println!(
        "generation {}: {} generations, {} objects checked, {} blobs re-hashed, {} quarantined, {} repaired from their second copies, {} problems",
        report.generation,
        report.generations_checked,
        report.objects_checked,
        report.blobs_rehashed,
        report.quarantined.len(),
        report.repaired.len(),
        report.problems.len()
    );
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
