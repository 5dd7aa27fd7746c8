//! What `airlock stack list|show|status` print on a terminal (tables) or as `--json`.

use super::*;

pub(super) fn print_json(v: &impl serde::Serialize) -> Result<()> {
    println!("{}", serde_json::to_string_pretty(v)?);
    Ok(())
}

/// One line for `stack lifecycle`: digest, status, stack, promotion, and
/// what the status depends on.
pub(super) fn lifecycle_line(l: &lifecycle::Lifecycle) -> String {
    let mut out = format!("{} {}", l.digest, l.status);
    if let Some(s) = &l.stack {
        out.push_str(&format!(" stack {s}"));
    }
    if let Some(p) = l.promotion {
        out.push_str(&format!(" promotion {p}"));
    }
    if let Some(pct) = l.rollout_percent {
        out.push_str(&format!(" on {pct} % of cells"));
    }
    if let Some(t) = &l.since {
        out.push_str(&format!(" since {t}"));
    }
    if let Some(r) = &l.rolling_out_to {
        out.push_str(&format!(
            "; rolling out to {} (promotion {}) on {} % of cells",
            r.digest, r.promotion, r.percent
        ));
    }
    if let Some(d) = &l.superseded_by {
        out.push_str(&format!("; current is {d}"));
    }
    if l.restage_required {
        out.push_str(" (restage required)");
    }
    out
}

/// The stack table as `stack list` (and `ls`) prints it.
pub(crate) fn list(table: &StackTable) {
    if table.stacks.is_empty() && table.custom.is_empty() {
        println!("no stacks");
        return;
    }
    println!(
        "{:<20} {:<11} {:>9} {:>7}  {:<8} image",
        "name", "state", "promotion", "rollout", "default"
    );
    for (name, s) in &table.stacks {
        let active = s.active();
        println!(
            "{:<20} {:<11} {:>9} {:>7}  {:<8} {}",
            name.as_str(),
            s.state.as_str(),
            active.map_or("-".into(), |p| p.id.to_string()),
            s.rollout.map_or("-".into(), |r| format!("{} %", r.percent)),
            if table.default.as_ref() == Some(name) {
                "yes"
            } else {
                ""
            },
            active.map_or_else(
                || format!("({} candidates)", s.candidates.len()),
                |p| p.image.to_string()
            ),
        );
    }
    for (name, c) in &table.custom {
        println!(
            "{:<20} {:<11} {:>9} {:>7}  {:<8} {}",
            name.as_str(),
            "CUSTOM",
            "-",
            "-",
            "",
            c.image
        );
    }
}

pub(super) fn show(table: &StackTable, name: &StackName) -> Result<()> {
    let s = table.get(name)?;
    println!(
        "stack        {name}{}",
        if table.default.as_ref() == Some(name) {
            " (default)"
        } else {
            ""
        }
    );
    println!("description  {}", s.description);
    println!(
        "state        {} ({}){}",
        s.state.as_str(),
        s.state.meaning(),
        if s.state_reason.is_empty() {
            String::new()
        } else {
            format!(": {}", s.state_reason)
        }
    );
    if let Some(id) = &s.stack_id {
        println!("stack id     {id}");
    }
    println!(
        "max in flight {}",
        s.max_in_flight.map_or("no limit".into(), |n| n.to_string())
    );
    match s.rollout {
        Some(r) => println!(
            "rollout      promotion {} to {} % of cells{}",
            r.promotion,
            r.percent,
            r.previous.map_or(String::new(), |p| format!(
                ", the others keep promotion {p}"
            ))
        ),
        None => println!("rollout      none (never promoted)"),
    }
    println!("promotions:");
    for p in &s.promotions {
        println!(
            "  {:>3}  {}  {}  {}{}{}",
            p.id,
            p.time,
            p.who,
            p.image,
            p.import
                .as_ref()
                .map_or(String::new(), |b| format!("  from bundle {b}")),
            p.rolled_back
                .as_ref()
                .map_or(String::new(), |t| format!("  rolled back {t}"))
        );
        println!("       why: {}", p.reason);
        for r in &p.rootfs {
            println!(
                "       rootfs {} {} sha256 {} ({})",
                r.platform,
                r.manifest,
                r.sha256.hex(),
                crate::cli::size(r.size)
            );
        }
        if let (Some(b), Some(rn)) = (&p.build_image, &p.run_image) {
            println!("       build {b}");
            println!("       run   {rn}");
        }
    }
    if !s.candidates.is_empty() {
        println!("candidates:");
        for c in &s.candidates {
            println!("       {}  {}  from bundle {}", c.time, c.image, c.bundle);
        }
    }
    println!("history:");
    for e in &s.history {
        println!(
            "       {}  {:<20} {:<9} {}",
            e.time, e.who, e.action, e.detail
        );
    }
    Ok(())
}

/// `stack status` for one stack: counts, digests, and at most `max_cells`
/// cell ids per list (`--json` lists every one).
pub(super) fn print_status(s: &cells::StackStatus, max_cells: usize) {
    println!(
        "stack {} ({}): promotion {} at {} %, {} cells reported, {} on it, {} lagging, {} stale",
        s.stack,
        s.state,
        s.promotion.map_or("-".into(), |p| p.to_string()),
        s.percent.map_or("-".into(), |p| p.to_string()),
        s.cells,
        s.on_latest,
        s.lagging.len(),
        s.stale.len()
    );
    for (d, n) in &s.digests {
        println!("  {n:>6}  {d}");
    }
    if s.bytes_moved + s.bytes_saved > 0 {
        println!(
            "  rollout moved {:.1} MB, saved {:.1} MB ({} cell{} by delta)",
            s.bytes_moved as f64 / 1e6,
            s.bytes_saved as f64 / 1e6,
            s.delta_cells,
            if s.delta_cells == 1 { "" } else { "s" }
        );
    }
    for (what, cells) in [
        ("lagging (need a restart on their digest)", &s.lagging),
        ("not seen for a while", &s.stale),
    ] {
        if cells.is_empty() {
            continue;
        }
        let shown: Vec<&str> = cells.iter().take(max_cells).map(String::as_str).collect();
        let more = cells.len() - shown.len();
        println!(
            "  {what}: {}{}",
            shown.join(" "),
            if more > 0 {
                format!(" ... and {more} more (--json lists all)")
            } else {
                String::new()
            }
        );
    }
}
