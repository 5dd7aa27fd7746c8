//! `airlock cell sync`: the cell-side stack installer (see `airlock::cell`).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, bail};

use airlock::cell::client::{CELL_RETRY_POLICY, StacksClient};
use airlock::cell::{CellSync, Outcome, SyncOptions};
use airlock::http_client::TlsOptions;

use super::progress_bar;

#[derive(clap::Subcommand)]
pub enum CellCmd {
    /// Install the rootfs the stacks API assigns to this cell for each
    /// stack, at INSTALL_DIR/STACK/rootfs.tar; with --once one pass (for a
    /// BOSH pre-start), else a pass every --interval.
    Sync(SyncArgs),
}

#[derive(clap::Args)]
pub struct SyncArgs {
    /// The airlock server: `https://HOST[:PORT]` (or `http://`).
    #[arg(long, env = "AIRLOCK_URL")]
    url: String,
    /// A stack to install (repeatable).
    #[arg(long = "stack", value_name = "NAME", required = true)]
    stacks: Vec<String>,
    /// Where STACK/rootfs.tar is kept (garden's persistent_image_list and
    /// rep's preloaded_rootfses name those paths).
    #[arg(
        long,
        env = "AIRLOCK_INSTALL_DIR",
        default_value = "/var/vcap/data/airlock-rootfs"
    )]
    install_dir: PathBuf,
    /// This cell's id (what rollouts sample and reports name). Default: the
    /// BOSH instance id from /var/vcap/instance/id, else the host name.
    #[arg(long, env = "AIRLOCK_CELL_ID")]
    cell_id: Option<String>,
    /// PEM file of CA certificates to add to each rootfs's CA store
    /// (etc/ssl/certs/ca-certificates.crt), after the sha256 check.
    #[arg(long, value_name = "FILE")]
    trusted_certs: Option<PathBuf>,
    /// One pass, then exit: 0 when every stack is installed, 1 otherwise.
    #[arg(long)]
    once: bool,
    /// Seconds between passes (without --once).
    #[arg(long, env = "AIRLOCK_SYNC_INTERVAL", default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..))]
    interval: u64,
    /// PEM file of CA certificates trusted for the airlock server (besides the system roots).
    #[arg(long, value_name = "FILE")]
    ca_file: Option<PathBuf>,
    /// User for HTTP Basic authentication (a user with the `cell` role).
    #[arg(long, env = "AIRLOCK_USER", requires = "password_file")]
    user: Option<String>,
    /// File holding the password of --user (one line).
    #[arg(long, value_name = "FILE", requires = "user")]
    password_file: Option<PathBuf>,
    /// Client certificate (PEM chain) for mTLS.
    #[arg(long, value_name = "FILE", requires = "key")]
    cert: Option<PathBuf>,
    /// Private key (PEM) of --cert.
    #[arg(long, value_name = "FILE", requires = "cert")]
    key: Option<PathBuf>,
}

pub async fn run(cmd: CellCmd) -> Result<()> {
    let CellCmd::Sync(args) = cmd;
    let cell_id = match args.cell_id {
        Some(id) => id,
        None => airlock::cell::default_cell_id("/var/vcap/instance/id".as_ref())?,
    };
    let password = match &args.password_file {
        None => None,
        Some(p) => {
            let text = std::fs::read_to_string(p)
                .with_context(|| format!("reading --password-file {}", p.display()))?;
            Some(text.trim_end_matches(['\r', '\n']).to_string())
        }
    };
    let tls = TlsOptions {
        ca_file: args.ca_file,
        verify: true,
        identity: args.cert.zip(args.key),
    };
    let creds = args.user.as_deref().zip(password.as_deref());
    let client = StacksClient::new(&args.url, &tls, creds, CELL_RETRY_POLICY)?;
    let opts = SyncOptions {
        stacks: args.stacks,
        install_dir: args.install_dir,
        cell_id,
        trusted_certs: args.trusted_certs,
    };
    let mut sync = CellSync::new(opts, client)?;
    let progress = progress_bar();
    if !args.once {
        sync.run(Duration::from_secs(args.interval), &progress)
            .await;
    }
    let mut failed = Vec::new();
    for (stack, r) in sync.pass(&progress).await {
        let path = sync.options().install_dir.join(&stack).join("rootfs.tar");
        match r {
            Ok(o) => {
                let what = match o {
                    Outcome::UpToDate => "up to date",
                    Outcome::Installed => "installed",
                    Outcome::Swapped => "switched to the previous rootfs",
                };
                println!("{stack}: {what}: {}", path.display());
            }
            Err(e) => {
                eprintln!("airlock: {stack}: {e:#}");
                failed.push(stack);
            }
        }
    }
    if !failed.is_empty() {
        bail!("cell sync failed for {}", failed.join(", "));
    }
    Ok(())
}
