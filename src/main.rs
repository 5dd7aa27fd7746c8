//! The `airlock` command line (clap). Thin: parses arguments, builds the
//! store and state once, calls one library function per command, prints a
//! one-line result, and turns any error into a one-line cause and exit code 1.

use std::io::IsTerminal;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};

use airlock::bundle::{create, format, import, sign, volume};
use airlock::state::StateStore;
use airlock::store::fs::FsStore;

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

#[derive(clap::Args)]
struct DataArg {
    /// Data directory of the filesystem blobstore.
    #[arg(long, env = "AIRLOCK_DATA", default_value = "./airlock-data")]
    data: PathBuf,
}

#[derive(Subcommand)]
enum Command {
    /// OpenPGP signing keys.
    #[command(subcommand)]
    Keys(KeysCmd),
    /// Create, inspect and verify bundles.
    #[command(subcommand)]
    Bundle(BundleCmd),
    /// Verify bundles and commit them into the store (one root swap).
    Import {
        #[command(flatten)]
        data: DataArg,
        /// Armored public key file(s) trusted to sign bundles.
        #[arg(long, required = true)]
        keyring: PathBuf,
        /// Bundle files, volumes in order (`NAME` finds `NAME.000`, `NAME.001`, ...), or `-` for stdin.
        #[arg(required = true)]
        bundles: Vec<PathBuf>,
    },
    /// Write the list of blobs this store holds (for delta bundles: `bundle create --have`).
    Inventory {
        #[command(flatten)]
        data: DataArg,
        /// Output file (`-` for stdout).
        #[arg(short, long, default_value = "-")]
        out: PathBuf,
    },
    /// List the state generations, newest first (number, time, who, reason).
    History {
        #[command(flatten)]
        data: DataArg,
    },
    /// Serve the OCI distribution API.
    Serve {
        #[command(flatten)]
        data: DataArg,
        /// Address to listen on.
        #[arg(long, env = "AIRLOCK_LISTEN", default_value = "127.0.0.1:5000")]
        listen: SocketAddr,
        /// Serve the push endpoints (blob uploads, manifest PUT). Off: 405 UNSUPPORTED.
        #[arg(long, env = "AIRLOCK_ALLOW_PUSH")]
        allow_push: bool,
        /// Serve deletes of manifests, tags and blobs. Off: 405 UNSUPPORTED.
        #[arg(long, env = "AIRLOCK_ALLOW_DELETE")]
        allow_delete: bool,
        /// Namespace for reads without `ns=` whose repository does not exist
        /// (docker `registry-mirrors`), e.g. `docker.io`.
        #[arg(long, env = "AIRLOCK_MIRROR_NAMESPACE")]
        mirror_namespace: Option<String>,
        /// Upload sessions older than this many seconds are refused and swept.
        #[arg(long, env = "AIRLOCK_UPLOAD_EXPIRY", default_value_t = 86400, value_parser = clap::value_parser!(u64).range(1..))]
        upload_expiry_secs: u64,
        /// Close a connection whose client has not sent a complete request
        /// head within this many seconds (also bounds HTTP/1.1 keep-alive
        /// idling between requests).
        #[arg(long, env = "AIRLOCK_HEADER_TIMEOUT", default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..))]
        header_timeout_secs: u64,
        /// Close a connection with no request in progress and no traffic for
        /// this many seconds.
        #[arg(long, env = "AIRLOCK_IDLE_TIMEOUT", default_value_t = 120, value_parser = clap::value_parser!(u64).range(1..))]
        idle_timeout_secs: u64,
        /// Connections open at once; at the cap, new clients wait until one
        /// closes.
        #[arg(long, env = "AIRLOCK_MAX_CONNECTIONS", default_value_t = 4096, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
        max_connections: u64,
    },
}

#[derive(Subcommand)]
enum KeysCmd {
    /// Generate an ed25519 signing key: writes PREFIX.sec.asc and PREFIX.pub.asc.
    Generate {
        /// User id, "NAME <EMAIL>".
        #[arg(long)]
        uid: String,
        /// Output prefix.
        #[arg(long)]
        out: PathBuf,
    },
}

