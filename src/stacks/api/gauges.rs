//! The stack gauges of `GET /metrics`: cells per stack and digest, cells on
//! the promotion being rolled out, lagging and stale cells, the rollout
//! percentage, the Cloud Controller state ([`super::cells::gauges`]) and the
//! rootfs downloads in flight per stack, added to the process's OpenMetrics
//! exposition by the server's `/metrics` handler with one call. A caller
//! limited to repository prefixes sees the stacks whose every image is in
//! them, as every list does (`server::routes`, `Touches::Listed`).

use super::*;

/// `text` (an OpenMetrics exposition ending in `# EOF`) with the stack
/// gauges of `ctx` inserted before `# EOF`, for the stacks `grant` may see
/// metrics of ([`Permission::Metrics`] on every repository of the stack's
/// images); for a caller limited to repository prefixes, every line of
/// `text` labelled with another stack (`stack="..."`, e.g.
/// `airlock_stack_vulnerabilities`) is left out too. When the stack table
/// or the cell reports cannot be read, `text` without any stack-labelled
/// line for such a caller, unchanged for others (and a warning logged):
/// the process's own metrics are still served.
pub async fn with_stack_gauges(ctx: &dyn Context, text: String, grant: &Grant) -> String {
    let limited = !grant.allows_everywhere(Permission::Metrics);
    let (gauges, visible) = match stack_gauges(ctx, grant).await {
        Ok(g) => g,
        Err(e) => {
            tracing::warn!(error = %e, "metrics: stack gauges not read");
            return match limited {
                true => only_stacks(&text, &|_| false),
                false => text,
            };
        }
    };
    let text = match limited {
        true => only_stacks(&text, &|n| visible.stacks.contains_key(n)),
        false => text,
    };
    match text.rfind("# EOF") {
        Some(i) => format!("{}{gauges}{}", &text[..i], &text[i..]),
        None => text + &gauges,
    }
}

/// The lines of `text` whose `stack="..."` label, if any, names a stack
/// `visible` holds.
fn only_stacks(text: &str, visible: &dyn Fn(&StackName) -> bool) -> String {
    let shown = |line: &str| {
        let Some(at) = line.find("stack=\"") else {
            return true;
        };
        let value = &line[at + 7..];
        let name = value.split('"').next().unwrap_or("");
        line.starts_with('#') || name.parse().is_ok_and(|n: StackName| visible(&n))
    };
    let mut out = String::with_capacity(text.len());
    for line in text.split_inclusive('\n').filter(|l| shown(l)) {
        out.push_str(line);
    }
    out
}

/// The stack gauges of the stacks `grant` may see, and the table of those
/// stacks.
async fn stack_gauges(
    ctx: &dyn Context,
    grant: &Grant,
) -> std::result::Result<(String, StackTable), StackError> {
    let all = ctx.stacks().table(ctx.state()).await?;
    let mut table = (*all).clone();
    table
        .stacks
        .retain(|name, _| grant.allows(Permission::Metrics, &all.repositories(name)));
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
    Ok((out, table))
}
