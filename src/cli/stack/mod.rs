//! `airlock stack ...`: system stacks on a data directory (each change one
//! root swap, like `import`). The printing is in `print.rs`.

use anyhow::Result;

use airlock::sbom::compare;
use airlock::stacks::cells;
use airlock::stacks::cf::{self, CcForm};
use airlock::stacks::custom::{Actor, CustomPolicy};
use airlock::stacks::kpack;
use airlock::stacks::lifecycle;
use airlock::stacks::ops::{self, PromoteRequest};
use airlock::stacks::{StackName, StackState, StackTable};
use airlock::state::user_at_host;

use super::DataArg;

mod print;
pub(crate) use print::list as print_table;
use print::*;

#[derive(clap::Subcommand)]
pub enum StackCmd {
    /// List the stacks: state, active promotion, rollout.
    List {
        #[command(flatten)]
        data: DataArg,
        /// JSON output.
        #[arg(long)]
        json: bool,
    },
    /// Show one stack: state, rollout, promotions, candidates, history.
    Show {
        #[command(flatten)]
        data: DataArg,
        /// The stack.
        name: StackName,
        /// JSON output.
        #[arg(long)]
        json: bool,
    },
    /// Promote an image held by the registry as the stack's rootfs (flattens
    /// it once); prints what changes from the active promotion first.
    Promote(PromoteArgs),
    /// Packages added, removed, upgraded, downgraded and os-release changes:
    /// `diff FROM TO` (REPO:TAG or REPO@DIGEST), or `diff NAME` (the
    /// stack's previous promotion vs its active one).
    Diff {
        #[command(flatten)]
        data: DataArg,
        /// A stack name, or the image before.
        from: String,
        /// The image after (absent: FROM is a stack name).
        to: Option<String>,
        /// JSON output.
        #[arg(long)]
        json: bool,
    },
    /// Widen the rollout of the active promotion to PERCENT of cells (it only widens).
    Rollout {
        #[command(flatten)]
        data: DataArg,
        /// The stack.
        name: StackName,
        /// Percentage of cells, 0 to 100 (`50` or `50%`).
        #[arg(value_parser = parse_percent)]
        percent: u8,
    },
    /// Return every cell to the promotion the active one replaced.
    Rollback {
        #[command(flatten)]
        data: DataArg,
        /// The stack.
        name: StackName,
        /// Why.
        #[arg(long, default_value = "rollback")]
        reason: String,
    },
    /// Set the Cloud Controller state: ACTIVE, DEPRECATED, RESTRICTED or DISABLED.
    SetState {
        #[command(flatten)]
        data: DataArg,
        /// The stack.
        name: StackName,
        /// The state.
        state: StackState,
        /// Why (Cloud Controller's `state_reason`, shown with warnings).
        #[arg(long, default_value = "")]
        reason: String,
    },
    /// Make a stack the default stack.
    SetDefault {
        #[command(flatten)]
        data: DataArg,
        /// The stack.
        name: StackName,
    },
    /// Which digests cells report, who lags behind, who was not seen for a while.
    Status {
        #[command(flatten)]
        data: DataArg,
        /// The stack (default: every stack).
        name: Option<StackName>,
        /// Reports older than this many seconds count as stale.
        #[arg(long, default_value_t = 3600)]
        stale_after_secs: u64,
        /// JSON output.
        #[arg(long, conflicts_with = "prometheus")]
        json: bool,
        /// Prometheus text-format gauges.
        #[arg(long)]
        prometheus: bool,
        /// At most this many cell ids per list (lagging, stale) in the
        /// text output; `--json` lists every one.
        #[arg(long, default_value_t = 10)]
        max_cells: usize,
    },
    /// Print a BOSH ops file adding the promoted stacks to Cloud
    /// Controller's `cc.stacks` (cf-deployment's `api` instance group); the
    /// deployment's other stacks and its default stack stay.
    CcConfig {
        #[command(flatten)]
        data: DataArg,
        /// Print entries for Cloud Controller's stacks_file (`stacks`,
        /// `default` with --set-default) instead.
        #[arg(long)]
        stacks_file: bool,
        /// Also make airlock's default stack (`stack set-default`) Cloud
        /// Controller's default stack.
        #[arg(long)]
        set_default: bool,
    },
    /// Print the diego-cell garden and rep properties adding each stack's
    /// rootfs to the lists the deployment has.
    CellProperties {
        #[command(flatten)]
        data: DataArg,
        /// Where the cells keep `<stack>/rootfs.tar`: by default where the
        /// BOSH job `airlock-rootfs` installs them (its `install_dir`).
        #[arg(long, default_value = "/var/vcap/data/airlock-rootfs")]
        rootfs_dir: String,
        /// Print a BOSH ops file appending to both lists (`/-`) instead of
        /// the items to add.
        #[arg(long)]
        ops_file: bool,
    },
    /// Register a custom stack: a name for any image the registry holds,
    /// never the default and never rolled out to cells (RFC-0040).
    Register {
        #[command(flatten)]
        data: DataArg,
        /// The custom stack's name.
        name: StackName,
        /// The image: REPO:TAG or REPO@DIGEST, held by the registry.
        #[arg(long)]
        image: String,
        /// Required: says that this is a custom stack, not a system stack.
        #[arg(long, required = true)]
        custom: bool,
        /// Free text.
        #[arg(long, default_value = "")]
        description: String,
        /// The custom_stacks policy in force: off, admin-only or on (the
        /// CLI acts as an admin).
        #[arg(long, env = "AIRLOCK_CUSTOM_STACKS", default_value = "off")]
        custom_stacks: CustomPolicy,
    },
    /// Lifecycle status of an image digest: current (and what replaces it
    /// during a rollout), canary, superseded or rolled back (restage
    /// required), custom or unknown.
    Lifecycle {
        #[command(flatten)]
        data: DataArg,
        /// The digest (image, platform manifest, rootfs or builder image),
        /// or a unique prefix of 12 or more hex digits.
        digest: String,
        /// JSON output (as GET /stacks/v1/lifecycle/<digest>).
        #[arg(long)]
        json: bool,
    },
    /// Print the kpack ClusterStack for a stack's build and run images, by
    /// digest (with --pull-secret: its Secret and ServiceAccount first).
    Kpack {
        #[command(flatten)]
        data: DataArg,
        /// The stack.
        name: StackName,
        /// The registry builders pull from (airlock's address as they see it), `HOST[:PORT]`.
        #[arg(long)]
        registry: String,
        /// Also create a read-only token user limited to the stack's build
        /// and run image repositories and print, before the ClusterStack, a
        /// `kubernetes.io/dockerconfigjson` Secret holding it and a
        /// ServiceAccount listing the Secret, which the ClusterStack names in
        /// `spec.serviceAccountRef` (needs --namespace; for sites where
        /// anonymous reads are off). The token is shown only here; `airlock
        /// user list` lists the user, `airlock user revoke` revokes it.
        #[arg(long, requires = "namespace")]
        pull_secret: bool,
        /// The Kubernetes namespace of the Secret and ServiceAccount (with
        /// --pull-secret), an RFC 1123 label.
        #[arg(long, requires = "pull_secret")]
        namespace: Option<String>,
        /// The ClusterStack's name (default: the stack name with `_`
        /// written `-`), an RFC 1123 subdomain.
        #[arg(long = "name", value_name = "NAME")]
        object_name: Option<String>,
    },
}

