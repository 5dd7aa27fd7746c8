//! `airlock import`, `inventory`, `history` and `status`: commands on a blobstore
//! (`--data DIR` or `--store URL`).

use std::path::PathBuf;

use anyhow::{Context, Result};

use airlock::bundle::{format, import as bundle_import, sign, trust};

use super::{BundleInput, DataArg, progress_bar};

#[derive(clap::Args)]
pub struct ImportArgs {
    #[command(flatten)]
    data: DataArg,
    /// Armored public key file(s) trusted to sign bundles; not used (and
    /// not needed) once the site holds a trust document.
    #[arg(long)]
    keyring: Option<PathBuf>,
    /// Bundle files, volumes in order (`NAME` finds `NAME.000`, `NAME.001`, ...), or `-` for stdin;
    /// or one signed trust document (`-----BEGIN PGP SIGNED MESSAGE-----`), which
    /// becomes the site's (the first one, or a successor signed by the current root keys).
    #[arg(required = true)]
    bundles: Vec<PathBuf>,
    /// Verify everything and print what the import would change (tags
    /// created, moved, unchanged); commit nothing.
    #[arg(long)]
    dry_run: bool,
    /// Move tags that a bundle created later than this one set back to
    /// this bundle's images (refused otherwise); needs --reason, recorded
    /// in history.
    #[arg(long, requires = "reason")]
    allow_downgrade: bool,
    /// Import a bundle past its `expires` (refused otherwise); needs
    /// --reason, recorded in history.
    #[arg(long, requires = "reason")]
    allow_expired: bool,
    /// Why the downgrade or the expired bundle is allowed (recorded in
    /// history).
    #[arg(long)]
    reason: Option<String>,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
    /// The signed volume list of the volumes [default: `NAME.volumes.asc`
    /// beside the first volume, when there].
    #[arg(long)]
    volume_list: Option<PathBuf>,
}

#[derive(clap::Args)]
pub struct InventoryArgs {
    #[command(flatten)]
    data: DataArg,
    /// Output file (`-` for stdout).
    #[arg(short, long, default_value = "-")]
    out: PathBuf,
}

#[derive(clap::Args)]
pub struct HistoryArgs {
    #[command(flatten)]
    data: DataArg,
    /// Print one JSON array (newest first): generation, digest, time, who,
    /// address, reason.
    #[arg(long)]
    json: bool,
}

pub async fn import(args: ImportArgs) -> Result<()> {
    if let Some(armored) = trust_document(&args.bundles)? {
        return import_trust(args, &armored).await;
    }
    let keyring = args
        .keyring
        .as_deref()
        .map(sign::Keyring::load)
        .transpose()?;
    // Bad input (a bundle path, the config) is refused before the store is
    // opened, so a mistyped --data path is not made into an empty store.
    airlock::bundle::volume::expand_inputs(&args.bundles)?;
    // With --config, its `[store]`, `[registry] immutable_tags` and
    // `[[import.policy]]` (upstream signatures) apply.
    let (immutable_tags, signature_policy) = match args.data.settings()? {
        Some(cfg) => {
            let policy =
                airlock::signatures::SitePolicy::load(&cfg.import.policy).map_err(|e| {
                    anyhow::anyhow!(
                        "{}: {e:#}",
                        args.data.config.clone().unwrap_or_default().display()
                    )
                })?;
            (cfg.registry.immutable_tags, policy)
        }
        None => Default::default(),
    };
    let opened = args.data.open(true)?;
    if !args.dry_run {
        airlock::ops::write_lock::refuse_if_locked(&*opened.blobstore()).await?;
    }
    opened.sweep_scratch().await;
    let state = airlock::state::StateStore::new(opened.blobstore());
    let verifier = trust::verifier(&state, keyring).await?;
    let mut input = BundleInput::open(
        &args.bundles,
        Some(verifier.keys()),
        args.volume_list.as_deref(),
    )?;
    let opts = bundle_import::ImportOptions {
        dry_run: args.dry_run,
        allow_downgrade: args
            .allow_downgrade
            .then(|| args.reason.clone().unwrap_or_default()),
        allow_expired: args
            .allow_expired
            .then(|| args.reason.clone().unwrap_or_default()),
        immutable_tags,
        signature_policy,
        may_write: None,
        may_repair: true,
    };
    let pb = progress_bar();
    let reader = std::mem::replace(&mut input.reader, Box::new(std::io::empty()));
    let report = bundle_import::import(
        &state,
        verifier,
        reader,
        &airlock::state::user_at_host(),
        pb.clone(),
        &opts,
    )
    .await
    .map_err(|e| input.blame(e))?;
    pb.finish_and_clear();
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "id": report.id,
                "created": report.created,
                "dry_run": report.dry_run,
                "tags": report.tags,
                "images": report.images,
                "blobs_new": report.blobs_new,
                "blobs_skipped": report.blobs_skipped,
                "bytes_new": report.bytes_new,
                "bytes_read": report.bytes_read,
                "generation": report.generation,
                "changed": report.changed,
                "repaired": report.repaired,
            }))?
        );
    } else {
        println!("{report}");
    }
    Ok(())
}