#[derive(Subcommand)]
enum BundleCmd {
    /// Gather the images of a mirror config into one signed bundle.
    Create {
        /// Mirror config (TOML, `[[image]]` tables).
        #[arg(long)]
        config: PathBuf,
        /// Armored secret key to sign with.
        #[arg(long)]
        sign_key: PathBuf,
        /// Output file (volumes: OUT.000, OUT.001, ...).
        #[arg(short, long)]
        out: PathBuf,
        /// Split into volumes of at most this size (bytes; K, M, G, T suffixes are powers of 1024).
        #[arg(long, value_parser = parse_size)]
        volume_size: Option<u64>,
        /// Inventory of the destination (`airlock inventory`): those blobs are left out (delta bundle).
        #[arg(long)]
        have: Option<PathBuf>,
    },
    /// Print a bundle's signed document (signature NOT checked; use `bundle verify`).
    Inspect {
        /// Bundle file or volumes.
        #[arg(required = true)]
        bundles: Vec<PathBuf>,
    },
    /// Check a bundle's signature and every digest, without a store.
    Verify {
        /// Trusted public key file.
        #[arg(long, required = true)]
        keyring: PathBuf,
        /// Bundle file or volumes.
        #[arg(required = true)]
        bundles: Vec<PathBuf>,
    },
}

/// Parses `123`, `4K`, `700M`, `4G`, `1T` (powers of 1024).
fn parse_size(s: &str) -> std::result::Result<u64, String> {
    let (num, mult) = match s.chars().last() {
        Some('K' | 'k') => (&s[..s.len() - 1], 1u64 << 10),
        Some('M' | 'm') => (&s[..s.len() - 1], 1 << 20),
        Some('G' | 'g') => (&s[..s.len() - 1], 1 << 30),
        Some('T' | 't') => (&s[..s.len() - 1], 1 << 40),
        _ => (s, 1),
    };
    let n: u64 = num.parse().map_err(|_| format!("invalid size {s:?}"))?;
    n.checked_mul(mult)
        .filter(|&v| v > 0)
        .ok_or_else(|| format!("invalid size {s:?}"))
}

fn progress_bar() -> indicatif::ProgressBar {
    if !std::io::stderr().is_terminal() {
        return indicatif::ProgressBar::hidden();
    }
    let style = indicatif::ProgressStyle::with_template(
        "{spinner} [{elapsed_precise}] {wide_bar} {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
    )
    .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar());
    indicatif::ProgressBar::new(0).with_style(style)
}

/// State in an existing data directory, for commands that only read.
fn existing_state_at(data: &Path) -> Result<StateStore> {
    if !data.is_dir() {
        bail!("data directory {} does not exist", data.display());
    }
    state_at(data)
}

fn state_at(data: &Path) -> Result<StateStore> {
    let store = FsStore::open(data)
        .with_context(|| format!("opening data directory {}", data.display()))?;
    Ok(StateStore::new(Arc::new(store)))
}

fn bundle_reader(bundles: &[PathBuf]) -> Result<Box<dyn std::io::Read + Send>> {
    let files = volume::expand_inputs(bundles)?;
    Ok(Box::new(std::io::BufReader::with_capacity(
        1 << 20,
        volume::ChainReader::new(files),
    )))
}