#[derive(clap::Args)]
pub struct PromoteArgs {
    #[command(flatten)]
    data: DataArg,
    /// The stack (created on its first promotion).
    name: StackName,
    /// The rootfs image: REPO:TAG or REPO@DIGEST, held by the registry.
    #[arg(long)]
    image: String,
    /// Percentage of cells that get it (the rest keep the previous one).
    #[arg(long, value_parser = parse_percent, default_value = "100")]
    rollout: u8,
    /// At most this many concurrent rootfs downloads of this stack (0: no limit).
    #[arg(long)]
    max_in_flight: Option<u32>,
    /// Builders' build image (REPO:TAG or REPO@DIGEST), with --run-image.
    #[arg(long, requires = "run_image")]
    build_image: Option<String>,
    /// Builders' run image, with --build-image.
    #[arg(long, requires = "build_image")]
    run_image: Option<String>,
    /// The io.buildpacks.stack.id the builder images must carry (default: the build image's).
    #[arg(long, requires = "build_image")]
    stack_id: Option<String>,
    /// The stack's description.
    #[arg(long)]
    description: Option<String>,
    /// Why (kept in the promotion and history).
    #[arg(long)]
    reason: Option<String>,
    /// JSON output.
    #[arg(long)]
    json: bool,
    /// Print what the promotion would change (the stack diff) and stop.
    #[arg(long)]
    dry_run: bool,
}

