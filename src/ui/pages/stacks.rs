//! `/ui/stacks` (every stack) and `/ui/stacks/NAME` (its promotions, the
//! live rollout chart, lagging and silent cells, and the admin forms).

use maud::{Markup, html as m};

use super::{bytes, digest, layout, query};
use crate::stacks::table::Stack;
use crate::ui::api::Paged;
use crate::ui::api::stacks::{Actions, StackList, StackView};
use crate::ui::chart;
use crate::ui::http::Viewer;

fn state_badge(state: &str) -> Markup {
    m! { span class=(format!("badge state-{state}")) { (state) } }
}

/// The list of stacks.
pub fn list(viewer: &Viewer, l: &StackList) -> Markup {
    let body = m! {
        @if l.stacks.is_empty() {
            p.muted { "No stacks yet: import a bundle with a [[stack]] candidate, then promote it." }
        } @else {
            table {
                thead { tr {
                    th scope="col" { "Stack" } th scope="col" { "State" } th scope="col" { "Promotion" }
                    th scope="col" { "Rollout" } th.num scope="col" { "Cells" } th.num scope="col" { "On the rollout" }
                } }
                tbody { @for s in &l.stacks { tr {
                    td { a href=(format!("/ui/stacks/{}", s.name)) { (s.name) } @if s.default { " " span.badge { "default" } }
                        @if !s.description.is_empty() { br; span.muted { (s.description) } } }
                    td { (state_badge(s.state)) }
                    td { @if let Some(r) = s.rollout { (r.promotion) } @if let Some(i) = &s.image { br; code { (i) } } }
                    td { @if let Some(r) = s.rollout {
                        meter min="0" max="100" value=(r.percent) aria-label=(format!("{} rollout", s.name)) { (r.percent) " %" }
                        " " (r.percent) " %"
                    } }
                    td.num { @if let Some(c) = s.cells { (c) } @else { span.muted { "–" } } }
                    td.num { @if let Some(c) = s.on_latest { (c) } }
                } } }
            }
        }
        @if !l.custom.is_empty() {
            h2 { "Custom stacks" }
            table {
                thead { tr { th scope="col" { "Stack" } th scope="col" { "Image" } th scope="col" { "Owner" } } }
                tbody { @for c in &l.custom { tr {
                    td { (c["name"].as_str().unwrap_or("")) } td { code { (c["image"].as_str().unwrap_or("")) } } td { (c["owner"].as_str().unwrap_or("")) }
                } } }
            }
        }
        p.muted { "JSON: " a href="/api/v1/stacks" { "/api/v1/stacks" } }
    };
    layout(viewer, "Stacks", "/ui/stacks", body)
}

fn cells(title: &str, id: &str, page: &Paged<String>, base: &str, cursor: &str) -> Markup {
    m! {
        section aria-labelledby=(id) {
            h3 id=(id) { (title) " (" (page.total.unwrap_or(0)) ")" }
            @if page.items.is_empty() { p.muted { "None." } } @else {
                ul.mono { @for c in &page.items { li { (c) } } }
                @if let Some(n) = &page.next {
                    div.pager { a href=(format!("{base}{}", query(&[(cursor, n)]))) { "More " (title.to_lowercase()) } }
                }
            }
        }
    }
}

fn forms(viewer: &Viewer, name: &str, a: &Actions) -> Markup {
    let csrf = viewer.csrf();
    m! {
        section aria-labelledby="actions" {
            h2 id="actions" { "Admin actions" }
            p.muted { "Each action shows what it will do to the reporting cells and asks for a confirmation first." }
            div.actions {
                @if !a.widen_to.is_empty() {
                    fieldset {
                        legend { "Widen the rollout" }
                        form method="post" action=(format!("/ui/stacks/{name}/rollout")) {
                            input type="hidden" name="csrf" value=(csrf);
                            label for="widen-percent" { "To percent of cells" }
                            select id="widen-percent" name="percent" {
                                @for p in &a.widen_to { option value=(p) { (p) " %" } }
                            }
                            " " button type="submit" { "Widen" }
                        }
                    }
                }
                @if let Some(to) = a.rollback_to {
                    fieldset {
                        legend { "Roll back to promotion " (to) }
                        form method="post" action=(format!("/ui/stacks/{name}/rollback")) {
                            input type="hidden" name="csrf" value=(csrf);
                            label for="rollback-reason" { "Reason" }
                            input id="rollback-reason" type="text" name="reason" required;
                            " " button.danger type="submit" { "Roll back" }
                        }
                    }
                }
                fieldset {
                    legend { "Set the state" }
                    form method="post" action=(format!("/ui/stacks/{name}/state")) {
                        input type="hidden" name="csrf" value=(csrf);
                        label for="state-state" { "State" }
                        select id="state-state" name="state" { @for s in &a.states { option value=(s) { (s) } } }
                        label for="state-reason" { "Reason (shown to Cloud Controller users)" }
                        input id="state-reason" type="text" name="reason";
                        " " button type="submit" { "Set state" }
                    }
                }
                @if a.can_promote && !a.candidates.is_empty() {
                    fieldset {
                        legend { "Promote an imported candidate" }
                        form method="post" action=(format!("/ui/stacks/{name}/promote")) {
                            input type="hidden" name="csrf" value=(csrf);
                            label for="promote-image" { "Image" }
                            select id="promote-image" name="image" { @for c in &a.candidates { option value=(c) { (c) } } }
                            label for="promote-percent" { "Rollout percent" }
                            input id="promote-percent" type="number" name="percent" min="0" max="100" value="10" required;
                            label for="promote-reason" { "Reason" }
                            input id="promote-reason" type="text" name="reason";
                            " " button type="submit" { "Promote" }
                        }
                    }
                }
            }
        }
    }
}

