//! The `airlock` command line (clap). Thin: parses arguments, builds the
//! store and state once, calls one library function per command, prints a
//! one-line result, and turns any error into a one-line cause and exit code 1.
//!
//! One file per command group: [`keys`], [`bundle`], [`data`] (import,
//! inventory, history), [`ops`] (gc, fsck, rollback), [`stack`], [`cell`] and [`serve`]; shared argument types and helpers live
//! here.
//!
//! Everything the CLI prints may hold content from outside (feed records,
//! stack descriptions, os-release `PRETTY_NAME`, package names, reasons):
//! within this module `println!`, `print!` and `eprintln!` are the
//! escaping versions below ([`escape_controls`]), so a terminal control
//! sequence in content is shown as text (`\u{1b}]0;...`), never run by the
//! terminal. JSON output is unchanged (serde_json escapes control
//! characters itself).

/// `println!` that escapes terminal control characters ([`escape_controls`]).
macro_rules! println {
    () => { $crate::cli::print_escaped(std::format_args!("\n")) };
    ($($t:tt)*) => {
        $crate::cli::print_escaped(std::format_args!("{}\n", std::format_args!($($t)*)))
    };
}

/// `print!` that escapes terminal control characters ([`escape_controls`]).
macro_rules! print {
    ($($t:tt)*) => { $crate::cli::print_escaped(std::format_args!($($t)*)) };
}

/// `eprintln!` that escapes terminal control characters ([`escape_controls`]).
macro_rules! eprintln {
    () => { $crate::cli::eprint_escaped(std::format_args!("\n")) };
    ($($t:tt)*) => {
        $crate::cli::eprint_escaped(std::format_args!("{}\n", std::format_args!($($t)*)))
    };
}

/// `text` with every control character but newline and tab (C0, DEL and
/// C1: what starts or ends a terminal escape sequence, or moves the
/// cursor) written as a Rust-style escape (`\u{1b}`, `\r`).
pub fn escape_controls(text: &str) -> std::borrow::Cow<'_, str> {
    if !text
        .chars()
        .any(|c| c.is_control() && c != '\n' && c != '\t')
    {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if c.is_control() && c != '\n' && c != '\t' {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

/// Writes `args` to standard output with [`escape_controls`] applied (a
/// closed pipe ends the output quietly).
pub fn print_escaped(args: std::fmt::Arguments<'_>) {
    use std::io::Write as _;
    let text = args.to_string();
    let _ = std::io::stdout()
        .lock()
        .write_all(escape_controls(&text).as_bytes());
}

/// Writes `args` to standard error with [`escape_controls`] applied.
pub fn eprint_escaped(args: std::fmt::Arguments<'_>) {
    use std::io::Write as _;
    let text = args.to_string();
    let _ = std::io::stderr()
        .lock()
        .write_all(escape_controls(&text).as_bytes());
}

mod backup;
mod bundle;
mod cell;
mod chunk;
mod data;
mod digests;
mod events;
mod input;
mod keys;
mod ls;
mod ops;
#[cfg(test)]
mod reference;
mod sbom;
mod serve;
mod stack;
mod torcx;
mod user;

use std::io::IsTerminal;
use std::path::Path;

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
    /// The default shows warnings and `serve`'s start-up line.
    #[arg(
        long,
        global = true,
        env = "AIRLOCK_LOG",
        default_value = "warn,airlock::startup=info"
    )]
    log: String,
    /// Log format on stderr.
    #[arg(long, global = true, value_parser = ["text", "json"], default_value = "text")]
    log_format: String,
    #[command(subcommand)]
    command: Command,
}

/// `--data DIR` or `--store URL`, or `--config FILE`: where the blobstore
/// lives (the `[store]` keys of the serve config, as flags: one parser,
/// one `open`). One rule for every command: the config's `[store]` names
/// the store, flags given too override its keys, and without either the
/// default `./airlock-data`.
#[derive(clap::Args)]
pub struct DataArg {
    #[command(flatten)]
    pub store: airlock::config::StoreSection,
    /// The serve config (the BOSH job's
    /// `/var/vcap/jobs/airlock/config/airlock.toml`): its `[store]` names
    /// the store; what else a command reads of it, its help says.
    #[arg(long, env = "AIRLOCK_CONFIG")]
    pub config: Option<std::path::PathBuf>,
}

impl DataArg {
    /// The serve config `--config` names, read (`None`: none given).
    /// Errors: it cannot be read or is not a valid config.
    pub fn settings(&self) -> Result<Option<airlock::config::Settings>> {
        self.config
            .as_deref()
            .map(airlock::config::load)
            .transpose()
            .map_err(Into::into)
    }