use trust::MAX_DOCUMENT as MAX_TRUST_DOCUMENT;

/// The text of `paths` when it is one file holding a cleartext-signed
/// document (a trust document) rather than a bundle; `None` otherwise.
fn trust_document(paths: &[PathBuf]) -> Result<Option<String>> {
    use std::io::Read;
    let [path] = paths else {
        return Ok(None);
    };
    if path.as_os_str() == "-" || !path.is_file() {
        return Ok(None);
    }
    let mut head = Vec::new();
    std::fs::File::open(path)
        .with_context(|| path.display().to_string())?
        .take(64)
        .read_to_end(&mut head)?;
    if !head.starts_with(b"-----BEGIN PGP SIGNED MESSAGE-----") {
        return Ok(None);
    }
    let mut text = String::new();
    std::fs::File::open(path)?
        .take(MAX_TRUST_DOCUMENT + 1)
        .read_to_string(&mut text)
        .with_context(|| format!("{}: not UTF-8 text", path.display()))?;
    if text.len() as u64 > MAX_TRUST_DOCUMENT {
        anyhow::bail!(
            "{}: a trust document of more than {MAX_TRUST_DOCUMENT} bytes",
            path.display()
        );
    }
    Ok(Some(text))
}

/// `airlock import TRUST.asc`: installs (or with `--dry-run` checks) a
/// trust document as the site's ([`trust::install`]).
async fn import_trust(args: ImportArgs, armored: &str) -> Result<()> {
    // A document that is not one is refused before the store is opened.
    trust::TrustDoc::parse(&sign::unverified_text(armored)?)?;
    let opened = args.data.open(true)?;
    let state = airlock::state::StateStore::new(opened.blobstore());
    if args.dry_run {
        println!("{}", trust::check(&state, armored).await?);
        return Ok(());
    }
    let installed = trust::install(&state, armored, &airlock::state::user_at_host()).await?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&installed.to_json())?);
    } else {
        println!("{installed}");
    }
    Ok(())
}

pub async fn inventory(args: InventoryArgs) -> Result<()> {
    let state = args.data.existing_state()?;
    let keys = state.blobstore().list("blobs/").await?;
    let blobs = keys
        .iter()
        .filter_map(|k| {
            let mut parts = k.split('/');
            let (_, alg, _, hex) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
            format!("{alg}:{hex}").parse().ok()
        })
        .collect();
    let inv = format::Inventory {
        format: format::INVENTORY_V1.into(),
        blobs,
    };
    let text = serde_json::to_string_pretty(&inv)? + "\n";
    let out = &args.out;
    if out.as_os_str() == "-" {
        print!("{text}");
    } else {
        std::fs::write(out, text).with_context(|| format!("writing {}", out.display()))?;
        eprintln!("{} blobs listed in {}", inv.blobs.len(), out.display());
    }
    Ok(())
}

/// Tag changes printed per generation by `history` (all with `--json`).
const HISTORY_TAGS: usize = 5;

#[derive(clap::Args)]
pub struct StatusArgs {
    #[command(flatten)]
    data: DataArg,
    /// How old the newest imported bundle may be (`14d`, `36h`) [default:
    /// the serve config's `[import] max_staleness`, else not checked].
    #[arg(long, value_parser = airlock::ops::parse_positive_duration)]
    max_staleness: Option<std::time::Duration>,
    /// Print one JSON object: generation, time, reason, newest_bundle,
    /// max_staleness_secs, stale.
    #[arg(long)]
    json: bool,
}

