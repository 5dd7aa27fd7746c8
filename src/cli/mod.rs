//! The `airlock` command line (clap). Thin: parses arguments, builds the
//! store and state once, calls one library function per command, prints a
//! one-line result, and turns any error into a one-line cause and exit code 1.
//!
//! One file per command group: [`keys`], [`bundle`], [`data`] (import,
//! inventory, history), [`ops`] (gc, fsck, rollback), [`stack`], [`cell`] and [`serve`]; shared argument types and helpers live
//! here.

mod bundle;
mod cell;
mod data;
mod events;
mod keys;
mod ops;
mod sbom;
mod serve;
mod stack;
mod torcx;
mod user;

use std::io::IsTerminal;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};

use airlock::state::StateStore;
use airlock::store::OpenedStore;

#[derive(Parser)]
#[command(
    name = "airlock",
    version,
    about = "Signed bundles, atomic import and an OCI registry for air-gapped platforms"
)]
struct Cli {
    /// Log filter (tracing EnvFilter syntax), e.g. `info`, `airlock=debug`.
    #[arg(long, global = true, env = "AIRLOCK_LOG", default_value = "warn")]
    log: String,
    /// Log format on stderr.
    #[arg(long, global = true, value_parser = ["text", "json"], default_value = "text")]
    log_format: String,
    #[command(subcommand)]
    command: Command,
}

/// `--data DIR` or `--store URL`: where the blobstore lives (the
/// `[store]` keys of the serve config, as flags: one parser, one `open`).
#[derive(clap::Args)]
pub struct DataArg {
    #[command(flatten)]
    pub store: airlock::config::StoreSection,
}

impl DataArg {
    /// The blobstore, opened (a filesystem directory is created when
    /// `create`). Runs on the caller's multi-threaded runtime.
    pub fn open(&self, create: bool) -> Result<OpenedStore> {
        let target = self.store.target()?;
        tokio::task::block_in_place(|| {
            tokio::runtime::Handle::current().block_on(target.open(create))
        })
        .with_context(|| format!("opening the blobstore {}", target.url))
    }

    /// State in an existing store, for commands that only read.
    pub fn existing_state(&self) -> Result<StateStore> {
        Ok(StateStore::new(self.open(false)?.blobstore()))
    }
}

#[derive(Subcommand)]
enum Command {
    /// OpenPGP signing keys.
    #[command(subcommand)]
    Keys(keys::KeysCmd),
    /// Create, inspect and verify bundles.
    #[command(subcommand)]
    Bundle(bundle::BundleCmd),
    /// Verify bundles and commit them into the store (one root swap).
    Import(data::ImportArgs),
    /// Write the list of blobs this store holds (for delta bundles: `bundle create --have`).
    Inventory(data::InventoryArgs),
    /// List the state generations, newest first (number, time, who, reason).
    History(data::HistoryArgs),
    /// Events queued for webhooks and their delivery results (oldest first).
    Events(events::EventsArgs),
    /// System stacks: promote, roll out, roll back, states, cells' status.
    #[command(subcommand)]
    Stack(stack::StackCmd),
    /// Print an image's SBOM (SPDX 2.3 or CycloneDX 1.5 JSON); `--attach` attaches it as a referrer.
    Sbom(sbom::SbomArgs),
    /// Known vulnerabilities of an image or a promoted stack (imported feeds).
    Vulns(sbom::VulnsArgs),
    /// Remove what no kept generation reaches (blobs, documents, links, temporary files).
    Gc(ops::GcArgs),
    /// Check the state and the stored content; `--deep` re-hashes every blob.
    Fsck(ops::FsckArgs),
    /// Make an earlier generation current again (as a new generation).
    Rollback(ops::RollbackArgs),
    /// Serve the OCI distribution API (and stacks, torcx, admin) over HTTP or HTTPS.
    Serve(Box<serve::ServeArgs>),
    /// Users of the serve config: password hashes.
    #[command(subcommand)]
    User(user::UserCmd),
    /// The cell side of system stacks (on Diego cells).
    #[command(subcommand)]
    Cell(cell::CellCmd),
    /// The torcx remote: host remote.json, profile checks, listing, deprecation.
    #[command(subcommand)]
    Torcx(torcx::TorcxCmd),
}