fn parse_percent(s: &str) -> Result<u8, String> {
    let n: u8 = s
        .trim_end_matches('%')
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a percentage (0 to 100)"))?;
    if n > 100 {
        return Err(format!("{n} is over 100"));
    }
    Ok(n)
}

pub async fn run(cmd: StackCmd) -> Result<()> {
    let who = user_at_host();
    match cmd {
        StackCmd::List { data, json } => {
            let table = ops::load(&data.existing_state()?).await?;
            if json {
                let stacks: Vec<_> = table
                    .stacks
                    .iter()
                    .map(|(n, s)| s.view(n, table.default.as_ref() == Some(n)))
                    .collect();
                print_json(&serde_json::json!({ "default": table.default, "stacks": stacks }))?;
            } else {
                list(&table);
            }
        }
        StackCmd::Show { data, name, json } => {
            let table = ops::load(&data.existing_state()?).await?;
            if json {
                let s = table.get(&name)?;
                print_json(&s.view(&name, table.default.as_ref() == Some(&name)))?;
            } else {
                show(&table, &name)?;
            }
        }
        StackCmd::Promote(a) => {
            let state = a.data.existing_state()?;
            let req = PromoteRequest {
                image: a.image,
                rollout: Some(a.rollout),
                max_in_flight: a.max_in_flight,
                build_image: a.build_image,
                run_image: a.run_image,
                stack_id: a.stack_id,
                description: a.description,
                reason: a.reason,
                diff: None,
            };
            let diff = compare::promotion(&state, &a.name, &req.image).await;
            let mut req = req;
            req.diff = diff.as_ref().and_then(|d| serde_json::to_value(d).ok());
            if let Some(d) = &diff {
                if a.json && a.dry_run {
                    print_json(d)?;
                } else if !a.json {
                    print!("{}", d.text());
                }
            } else if a.dry_run {
                println!("stack {}: no active promotion to compare with", a.name);
            }
            if a.dry_run {
                return Ok(());
            }
            let p = ops::promote(&state, &a.name, &req, &who).await?;
            if a.json {
                print_json(&p)?;
            } else {
                let rootfs: Vec<String> = p
                    .rootfs
                    .iter()
                    .map(|r| {
                        format!(
                            "{} rootfs sha256 {} ({})",
                            r.platform,
                            r.sha256.hex(),
                            crate::cli::size(r.size)
                        )
                    })
                    .collect();
                println!(
                    "promoted {}: promotion {}, {} to {} % of cells; {}; generation {}",
                    a.name,
                    p.promotion,
                    p.image,
                    p.percent,
                    rootfs.join(", "),
                    p.generation
                );
            }
        }
        StackCmd::Rollout {
            data,
            name,
            percent,
        } => {
            let c = ops::rollout(&data.existing_state()?, &name, percent, &who).await?;
            println!(
                "stack {name}: rollout at {percent} % of cells, generation {}",
                c.generation
            );
        }
        StackCmd::Rollback { data, name, reason } => {
            let (to, c) = ops::rollback(&data.existing_state()?, &name, &reason, &who).await?;
            println!(
                "stack {name}: rolled back; every cell runs promotion {to}, generation {}",
                c.generation
            );
        }
        StackCmd::SetState {
            data,
            name,
            state,
            reason,
        } => {
            let c = ops::set_state(&data.existing_state()?, &name, state, &reason, &who).await?;
            println!(
                "stack {name}: {} ({}), generation {}",
                state.as_str(),
                state.meaning(),
                c.generation
            );
        }
        StackCmd::SetDefault { data, name } => {
            let c = ops::set_default(&data.existing_state()?, &name, &who).await?;
            println!(
                "stack {name} is the default stack, generation {}",
                c.generation
            );
        }
        StackCmd::Status {
            data,
            name,
            stale_after_secs,
            json,
            prometheus,
            max_cells,
        } => {
            let state = data.existing_state()?;
            let table = ops::load(&state).await?;
            let stale = std::time::Duration::from_secs(stale_after_secs);
            let statuses = match &name {
                Some(n) => {
                    let stack = table.get(n)?;
                    let reports = cells::reports(&**state.blobstore(), n).await?;
                    vec![cells::status(
                        n,
                        stack,
                        &reports,
                        time::OffsetDateTime::now_utc(),
                        stale,
                    )]
                }
                None => cells::all_statuses(&**state.blobstore(), &table, stale).await?,
            };
            if prometheus {
                print!("{}", cells::gauges(&statuses));
            } else if json {
                match name {
                    Some(_) => print_json(&statuses[0])?,
                    None => print_json(&statuses)?,
                }
            } else {
                for s in &statuses {
                    print_status(s, max_cells);
                }
            }
        }
        StackCmd::CcConfig {
            data,
            stacks_file,
            set_default,
        } => {
            let table = ops::load(&data.existing_state()?).await?;
            let form = if stacks_file {
                CcForm::StacksFile
            } else {
                CcForm::OpsFile
            };
            print!("{}", cf::cc_config(&table, form, set_default));
        }
        StackCmd::CellProperties {
            data,
            rootfs_dir,
            ops_file,
        } => {
            let table = ops::load(&data.existing_state()?).await?;
            print!("{}", cf::cell_properties(&table, &rootfs_dir, ops_file));
        }
        StackCmd::Register {
            data,
            name,
            image,
            custom: _,
            description,
            custom_stacks,
        } => {
            let actor = Actor {
                name: who.clone(),
                admin: true,
                reader: true,
            };
            let state = data.existing_state()?;
            let (image, c) = ops::register_custom(
                &state,
                &name,
                &image,
                &description,
                &actor,
                custom_stacks,
                &airlock::registry::scope::RepositoryScope::all(),
            )
            .await?;
            println!(
                "registered custom stack {name}: {image} (generation {})",
                c.generation
            );
        }
        StackCmd::Diff {
            data,
            from,
            to,
            json,
        } => {
            let state = data.existing_state()?;
            let d = match to {
                Some(to) => {
                    let (f, t) = (
                        compare::pin(&state, &from).await?,
                        compare::pin(&state, &to).await?,
                    );
                    compare::images(&state, &f, &t).await?
                }
                None => {
                    let name: StackName = from.parse()?;
                    compare::stack(&state, &name).await?
                }
            };
            if json {
                print_json(&d)?;
            } else {
                print!("{}", d.text());
            }
        }
        StackCmd::Lifecycle { data, digest, json } => {
            let state = data.existing_state()?;
            let table = ops::load(&state).await?;
            let digest = crate::cli::digests::resolve(&digest, lifecycle::known(&table))?;
            let l = lifecycle::lifecycle(&table, &digest);
            let v = airlock::sbom::report::lifecycle_json(&state, &l).await;
            if json {
                print_json(&v)?;
            } else if let Some(reason) = v["reason"].as_str() {
                println!(
                    "{} {reason}{}{}",
                    l.digest,
                    l.stack
                        .as_ref()
                        .map_or(String::new(), |s| format!(" stack {s}")),
                    l.superseded_by
                        .as_ref()
                        .map_or(String::new(), |d| format!(" superseded by {d}"))
                );
            } else {
                println!("{}", lifecycle_line(&l));
            }
        }
        StackCmd::Kpack {
            data,
            name,
            registry,
            pull_secret,
            namespace,
            object_name,
        } => {
            let state = data.existing_state()?;
            let table = ops::load(&state).await?;
            // Every name is checked before the token user is made.
            let docs = kpack::Documents::new(
                &table,
                &name,
                &registry,
                object_name.as_deref(),
                namespace.as_deref(),
            )?;
            match (pull_secret, namespace) {
                (true, Some(ns)) => {
                    let user = format!(
                        "kpack-{}-{ns}-{:06x}",
                        docs.name,
                        rand::random::<u32>() & 0xff_ffff
                    );
                    let purpose = format!("kpack pull secret for stack {name} in namespace {ns}");
                    let (token, _) = airlock::auth::tokens::create(
                        &state,
                        &user,
                        vec![airlock::auth::Role::Reader],
                        docs.repositories(),
                        &purpose,
                        &who,
                    )
                    .await?;
                    print!(
                        "{}---\n{}",
                        docs.credential(&ns, &user, &token),
                        docs.cluster_stack(Some(&ns))
                    );
                }
                _ => print!("{}", docs.cluster_stack(None)),
            }
        }
    }
    Ok(())
}
