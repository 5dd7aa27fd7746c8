//! `airlock sbom IMAGE` and `airlock vulns IMAGE|STACK`: what is inside an
//! image and which known vulnerabilities it carries, on a data directory.

use anyhow::{Result, anyhow, bail};

use airlock::sbom::report::{self, VulnReport};
use airlock::sbom::site::{self, Origin};
use airlock::sbom::{cyclonedx, spdx};
use airlock::state::user_at_host;

use super::DataArg;

/// Document formats of `airlock sbom`.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum SbomFormat {
    /// SPDX 2.3 JSON.
    Spdx,
    /// CycloneDX 1.5 JSON.
    Cyclonedx,
}

#[derive(clap::Args)]
pub struct SbomArgs {
    #[command(flatten)]
    data: DataArg,
    /// The image: REPO:TAG or REPO@DIGEST, held by the registry.
    image: String,
    /// Document format.
    #[arg(long, value_enum, default_value = "spdx")]
    format: SbomFormat,
    /// The platform image of an index (`linux/amd64`; default: the only
    /// one, else the server's own).
    #[arg(long)]
    platform: Option<String>,
    /// Also attach an SPDX referrer to every platform manifest that has none
    /// (one root swap), so registry clients (`oras discover`) see it.
    #[arg(long)]
    attach: bool,
}

#[derive(clap::Args)]
pub struct VulnsArgs {
    #[command(flatten)]
    data: DataArg,
    /// A promoted stack's name, or an image (REPO:TAG or REPO@DIGEST).
    target: String,
    /// JSON output (as GET /api/v1/vulns).
    #[arg(long)]
    json: bool,
}

/// `airlock sbom`: prints the SBOM of one platform image (the attached SPDX
/// document as it is, else one generated from the layers).
pub async fn sbom(a: SbomArgs) -> Result<()> {
    let state = a.data.existing_state()?;
    let image = airlock::sbom::compare::pin(&state, &a.image).await?;
    if a.attach {
        let made = site::attach(&state, &image, &user_at_host()).await?;
        eprintln!("attached {} SBOM referrer(s) to {image}", made.len());
    }
    let all = site::image_inventories(&state, &image).await?;
    let names: Vec<&str> = all.iter().map(|i| i.platform.as_str()).collect();
    let native = airlock::stacks::image::native_platform();
    let want = a.platform.as_deref().unwrap_or(native.as_str());
    let inv = match all.len() {
        1 if a.platform.is_none() => &all[0],
        _ => all.iter().find(|i| i.platform == want).ok_or_else(|| {
            anyhow!(
                "{image} has no platform {want} (it has {})",
                names.join(", ")
            )
        })?,
    };
    let subject = site::subject(&image.repository, inv);
    let doc = match (a.format, &inv.origin) {
        (SbomFormat::Spdx, Origin::Attached(_)) => {
            let snap = state.snapshot().await?;
            let (_, bytes) = site::attached(&state, &snap, &image.repository, &inv.manifest)
                .await?
                .ok_or_else(|| anyhow!("the attached SBOM of {} went away", inv.manifest))?;
            serde_json::from_slice(&bytes)?
        }
        (SbomFormat::Spdx, Origin::Layers) => spdx::document(&inv.inventory, &subject),
        (SbomFormat::Cyclonedx, _) => cyclonedx::document(&inv.inventory, &subject),
    };
    println!("{}", serde_json::to_string_pretty(&doc)?);
    Ok(())
}

fn print_report(r: &VulnReport) {
    let asked = match (&r.stack, r.promotion) {
        (Some(s), Some(p)) => format!(" (stack {s}, promotion {p})"),
        _ => String::new(),
    };
    println!("{}{asked}", r.image);
    if r.feeds.is_empty() {
        println!("feeds: none imported (add [[feed]] to a mirror config and import the bundle)");
    }
    for f in &r.feeds {
        println!("feed {} ({}): {}", f.name, f.format, f.age);
    }
    for p in &r.platforms {
        let origin = match &p.inventory {
            Origin::Attached(d) => format!("attached SBOM {d}"),
            Origin::Layers => "read from the layers".into(),
        };
        let levels: Vec<String> = p
            .counts
            .iter()
            .filter(|(_, n)| **n > 0)
            .map(|(l, n)| format!("{n} {l}"))
            .collect();
        println!(
            "{} {}: {} packages ({origin}); {} vulnerabilities{}",
            p.platform,
            p.os,
            p.packages,
            p.vulnerabilities.len(),
            if levels.is_empty() {
                String::new()
            } else {
                format!(" ({})", levels.join(", "))
            }
        );
        for f in &p.vulnerabilities {
            println!(
                "  {:<18} {:<10} {} ({}) {} -> {}",
                f.id,
                f.severity,
                f.source,
                f.packages.join(", "),
                f.installed,
                f.fixed.as_deref().unwrap_or("no fix yet")
            );
        }
    }
}

/// `airlock vulns`.
pub async fn vulns(a: VulnsArgs) -> Result<()> {
    let state = a.data.existing_state()?;
    let r = report::vulns(&state, &a.target).await?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        print_report(&r);
    }
    if r.platforms.is_empty() {
        bail!("{} has no platform image", r.image);
    }
    Ok(())
}