fn write_private(path: &Path, text: &str) -> Result<()> {
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

fn with_suffix(prefix: &Path, suffix: &str) -> PathBuf {
    let mut s = prefix.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

async fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Keys(KeysCmd::Generate { uid, out }) => {
            let (sec, public) = sign::generate_key(&uid)?;
            let (sec_path, pub_path) =
                (with_suffix(&out, ".sec.asc"), with_suffix(&out, ".pub.asc"));
            if sec_path.exists() || pub_path.exists() {
                bail!(
                    "{} or {} already exists; refusing to overwrite a key",
                    sec_path.display(),
                    pub_path.display()
                );
            }
            write_private(&sec_path, &sec)?;
            std::fs::write(&pub_path, public)?;
            let fpr = sign::SigningKey::from_armored(&sec)?.fingerprint();
            println!(
                "key {fpr}: wrote {} and {}",
                sec_path.display(),
                pub_path.display()
            );
        }
        Command::Bundle(BundleCmd::Create {
            config,
            sign_key,
            out,
            volume_size,
            have,
        }) => {
            let key = sign::SigningKey::load(&sign_key)?;
            let have = match have {
                Some(p) => {
                    let text = std::fs::read_to_string(&p)
                        .with_context(|| format!("reading {}", p.display()))?;
                    let inv: format::Inventory = serde_json::from_str(&text)
                        .with_context(|| format!("{}: not an airlock inventory", p.display()))?;
                    if inv.format != format::INVENTORY_V1 {
                        bail!(
                            "{}: unsupported inventory format {:?}",
                            p.display(),
                            inv.format
                        );
                    }
                    Some(inv)
                }
                None => None,
            };
            let opts = create::CreateOptions {
                config: &config,
                key: &key,
                out: &out,
                volume_size,
                have: have.as_ref(),
            };
            let pb = progress_bar();
            let created = tokio::task::block_in_place(|| create::create(&opts, &pb))?;
            pb.finish_and_clear();
            println!(
                "bundle {}: {} images, {} blobs carried, {} required, {} bytes in {} file(s): {}",
                created.doc.id,
                created.doc.images.len(),
                created.doc.blobs.len(),
                created.doc.required.len(),
                created.bytes,
                created.files.len(),
                created
                    .files
                    .iter()
                    .map(|f| f.display().to_string())
                    .collect::<Vec<_>>()
                    .join(" ")
            );
        }
        Command::Bundle(BundleCmd::Inspect { bundles }) => {
            let doc = import::inspect(bundle_reader(&bundles)?)?;
            println!("{}", serde_json::to_string_pretty(&doc)?);
            eprintln!(
                "note: signature not checked; run `airlock bundle verify --keyring KEY` to check it"
            );
        }
        Command::Bundle(BundleCmd::Verify { keyring, bundles }) => {
            let keyring = sign::Keyring::load(&keyring)?;
            let pb = progress_bar();
            let doc = import::verify(keyring, bundle_reader(&bundles)?, pb.clone()).await?;
            pb.finish_and_clear();
            println!(
                "bundle {} OK: signature valid, {} images, {} blobs verified, {} required",
                doc.id,
                doc.images.len(),
                doc.blobs.len(),
                doc.required.len()
            );
        }
        Command::Import {
            data,
            keyring,
            bundles,
        } => {
            let keyring = sign::Keyring::load(&keyring)?;
            let reader = bundle_reader(&bundles)?;
            let state = state_at(&data.data)?;
            let pb = progress_bar();
            let report = import::import(
                &state,
                keyring,
                reader,
                &airlock::state::user_at_host(),
                pb.clone(),
            )
            .await?;
            pb.finish_and_clear();
            println!("{report}");
        }
        Command::Inventory { data, out } => {
            let state = existing_state_at(&data.data)?;
            let keys = state.blobstore().list("blobs/").await?;
            let blobs = keys
                .iter()
                .filter_map(|k| {
                    let mut parts = k.split('/');
                    let (_, alg, _, hex) =
                        (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
                    format!("{alg}:{hex}").parse().ok()
                })
                .collect();
            let inv = format::Inventory {
                format: format::INVENTORY_V1.into(),
                blobs,
            };
            let text = serde_json::to_string_pretty(&inv)? + "\n";
            if out.as_os_str() == "-" {
                print!("{text}");
            } else {
                std::fs::write(&out, text).with_context(|| format!("writing {}", out.display()))?;
                eprintln!("{} blobs listed in {}", inv.blobs.len(), out.display());
            }
        }
        Command::History { data } => {
            let state = existing_state_at(&data.data)?;
            let history = state.history().await?;
            if history.is_empty() {
                println!("no generations yet (empty store)");
            }
            println!(
                "{:>10}  {:<25}  {:<20}  reason",
                "generation", "time", "who"
            );
            for (_, doc) in history {
                println!(
                    "{:>10}  {:<25}  {:<20}  {}",
                    doc.generation, doc.time, doc.who, doc.reason
                );
            }
        }
        Command::Serve {
            data,
            listen,
            allow_push,
            allow_delete,
            mirror_namespace,
            upload_expiry_secs,
            header_timeout_secs,
            idle_timeout_secs,
            max_connections,
        } => {
            if let Some(ns) = &mirror_namespace {
                let probe: airlock::names::RepositoryName = "x".parse()?;
                airlock::registry::namespace::qualify(ns, &probe).map_err(|_| {
                    anyhow::anyhow!("--mirror-namespace {ns:?} cannot prefix a repository name")
                })?;
            }
            let state = state_at(&data.data)?;
            let config = airlock::registry::RegistryConfig {
                allow_push,
                allow_delete,
                mirror_namespace,
                upload_expiry: std::time::Duration::from_secs(upload_expiry_secs),
            };
            let app = Arc::new(airlock::server::App::with_config(state, config));
            let limits = airlock::server::Limits {
                header_timeout: std::time::Duration::from_secs(header_timeout_secs),
                idle_timeout: std::time::Duration::from_secs(idle_timeout_secs),
                max_connections: max_connections as usize,
                ..airlock::server::Limits::default()
            };
            airlock::server::serve(listen, app, limits).await?;
        }
    }
    Ok(())
}

fn main() {
    let cli = Cli::parse();
    if !matches!(cli.command, Command::Serve { .. }) {
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
        eprintln!("airlock: error: {}", one_line(&format!("{e:#}")));
        std::process::exit(1);
    }
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