/// The page of one stack.
pub fn show(viewer: &Viewer, v: &StackView, done: Option<&str>) -> Markup {
    let stack: Stack = serde_json::from_value(v.stack.clone()).unwrap_or_default();
    let name = &v.name;
    let base = format!("/ui/stacks/{name}");
    let active = stack.active();
    let body = m! {
        @if let Some(d) = done { div.notice.done role="status" { "Done: " (d) "." } }
        dl.kv {
            dt { "State" } dd { (state_badge(stack.state.as_str())) @if !stack.state_reason.is_empty() { " " (stack.state_reason) } }
            dt { "Default stack" } dd { @if v.stack["default"].as_bool() == Some(true) { "yes" } @else { "no" } }
            @if !stack.description.is_empty() { dt { "Description" } dd { (stack.description) } }
            @if let (Some(r), Some(p)) = (stack.rollout, active) {
                dt { "Rolling out" } dd { "promotion " (p.id) ": " code { (p.image) } }
                dt { "Rollout" } dd id="rollout-percent" {
                    meter min="0" max="100" value=(r.percent) aria-label="rollout percentage" { (r.percent) " %" }
                    " " strong { (r.percent) " %" } " of cells"
                    @if let Some(prev) = r.previous { "; the others keep promotion " (prev) }
                }
            }
        }
        h2 { "Live rollout" }
        @match &v.live {
            None => p.muted { "No sample of the cells' reports yet (every " (v.sample_interval_secs) " s)." },
            Some(l) => {
                p { "Sampled " (l.sampled_at) " (every " (v.sample_interval_secs) " s): "
                    strong id="cells-total" { (l.cells) } " cells report, "
                    strong { (l.on_latest) } " on the promotion being rolled out, "
                    strong { (l.lagging) } " lagging, " strong { (l.silent) } " silent (no report for " (v.silent_after_secs) " s); "
                    (bytes(l.bytes_moved)) " of rootfs moved to the cells on it." }
                (chart::rollout(name, &v.series, &v.legend))
                table id="cells-now" {
                    caption { "Cells per digest now" }
                    thead { tr { th scope="col" { "Digest" } th scope="col" { "Promotion" } th.num scope="col" { "Cells" } } }
                    tbody { @for d in &l.digests {
                        @let class = v.legend.iter().find(|b| b.digests.contains(&d.digest)).map_or("other-0", |b| b.class.as_str());
                        tr data-digest=(d.digest) data-role=(d.role) {
                            td { span class=(format!("swatch sw-{class}")) {} (digest(&d.digest)) }
                            td { @if let Some(p) = d.promotion { (p) " (" (d.role) ")" } @else { "none" } }
                            td.num.cells { (d.cells) }
                        }
                    } }
                }
            }
        }
        @if v.actions.allowed {
            (forms(viewer, name, &v.actions))
        } @else if viewer.admin() {
            p.muted { "Admin actions are off: " (v.actions.why_not.as_deref().unwrap_or("")) "." }
        }
        h2 { "Cells" }
        (cells("Lagging cells", "lagging", &v.lagging, &base, "lagging_after"))
        (cells("Silent cells", "silent", &v.silent, &base, "silent_after"))
        h2 { "Promotions" }
        table {
            thead { tr { th.num scope="col" { "#" } th scope="col" { "Image" } th scope="col" { "When" } th scope="col" { "Who" } th scope="col" { "Why" } th scope="col" { "Status" } } }
            tbody { @for p in stack.promotions.iter().rev() { tr {
                td.num { (p.id) } td { code { (p.image.repository) } br; (digest(&p.image.digest)) }
                td { (p.time) } td { (p.who) } td { (p.reason) @if let Some(b) = &p.import { br; span.muted { "bundle " (b) } } }
                td { @if p.rolled_back.is_some() { span.bad { "rolled back" } }
                     @else if active.is_some_and(|a| a.id == p.id) { span.ok { "rolling out" } } }
            } } }
        }
        @if !stack.candidates.is_empty() {
            h2 { "Import candidates" }
            table {
                thead { tr { th scope="col" { "Image" } th scope="col" { "Bundle" } th scope="col" { "Imported" } } }
                tbody { @for c in stack.candidates.iter().rev() { tr { td { code { (c.image) } } td { (c.bundle) } td { (c.time) } } } }
            }
        }
        h2 { "History" }
        table {
            thead { tr { th scope="col" { "When" } th scope="col" { "Who" } th scope="col" { "What" } } }
            tbody { @for e in stack.history.iter().rev().take(50) { tr { td { (e.time) } td { (e.who) } td { (e.action) ": " (e.detail) } } } }
        }
        p.muted { "JSON: " a href=(format!("/api/v1/stacks/{name}")) { "/api/v1/stacks/" (name) } }
    };
    layout(viewer, &format!("Stack {name}"), "/ui/stacks", body)
}
