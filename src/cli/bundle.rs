//! `airlock bundle`: create, inspect and verify bundles.

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use clap::Subcommand;

use airlock::bundle::{create, format, freshness, import, sign, trust, volume, volume_list};

use super::{BundleInput, parse_size, progress_bar};

#[derive(Subcommand)]
pub enum BundleCmd {
    /// Gather the images of a mirror config into one signed bundle.
    Create {
        /// Mirror config (TOML, `[[image]]` tables).
        #[arg(long)]
        config: PathBuf,
        /// Armored secret key to sign with; repeat it for a document
        /// signed by several keys (a trust document's thresholds count
        /// distinct signers; `airlock keys cosign` adds one later).
        #[arg(long, required = true)]
        sign_key: Vec<PathBuf>,
        /// Output file (volumes: OUT.000, OUT.001, ...).
        #[arg(short, long)]
        out: PathBuf,
        /// Split into volumes of at most this size (bytes; K, M, G, T suffixes are powers of 1024).
        #[arg(long, value_parser = parse_size)]
        volume_size: Option<u64>,
        /// Inventory of the destination (`airlock inventory`): those blobs are left out (delta bundle).
        #[arg(long)]
        have: Option<PathBuf>,
        /// Content cache for `docker://` sources (default `$XDG_CACHE_HOME/airlock`, else `~/.cache/airlock`).
        #[arg(long, env = "AIRLOCK_CACHE")]
        cache: Option<PathBuf>,
        /// How long the bundle stays importable: a site refuses it after
        /// (`90s`, `12h`, `30d`; over the mirror config's `expires_in`)
        /// [default: 30d].
        #[arg(long, value_parser = airlock::ops::parse_positive_duration)]
        expires_in: Option<std::time::Duration>,
        /// Print a JSON summary on stdout instead of the one-line summary.
        #[arg(long)]
        json: bool,
    },
    /// Add a signature by another key to a bundle (a second release
    /// engineer's, for a trust document's threshold): writes OUT, the same
    /// bundle with one more signature on its signed document.
    Cosign {
        /// Armored secret key to sign with.
        #[arg(long)]
        sign_key: PathBuf,
        /// The bundle (one file, not volumes: sign volumes with every key at create).
        bundle: PathBuf,
        /// Output file (must not exist).
        #[arg(short, long)]
        out: PathBuf,
    },
    /// Summarize a bundle: images, tags, stacks, addons, sizes, signer,
    /// creation time (signature NOT checked; use `bundle verify`).
    Inspect {
        /// Bundle file or volumes.
        #[arg(required = true)]
        bundles: Vec<PathBuf>,
        /// Print the signed document as JSON instead.
        #[arg(long)]
        json: bool,
    },
    /// Check a bundle's signature and every digest, without a store; or,
    /// given some of a bundle's volumes, each of them on its own against
    /// the signed volume list (size and sha256), before it travels.
    Verify {
        /// Trusted public key file.
        #[arg(long, required_unless_present = "trust", conflicts_with = "trust")]
        keyring: Option<PathBuf>,
        /// A signed trust document (as `airlock import` installs it): the
        /// bundle's signers must meet its roles, as at a site that holds it.
        #[arg(long)]
        trust: Option<PathBuf>,
        /// Bundle file or volumes.
        #[arg(required = true)]
        bundles: Vec<PathBuf>,
        /// The signed volume list [default: `NAME.volumes.asc` beside the
        /// first volume].
        #[arg(long)]
        volume_list: Option<PathBuf>,
    },
}

fn load_inventory(p: &PathBuf) -> Result<format::Inventory> {
    let text = std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
    let inv: format::Inventory = serde_json::from_str(&text)
        .with_context(|| format!("{}: not an airlock inventory", p.display()))?;
    if inv.format != format::INVENTORY_V1 {
        bail!(
            "{}: unsupported inventory format {:?}",
            p.display(),
            inv.format
        );
    }
    Ok(inv)
}