/// Parses `123`, `4K`, `700M`, `4G`, `1T` (powers of 1024).
pub use airlock::config::parse_size;

/// A progress bar on stderr when it is a terminal; hidden otherwise.
pub fn progress_bar() -> indicatif::ProgressBar {
    if !std::io::stderr().is_terminal() {
        return indicatif::ProgressBar::hidden();
    }
    let style = indicatif::ProgressStyle::with_template(
        "{spinner} [{elapsed_precise}] {wide_bar} {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
    )
    .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar());
    indicatif::ProgressBar::new(0).with_style(style)
}

/// Bundle files or volumes (or `-`) as one reader.
pub fn bundle_reader(bundles: &[PathBuf]) -> Result<Box<dyn std::io::Read + Send>> {
    let files = airlock::bundle::volume::expand_inputs(bundles)?;
    Ok(Box::new(std::io::BufReader::with_capacity(
        1 << 20,
        airlock::bundle::volume::ChainReader::new(files),
    )))
}

/// Creates `path` with mode 0600 (never overwriting) and writes `text`.
pub fn write_private(path: &Path, text: &str) -> Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("creating {}", path.display()))?;
    f.write_all(text.as_bytes())?;
    f.sync_all()?;
    Ok(())
}

async fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Keys(cmd) => keys::run(cmd),
        Command::Bundle(cmd) => bundle::run(cmd).await,
        Command::Import(args) => data::import(args).await,
        Command::Inventory(args) => data::inventory(args).await,
        Command::History(args) => data::history(args).await,
        Command::Events(args) => events::run(args).await,
        Command::Stack(cmd) => stack::run(cmd).await,
        Command::Sbom(args) => sbom::sbom(args).await,
        Command::Vulns(args) => sbom::vulns(args).await,
        Command::Serve(args) => serve::run(*args).await,
        Command::User(cmd) => user::run(cmd).await,
        Command::Cell(cmd) => cell::run(cmd).await,
        Command::Gc(args) => ops::gc(args).await,
        Command::Fsck(args) => ops::fsck(args).await,
        Command::Rollback(args) => ops::rollback(args).await,
        Command::Torcx(cmd) => torcx::run(cmd).await,
    }
}

/// Parses the command line, sets up logging and the runtime, runs the
/// command and exits: 0 on success, 1 with a one-line cause on error.
pub fn main() {
    let cli = Cli::parse();
    // `bundle create` talks to registries: a server closing a TLS socket must be
    // an error to retry, not a SIGPIPE (rustls writes with writev, which has no
    // MSG_NOSIGNAL), so it keeps the default too.
    let network = matches!(
        cli.command,
        Command::Serve(_) | Command::Cell(_) | Command::Bundle(bundle::BundleCmd::Create { .. })
    );
    if !network {
        // A command whose output is piped into `head` ends quietly like any Unix tool
        // instead of panicking on EPIPE. The server keeps Rust's default (ignored), so
        // a client closing its socket is an error to handle, not a signal.
        // SAFETY: restoring a signal's default disposition at start-up, before any
        // thread is spawned.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        }
    }
    let filter = tracing_subscriber::EnvFilter::try_new(&cli.log)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if cli.log_format == "json" {
        builder.json().init();
    } else {
        builder.init();
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("airlock: error: cannot start the runtime: {e}");
            std::process::exit(1);
        }
    };
    if let Err(e) = runtime.block_on(run(cli)) {
        eprintln!("airlock: error: {}", one_line(&cause_chain(&e)));
        std::process::exit(1);
    }
}

/// The error and its causes joined by `: `, each cause once: a cause whose
/// text the message so far already holds (an error type that prints its
/// source, as `thiserror`'s `{0}` does) is not repeated.
fn cause_chain(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if out.contains(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    out
}

/// A cause fit for one terminal line: control characters escaped (no
/// terminal escape injection from a hostile bundle), at most 1000 characters.
fn one_line(text: &str) -> String {
    const MAX: usize = 1000;
    let mut out = String::new();
    for c in text.chars() {
        if out.len() >= MAX {
            out.push_str("...");
            break;
        }
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}