    /// Where the store is: the config's `[store]` under the flags.
    /// Errors: the config cannot be read, or names no valid store.
    pub fn target(&self) -> Result<airlock::config::StoreTarget> {
        let Some(file) = self.settings()? else {
            return Ok(self.store.target()?);
        };
        let over = airlock::config::Settings {
            store: self.store.clone(),
            ..Default::default()
        };
        let merged = airlock::config::merge(file, &over)?;
        Ok(merged.store.target()?)
    }

    /// The blobstore, opened (a filesystem directory is created when
    /// `create`). Runs on the caller's multi-threaded runtime.
    pub fn open(&self, create: bool) -> Result<OpenedStore> {
        let target = self.target()?;
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
    /// List what the store holds: repositories (tags, sizes), stacks and
    /// torcx addons; with REPO, its tags with digests and sizes.
    Ls(ls::LsArgs),
    /// Write the list of blobs this store holds (for delta bundles: `bundle create --have`).
    Inventory(data::InventoryArgs),
    /// List the state generations, newest first (number, time, who, reason).
    History(data::HistoryArgs),
    /// The current generation and the newest imported bundle; with a max
    /// staleness, exit 1 when that bundle is older.
    Status(data::StatusArgs),
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
    /// Rehash every blob (resuming an unfinished pass), quarantining corrupt ones: what `serve` does every `[scrub] interval`.
    Scrub(ops::ScrubArgs),
    /// Make an earlier generation current again (as a new generation).
    Rollback(ops::RollbackArgs),
    /// Copy the current generation (metadata, and on a filesystem store every blob it reaches) into a directory, under the write lock.
    Backup(backup::BackupArgs),
    /// Make a backup's generation current in this store (empty or not), as a new generation.
    Restore(backup::RestoreArgs),
    /// Take the write lock: every server answers writes 503 until `unlock` or its ttl (bbr's pre-backup-lock).
    Lock(backup::LockArgs),
    /// Release the write lock (bbr's post-backup-unlock).
    Unlock(backup::UnlockArgs),
    /// Serve the OCI distribution API (and stacks, torcx, admin) over HTTP or HTTPS.
    Serve(Box<serve::ServeArgs>),
    /// Users of the serve config: password hashes.
    #[command(subcommand)]
    User(user::UserCmd),
    /// The cell side of system stacks (on Diego cells).
    #[command(subcommand)]
    Cell(cell::CellCmd),
    /// casync blob indexes and chunk stores of local files (rootfs deltas).
    #[command(subcommand)]
    Chunk(chunk::ChunkCmd),
    /// The torcx remote: host remote.json, profile checks, listing, deprecation.
    #[command(subcommand)]
    Torcx(torcx::TorcxCmd),
}

/// Parses `123`, `4K`, `700M`, `4G`, `1T` (powers of 1024).
pub use airlock::config::parse_size;

/// A size as every command prints it (`700.0 MiB`: powers of 1024, as
/// [`parse_size`] reads them).
pub use airlock::config::format_size as size;

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

pub use input::BundleInput;

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
        Command::Ls(args) => ls::run(args).await,
        Command::Inventory(args) => data::inventory(args).await,
        Command::History(args) => data::history(args).await,
        Command::Status(args) => data::status(args).await,
        Command::Events(args) => events::run(args).await,
        Command::Stack(cmd) => stack::run(cmd).await,
        Command::Sbom(args) => sbom::sbom(args).await,
        Command::Vulns(args) => sbom::vulns(args).await,
        Command::Serve(args) => serve::run(*args).await,
        Command::User(cmd) => user::run(cmd).await,
        Command::Cell(cmd) => cell::run(cmd).await,
        Command::Chunk(cmd) => chunk::run(cmd).await,
        Command::Gc(args) => ops::gc(args).await,
        Command::Fsck(args) => ops::fsck(args).await,
        Command::Scrub(args) => ops::scrub(args).await,
        Command::Rollback(args) => ops::rollback(args).await,
        Command::Backup(args) => backup::backup(args).await,
        Command::Restore(args) => backup::restore(args).await,
        Command::Lock(args) => backup::lock(args).await,
        Command::Unlock(args) => backup::unlock(args).await,
        Command::Torcx(cmd) => torcx::run(cmd).await,
    }
}

/// Replaces the log filter of the running process (`serve`'s config
/// `log`, on start and on SIGHUP). Errors: the filter does not parse.
type LogReload = Box<dyn Fn(&str) -> std::result::Result<(), String> + Send + Sync>;
static LOG_RELOAD: std::sync::OnceLock<LogReload> = std::sync::OnceLock::new();
/// Whether `--log` or `AIRLOCK_LOG` was given (then a config file's `log`
/// does not override it).
static LOG_GIVEN: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

