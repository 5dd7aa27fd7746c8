//! `/ui/imports`: the history, imports first, with what each changed and
//! (admins) a rollback of the whole state to a generation.

use maud::{Markup, html as m};

use super::{digest, layout, query};
use crate::ui::api::imports::{GenerationView, Imports};
use crate::ui::http::Viewer;

/// A detail field of a state document (e.g. what an import changed):
/// nested objects and lists as nested lists, every value as text.
fn value(v: &serde_json::Value) -> Markup {
    match v {
        serde_json::Value::Object(o) => m! {
            dl.kv { @for (k, v) in o { dt { (k) } dd { (value(v)) } } }
        },
        serde_json::Value::Array(a) if a.is_empty() => m! { span.muted { "none" } },
        serde_json::Value::Array(a) => m! {
            ul { @for v in a { li { (value(v)) } } }
        },
        serde_json::Value::String(s) => m! { (s) },
        serde_json::Value::Null => m! { span.muted { "–" } },
        other => m! { (other) },
    }
}

fn row(viewer: &Viewer, g: &GenerationView, current: u64) -> Markup {
    m! {
        tr {
            td.num { (g.generation) }
            td.time { (g.time) }
            td { (g.who) @if let Some(a) = &g.address { br; span.muted { (a) } } }
            td {
                span.badge { (g.kind) } " "
                @if let Some(b) = &g.bundle { "bundle " code { (b) } } @else { (g.reason) }
                @if !g.details.is_empty() {
                    details {
                        summary { "What it changed" }
                        dl.kv { @for (k, v) in &g.details { dt { (k) } dd { (value(v)) } } }
                    }
                }
            }
            td { (digest(&g.digest)) }
            @if viewer.admin_everywhere() {
                td {
                    @if g.generation != current {
                        form method="post" action="/ui/imports/rollback" {
                            input type="hidden" name="csrf" value=(viewer.csrf());
                            input type="hidden" name="to" value=(g.generation);
                            button.danger type="submit" aria-label=(format!("Roll back to generation {}", g.generation)) { "Roll back to this" }
                        }
                    } @else { span.muted { "current" } }
                }
            }
        }
    }
}

/// The history page of `h`.
pub fn page(viewer: &Viewer, h: &Imports) -> Markup {
    let all = if h.all { "1" } else { "0" };
    let body = m! {
        p {
            @if h.all {
                "Every generation. " a href="/ui/imports" { "Show imports only" }
            } @else {
                "Imports only. " a href="/ui/imports?all=1" { "Show every generation" }
                " (pushes, stack changes, rollbacks)."
            }
        }
        @if h.generations.is_empty() {
            p.muted {
                @if h.seen.0 > 0 { "No import among generations " (h.seen.1) " to " (h.seen.0) "." }
                @else { "Nothing on this page." }
            }
        } @else {
            table {
                thead { tr {
                    th.num scope="col" { "Generation" } th scope="col" { "When" } th scope="col" { "Who" }
                    th scope="col" { "What" } th scope="col" { "State document" }
                    @if viewer.admin_everywhere() { th scope="col" { "Admin" } }
                } }
                tbody { @for g in &h.generations { (row(viewer, g, h.current)) } }
            }
        }
        div.pager {
            @if let Some(n) = h.next {
                a href=(format!("/ui/imports{}", query(&[("before", &n.to_string()), ("all", all)]))) { "Older" }
            }
            @if let Some(e) = &h.end { span.muted { (e) } }
        }
        p.muted { "JSON: " a href=(format!("/api/v1/imports{}", query(&[("all", all)]))) { "/api/v1/imports" } }
    };
    layout(viewer, "Imports", "/ui/imports", body)
}
