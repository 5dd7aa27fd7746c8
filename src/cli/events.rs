//! `airlock events`: the event queue and the webhook delivery log.

use anyhow::Result;

use airlock::events::{self, Queued};

use super::DataArg;

#[derive(clap::Args)]
pub struct EventsArgs {
    #[command(flatten)]
    data: DataArg,
    /// JSON output: `{"queued": [...], "log": [...]}`, oldest first.
    #[arg(long)]
    json: bool,
}

fn print(q: &Queued, queued: bool) {
    let e = &q.event;
    println!(
        "{}  {:<20} generation {:<6} {}  {}",
        e.time,
        e.kind,
        e.generation,
        e.id,
        if queued && q.deliveries.is_empty() {
            "queued"
        } else {
            ""
        }
    );
    for (url, d) in &q.deliveries {
        println!(
            "    {:<9} {url}  attempts {}{}{}",
            d.status,
            d.attempts,
            d.http_status
                .map_or(String::new(), |s| format!("  HTTP {s}")),
            d.error.as_ref().map_or(String::new(), |e| format!("  {e}"))
        );
    }
}

pub async fn run(args: EventsArgs) -> Result<()> {
    let state = args.data.existing_state()?;
    let (queued, log) = events::list(&**state.blobstore()).await?;
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({ "queued": queued, "log": log }))?
        );
        return Ok(());
    }
    if queued.is_empty() && log.is_empty() {
        println!("no events");
    }
    for q in &log {
        print(q, false);
    }
    for q in &queued {
        print(q, true);
    }
    let waiting = queued.iter().filter(|q| q.deliveries.is_empty()).count();
    if waiting > 0 {
        println!("{}", never_attempted(waiting, args.data.config.as_deref())?);
    }
    Ok(())
}

/// Why `n` queued events were never attempted: only `airlock serve`
/// delivers, and only to the `[[webhook]]` entries of its config.
fn never_attempted(n: usize, config: Option<&std::path::Path>) -> Result<String> {
    let Some(path) = config else {
        return Ok(format!(
            "note: {n} queued events were never attempted: only `airlock serve` delivers them, to the [[webhook]] entries of its config; with none configured they stay queued (the oldest are dropped past {} events)",
            events::MAX_QUEUE
        ));
    };
    let settings = airlock::config::load(path)?;
    Ok(if settings.webhooks.is_empty() {
        format!(
            "note: {n} queued events will never be delivered: {} configures no [[webhook]]",
            path.display()
        )
    } else {
        format!(
            "note: {n} queued events wait for `airlock serve` to deliver them to {} webhooks of {}",
            settings.webhooks.len(),
            path.display()
        )
    })
}