pub async fn run(cmd: BundleCmd) -> Result<()> {
    match cmd {
        BundleCmd::Create {
            config,
            sign_key,
            out,
            volume_size,
            have,
            cache,
            expires_in,
            json,
        } => {
            let keys = sign_key
                .iter()
                .map(|p| sign::SigningKey::load(p))
                .collect::<Result<Vec<_>, _>>()?;
            let keys: Vec<&sign::SigningKey> = keys.iter().collect();
            let have = have.as_ref().map(load_inventory).transpose()?;
            let opts = create::CreateOptions {
                config: &config,
                keys: &keys,
                out: &out,
                volume_size,
                have: have.as_ref(),
                cache: cache.as_deref(),
                expires_in,
            };
            let pb = progress_bar();
            if !pb.is_hidden()
                && let Ok(style) = indicatif::ProgressStyle::with_template(
                    "{spinner} [{elapsed_precise}] {msg} {bar:30} {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
                )
            {
                // Which image is being pulled, then "writing bundle".
                pb.set_style(style);
            }
            let created = tokio::task::block_in_place(|| create::create(&opts, &pb))?;
            pb.finish_and_clear();
            if json {
                let summary = serde_json::json!({
                    "id": created.doc.id,
                    "created": created.doc.created,
                    "expires": created.doc.expires,
                    "images": created.doc.images.iter().map(|i| serde_json::json!({
                        "repository": i.repository,
                        "tags": i.tags,
                        "digest": i.digest,
                        "mediaType": i.media_type,
                    })).collect::<Vec<_>>(),
                    "blobs_carried": created.doc.blobs.len(),
                    "blobs_required": created.doc.required.len(),
                    "bytes_written": created.bytes,
                    "files": created.files,
                    "registry": created.pulled,
                    "stacks_checked": created.checked,
                    "volume_list": created.volume_list,
                });
                println!("{}", serde_json::to_string_pretty(&summary)?);
                return Ok(());
            }
            println!(
                "bundle {} (expires {}): {} images, {} blobs carried, {} required, {} bytes in {} file(s): {}",
                created.doc.id,
                created.doc.expires.as_deref().unwrap_or("never"),
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
            if let Some(list) = &created.volume_list {
                println!(
                    "volume list {} (signed): copy it onto every disc with its volume; `airlock bundle verify --keyring KEY VOLUME` checks one volume on its own",
                    list.display()
                );
            }
            for c in &created.checked {
                println!(
                    "{} {}: flattens ({}; layers read: {})",
                    c.why,
                    c.image,
                    c.platforms.join(", "),
                    c.layers
                );
            }
        }
        BundleCmd::Inspect { bundles, json } => {
            let doc = import::inspect(BundleInput::open(&bundles, None, None)?.reader)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&doc)?);
            } else {
                print!("{}", summary(&doc));
            }
            eprintln!(
                "note: signature not checked; run `airlock bundle verify --keyring KEY` to check it"
            );
        }
        BundleCmd::Cosign {
            sign_key,
            bundle,
            out,
        } => {
            let key = sign::SigningKey::load(&sign_key)?;
            let pb = progress_bar();
            let id = tokio::task::block_in_place(|| {
                airlock::bundle::cosign::cosign(&bundle, &out, &key, &pb)
            })?;
            pb.finish_and_clear();
            println!(
                "bundle {id}: wrote {} with a signature by {} added",
                out.display(),
                key.fingerprint()
            );
        }
        BundleCmd::Verify {
            keyring,
            trust: trust_path,
            bundles,
            volume_list,
        } => {
            let verifier = match (keyring, trust_path) {
                (_, Some(path)) => {
                    let text = std::fs::read_to_string(&path)
                        .with_context(|| path.display().to_string())?;
                    let (doc, _) = trust::TrustDoc::check_successor(None, &text)
                        .with_context(|| path.display().to_string())?;
                    trust::Verifier::trust(doc)?
                }
                (Some(path), None) => trust::Verifier::keyring(sign::Keyring::load(&path)?),
                (None, None) => bail!("give --keyring or --trust"),
            };
            if let Some(checked) =
                verify_volumes(verifier.keys(), &bundles, volume_list.as_deref())?
            {
                println!("{checked}");
                return Ok(());
            }
            let mut input =
                BundleInput::open(&bundles, Some(verifier.keys()), volume_list.as_deref())?;
            let reader = std::mem::replace(&mut input.reader, Box::new(std::io::empty()));
            let pb = progress_bar();
            let doc = import::verify(verifier, reader, pb.clone())
                .await
                .map_err(|e| input.blame(e))?;
            pb.finish_and_clear();
            println!(
                "bundle {} OK: signature valid, {} images, {} blobs verified, {} required; expires {}",
                doc.id,
                doc.images.len(),
                doc.blobs.len(),
                doc.required.len(),
                expiry(&doc)
            );
        }
    }
    Ok(())
}

