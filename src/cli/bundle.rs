//! `airlock bundle`: create, inspect and verify bundles.

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use clap::Subcommand;

use airlock::bundle::{create, format, import, sign};

use super::{bundle_reader, parse_size, progress_bar};

#[derive(Subcommand)]
pub enum BundleCmd {
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
        /// Content cache for `docker://` sources (default `$XDG_CACHE_HOME/airlock`, else `~/.cache/airlock`).
        #[arg(long, env = "AIRLOCK_CACHE")]
        cache: Option<PathBuf>,
        /// Print a JSON summary on stdout instead of the one-line summary.
        #[arg(long)]
        json: bool,
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
            json,
        } => {
            let key = sign::SigningKey::load(&sign_key)?;
            let have = have.as_ref().map(load_inventory).transpose()?;
            let opts = create::CreateOptions {
                config: &config,
                key: &key,
                out: &out,
                volume_size,
                have: have.as_ref(),
                cache: cache.as_deref(),
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
                });
                println!("{}", serde_json::to_string_pretty(&summary)?);
                return Ok(());
            }
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
        BundleCmd::Inspect { bundles } => {
            let doc = import::inspect(bundle_reader(&bundles)?)?;
            println!("{}", serde_json::to_string_pretty(&doc)?);
            eprintln!(
                "note: signature not checked; run `airlock bundle verify --keyring KEY` to check it"
            );
        }
        BundleCmd::Verify { keyring, bundles } => {
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
    }
    Ok(())
}
