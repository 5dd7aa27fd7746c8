//! The stack gauges of `GET /metrics`: cells per stack and digest, cells on
//! the promotion being rolled out, lagging and stale cells, the rollout
//! percentage, the Cloud Controller state ([`super::cells::gauges`]) and the
//! rootfs downloads in flight per stack, added to the process's OpenMetrics
//! exposition by the server's `/metrics` handler with one call.

use super::*;

/// `text` (an OpenMetrics exposition ending in `# EOF`) with the stack
/// gauges of `ctx` inserted before `# EOF`. When the stack table or the
/// cell reports cannot be read, `text` unchanged (and a warning logged):
/// the process's own metrics are still served.
pub async fn with_stack_gauges(ctx: &dyn Context, text: String) -> String {
    let gauges = match stack_gauges(ctx).await {
        Ok(g) => g,
        Err(e) => {
            tracing::warn!(error = %e, "metrics: stack gauges not read");
            return text;
        }
    };
    match text.rfind("# EOF") {
        Some(i) => format!("{}{gauges}{}", &text[..i], &text[i..]),
        None => text + &gauges,
    }
}

async fn stack_gauges(ctx: &dyn Context) -> std::result::Result<String, StackError> {
    let table = ctx.stacks().table(ctx.state()).await?;
    let statuses = cells::all_statuses(
        &**ctx.state().blobstore(),
        &table,
        ctx.stacks().config.stale_after,
    )
    .await?;
    let mut out = cells::gauges(&statuses);
    out.push_str(
        "# HELP airlock_stack_rootfs_downloads_in_flight Rootfs downloads being sent now (max_in_flight bounds them).\n\
         # TYPE airlock_stack_rootfs_downloads_in_flight gauge\n",
    );
    for name in table.stacks.keys() {
        out.push_str(&format!(
            "airlock_stack_rootfs_downloads_in_flight{{stack=\"{name}\"}} {}\n",
            ctx.stacks().in_flight(name.as_str())
        ));
    }
    Ok(out)
}