/// `bundle verify` of some volumes of a bundle, not all: each checked on
/// its own against the signed volume list. `None` when `bundles` is not
/// such a subset (a whole bundle, or volumes without a list).
fn verify_volumes(
    keyring: &sign::Keyring,
    bundles: &[PathBuf],
    list_arg: Option<&std::path::Path>,
) -> Result<Option<String>> {
    let list_path = match list_arg {
        Some(p) => p.to_path_buf(),
        None => match bundles.first().and_then(|b| volume_list::beside(b)) {
            Some(p) => p,
            None => return Ok(None),
        },
    };
    let list = volume_list::VolumeList::load(&list_path, keyring)?;
    let files = volume::expand_inputs(bundles)?;
    let whole = files.len() == list.count
        && files
            .iter()
            .zip(&list.volumes)
            .all(|(f, v)| f.file_name().is_some_and(|n| n == v.name.as_str()));
    if whole {
        return Ok(None);
    }
    let mut lines = Vec::new();
    for f in &files {
        let i = list.check_one(f)?;
        let v = &list.volumes[i];
        lines.push(format!(
            "{} OK: {} ({} bytes), {}",
            list.describe(i),
            crate::cli::size(v.size),
            v.size,
            v.sha256
        ));
    }
    lines.push(format!(
        "volume list {} of bundle {}: signature valid",
        list_path.display(),
        list.bundle
    ));
    Ok(Some(lines.join("\n")))
}

/// A bundle's `expires` for people: the time, `(expired)` when past, or
/// that the bundle carries none.
fn expiry(doc: &format::BundleDoc) -> String {
    match &doc.expires {
        None => "never (made before bundles carried an expiry)".into(),
        Some(t) => match freshness::check_expiry(doc, std::time::SystemTime::now(), None) {
            Err(freshness::FreshnessError::Expired { .. }) => format!("{t} (expired)"),
            _ => t.clone(),
        },
    }
}

/// What `bundle inspect` prints: who made the bundle and when, its images
/// with their tags, its stack candidates and torcx addons, and its size.
fn summary(doc: &format::BundleDoc) -> String {
    use std::fmt::Write as _;
    let size = |blobs: &[format::BlobEntry]| crate::cli::size(blobs.iter().map(|b| b.size).sum());
    let mut out = String::new();
    let _ = writeln!(out, "bundle   {} ({})", doc.id, doc.format);
    let _ = writeln!(out, "created  {}", doc.created);
    let _ = writeln!(out, "expires  {}", expiry(doc));
    let _ = writeln!(out, "by       {} (signature not checked)", doc.creator);
    let _ = writeln!(
        out,
        "blobs    {} carried, {}; {} required from the destination, {}",
        doc.blobs.len(),
        size(&doc.blobs),
        doc.required.len(),
        size(&doc.required)
    );
    let tagged: Vec<_> = doc.images.iter().filter(|i| !i.tags.is_empty()).collect();
    let _ = writeln!(
        out,
        "images   {} ({} referrers)",
        tagged.len(),
        doc.images.len() - tagged.len()
    );
    for i in &tagged {
        let tags: Vec<&str> = i.tags.iter().map(|t| t.as_str()).collect();
        let _ = writeln!(out, "  {}:{}  {}", i.repository, tags.join(","), i.digest);
    }
    if !doc.stacks.is_empty() {
        let _ = writeln!(out, "stacks   {}", doc.stacks.len());
        for s in &doc.stacks {
            let _ = writeln!(out, "  {}  {}", s.name, s.image);
        }
    }
    if !doc.addons.is_empty() {
        let _ = writeln!(out, "addons   {}", doc.addons.len());
        for a in &doc.addons {
            let _ = writeln!(
                out,
                "  {}:{}  remote {}  {}",
                a.name,
                a.version,
                a.remote,
                crate::cli::size(a.size)
            );
        }
    }
    if !doc.torcx_contents.is_empty() {
        let _ = writeln!(out, "torcx contents {}", doc.torcx_contents.len());
    }
    out
}