/// `airlock status`: the current generation and the newest imported
/// bundle; with a max staleness, whether the site is stale (exit 1, with
/// the one line `/readyz` gives, when it is).
pub async fn status(args: StatusArgs) -> Result<()> {
    use airlock::bundle::freshness;
    // Else the `--config`'s `[import] max_staleness`.
    let max = match (args.max_staleness, args.data.settings()?) {
        (Some(d), _) => Some(d),
        (None, Some(cfg)) => cfg
            .import
            .max_staleness
            .map(|v| {
                airlock::ops::parse_positive_duration(&v).map_err(|e| {
                    anyhow::anyhow!(
                        "{}: import.max_staleness: {e}",
                        args.data.config.clone().unwrap_or_default().display()
                    )
                })
            })
            .transpose()?,
        (None, None) => None,
    };
    let state = args.data.existing_state()?;
    let snap = state.snapshot().await?;
    let freshness::Report { newest, stale } = freshness::report(&state, &snap, max).await?;
    let doc = snap.state.as_ref();
    let trust_doc = trust::load(&state, &snap).await?;
    let lock = airlock::ops::write_lock::read(&**state.blobstore())
        .await?
        .map(|(_, d)| d)
        .filter(airlock::ops::write_lock::LockDoc::in_force);
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "generation": snap.generation(),
                "write_lock": lock,
                "time": doc.map(|d| &d.time),
                "reason": doc.map(|d| &d.reason),
                "newest_bundle": newest,
                "max_staleness_secs": max.map(|d| d.as_secs()),
                "stale": stale,
                "trust_version": trust_doc.as_ref().map(|t| t.version),
            }))?
        );
    } else {
        match doc {
            Some(d) => println!(
                "generation     {} ({}, {}: {})",
                d.generation, d.time, d.who, d.reason
            ),
            None => println!("generation     none yet (empty store)"),
        }
        match &newest {
            Some(n) => println!(
                "newest bundle  {}: created {}, imported {}, expires {}",
                n.bundle,
                n.created,
                n.imported,
                n.expires.as_deref().unwrap_or("never")
            ),
            None => println!("newest bundle  none recorded"),
        }
        match (max, &stale) {
            (None, _) => {
                println!("staleness      not checked (--max-staleness or [import] max_staleness)")
            }
            (Some(_), Some(line)) => println!("staleness      {line}"),
            (Some(m), None) => println!("staleness      fresh (max_staleness {}s)", m.as_secs()),
        }
        match &trust_doc {
            Some(t) => println!("trust          document {}", t.summary()),
            None => println!("trust          no trust document: the import keyring decides"),
        }
        match &lock {
            Some(l) => println!("write lock     {}", l.describe()),
            None => println!("write lock     none: writes are accepted"),
        }
    }
    match stale {
        Some(line) => Err(anyhow::anyhow!(line)),
        None => Ok(()),
    }
}

pub async fn history(args: HistoryArgs) -> Result<()> {
    let state = args.data.existing_state()?;
    let (history, broken) = state.history_partial().await?;
    let mut changes = Vec::with_capacity(history.len());
    let mut damaged = Vec::with_capacity(history.len());
    for (_, doc) in &history {
        // A record that cannot be read is said so, never left out quietly.
        match state.changes_record(doc).await {
            Ok(c) => {
                changes.push(c);
                damaged.push(None);
            }
            Err(e) => {
                changes.push(None);
                damaged.push(Some(e.to_string()));
            }
        }
    }
    if args.json {
        let rows: Vec<_> = history
            .iter()
            .zip(changes.iter().zip(&damaged))
            .map(|((digest, doc), (changes, damaged))| {
                serde_json::json!({
                    "generation": doc.generation,
                    "digest": digest,
                    "time": doc.time,
                    "who": doc.who,
                    "address": doc.address,
                    "reason": doc.reason,
                    "changes": changes,
                    "changes_damaged": damaged,
                })
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(());
    }
    if history.is_empty() && broken.is_none() {
        println!("no generations yet (empty store)");
    }
    println!(
        "{:>10}  {:<25}  {:<20}  {:<21}  reason",
        "generation", "time", "who", "address"
    );
    for (((_, doc), changes), damaged) in history.iter().zip(&changes).zip(&damaged) {
        println!(
            "{:>10}  {:<25}  {:<20}  {:<21}  {}",
            doc.generation,
            doc.time,
            doc.who,
            doc.address.as_deref().unwrap_or("-"),
            doc.reason
        );
        if let Some(cause) = damaged {
            println!(
                "{:>10}  (its record of what it changed is damaged: {cause})",
                ""
            );
        }
        if let Some(c) = changes {
            // What it changed: the summary, and the first few tags.
            println!("{:>10}  {}", "", c.summary());
            for t in c.tags.iter().take(HISTORY_TAGS) {
                println!("{:>10}    {t}", "");
            }
            if c.tags.len() > HISTORY_TAGS {
                println!(
                    "{:>10}    ... {} more (history --json lists all)",
                    "",
                    c.tags.len() - HISTORY_TAGS
                );
            }
        }
    }
    if let Some(e) = broken {
        // Older generations removed by `gc` retention end the list quietly;
        // anything else is damage `fsck` should look at.
        let missing = matches!(
            e,
            airlock::state::StateError::Store(airlock::store::StoreError::NotFound(_))
        );
        if missing && !history.is_empty() {
            println!("{:>10}  (older generations removed by gc)", "...");
        } else {
            eprintln!("airlock: warning: history ends early: {e} (run `airlock fsck`)");
            if history.is_empty() {
                anyhow::bail!("the current generation cannot be read: {e}");
            }
        }
    }
    Ok(())
}