fn set_reload<S: 'static>(
    handle: tracing_subscriber::reload::Handle<tracing_subscriber::EnvFilter, S>,
) {
    let _ = LOG_RELOAD.set(Box::new(move |filter: &str| {
        let f = tracing_subscriber::EnvFilter::try_new(filter).map_err(|e| e.to_string())?;
        handle.reload(f).map_err(|e| e.to_string())
    }));
}

/// Sets the log filter to `filter` unless `--log`/`AIRLOCK_LOG` was given.
/// Errors: the filter does not parse (the old one stays).
pub fn set_log_filter(filter: &str) -> std::result::Result<(), String> {
    if LOG_GIVEN.load(std::sync::atomic::Ordering::Relaxed) {
        return Ok(());
    }
    match LOG_RELOAD.get() {
        Some(reload) => reload(filter),
        None => Ok(()),
    }
}

/// Parses the command line, sets up logging and the runtime, runs the
/// command and exits: 0 on success, 1 with a one-line cause on error.
pub fn main() {
    use clap::{CommandFactory as _, FromArgMatches as _};
    let matches = Cli::command().get_matches();
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(c) => c,
        Err(e) => e.exit(),
    };
    LOG_GIVEN.store(
        matches.value_source("log") != Some(clap::parser::ValueSource::DefaultValue),
        std::sync::atomic::Ordering::Relaxed,
    );
    // `bundle create` talks to registries: a server closing a TLS socket must be
    // an error to retry, not a SIGPIPE (rustls writes with writev, which has no
    // MSG_NOSIGNAL), so it keeps the default too.
    if !matches!(cli.command, Command::Serve(_)) {
        crate::purge_freed_memory_at_once();
    }
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
        .with_writer(std::io::stderr)
        .with_ansi(log_colour(
            std::io::stderr().is_terminal(),
            std::env::var_os("NO_COLOR").as_deref(),
        ));
    if cli.log_format == "json" {
        let builder = builder.json().with_filter_reloading();
        set_reload(builder.reload_handle());
        builder.init();
    } else {
        let builder = builder.with_filter_reloading();
        set_reload(builder.reload_handle());
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
    let result = runtime.block_on(run(cli));
    // What this command committed is served to the next request a server
    // on the same host gets (its default root refresh interval has passed).
    airlock::store::fs::settle();
    if let Err(e) = result {
        eprintln!("airlock: error: {}", one_line(&cause_chain(&e)));
        std::process::exit(1);
    }
}

/// Whether logs use colour: only on a terminal, and never when `NO_COLOR`
/// is set to anything but the empty string (no-color.org).
fn log_colour(terminal: bool, no_color: Option<&std::ffi::OsStr>) -> bool {
    terminal && no_color.is_none_or(|v| v.is_empty())
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
/// terminal escape injection from a hostile bundle), bytes that were not
/// text shown as `?`, at most 1000 characters.
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
        } else if c == char::REPLACEMENT_CHARACTER {
            // Bytes that were not text (a tar header field, say): never on screen.
            out.push('?');
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_shown_not_run() {
        assert_eq!(escape_controls("plain\ttext\n"), "plain\ttext\n");
        assert_eq!(
            escape_controls("\u{1b}]0;owned\u{7}x"),
            "\\u{1b}]0;owned\\u{7}x"
        );
        assert_eq!(escape_controls("\u{1b}[2K\rfake"), "\\u{1b}[2K\\rfake");
        assert_eq!(escape_controls("c1 \u{9b}31m"), "c1 \\u{9b}31m");
        assert_eq!(escape_controls("ünïcode"), "ünïcode");
    }

    #[test]
    fn colour_only_on_a_terminal_without_no_color() {
        use std::ffi::OsStr;
        assert!(log_colour(true, None));
        assert!(log_colour(true, Some(OsStr::new(""))));
        assert!(!log_colour(true, Some(OsStr::new("1"))));
        assert!(!log_colour(false, None));
    }

    /// clap's own checks of every command: unique argument ids (two
    /// sections' `interval` fields once shared one, so `--scrub-interval`
    /// set the gc interval), valid defaults, no conflicting flags.
    #[test]
    fn every_command_is_well_formed() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }

    #[test]
    fn causes_are_one_line_of_text() {
        let raw = String::from_utf8_lossy(b"numeric field: y\xff\xfe5\x1b[2J\n");
        assert_eq!(one_line(&raw), "numeric field: y??5\\u{1b}[2J\\n");
    }
}
