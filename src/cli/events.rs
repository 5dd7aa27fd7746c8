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
    Ok(())
}
