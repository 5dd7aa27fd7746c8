//! `/ui/`: the overview.

use maud::{Markup, html as m};

use super::{bytes, digest, layout};
use crate::ui::api::overview::Overview;
use crate::ui::http::Viewer;

fn card(label: &str, value: Markup) -> Markup {
    m! { div.card { div.label { (label) } div.value { (value) } } }
}

/// The overview page of `o`.
pub fn page(viewer: &Viewer, o: &Overview) -> Markup {
    let c = &o.counts;
    let body = m! {
        @if o.health.ready && o.health.problems.is_empty() {
            div.notice.done role="status" { "Healthy: the state reads, nothing needs a look." }
        } @else {
            div.notice.error role="status" {
                @if !o.health.ready { p { strong { "Not ready." } } }
                ul { @for p in &o.health.problems { li { (p) } } }
            }
        }
        div.cards {
            (card("Generation", m! { (o.generation) }))
            (card("Repositories", m! { (c.repositories) @if c.repositories_more { "+" } }))
            (card("Stacks", m! { (c.stacks) @if c.custom_stacks > 0 { span.muted { " + " (c.custom_stacks) " custom" } } }))
            (card("torcx", m! { (c.torcx_builds) span.muted { " builds in " (c.torcx_remotes) " remotes" } }))
            @if viewer.admin_everywhere() {
                (card("Users", m! { (c.users) span.muted { " + " (c.token_users) " token users" } }))
            }
            @if let Some(f) = o.store.free_bytes { (card("Free space", m! { (bytes(f)) })) }
        }
        h2 { "Store" }
        dl.kv {
            dt { "Backend" } dd { (o.store.info.backend) }
            @if !o.store.info.location.is_empty() {
                dt { "Location" } dd { code { (o.store.info.location) } }
            }
            @if let (Some(t), Some(f)) = (o.store.total_bytes, o.store.free_bytes) {
                dt { "File system" } dd { (bytes(t)) ", " (bytes(f)) " free "
                    meter min="0" max=(t) value=(t - f) aria-label="space used" { (bytes(t - f)) " used" } }
            }
        }
        h2 { "State" }
        dl.kv {
            @if let Some(g) = &o.current {
                dt { "Current generation" } dd { (g.generation) " · " (g.time) " · " (g.who) " · " (g.reason) }
                dt { "State document" } dd { (digest(&g.digest)) }
            } @else {
                dt { "Current generation" } dd { "none yet (empty store)" }
            }
            dt { "Last import" }
            dd {
                @if let Some(g) = &o.last_import {
                    "bundle " code { (g.bundle.as_deref().unwrap_or("?")) } " · generation " (g.generation) " · " (g.time) " · " (g.who)
                } @else { span.muted { "none in the recent generations" } }
            }
            dt { "Newest bundle" }
            dd {
                @if let Some(n) = &o.newest_bundle {
                    code { (n.bundle) } " · created " (n.created) " · imported " (n.imported)
                    @if let Some(e) = &n.expires { " · expires " (e) }
                } @else { span.muted { "none recorded" } }
            }
            dt { "Trust" }
            dd {
                @if let Some(t) = &o.trust { "trust document " (t) }
                @else { span.muted { "no trust document: the import keyring decides" } }
            }
            dt { "Last gc" }
            dd {
                @if let Some(r) = &o.last_gc {
                    (r.time) " by " (r.who) ": " (r.report["blobs_removed"]) " blobs removed, "
                    (bytes(r.report["bytes_freed"].as_u64().unwrap_or(0))) " freed"
                    @if r.report["dry_run"].as_bool() == Some(true) { " (dry run)" }
                } @else { span.muted { "never (airlock gc, or [gc] interval)" } }
            }
            dt { "Last fsck" }
            dd {
                @if let Some(r) = &o.last_fsck {
                    @let n = r.report["problems"].as_array().map_or(0, Vec::len);
                    (r.time) " by " (r.who) ": " (r.report["objects_checked"]) " objects checked, "
                    span class=(if n == 0 { "ok" } else { "bad" }) { (n) " problems" }
                } @else { span.muted { "never (airlock fsck)" } }
            }
        }
        h2 { "Recent events" }
        @if o.events.is_empty() {
            p.muted { "No events yet." }
        } @else {
            table {
                thead { tr { th scope="col" { "When" } th scope="col" { "Event" } th scope="col" { "Who" } th.num scope="col" { "Generation" } } }
                tbody {
                    @for e in o.events.iter() {
                        tr { td.time { (e.time) } td { (e.summary) } td { (e.who) } td.num { (e.generation) } }
                    }
                }
            }
        }
        p.muted { "JSON: " a href="/api/v1/overview" { "/api/v1/overview" } }
    };
    layout(viewer, "Overview", "/ui/", body)
}
